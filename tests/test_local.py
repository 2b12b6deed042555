"""A probe that replays only the calls whose decisions change (trace/local.py) against a fresh trace.

The oracle: at every point exploration would try (each dim at 0 and 1, pairs at 1, all at 0
and all at 1), a replay that answers "same" must meet a fresh trace that records the same trace
and takes a route with the same guards (proved by z3), and a replay that answers "other" a
fresh trace that stops or records another trace.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import pytest
import torch

import guardsolve
from guardsolve.solve.explore import inputs_at, prove_union
from guardsolve.trace.local import LocalReplay
from guardsolve.trace.tracer import trace_once
from guardsolve.trace.divergence import difference

CONV = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                           torch.nn.MaxPool2d(2)).eval()
CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "sin": (lambda x: x.sin(), (torch.randn(6, 5),)),
    "add": (lambda a, b: a + b, (torch.randn(4, 3), torch.randn(4, 3))),
    "linear": (torch.nn.Linear(8, 4).eval(), (torch.randn(5, 8),)),
    "layer_norm": (torch.nn.LayerNorm(8).eval(), (torch.randn(3, 5, 8),)),
    "view": (lambda x: x.view(x.shape[0], -1), (torch.randn(3, 4, 5),)),
    "sum": (lambda x: x.sum(0) * 2, (torch.randn(3, 4),)),
    "cat": (lambda a, b: torch.cat([a, b], 1).softmax(-1), (torch.randn(3, 4), torch.randn(3, 2))),
    "matmul": (lambda a, b: (a @ b).relu(), (torch.randn(2, 3, 4), torch.randn(4, 5))),
    "conv": (CONV, (torch.randn(2, 3, 8, 8),)),
    "lstm": (torch.nn.LSTM(4, 6, batch_first=True).eval(), (torch.randn(2, 3, 4),)),
    "embedding": (torch.nn.Embedding(10, 3).eval(), (torch.tensor([[1, 2, 3], [4, 5, 6]]),)),
}


def _points(example: dict[str, int]) -> list[dict[str, int]]:
    dims = list(example)
    out = [{**example, d: v} for d in dims for v in (0, 1)]
    out += [{**example, a: 1, b: 1} for a, b in itertools.combinations(dims, 2)]
    out += [{d: v for d in dims} for v in (0, 1)]
    return [p for p in out if p != example]


@pytest.mark.parametrize("name", list(CASES))
def test_a_replayed_probe_agrees_with_a_fresh_trace(name: str) -> None:
    fn, inputs = CASES[name]
    with torch.no_grad():
        t = guardsolve.trace(fn, *inputs)
        base = guardsolve.simplify(t, explore=False)
        replay = LocalReplay.of(t)
        assert replay is not None, name
        example = base.input_dims(*t.inputs)
        answered = 0
        for point in _points(example):
            args = inputs_at(t, point)
            got = replay(point, args)
            if got is None:
                continue
            answered += 1
            try:
                u = trace_once(t.fn, args, False, expect=t.graph.nodes)
                fresh = difference(t, u)
            except Exception as e:  # NOTE: the fresh trace stops (diverges, a rule rejects, eager raises)
                fresh, u = f"{type(e).__name__}: {e}", None
            if got[0] == "other":
                assert fresh is not None, f"{name} at {point}: replay says another trace ({got[1]}), a fresh trace the same"
                continue
            assert fresh is None, f"{name} at {point}: replay says the same trace, a fresh trace: {fresh}"
            assert u is not None
            mine, theirs = guardsolve.simplify(got[1], explore=False), guardsolve.simplify(u.guard_graph(), explore=False)
            assert mine.check_dims(point) and theirs.check_dims(point)
            # NOTE: the same route: its guards and the fresh trace's accept the same sizes
            assert prove_union(list(mine), [list(theirs)], mine.sizes, 5000) is None, (name, point, str(mine), str(theirs))
    assert answered > 0, f"{name}: every point was left to a fresh trace ({replay.why})"


def test_exploration_replays_instead_of_tracing_again() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda x: x.sin(), torch.randn(4, 3)))
    ex = gs.exploration
    assert ex.replayed == 4 and ex.traces == 0 and len(gs) == 0 and len(gs.paths) == 4


class _Shift(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b


def test_a_size_of_1_a_broadcast_decides_stays_its_symbol_read_or_not() -> None:
    # NOTE: at x0 = 1 the broadcast against the (1, 4) parameter could give the output the
    # parameter's constant 1; the rule decided x0 == 1, so the output keeps x0 (valued 1): the
    # trace batch 5 records, whether user code reads the size (`new_zeros([i0])`) or not.
    # Both replay call by call as the same trace, and a fresh trace at batch 1 agrees.
    shift = _Shift().eval()
    point = {"x0": 1, "x1": 4}
    with torch.no_grad():
        t = guardsolve.trace(shift, torch.randn(5, 4))
        assert [c.text for c in guardsolve.simplify(t, explore=False)] == ["x1 == 4", "x0 != 1"]
        replay = LocalReplay.of(t)
        got = replay(point, inputs_at(t, point))
        assert got is not None and got[0] == "same", replay.why
        assert str(guardsolve.simplify(t)) == "(x1 == 1) or (x1 == 4)"  # NOTE: x1 = 1 broadcasts too

        def reads(x: torch.Tensor) -> torch.Tensor:
            y = shift(x)
            return y.new_zeros(y.shape[0]) + y.sum(1)

        t = guardsolve.trace(reads, torch.randn(5, 4))
        replay = LocalReplay.of(t)
        got = replay(point, inputs_at(t, point))
        assert got is not None and got[0] == "same", replay.why
        gs = guardsolve.simplify(t)
        assert gs.check(torch.randn(1, 4)) and gs.check(torch.randn(2, 4)) and not gs.check(torch.randn(2, 3))
        assert difference(t, guardsolve.trace(reads, torch.randn(1, 4))) is None
        assert str(guardsolve.trace(reads, torch.randn(1, 4)).graph) == str(t.graph).replace("[5, 4]", "[1, 4]")


def test_a_call_that_changes_sizes_in_place_leaves_probes_to_fresh_traces() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.t_()
        return y.sin()

    t = guardsolve.trace(f, torch.randn(3, 4))
    assert LocalReplay.of(t) is None and "in place" in (t.recorded.blocked or "")
    gs = guardsolve.simplify(t)
    assert gs.exploration.replayed == 0 and gs.check(torch.randn(1, 4))


def test_after_a_constant_size_a_later_rule_that_rejects_still_decides() -> None:
    # NOTE: at height 1 BatchNorm's rule gives the constant 1 where the trace has a size; the
    # replay carries it to ReLU and pooling, and MaxPool2d's rule rejects the sizes (as a fresh
    # trace's does); at batch 1 nothing rejects, and no user code reads the sizes: a route
    with torch.no_grad():
        t = guardsolve.trace(CONV, torch.randn(2, 3, 8, 8))
        replay = LocalReplay.of(t)
        low = {"input0": 2, "input1": 3, "input2": 1, "input3": 8}
        got = replay(low, inputs_at(t, low))
        assert got is not None and got[0] == "other" and "max_pool2d" in str(got[1]), replay.why
        one = {"input0": 1, "input1": 3, "input2": 8, "input3": 8}
        got = replay(one, inputs_at(t, one))
        assert got is not None and got[0] == "same", replay.why
    assert difference(t, guardsolve.trace(CONV, torch.randn(1, 3, 8, 8))) is None


def test_at_a_size_0_a_rule_that_rejects_is_found_on_plain_meta_tensors() -> None:
    # NOTE: `view(-1)` of no elements is ambiguous: at batch 0 `view`'s rule rejects, found by
    # running the flipped calls' rules on plain meta tensors (no symbolic replay), worded as
    # the symbolic replay words it; a fresh trace stops there too
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x + 1).view(x.shape[0], 4, -1)

    t = guardsolve.trace(f, torch.randn(3, 8))
    replay = LocalReplay.of(t)
    zero = {"x0": 0, "x1": 8}
    got = replay(zero, inputs_at(t, zero))
    assert got is not None and got[0] == "other" and got[2] is None and replay.stopped == 1
    assert str(got[1]).startswith("stops at tests/test_local.py:") and got[1].op == "aten.view.default"
    assert "aten.view.default's shape rule rejects these sizes: RuntimeError" in str(got[1])
    with pytest.raises(Exception):
        trace_once(f, inputs_at(t, zero), False, expect=t.graph.nodes)
    # NOTE: where no rule rejects a size 0, the symbolic replay decides (a route here)
    sin = guardsolve.trace(lambda x: x.sin(), torch.randn(3, 8))
    replay = LocalReplay.of(sin)
    got = replay(zero, inputs_at(sin, zero))
    assert got is not None and got[0] == "same" and replay.stopped == 0
    gs = guardsolve.simplify(t)
    assert gs.exploration.stopped >= 1 and not gs.check(torch.randn(0, 8)) and gs.check(torch.randn(1, 8))
