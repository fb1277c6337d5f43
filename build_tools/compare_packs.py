"""Compare the cubins of two builds variant by variant:

    python -m build_tools compare OLD NEW [--renames FILE] [--allow-removed]

OLD and NEW are pack folders (holding <arch>/manifest.json) or tkreg wheels (their tkreg/packs/).
Each (arch, op, variant key) maps to the sha256 of its cubin's bytes.  A refactor may rename
variant keys without touching a kernel: `--renames` reads a JSON file {op: {old key: new key}}
(docs/key-renames.json holds the renames of the family-package refactor) and compares OLD's
variants under their new names.  Prints how many cubins are identical and lists those that differ
or exist on one side only; exits 1 when a cubin differs or (unless --allow-removed) a variant of
OLD is missing from NEW.  Variants only in NEW are listed, not failed: they are new kernels.
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from tkreg import manifest


def _files(where: Path) -> dict:
    """{path relative to the packs folder: bytes reader} of a pack folder or a wheel."""
    if where.is_file() and where.suffix == ".whl":
        z = zipfile.ZipFile(where)
        prefix = "tkreg/packs/"
        return {n[len(prefix):]: (lambda n=n: z.read(n)) for n in z.namelist() if n.startswith(prefix)}
    return {str(p.relative_to(where)): (lambda p=p: p.read_bytes()) for p in where.rglob("*") if p.is_file()}


def cubins(where) -> dict:
    """{(arch, op, key): sha256 of the cubin's bytes} of every variant in a pack folder or wheel."""
    files = _files(Path(where))
    out = {}
    for name in sorted(files):
        arch, _, base = name.partition("/")
        if base != manifest.FILENAME:
            continue
        raw = json.loads(files[name]())
        for op, rec in raw["ops"].items():
            for v in rec["variants"]:
                data = files[f"{arch}/{v['cubin']}"]()
                out[(arch, op, v["key"])] = hashlib.sha256(data).hexdigest()
    if not out:
        raise SystemExit(f"{where}: no <arch>/{manifest.FILENAME} with variants found")
    return out


def compare(old: dict, new: dict, renames: dict) -> dict:
    """{"identical": [...], "differ": [...], "removed": [...], "added": [...]} of (arch, op, key)s;
    OLD's keys are taken under their renamed names."""
    moved = {(a, op, renames.get(op, {}).get(k, k)): h for (a, op, k), h in old.items()}
    res = {"identical": [], "differ": [], "removed": [], "added": sorted(set(new) - set(moved))}
    for k, h in sorted(moved.items()):
        res["removed" if k not in new else "identical" if new[k] == h else "differ"].append(k)
    return res


def main(args) -> int:
    renames = json.loads(Path(args.renames).read_text()) if args.renames else {}
    res = compare(cubins(args.old), cubins(args.new), renames)
    for what in ("differ", "removed", "added"):
        for arch, op, key in res[what]:
            print(f"{what:9} {arch:8} {op} [{key}]")
    print(f"{len(res['identical'])} identical, {len(res['differ'])} differ, {len(res['removed'])} only in "
          f"{args.old}, {len(res['added'])} only in {args.new}")
    return 1 if res["differ"] or (res["removed"] and not args.allow_removed) else 0
