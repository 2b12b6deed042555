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


_REACH_CHECK = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import jit
lines = ["# t", "a", "## Programs of issue 48: x", "| row |", "## later", "b"]
rest, reach = jit._split_reach(lines)
assert rest == ["# t", "a", "## later", "b"] and reach == ["## Programs of issue 48: x", "| row |"], (rest, reach)
assert jit._split_reach(["# t"]) == (["# t"], [])
before = torch._dynamo.config.capture_scalar_outputs, torch._dynamo.config.capture_dynamic_output_shape_ops
with jit.CaptureFlags(True):
    assert torch._dynamo.config.capture_scalar_outputs and torch._dynamo.config.capture_dynamic_output_shape_ops
assert (torch._dynamo.config.capture_scalar_outputs, torch._dynamo.config.capture_dynamic_output_shape_ops) == before
assert jit.same(torch.ones(2), torch.ones(2) + 1e-7) and not jit.same(torch.ones(2), torch.ones(2) + 1e-2)
assert not jit.same(torch.ones(2, dtype=torch.int64), torch.ones(2))
moe = jit.make_moe()
x = torch.randn(1, 16)  # one token: two of the four experts get none
assert moe(x).shape == (1, 16)
print("ok")
"""


def test_jit_reach_helpers() -> None:
    """jit.py's `--reach` pieces without compiling: its section is cut out of JIT.md's lines up to
    the next heading, the capture flags are restored, outputs compare within tolerance."""
    out = subprocess.run([sys.executable, "-c", _REACH_CHECK, str(BENCH)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


@pytest.mark.slow
def test_jit_reach_item_row() -> None:
    """`jit.py --reach --quick --only item`: the `.item()` row for every system, printed, JIT.md untouched."""
    before = (BENCH / "JIT.md").read_bytes()
    out = subprocess.run([sys.executable, str(BENCH / "jit.py"), "--reach", "--quick", "--only", "item"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| `.item()` branch")]
    assert [r.split(" | ")[1] for r in rows[:4]] == ["guardsolve", "torch.compile", "torch.compile + capture flags",
                                                     "eager"]
    assert all(r.split(" | ")[7] == "0" for r in rows[:3]), rows  # no output differs from eager's
    assert len(rows) == 5 and ("MET" in rows[4] or "MISSED" in rows[4]), rows  # its row of issue 48's targets
    assert (BENCH / "JIT.md").read_bytes() == before


@pytest.mark.slow
def test_train_benchmark_quick_run() -> None:
    """`train.py --quick`: the token classifier's loop for every system and the restart, printed; TRAIN.md untouched."""
    before = (BENCH / "TRAIN.md").read_bytes()
    out = subprocess.run([sys.executable, str(BENCH / "train.py"), "--quick"], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "guardsolve" in out.stdout and "torch.compile dynamic=True" in out.stdout
    assert (BENCH / "TRAIN.md").read_bytes() == before
