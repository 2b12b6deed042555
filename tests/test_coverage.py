"""Coverage on PyTorch's own op and module databases: a fast subset across op families, and
the whole sweep as a slow test (benchmarks/coverage.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
pytest.importorskip("expecttest")  # NOTE: torch.testing._internal needs it (the test extra)

# NOTE: loaded by path under its own name: `coverage` is also coverage.py's package name.
_spec = importlib.util.spec_from_file_location(
    "guardsolve_coverage_sweep", Path(__file__).resolve().parents[1] / "benchmarks" / "coverage.py")
assert _spec is not None and _spec.loader is not None
sweep = sys.modules["guardsolve_coverage_sweep"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

# NOTE: by name, the plain variant where there is one (`div` has only `div.no_rounding_mode`, ...)
_OPS = {o.name: o for o in sorted(sweep.op_database(), key=lambda o: o.variant_test_name == "")}
_MODULES = {m.name: m for m in sweep.module_database()}


def _check(samples: list[sweep.Sample]) -> None:
    assert samples, "no plain-dense float32 sample"
    for s in samples:
        r = sweep.run_sample(s, make_fx_too=False)
        assert r is not None, f"{s.name}[{s.index}]: eager fails"
        assert r.gs == "ok", f"{s.name}[{s.index}]: {r.gs}: {r.reason}"


@pytest.mark.parametrize("name", sweep.FAST_OPS)
def test_op(name: str) -> None:
    _check(list(sweep.op_samples(_OPS[name], 2)))


@pytest.mark.parametrize("name", sweep.FAST_MODULES)
def test_module(name: str) -> None:
    _check(list(sweep.module_samples(_MODULES[name], 2)))


@pytest.mark.parametrize("name", sweep.FAST_OPS + sweep.FAST_MODULES)
def test_compiled_replay_equals_eager(name: str) -> None:
    """The straight-line replay a cache hit runs (direct op calls where it can) gives eager's output."""
    import guardsolve
    from guardsolve.trace.replay import compile_replay

    samples = list(sweep.op_samples(_OPS[name], 2) if name in _OPS else sweep.module_samples(_MODULES[name], 2))
    for s in samples:
        expected = sweep._seeded(s.fn, s.inputs)
        if not sweep._deterministic(s.fn, s.inputs, expected):
            continue
        t = guardsolve.trace(s.fn, *s.inputs)
        replay = compile_replay(t.graph, t.out_spec, t.constants)
        torch.manual_seed(0)
        assert sweep._compare(expected, replay(*s.inputs), True) is None, replay.__source__


@pytest.mark.slow
def test_full_sweep() -> None:
    import argparse

    args = argparse.Namespace(fast=False, only=None, ops=None, modules=True, samples=3, jobs=1)
    results = sweep.sweep(args)
    ok = sum(r.gs == "ok" for r in results)
    fx = sum(r.fx for r in results)
    assert not [r for r in results if r.gs in ("wrong", "inexact")], sweep.failures_list(results)
    assert ok >= fx, sweep.tables(results)


def test_meta_first_never_runs_eager_where_the_meta_rule_rejects_the_shapes() -> None:
    """Eager `native_batch_norm` does not check its running statistics' size (it writes out of
    bounds); the sweep's exactness check must not run it on perturbed sizes its meta rule rejects."""
    from guardsolve.testing import exactness_failures

    eager_shapes: list[tuple[int, int]] = []

    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        if type(x) is torch.Tensor:  # NOTE: an eager run (not traced, not under FakeTensorMode)
            eager_shapes.append((x.shape[1], m.shape[0]))
            if x.shape[1] != m.shape[0]:
                raise RuntimeError("stand-in for the out-of-bounds write")  # NOTE: not run for real
        return torch.ops.aten.native_batch_norm(x, None, None, m, m.abs() + 1, False, 0.1, 1e-5)[0]

    assert exactness_failures(f, (torch.randn(2, 3, 4), torch.randn(3)), count=8, meta_first=True) == []
    assert eager_shapes and all(a == b for a, b in eager_shapes), eager_shapes  # the variants that fit ran
