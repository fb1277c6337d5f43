"""What `tkreg.kernelize` did to a model: one row per patched or kept module part."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    module: str        # qualified module name, e.g. "model.layers.0.self_attn"
    part: str          # "rms_norm", "mlp", "attention", "rotary", "decoder_layer"
    on_tkreg: bool
    detail: str        # what runs (on tkreg) or the one-line reason it stays on torch


@dataclass
class KernelizeReport:
    """`model.tkreg_report` after `tkreg.kernelize(model)`.  `str(report)` groups identical rows
    across layers; `replaced` / `kept` list the rows; `notes` holds model-wide remarks."""
    mode: str = "inference"
    entries: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def add(self, module: str, part: str, on_tkreg: bool, detail: str) -> None:
        self.entries.append(Entry(module, part, on_tkreg, detail))

    @property
    def replaced(self) -> list:
        return [e for e in self.entries if e.on_tkreg]

    @property
    def kept(self) -> list:
        return [e for e in self.entries if not e.on_tkreg]

    def parts(self, on_tkreg: bool = True) -> set:
        return {e.part for e in self.entries if e.on_tkreg == on_tkreg}

    def __str__(self) -> str:
        groups: dict = {}
        for e in self.entries:
            groups.setdefault((e.on_tkreg, e.part, e.detail), []).append(e.module)
        lines = [f"tkreg.kernelize (mode={self.mode}): {len(self.replaced)} parts on tkreg, "
                 f"{len(self.kept)} kept on torch"]
        for (on, part, detail), mods in sorted(groups.items(), key=lambda kv: (not kv[0][0], kv[0][1])):
            where = mods[0] if len(mods) == 1 else f"{len(mods)} modules ({mods[0]}, ...)"
            lines.append(f"  {'tkreg' if on else 'torch'}  {part:<13} {where}: {detail}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    __repr__ = __str__
