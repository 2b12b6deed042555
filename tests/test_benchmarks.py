"""The benchmark workloads are sound inputs; the runner itself is exercised by a slow test."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import guardsolve

BENCH = pathlib.Path(__file__).parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from workloads import mixed_guard_graph, scale_guard_graph  # noqa: E402


def test_mixed_workload_has_n_irredundant_guards() -> None:
    gs = guardsolve.simplify(mixed_guard_graph(60))
    assert len(mixed_guard_graph(60).bailouts()) == 5 * 60 - 3
    assert len(gs) == 60  # 45 equalities, 14 chain orderings, one bound
    gs.verify()


def test_scale_workload_is_satisfiable_and_verified() -> None:
    g = scale_guard_graph(300)
    gs = guardsolve.simplify(g)
    assert len(g.bailouts()) >= 300 and 0 < len(gs) < len(g.bailouts())
    gs.verify()


def test_runner_smoke_run_of_every_section() -> None:
    """`--quick --smallest`: every section on its smallest case; it checks that the script runs, not timings."""
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in BENCH.iterdir() if p.is_file()}
    out = subprocess.run([sys.executable, str(BENCH / "run.py"), "--quick", "--smallest"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in BENCH.iterdir() if p.is_file()}
    assert after == before, "a smoke run must leave benchmarks/ (the committed RESULTS.md) untouched"
    assert "wrote " not in out.stdout
    for title in ("## mixed-N", "## chain-N", "## models", "## nested divisions", "## check", "## scale", "## targets"):
        assert title in out.stdout, title
    assert "| 100 | 497 |" in out.stdout and "| 10013 |" in out.stdout  # mixed-100 and scale-10k rows
    assert "MET: mixed-100: only irredundant guards (100/100)" in out.stdout  # z3-checked, not a timing


@pytest.mark.slow
def test_runner_quick_sections() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "run.py"), "--quick", "--only", "models", "--only", "check",
                          "--no-write"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    # NOTE: the target line is printed, MET or MISSED: a timing on a shared machine is not a test
    assert "## models (examples/)" in out.stdout and "check (notebook add): compiled minimal check" in out.stdout


def test_depth_sweep_quick_run(tmp_path: pathlib.Path) -> None:
    """`depth.py --quick`: GPT-2 at 1 and 2 layers, once, to a temporary file; the script runs, not timings."""
    pytest.importorskip("transformers")
    report = tmp_path / "depth.md"
    out = subprocess.run([sys.executable, str(BENCH / "depth.py"), "--quick", "-o", str(report)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "## GPT-2 depth sweep" in text and "| layers | aten ops |" in text
    rows = [line for line in text.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2, text
    assert "simplify time grows no faster than linearly with depth" in text
    assert "under cProfile" in text and "ncalls" in text


def test_compile_benchmark_fast_run() -> None:
    """`compile.py --fast`: Dynamo's counts vs the minimal ones on the small functions; prints only."""
    before = (BENCH / "COMPILE.md").read_bytes() if (BENCH / "COMPILE.md").exists() else None
    out = subprocess.run([sys.executable, str(BENCH / "compile.py"), "--fast"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "| branches | 1 | 3 (3) | 2 | yes |" in out.stdout  # Dynamo's 3 guards -> 2, proven
    assert ((BENCH / "COMPILE.md").read_bytes() if (BENCH / "COMPILE.md").exists() else None) == before
