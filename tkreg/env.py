"""Every environment switch tkreg reads, in one place (shown by `tkreg doctor`)."""
from __future__ import annotations

import os

SWITCHES = {
    "TKREG_FALLBACK": "`reference`: run the torch reference where no kernel pack serves the GPU",
    "TKREG_PLUGINS": "comma-separated allow-list of plugin entry-point names to load",
    "TKREG_DISABLE_PLUGINS": "`1`: load no plugin packs",
    "TKREG_PACKS": "extra pack folders to load, separated by `:` (like tkreg.register_pack)",
    "TKREG_CHECK_INDICES": "`1`: index inputs (sequence and group offsets, counts, page tables, expert ids) "
                           "are copied to the host and checked before launch (a sync per call; skipped under "
                           "torch.compile and CUDA-graph capture; for debugging)",
    "TKREG_DISABLE_SHIM": "`1`: read tensors through their Python attributes, not torch's C shim (slower)",
    "TKREG_SKIP_VARIANTS": "variants never to dispatch to, `;`-separated, each `[op:]name=value[,name=value...]`, "
                           "matching a variant whose key has all those pairs (e.g. "
                           "`tkreg.flash_attention:kernel=tcgen05`): dispatch takes the next variant that "
                           "accepts; to route around a kernel that misbehaves on your GPU without a rebuild",
}


def fallback_reference() -> bool:
    v = os.environ.get("TKREG_FALLBACK", "").strip().lower()
    if v not in ("", "reference", "none", "0"):
        raise ValueError(f"TKREG_FALLBACK={v!r}: expected `reference` or unset")
    return v == "reference"


def plugins_disabled() -> bool:
    return os.environ.get("TKREG_DISABLE_PLUGINS", "").strip() not in ("", "0")


def plugin_allow_list() -> set | None:
    v = os.environ.get("TKREG_PLUGINS")
    return None if v is None else {p.strip() for p in v.split(",") if p.strip()}


def shim_disabled() -> bool:
    return os.environ.get("TKREG_DISABLE_SHIM", "").strip() not in ("", "0")


def check_indices() -> bool:
    return os.environ.get("TKREG_CHECK_INDICES", "").strip() not in ("", "0")


def extra_packs() -> list[str]:
    return [p for p in os.environ.get("TKREG_PACKS", "").split(":") if p]


def in_force() -> dict:
    return {k: os.environ[k] for k in SWITCHES if k in os.environ}


def skip_variants() -> str:
    return os.environ.get("TKREG_SKIP_VARIANTS", "").strip()


def _skip_entries() -> list:
    """[(entry text, op scope or "", {name=value pairs})] of TKREG_SKIP_VARIANTS."""
    out = []
    for entry in skip_variants().split(";"):
        scope, _, want = entry.strip().rpartition(":")
        if want:
            out.append((entry.strip(), scope, set(want.split(","))))
    return out


def skipped_variant(op: str, key: str) -> bool:
    """Whether TKREG_SKIP_VARIANTS names this variant (`key`: its `name=value,...` key)."""
    pairs = set(key.split(","))
    return any((not scope or scope == op) and want <= pairs for _, scope, want in _skip_entries())


def unmatched_skip_entries(keys_by_op: dict) -> list[str]:
    """The TKREG_SKIP_VARIANTS entries that name no variant of any op ({op: [variant keys]}): a typo,
    or a key written before the keys were spelled out in words (docs/key-renames.json)."""
    return [text for text, scope, want in _skip_entries()
            if not any((not scope or scope == op) and want <= set(k.split(","))
                       for op, keys in keys_by_op.items() for k in keys)]
