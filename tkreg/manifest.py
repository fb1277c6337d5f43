"""The kernel-pack format, schema 2: `<pack>/<arch>/manifest.json` beside the cubins it names.

```
{"schema": 2, "arch": "sm_90a", "namespace": "tkreg",
 "toolchain": {"tilelang": "0.1.15", "nvcc": "13.0.88", "flags": [...]},
 "ops": {"tkreg.rms_norm": {
     "spec": <OpSpec.to_json(): tensors, scalars, variants (params, rule, priority, archs,
              pass_configs, nvcc_flags), archs, reference, backward, index64, extends, doc>,
     "variants": [<VariantRecord.to_json()>: {"key": "N=4096,dtype=bfloat16", "cubin": "<file>",
                   "sha256": "<hex>", "source_hash": "<hex>", "plan": <Plan.to_json()>}]}}}
```
Each record's `key` names one of the spec's variants (its rule and priority live there); its
`plan` is tkreg/launch_plan.py's `Plan`: the tensors the kernels take and their dtypes, constraints,
kernels in launch order with their parameters, grid / block / shared memory programs, cluster /
cooperative / PDL flags and every TMA descriptor's encode arguments.  Cubin file names derive
from a digest of the key.  Programs are postfix lists (tkreg/expr.py); codes are tkreg/codes.py's.

Per-group descriptors (grouped GEMM) need no format of their own: a contiguous or masked layout
is one rank-2/3 tensor (`b[E, N, K]`), read through one descriptor whose box walks the groups.

Build tools write packs with `dump`; the run time reads them with `load`.  Plugins ship the
same format.  A schema-1 pack (tkreg 0.1.0 before launch format v2) is refused: rebuild it.
"""
from __future__ import annotations

import gc
import hashlib
import json
from pathlib import Path
from typing import Mapping

from .elf import check_cubin
from .errors import PackError
from .launch_plan import Plan
from .record import RECORD, Fields
from .spec import OpSpec

SCHEMA = 2
FILENAME = "manifest.json"


def cubin_name(op: str, key: str) -> str:
    """`tkreg.rms_norm__<16 hex>.cubin`: distinct keys never share a file."""
    return f"{op}__{hashlib.sha256(key.encode()).hexdigest()[:16]}.cubin"


@RECORD
class VariantRecord(Fields):
    """One compiled variant of one arch: its cubin and launch plan."""
    key: str
    cubin: str
    sha256: str
    plan: Plan
    source_hash: str = ""

    def to_json(self) -> dict:
        return {"key": self.key, "cubin": self.cubin, "sha256": self.sha256,
                "source_hash": self.source_hash, "plan": self.plan.to_json()}

    @classmethod
    def from_json(cls, d: Mapping) -> "VariantRecord":
        return cls(d["key"], d["cubin"], d["sha256"], Plan.from_json(d["plan"]), d.get("source_hash", ""))


class OpRecord:
    """One op of one arch: its spec and its compiled variants (VariantRecord)."""
    __slots__ = ("spec", "variants")

    def __init__(self, spec: OpSpec, variants: tuple):
        self.spec, self.variants = spec, tuple(variants)

    def to_json(self) -> dict:
        return {"spec": self.spec.to_json(), "variants": [v.to_json() for v in self.variants]}


class Manifest:
    """One arch folder.  Ops are parsed on first use (`op(name)`): loading reads only the JSON."""
    __slots__ = ("path", "arch", "namespace", "toolchain", "raw_ops", "_parsed")

    def __init__(self, path: Path, arch: str, namespace: str, toolchain: dict, raw_ops: dict):
        self.path, self.arch, self.namespace, self.toolchain, self.raw_ops = path, arch, namespace, toolchain, raw_ops
        self._parsed: dict = {}

    @property
    def folder(self) -> Path:
        return self.path.parent

    def op(self, name: str) -> OpRecord:
        rec = self._parsed.get(name)
        if rec is None:
            rec = self._parsed[name] = _parse_op(self.path, name, self.raw_ops[name])
        return rec

    def ops(self) -> dict:
        return {n: self.op(n) for n in sorted(self.raw_ops)}


def _parse_op(path: Path, name: str, d) -> OpRecord:
    where = f"{path}: op {name}"
    if not isinstance(d, dict) or not isinstance(d.get("variants"), list) or "spec" not in d:
        raise PackError(f"corrupt manifest {where}: lacks `spec` or `variants`")
    try:
        spec = OpSpec.from_json(d["spec"])
    except Exception as e:  # noqa: BLE001 - any malformed field: the pack is unusable
        raise PackError(f"{where}: bad spec ({type(e).__name__}: {e})") from None
    records = []
    for v in d["variants"]:
        try:
            records.append(VariantRecord.from_json(v))
        except Exception as e:  # noqa: BLE001
            key = v.get("key") if isinstance(v, dict) else None
            raise PackError(f"{where}: variant {key!r}: malformed record or plan ({type(e).__name__}: {e})") from None
    records = tuple(records)
    if spec.name != name:
        raise PackError(f"{where}: its spec is named {spec.name}")
    keys = {v.key for v in spec.variants}
    for r in records:
        if r.key not in keys:
            raise PackError(f"{where}: compiled variant {r.key!r} is not one of the spec's variants")
    return OpRecord(spec, records)


def dump(path: Path, arch: str, namespace: str, toolchain: dict, ops: Mapping) -> None:
    """Deterministic bytes: sorted keys, no timestamps.  `ops`: name -> OpRecord."""
    m = {"schema": SCHEMA, "arch": arch, "namespace": namespace, "toolchain": toolchain,
         "ops": {n: r.to_json() for n, r in sorted(ops.items())}}
    dump_json(path, m)


def dump_json(path: Path, m: dict) -> None:
    Path(path).write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")


def _parse(text: str):
    """json.loads with the cyclic GC paused: a manifest is ~10^5 small objects, and a full
    collection triggered halfway walks every object torch made (80-100 ms of a cold start; none
    of these objects is garbage)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if was:
            gc.enable()


def load(path: Path) -> Manifest:
    """Parse and check the outline of one manifest; PackError says what is wrong."""
    path = Path(path)
    try:
        m = _parse(path.read_text())
    except FileNotFoundError:
        raise PackError(f"no manifest at {path}") from None
    except (OSError, ValueError) as e:
        raise PackError(f"corrupt manifest {path}: {e}") from None
    if not isinstance(m, dict) or not isinstance(m.get("schema"), int):
        raise PackError(f"corrupt manifest {path}: no integer `schema`")
    if m["schema"] > SCHEMA:
        raise PackError(f"manifest {path} has schema {m['schema']}, newer than this tkreg reads "
                        f"({SCHEMA}); upgrade tkreg")
    if m["schema"] < SCHEMA:
        raise PackError(f"manifest {path} has schema {m['schema']} (launch format v1); this tkreg "
                        f"reads schema {SCHEMA}: rebuild the pack with this tkreg's build tools "
                        "(`python -m build_tools build ...`)")
    for k, t in (("arch", str), ("ops", dict), ("toolchain", dict), ("namespace", str)):
        if not isinstance(m.get(k), t):
            raise PackError(f"corrupt manifest {path}: `{k}` missing or not a {t.__name__}")
    if m["arch"] != path.parent.name:
        raise PackError(f"manifest {path} says arch {m['arch']} but sits in folder {path.parent.name}")
    return Manifest(path, m["arch"], m["namespace"], m["toolchain"], m["ops"])


def read_cubin(arch_dir: Path, record: VariantRecord, op: str = "?") -> bytes:
    """The cubin's bytes after checking its sha256 against the manifest."""
    p = Path(arch_dir) / record.cubin
    if Path(record.cubin).name != record.cubin:
        raise PackError(f"{op}[{record.key}]: cubin name {record.cubin!r} is not a file name in the pack")
    try:
        data = p.read_bytes()
    except OSError:
        raise PackError(f"{op}[{record.key}]: cubin {p} is missing") from None
    got = hashlib.sha256(data).hexdigest()
    if got != record.sha256:
        raise PackError(f"{op}[{record.key}]: cubin {p} has sha256 {got[:12]}…, the manifest "
                        f"says {record.sha256[:12]}…; the pack is corrupt — reinstall it")
    return data


def arch_dirs(pack: Path) -> list[Path]:
    return sorted(d for d in Path(pack).iterdir() if (d / FILENAME).exists()) if Path(pack).is_dir() else []


def check_cubins(m: Manifest) -> list[str]:
    """sha256 and ELF arch of every cubin of one manifest, as messages; [] when sound."""
    problems = []
    for name, rec in m.ops().items():
        for v in rec.variants:
            try:
                check_cubin(read_cubin(m.folder, v, name), m.arch)
            except PackError as e:
                problems.append(str(e))
            except ValueError as e:
                problems.append(f"{name}[{v.key}]: {m.folder / v.cubin}: {e}")
    return problems


def verify(pack: Path) -> list[str]:
    """Every problem of a pack (manifest, plans, sha256, ELF arch), as messages; [] when sound."""
    dirs = arch_dirs(pack)
    if not dirs:
        return [f"{pack}: no <arch>/{FILENAME} found"]
    problems = []
    for d in dirs:
        try:
            problems += check_cubins(load(d / FILENAME))
        except PackError as e:
            problems.append(str(e))
    return problems
