"""The kernel-pack format: `<pack>/<arch>/manifest.json` beside the cubins it names.

```
{"schema": 1, "arch": "sm_90a", "namespace": "tkreg",
 "toolchain": {"tilelang": "0.1.15", "nvcc": "13.0.88", "flags": [...]},
 "ops": {"tkreg.rms_norm": {
     "spec": <OpSpec.to_json()>,
     "variants": [{"key": "N=4096,dtype=bfloat16", "priority": 0, "rule": null,
                   "cubin": "<file>", "sha256": "<hex>", "source_hash": "<hex>",
                   "plan": {"dtypes": {...}, "constraints": [{"text", "prog"}],
                            "kernels": [{"name", "grid", "block", "smem", "cluster",
                                         "cooperative", "pdl", "params": [...]}],
                            "tma": [{"tensor", "dtype", "rank", "dims", "strides", "box",
                                     "elem_strides", "interleave", "swizzle", "l2", "oob"}]}}]}}}
```
Programs (`grid`, `smem`, `dims`, `prog`...) are postfix lists, see tkreg/expr.py.  Plugins ship
the same format.  Build tools write it with `dump`; the run time reads it with `load`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .elf import check_cubin
from .errors import PackError

SCHEMA = 1
FILENAME = "manifest.json"


def dump(path: Path, manifest: dict) -> None:
    """Deterministic bytes: sorted keys, no timestamps."""
    Path(path).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def load(path: Path) -> dict:
    """Parse and check the shape of one manifest; PackError says what is wrong."""
    path = Path(path)
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackError(f"no manifest at {path}") from None
    except (OSError, ValueError) as e:
        raise PackError(f"corrupt manifest {path}: {e}") from None
    if not isinstance(m, dict) or not isinstance(m.get("schema"), int):
        raise PackError(f"corrupt manifest {path}: no integer `schema`")
    if m["schema"] > SCHEMA:
        raise PackError(f"manifest {path} has schema {m['schema']}, newer than this tkreg reads "
                        f"({SCHEMA}); upgrade tkreg")
    for k, t in (("arch", str), ("ops", dict), ("toolchain", dict)):
        if not isinstance(m.get(k), t):
            raise PackError(f"corrupt manifest {path}: `{k}` missing or not a {t.__name__}")
    if m["arch"] != path.parent.name:
        raise PackError(f"manifest {path} says arch {m['arch']} but sits in folder {path.parent.name}")
    for name, op in m["ops"].items():
        if not isinstance(op, dict) or not isinstance(op.get("variants"), list) or "spec" not in op:
            raise PackError(f"corrupt manifest {path}: op {name} lacks `spec` or `variants`")
        for v in op["variants"]:
            for k in ("key", "cubin", "sha256", "plan"):
                if k not in v:
                    raise PackError(f"corrupt manifest {path}: a variant of {name} lacks `{k}`")
    return m


def read_cubin(arch_dir: Path, variant: dict, op: str = "?") -> bytes:
    """The cubin's bytes after checking its sha256 against the manifest."""
    p = Path(arch_dir) / variant["cubin"]
    try:
        data = p.read_bytes()
    except OSError:
        raise PackError(f"{op}[{variant['key']}]: cubin {p} is missing") from None
    got = hashlib.sha256(data).hexdigest()
    if got != variant["sha256"]:
        raise PackError(f"{op}[{variant['key']}]: cubin {p} has sha256 {got[:12]}…, the manifest "
                        f"says {variant['sha256'][:12]}…; the pack is corrupt — reinstall it")
    return data


def arch_dirs(pack: Path) -> list[Path]:
    return sorted(d for d in Path(pack).iterdir() if (d / FILENAME).exists()) if Path(pack).is_dir() else []


def verify(pack: Path) -> list[str]:
    """Every problem of a pack (sha256, ELF arch, manifest), as messages; [] when sound."""
    problems = []
    dirs = arch_dirs(pack)
    if not dirs:
        return [f"{pack}: no <arch>/{FILENAME} found"]
    for d in dirs:
        try:
            m = load(d / FILENAME)
        except PackError as e:
            problems.append(str(e))
            continue
        for name, op in m["ops"].items():
            for v in op["variants"]:
                try:
                    check_cubin(read_cubin(d, v, name), m["arch"])
                except PackError as e:
                    problems.append(str(e))
                except ValueError as e:
                    problems.append(f"{name}[{v['key']}]: {d / v['cubin']}: {e}")
    return problems
