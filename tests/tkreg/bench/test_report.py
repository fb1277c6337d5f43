"""`tkreg bench` reporting without a GPU: BENCHMARKS.md and the plot from a saved H200 run."""
from __future__ import annotations

import json
import pathlib

import pytest

from tkreg import bench

ROOT = pathlib.Path(__file__).resolve().parents[3]
RUN = ROOT / "docs" / "bench" / "h200.json"
JIT = ROOT / "docs" / "bench" / "jit-time.json"
MODELS = sorted((ROOT / "docs" / "bench" / "models").glob("*.json"))   # BENCHMARKS.md's first tables


@pytest.fixture
def results():
    if not RUN.exists():
        pytest.skip("no saved run beside the tests (they run from a copy)")
    return json.loads(RUN.read_text())


def test_markdown_has_every_row_host_cost_and_cold_start(results):
    md = bench.markdown(results, json.loads(JIT.read_text()))
    assert md.startswith("# Benchmarks")
    assert results["gpu"] in md and results["torch"] in md and "Command:" in md
    assert md.count("\n| ") >= len(results["rows"]) + len(results["host_us"])
    assert "driver cuLaunchKernel" in md and "Cold start" in md and "jit-time" in md


def test_benchmarks_md_is_the_rendered_saved_run(results):
    """BENCHMARKS.md is generated, never edited by hand."""
    models = [json.loads(p.read_text()) for p in MODELS]
    assert (ROOT / "BENCHMARKS.md").read_text() == bench.markdown(results, json.loads(JIT.read_text()), models)


def test_model_tables_come_first():
    """Whole-model rows (tkreg.bench.decoder / .models JSONs) open the page, each with its GPU and command."""
    m = dict(title="T", date="2026-12-06", gpu="G", torch="2.11", command="python -m tkreg.bench.decoder",
             header=["case", "speedup"], rows=[["prefill 1 x 4096", "**1.10×**"]])
    md = bench.markdown(json.loads(RUN.read_text()), None, [m]) if RUN.exists() else None
    if md is None:
        pytest.skip("no saved run beside the tests")
    assert md.index("## Models") < md.index("## At a glance")
    assert "| prefill 1 x 4096 | **1.10×** |" in md and "on G, torch 2.11: `python -m tkreg.bench.decoder`" in md


def test_table_and_plot(results, tmp_path):
    assert "host cost per call" in bench.table(results)
    if bench.plot(results, str(tmp_path / "p.png")):
        assert (tmp_path / "p.png").stat().st_size > 1000


def test_bandwidth_rows_and_failed_peers(monkeypatch):
    from tkreg.bench import timing

    def boom(*a, **k):
        raise RuntimeError("inductor failed")
    monkeypatch.setattr(timing, "gpu_ms", boom)
    assert timing.try_ms(lambda: None, [()]) is None
    rows = timing.bandwidth_rows("op", "case", 4e9, 4000.0, 1.0, {"eager": 2.0, "torch.compile": None})
    assert [r.impl for r in rows] == ["tkreg", "eager"]
    assert rows[0].metric == pytest.approx(4000.0) and rows[0].pct_ceiling == pytest.approx(100.0)
    assert rows[0].vs == {"eager": 2.0} and rows[1].metric == pytest.approx(2000.0)


def test_merge_replaces_a_family_and_names_every_run(results):
    other = dict(results, date="2099-01-01", command="python -m tkreg bench --ops gemm",
                 rows=[dict(r, ms=r["ms"] * 2) for r in results["rows"] if r["op"] == "gemm"])
    merged = bench.merge(results, [(other, {"gemm"}, "a later run")])
    gemm = [r for r in merged["rows"] if r["op"] == "gemm"]
    assert gemm == other["rows"] and len(merged["rows"]) == len(results["rows"])
    md = bench.markdown(merged)
    assert "2099-01-01, `python -m tkreg bench --ops gemm` (a later run)" in md
    assert merged["runs"][-1]["families"] == ["gemm"] and merged["date"] == "2099-01-01"
    assert all("gemm" not in r["families"] for r in merged["runs"][:-1])
    # the earlier runs keep naming their other families
    before = {f for r in results.get("runs", [dict(families=sorted({r["op"] for r in results["rows"]}))])
              for f in r["families"]}
    assert {f for r in merged["runs"] for f in r["families"]} == before | {"gemm"}


def test_merge_cli_rewrites_the_table(results, tmp_path):
    import subprocess
    import sys
    table, new = tmp_path / "table.json", tmp_path / "new.json"
    table.write_text(json.dumps(results))
    new.write_text(json.dumps(dict(results, date="2099-01-02", command="python -m tkreg bench --ops norm",
                                   rows=[dict(r, ms=1.0) for r in results["rows"] if r["op"] == "rms_norm"])))
    subprocess.run([sys.executable, "-m", "tkreg.bench", "merge", str(table), str(new), "a note"], check=True)
    merged = json.loads(table.read_text())
    assert {r["ms"] for r in merged["rows"] if r["op"] == "rms_norm"} == {1.0}
    assert len(merged["rows"]) == len(results["rows"])
    assert merged["runs"][-1] == dict(families=["rms_norm"], date="2099-01-02",
                                      command="python -m tkreg bench --ops norm", note="a note")


def test_first_screen_summarizes_every_op(results):
    """BENCHMARKS.md opens with one row per op (its range of % of copy or rate, and of each peer
    ratio) before the per-run notes and the full table."""
    md = bench.markdown(results, json.loads(JIT.read_text()))
    assert md.index("## At a glance") < md.index("| op | case | impl |")
    glance = md.split("## At a glance", 1)[1].split("| op | case | impl |", 1)[0]
    for op in {r["op"] for r in results["rows"]}:
        row = next(line for line in glance.splitlines() if line.startswith(f"| {op} |"))
        assert "×" in row or "% of copy" in row, row
