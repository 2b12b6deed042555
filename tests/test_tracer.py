"""Tracer: the notebook's node sequence, guard graphs, re-execution, isolation, unsupported ops."""

from __future__ import annotations

import threading

import pytest
import torch

import guardsolve
from guardsolve.errors import InputMismatchError, InterpretError, MissingRuleError, TraceError
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op

NOTEBOOK_TRACE = """\
a = var_placeholder(name=a, rank=1)
b = var_placeholder(name=b, rank=1)
s0 = var_size(a)
s1 = var_size(b)
i0 = size_index(s0, index=0)
i1 = size_index(s1, index=0)
i2 = int_const(val=1)
i3 = int_eq(i0, i2)
bool_bailout(i3, expect=False)
i4 = int_const(val=1)
i5 = int_eq(i1, i4)
bool_bailout(i5, expect=False)
i6 = int_eq(i0, i1)
bool_bailout(i6, expect=True)
s2 = size_ctor(i0)
i7 = size_index(s0, index=0)
i8 = size_index(s2, index=0)
i9 = int_eq(i7, i8)
bool_bailout(i9, expect=True)
i10 = size_index(s1, index=0)
i11 = size_index(s2, index=0)
i12 = int_eq(i10, i11)
bool_bailout(i12, expect=True)
v0 = var_add(a, b)"""


def add(a, b):
    return a + b


def test_notebook_trace_node_sequence() -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    assert str(t.graph) == NOTEBOOK_TRACE


def test_notebook_guard_graph(notebook_guards: str) -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    assert str(guardsolve.guard_graph(t.graph)) == notebook_guards


def test_notebook_printed_guards() -> None:
    g = guardsolve.guard_graph(guardsolve.trace(add, torch.randn(4), torch.randn(4)).graph)
    assert guardsolve.print_guards(g) == [
        "assert not (a0 == 1)", "assert not (b0 == 1)", "assert (a0 == b0)", "assert (a0 == a0)",
        "assert (b0 == a0)"]


def test_guard_graph_of_parsed_trace(notebook_guards: str) -> None:
    g = guardsolve.Graph.parse(NOTEBOOK_TRACE)
    assert str(guardsolve.guard_graph(g)) == notebook_guards


def test_reexecution_same_sizes_and_guard_failure() -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    a, b = torch.randn(4), torch.randn(4)
    assert torch.equal(guardsolve.run_trace(t.graph, a, b), a + b)
    with pytest.raises(guardsolve.GuardFailure) as info:
        guardsolve.run_trace(t.graph, torch.randn(4), torch.randn(8))
    err = info.value
    assert err.expected is True and str(err.node) == "bool_bailout(i6, expect=True)"
    assert err.loc is not None and err.loc.code == "return a + b"
    assert "test_tracer.py" in str(err)


def test_guard_graph_check_fails_at_4_8() -> None:
    g = guardsolve.guard_graph(guardsolve.trace(add, torch.randn(4), torch.randn(4)).graph)
    guardsolve.run_concrete(g, {"a0": 5, "b0": 5})
    with pytest.raises(guardsolve.GuardFailure, match=r"bool_bailout\(i4, expect=True\)"):
        guardsolve.run_concrete(g, {"a0": 4, "b0": 8})


def test_rank_mismatch_on_reexecution() -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    with pytest.raises(InputMismatchError, match="rank-1"):
        guardsolve.run_trace(t.graph, torch.randn(4, 1), torch.randn(4))


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b, lambda a, b: torch.add(a, b), lambda a, b: a * b, lambda a, b: a - b,
    lambda a, b: a / b, lambda a, b: torch.mul(a, torch.sub(b, a)),
    lambda a, b: a.add(b).div(b), lambda a, b: b - a * b + a,
])
@pytest.mark.parametrize("shapes", [((4,), (4,)), ((4, 1), (1, 3)), ((3,), (2, 3)), ((2, 1, 5), (7, 1)),
                                    ((1,), (6,)), ((), (3,))])
def test_traced_output_and_replay_equal_eager(fn, shapes) -> None:  # type: ignore[no-untyped-def]
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    t = guardsolve.trace(fn, a, b)
    assert torch.allclose(t.output, fn(a, b), equal_nan=True)
    a2, b2 = torch.randn(shapes[0]), torch.randn(shapes[1])
    assert torch.allclose(guardsolve.run_trace(t.graph, a2, b2), fn(a2, b2), equal_nan=True)


def test_shape_queries() -> None:
    def f(x, y):
        assert x.dim() == 2 and len(x.shape) == 2 and x.ndim == 2
        n = x.size(0) * x.size(1)
        assert n == x.numel()
        if x.shape[1] == y.size(-1):
            return x + y
        return x

    x, y = torch.randn(3, 4), torch.randn(4)
    t = guardsolve.trace(f, x, y)
    assert torch.equal(t.output, x + y)
    assert Op.INT_MUL in {n.op for n in t.graph}
    gs = guardsolve.simplify(t.graph)
    assert gs.check(torch.randn(5, 4), torch.randn(4)) is True
    assert gs.check(torch.randn(5, 4), torch.randn(5)) is False
    assert gs.check(torch.randn(4), torch.randn(4)) is False  # rank differs


def test_shape_branch_records_bailout() -> None:
    def f(x):
        if x.shape[0] > 16:
            return x * x
        return x + x

    t = guardsolve.trace(f, torch.randn(20))
    g = guardsolve.guard_graph(t.graph)
    assert guardsolve.print_guards(g)[0] == "assert (x0 > 16)"


def test_int_arguments_are_traced() -> None:
    def f(x, n):
        assert x.shape[0] == n * 2
        return x + x

    t = guardsolve.trace(f, torch.randn(6), 3)
    assert str(t.graph).splitlines()[1] == "n = int_arg(name=n)"
    assert "x0 == 2*n" in str(guardsolve.simplify(t.graph))


def test_placeholders_named_after_parameters() -> None:
    t = guardsolve.trace(lambda query, key1: query + key1, torch.randn(2), torch.randn(2))
    assert [n.params["name"] for n in t.graph.placeholders()] == ["query", "key1"]
    g = guardsolve.guard_graph(t.graph)
    assert [n.params["name"] for n in g.placeholders()] == ["query0", "key1_0"]


def test_int_specialization_records_a_guard() -> None:
    def f(x):
        for _ in range(x.shape[0]):
            pass
        return x + x

    g = guardsolve.guard_graph(guardsolve.trace(f, torch.randn(3)).graph)
    assert "assert (x0 == 3)" in guardsolve.print_guards(g)


def test_unsupported_op_names_function_and_list() -> None:
    with pytest.raises(guardsolve.UnsupportedOpError) as info:
        guardsolve.trace(lambda x: torch.cumsum(x, 0), torch.randn(3))
    assert "`torch.cumsum`" in str(info.value) and "torch.add" in str(info.value)
    with pytest.raises(guardsolve.UnsupportedOpError, match="Tensor.cumprod"):
        guardsolve.trace(lambda x: x.cumprod(0), torch.randn(3))
    with pytest.raises(guardsolve.UnsupportedOpError, match="advanced"):
        guardsolve.trace(lambda x, i: x[i], torch.randn(3), torch.tensor([0, 1]))


def test_data_dependent_control_flow_names_the_line() -> None:
    def f(x):
        if x.sum() > 0:  # data, not shape
            return x + x
        return x - x

    with pytest.raises(guardsolve.DataDependentError) as info:
        guardsolve.trace(f, torch.ones(3))
    assert "if x.sum() > 0:  # data, not shape" in str(info.value) and "value_guards=True" in str(info.value)
    with pytest.raises(guardsolve.DataDependentError, match=r"\.item\(\)"):
        guardsolve.trace(lambda x: x * x.sum().item(), torch.ones(3))


def test_value_guards_opt_in() -> None:
    def f(x):
        if x.sum() > 0:
            return x + x
        return x - x

    t = guardsolve.trace(f, torch.ones(3), value_guards=True)
    gs = guardsolve.simplify(t.graph)
    assert len(gs.value_guards) == 1
    assert "not checkable from shapes alone" in gs.explain() and "if x.sum() > 0:" in gs.explain()
    assert str(gs) == ""  # x + x needs no shape guard; only the value guard remains
    with pytest.raises(guardsolve.GuardFailure):
        guardsolve.run_trace(t.graph, -torch.ones(3))
    assert torch.equal(guardsolve.run_trace(t.graph, 2 * torch.ones(3)), 4 * torch.ones(3))


def test_bad_arguments() -> None:
    with pytest.raises(TraceError, match="only torch.Tensor and int"):
        guardsolve.trace(lambda x: x, "nope")
    with pytest.raises(TraceError, match="takes 1 positional"):
        guardsolve.trace(lambda x: x, torch.randn(1), torch.randn(1))


def test_missing_rule_names_op_and_table() -> None:
    g = guardsolve.Graph.parse("a0 = int_placeholder(name=a0)\ni0 = int_mod(a0, a0)")
    with pytest.raises(MissingRuleError, match="the tiny rule table has no rule for op int_mod"):
        interpret(g, RuleTable("tiny", {Op.INT_PLACEHOLDER: lambda *, name: 1}))


def test_rule_failure_names_node() -> None:
    g = guardsolve.Graph.parse("a0 = int_placeholder(name=a0)\ni0 = int_const(val=0)\ni1 = int_floordiv(a0, i0)")
    with pytest.raises(InterpretError, match=r"node 2 `i1 = int_floordiv\(a0, i0\)`.*ZeroDivisionError"):
        guardsolve.run_concrete(g, {"a0": 3})


def test_interleaved_traces_do_not_interfere() -> None:
    results = {}

    def inner(x):
        results["inner"] = guardsolve.trace(lambda p, q: p * q, torch.randn(2), torch.randn(2))
        return x + x

    outer = guardsolve.trace(inner, torch.randn(5))
    alone = guardsolve.trace(lambda x: x + x, torch.randn(5))
    assert str(outer.graph) == str(alone.graph)
    assert str(results["inner"].graph) == str(guardsolve.trace(lambda p, q: p * q, torch.randn(2), torch.randn(2)).graph)


def test_values_cannot_cross_traces() -> None:
    leaked = {}

    def grab(x):
        leaked["x"] = x
        return x

    guardsolve.trace(grab, torch.randn(2))
    with pytest.raises(TraceError, match="different trace"):
        guardsolve.trace(lambda y: y + leaked["x"], torch.randn(2))


def test_threaded_traces_do_not_interfere() -> None:
    expected = {n: str(guardsolve.trace(add, torch.randn(n), torch.randn(n)).graph) for n in (1, 3)}
    errors: list[str] = []

    def work(n: int) -> None:
        for _ in range(30):
            got = str(guardsolve.trace(add, torch.randn(n), torch.randn(n)).graph)
            if got != expected[n]:
                errors.append(got)

    threads = [threading.Thread(target=work, args=(n,)) for n in (1, 3, 1, 3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
