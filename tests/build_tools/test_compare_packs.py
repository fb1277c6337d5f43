"""build_tools/compare_packs.py (`python -m build_tools compare OLD NEW --renames FILE`): the cubin
of each (arch, op, variant key) of two builds compared by sha256, OLD's keys taken through a
rename map; pack folders and wheels alike.  Built on copies of tests/format_probe/pack."""
from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from build_tools.__main__ import main
from build_tools.compare_packs import compare, cubins
from tkreg import manifest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "format_probe" / "pack"
OP, A, B = "t.probe", "splits=2,with_bias=false", "splits=4,with_bias=true"


def pack(tmp_path, name: str) -> Path:
    shutil.copytree(PROBE, tmp_path / name)
    return tmp_path / name


def _edit(p: Path, fn) -> None:
    """Apply fn(variants, folder) to sm_90a's manifest of pack p and write it back."""
    f = p / "sm_90a" / manifest.FILENAME
    raw = json.loads(f.read_text())
    fn(raw["ops"][OP]["variants"], f.parent)
    f.write_text(json.dumps(raw, indent=1, sort_keys=True))


def flip_byte(p: Path, key: str) -> None:
    """One byte of the variant's cubin changed, its sha256 in the manifest updated (a valid pack)."""
    def fn(variants, folder):
        v = next(v for v in variants if v["key"] == key)
        c = folder / v["cubin"]
        data = bytearray(c.read_bytes())
        data[-1] ^= 0xFF
        c.write_bytes(bytes(data))
        v["sha256"] = hashlib.sha256(data).hexdigest()
    _edit(p, fn)


def rename(p: Path, old: str, new: str) -> None:
    """The variant's key renamed, its cubin file with it (the bytes unchanged)."""
    def fn(variants, folder):
        v = next(v for v in variants if v["key"] == old)
        (folder / v["cubin"]).rename(folder / manifest.cubin_name(OP, new))
        v["key"], v["cubin"] = new, manifest.cubin_name(OP, new)
    _edit(p, fn)


def drop(p: Path, key: str) -> None:
    _edit(p, lambda variants, folder: variants.remove(next(v for v in variants if v["key"] == key)))


def run(capsys, *args) -> tuple[int, list[str]]:
    rc = main(["compare", *map(str, args)])
    return rc, capsys.readouterr().out.splitlines()


def test_the_edited_packs(tmp_path):
    p = pack(tmp_path, "p")
    before = cubins(p)
    flip_byte(p, A)
    assert manifest.verify(p) == []   # still a valid pack: only the bytes differ
    rename(p, B, "splits=4,bias=1")
    after = cubins(p)
    assert set(after) == {("sm_90a", OP, A), ("sm_90a", OP, "splits=4,bias=1")}
    assert after[("sm_90a", OP, A)] != before[("sm_90a", OP, A)]
    assert after[("sm_90a", OP, "splits=4,bias=1")] == before[("sm_90a", OP, B)]


def test_identical(tmp_path, capsys):
    rc, out = run(capsys, pack(tmp_path, "old"), pack(tmp_path, "new"))
    assert rc == 0
    assert out == [f"2 identical, 0 differ, 0 only in {tmp_path / 'old'}, 0 only in {tmp_path / 'new'}"]


def test_a_changed_cubin_differs_and_fails(tmp_path, capsys):
    new = pack(tmp_path, "new")
    flip_byte(new, A)
    rc, out = run(capsys, pack(tmp_path, "old"), new)
    assert rc == 1
    assert out[0].split() == ["differ", "sm_90a", OP, f"[{A}]"]
    assert out[-1].startswith("1 identical, 1 differ, 0 only in")
    assert run(capsys, pack(tmp_path, "old2"), new, "--allow-removed")[0] == 1   # a difference always fails


def test_a_renamed_key_is_removed_and_added_unless_the_map_names_it(tmp_path, capsys):
    old, new = pack(tmp_path, "old"), pack(tmp_path, "new")
    rename(new, B, "splits=4,bias=1")
    rc, out = run(capsys, old, new)
    assert rc == 1
    assert [line.split()[0] for line in out[:-1]] == ["removed", "added"]
    assert f"[{B}]" in out[0] and "[splits=4,bias=1]" in out[1]
    assert out[-1].startswith("1 identical, 0 differ, 1 only in")
    assert run(capsys, old, new, "--allow-removed")[0] == 0

    renames = tmp_path / "renames.json"
    renames.write_text(json.dumps({OP: {B: "splits=4,bias=1"}}))
    rc, out = run(capsys, old, new, "--renames", renames)
    assert (rc, out[-1].split(",")[0]) == (0, "2 identical")
    renames.write_text(json.dumps({"t.other": {B: "splits=4,bias=1"}}))   # a map is per op
    assert run(capsys, old, new, "--renames", renames)[0] == 1


def test_a_rename_onto_the_wrong_cubin_differs(tmp_path, capsys):
    old, new = pack(tmp_path, "old"), pack(tmp_path, "new")
    renames = tmp_path / "renames.json"
    renames.write_text(json.dumps({OP: {A: B, B: A}}))   # each old key named as the other's new key
    rc, out = run(capsys, old, new, "--renames", renames)
    assert rc == 1 and [line.split()[0] for line in out[:-1]] == ["differ", "differ"]


def test_new_variants_are_listed_not_failed(tmp_path, capsys):
    old, new = pack(tmp_path, "old"), pack(tmp_path, "new")
    drop(old, B)
    rc, out = run(capsys, old, new)
    assert rc == 0 and out[0].split() == ["added", "sm_90a", OP, f"[{B}]"]
    assert compare(cubins(old), cubins(new), {}) == {"identical": [("sm_90a", OP, A)], "differ": [],
                                                      "removed": [], "added": [("sm_90a", OP, B)]}


def test_a_wheel_is_read_from_its_packs_folder(tmp_path, capsys):
    new = pack(tmp_path, "new")
    flip_byte(new, B)
    whl = tmp_path / "tkreg-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("tkreg/__init__.py", "")
        for f in sorted(PROBE.rglob("*")):
            if f.is_file():
                z.write(f, "tkreg/packs/" + f.relative_to(PROBE).as_posix())
    assert cubins(whl) == cubins(PROBE)
    rc, out = run(capsys, whl, new)
    assert rc == 1 and out[0].split() == ["differ", "sm_90a", OP, f"[{B}]"]


def test_no_manifest_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no <arch>/manifest.json"):
        cubins(tmp_path / "empty")
