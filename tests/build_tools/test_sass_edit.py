"""build_tools/sass_edit.py changes scheduling hints only: on a shipped sm_90a FP8 cubin built without
the edit, the FFMA interleave flips the yield / reuse bits of some FFMAs and nothing else, so the
disassembly without `.reuse` marks is unchanged.  A variant's unknown or no-op edit fails its build.
Needs nvdisasm (build_tools/requirements-build.txt)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tkreg
from build_tools import sass_edit
from build_tools.compile import CompileError
from build_tools.sass import disassemble, find_disassembler
from tkreg.spec import Variant

HINT_BITS = sass_edit.YIELD | sass_edit.REUSE_B


@pytest.fixture(scope="module")
def unedited_fp8_cubin() -> bytes:
    """The sm_90a fp8_gemm cubin of a variant the build did not edit (the pipelined mid-64 tile,
    whose promotion is a run of FFMAs)."""
    tool = find_disassembler()
    if tool is None or "nvdisasm" not in Path(tool[0]).name:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    pack = Path(tkreg.__file__).parent / "packs" / "sm_90a"
    manifest = json.loads((pack / "manifest.json").read_text())["ops"]["tkreg.fp8_gemm"]
    edited = {Variant.from_json(v).key for v in manifest["spec"]["variants"] if v.get("sass_edits")}
    for rec in manifest["variants"]:
        if rec["key"] not in edited and "shape_class=mid-64" in rec["key"]:
            return (pack / rec["cubin"]).read_bytes()
    pytest.skip("no unedited mid-64 fp8_gemm variant in this wheel")


def _text(cubin: bytes) -> str:
    sass = disassemble(cubin)
    return re.sub(r"\.reuse|/\*\s*0x[0-9a-f]+\s*\*/", "", sass)


def test_ffma_interleave_flips_only_hint_bits_of_ffmas(unedited_fp8_cubin):
    before = unedited_fp8_cubin
    after, count = sass_edit.interleave_ffma(before)
    assert count > 0 and len(after) == len(before)
    ffma_words = set()
    for func, run in sass_edit._runs(sass_edit._listing(before)):
        base, _ = sass_edit._text_sections(before)[f".text.{func}"]
        ffma_words |= {base + off + 8 for off, *_ in run}
    changed = 0
    for pos in range(0, len(before), 8):
        a, b = (int.from_bytes(x[pos:pos + 8], "little") for x in (before, after))
        if a != b:
            assert pos in ffma_words and (a ^ b) & ~HINT_BITS == 0, hex(pos)
            changed += 1
    assert changed == count
    assert _text(after) == _text(before)


def test_unknown_or_idle_edits_fail_the_build(unedited_fp8_cubin):
    with pytest.raises(CompileError, match="unknown SASS edit"):
        sass_edit.apply_edits(unedited_fp8_cubin, ("nope",), "sm_90a")
    # a transpose only moves bits: no FFMA run, so the edit would ship an unedited cubin
    pack = Path(tkreg.__file__).parent / "packs" / "sm_90a"
    rec = json.loads((pack / "manifest.json").read_text())["ops"]["tkreg.batched_transpose"]["variants"][0]
    with pytest.raises(CompileError, match="found nothing to edit"):
        sass_edit.apply_edits((pack / rec["cubin"]).read_bytes(), ("ffma_interleave",), "sm_90a")
