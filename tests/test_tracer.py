"""Tracer: a real Tensor subclass over SymInts; PyTorch's shape rules; the seed's IR; isolation."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import guardsolve
from guardsolve.errors import InputMismatchError, InterpretError, MissingRuleError, TraceError, UnsupportedOpError
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op
from guardsolve.testing import exactness_failures
from guardsolve.trace.traced_tensor import TracedTensor

def _seed_trace() -> str:
    """The seed notebook's trace of `a + b` in its own five-op IR, from examples/notebook.py."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "examples" / "notebook.py"
    spec = importlib.util.spec_from_file_location("notebook_example", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.SEED_TRACE


NOTEBOOK_TRACE = _seed_trace()


def add(a, b):
    return a + b


# -- the seed's IR keeps its own rules ------------------------------------------------------------


def test_seed_trace_guard_graph(notebook_guards: str) -> None:
    g = guardsolve.Graph.parse(NOTEBOOK_TRACE)
    assert str(guardsolve.guard_graph(g)) == notebook_guards
    assert guardsolve.print_guards(guardsolve.guard_graph(g)) == [
        "assert not (a0 == 1)", "assert not (b0 == 1)", "assert (a0 == b0)", "assert (a0 == a0)",
        "assert (b0 == a0)"]
    assert [str(c) for c in guardsolve.simplify(g)] == ["a0 == b0", "a0 != 1"]


def test_seed_guard_graph_check_fails_at_4_8(notebook_guards: str) -> None:
    g = guardsolve.guard_graph(guardsolve.Graph.parse(NOTEBOOK_TRACE))
    guardsolve.run_concrete(g, {"a0": 5, "b0": 5})
    with pytest.raises(guardsolve.GuardFailure, match=r"bool_bailout\(i4, expect=True\)"):
        guardsolve.run_concrete(g, {"a0": 4, "b0": 8})


# -- PyTorch's rules: the same minimal guards, many more raw ones ----------------------------------


def test_add_under_pytorch_rules_has_the_seeds_minimal_guards() -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    assert str(t.graph) == (
        "a = var_placeholder(name=a, rank=1, shape=[4], dtype=float32)\n"
        "b = var_placeholder(name=b, rank=1, shape=[4], dtype=float32)\n"
        "v0 = aten.add.Tensor(a, b)")
    assert len(t.guard_graph().bailouts()) == 4  # FakeTensor's fast path asks only about the broadcast
    gs = guardsolve.simplify(t, explore=False)
    assert [str(c) for c in gs] == ["a0 == b0", "a0 != 1"]
    assert gs.check_dims({"a0": 7, "b0": 7}) and not gs.check_dims({"a0": 1, "b0": 1})
    merged = guardsolve.simplify(t)  # NOTE: the broadcast routes record the same `aten.add.Tensor`
    assert [str(c) for c in merged] == ["(a0 == 1) or (a0 == b0) or (b0 == 1)"]
    assert merged.check_dims({"a0": 1, "b0": 1}) and not merged.check_dims({"a0": 2, "b0": 3})


@pytest.mark.parametrize("fn", [
    lambda x: x + x.exp(),
    lambda x: x * x.relu() - x,
    lambda x: x.sigmoid() / (x.exp() + x),
], ids=["add", "mul-sub", "div"])
def test_operands_of_one_shape_broadcast_without_a_decision(fn) -> None:  # type: ignore[no-untyped-def]
    """Sizes that are one value broadcast to it for every value, 1 included: no `!= 1` guard."""
    t = guardsolve.trace(fn, torch.randn(3, 5))
    gs = guardsolve.simplify(t)
    assert not any("!= 1" in str(c) for c in gs), [str(c) for c in gs]
    one = torch.randn(1, 1)
    assert gs.check(one) is True
    torch.testing.assert_close(guardsolve.guarded(fn)(one), fn(one))
    assert exactness_failures(fn, (torch.randn(3, 5),), count=10) == []


def test_operands_of_different_sizes_still_decide_the_broadcast() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda x, y: x + y, torch.randn(2, 5), torch.randn(5)), explore=False)
    assert gs.check(torch.randn(2, 5), torch.randn(5)) and gs.check(torch.randn(3, 4), torch.randn(4))
    assert not gs.check(torch.randn(2, 5), torch.randn(1)) and not gs.check(torch.randn(2, 1), torch.randn(1))


@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 8), (1, 8), (0, 8), (1, 1, 8), (2, 0, 8), (3, 1, 2, 8), (4, 0)])
def test_linear_takes_eagers_one_check_and_gives_eagers_result(shape) -> None:  # type: ignore[no-untyped-def]
    """`linear`'s own rule (`fast_rules._fast_linear`) against eager and against PyTorch's composite:
    the same sizes, strides and dtype; one guard on the inner size; the example's path alone
    accepts every leading size (eager records the same `aten.linear` at 0 and 1)."""
    from guardsolve.guards.fast_rules import _fast_linear

    inner = shape[-1]
    for bias in (True, False):
        lin = torch.nn.Linear(inner, 3, bias=bias).eval()
        x = torch.randn(*shape)
        want = lin(x)
        meta = _fast_linear(x.to("meta"), lin.weight.to("meta"), lin.bias.to("meta") if bias else None)
        composite = torch.ops.aten.linear.default.decompose(x.to("meta"), lin.weight.to("meta"),
                                                            lin.bias.to("meta") if bias else None)
        # NOTE: an empty inner dim has strides `_known_contiguous` cannot tell: the composite decides
        assert meta is not None or 0 in shape
        for other in (want, composite) if meta is not None else ():
            assert (meta.shape, meta.dtype) == (other.shape, other.dtype)
            assert all(a == b or n <= 1 for a, b, n in zip(meta.stride(), other.stride(), meta.shape))
        with torch.no_grad():
            gs = guardsolve.simplify(guardsolve.trace(lin, x), explore=False)
        assert [c.text for c in gs if "== " + str(inner) in c.text] and (meta is None or not any(
            ">= 2" in c.text or "!= 1" in c.text for c in gs)), str(gs)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(10x7 and 8x4\)"):
        guardsolve.trace(torch.nn.Linear(8, 4), torch.randn(2, 5, 7))
    # NOTE: other dtypes, a bias to broadcast, a strided input: PyTorch's composite decides
    assert _fast_linear(torch.empty(5, 8, device="meta"), torch.empty(4, 8, device="meta", dtype=torch.float64)) is None
    assert _fast_linear(torch.empty(5, 8, device="meta"), torch.empty(4, 8, device="meta"),
                        torch.empty(1, device="meta")) is None
    assert _fast_linear(torch.empty(8, 5, device="meta").t(), torch.empty(4, 8, device="meta")) is None


def test_recorded_guards_equal_the_reinterpreted_saved_trace() -> None:
    def f(x, w):
        h = F.layer_norm(x, (x.shape[-1],))
        return (h @ w).softmax(-1)[:, : x.shape[0]]

    t = guardsolve.trace(f, torch.randn(4, 8), torch.randn(8, 6))
    parsed = guardsolve.Graph.parse(str(t.graph))
    assert parsed == t.graph
    replayed = guardsolve.guard_graph(parsed)
    # NOTE: the live trace also records PyTorch's checks on the tensors it hands back to user
    # code (a few trivial `size >= 0`), so the replay's bailouts are a subset of the live ones.
    assert set(guardsolve.print_guards(replayed)) <= set(guardsolve.print_guards(t.guard_graph()))
    assert str(guardsolve.simplify(replayed)) == str(guardsolve.simplify(t, explore=False))
    assert len(guardsolve.simplify(t)) > 0


def test_traced_tensor_is_a_tensor_and_unbound_methods_work() -> None:
    seen = {}

    def f(x, y):
        seen["isinstance"] = isinstance(x, torch.Tensor)
        return torch.Tensor.__radd__(x, y), torch.Tensor.__rsub__(x, 10)

    x, y = torch.randn(3), torch.randn(3)
    t = guardsolve.trace(f, x, y)
    assert seen["isinstance"] is True
    torch.testing.assert_close(t.output, (y + x, 10 - x))


@pytest.mark.parametrize("fn, inputs", [
    (lambda x: x.squeeze(dim=()), (torch.randn(1, 3),)),
    (lambda x: x.amax(dim=0), (torch.tensor(3.0),)),
    (lambda x, n: x.view(n, -1), (torch.randn(4, 3), 2)),
    (lambda x: x / x.shape[-1] ** 0.5, (torch.randn(2, 3),)),
    (lambda x: torch.arange(x.shape[1]) + x, (torch.randn(2, 3),)),
    (lambda x: torch.zeros(x.shape[0], 4), (torch.randn(2, 3),)),
    (lambda x: F.max_pool2d(x, 2), (torch.randn(1, 2, 6, 6),)),
    (lambda x: torch.chunk(x, 2), (torch.randn(4, 3),)),
    (lambda x: x.split(2, dim=1), (torch.randn(2, 5),)),
    (lambda x: F.pad(x, (1, 2)), (torch.randn(2, 3),)),
    (lambda a, b: torch.einsum("ij,jk->ik", a, b), (torch.randn(2, 3), torch.randn(3, 4))),
    (lambda x: x.new_zeros(x.shape) + x.masked_fill(x > 0, 0.0), (torch.randn(2, 3),)),
    (lambda x: x.float().to(torch.float64), (torch.randn(2, 3),)),
    (lambda x: x.repeat(2, 1).flip(0), (torch.randn(2, 3),)),
    (lambda x: F.interpolate(x, scale_factor=2), (torch.randn(1, 2, 4, 4),)),
    (lambda x, m: F.batch_norm(x, m, m.abs() + 1), (torch.randn(2, 3, 4), torch.randn(3))),
    (lambda q: F.scaled_dot_product_attention(q, q, q), (torch.randn(2, 4, 8),)),
    (lambda x: x.t().is_contiguous() or x.unbind(0)[0].sum() > 0, (torch.randn(2, 3),)),
], ids=["squeeze-empty", "amax-0d", "view-int-arg", "pow-half", "arange", "zeros", "max_pool2d", "chunk",
        "split", "pad", "einsum", "new_zeros-masked_fill", "float-to", "repeat-flip", "interpolate",
        "batch_norm", "sdpa", "contiguity"])
def test_everyday_idioms_equal_eager_with_exact_guards(fn, inputs) -> None:  # type: ignore[no-untyped-def]
    t = guardsolve.trace(fn, *inputs)
    torch.testing.assert_close(t.output, fn(*inputs))
    assert exactness_failures(fn, inputs, count=10) == []


def test_zeros_of_a_dim_keeps_it_free() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda x: torch.zeros(x.shape[0], 4), torch.randn(2, 3)))
    assert str(gs) == ""


def test_view_with_an_int_argument_rejects_what_eager_rejects() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda x, n: x.view(n, -1), torch.randn(4, 3), 2))
    x = torch.randn(4, 3)
    for n in (-2, -1, 0, 5):
        with pytest.raises(RuntimeError):
            x.view(n, -1)
        assert gs.check(x, n) is False
    # PyTorch's stride computation for `view` branches on x0 % n: other divisors retrace
    assert gs.check(torch.randn(6, 5), 2) is True and gs.check(torch.randn(8, 3), 4) is True



# -- layout: what a trace assumes about its inputs' strides and storage offsets -------------------


@pytest.mark.parametrize("offset", [None, 0, 10], ids=["own-offset", "offset-0", "offset-10"])
def test_as_strided_on_a_partial_view_observes_no_layout(offset) -> None:  # type: ignore[no-untyped-def]
    # op_db's as_strided.partial_views: as_strided replaces the strides, and the replay runs it on
    # the new input itself, so a fresh tensor of another size traces the same
    def fn(x):
        return torch.as_strided(x, (2, 2), (1, 2), offset)

    x = torch.randn(20)[5:15]
    t = guardsolve.trace(fn, x)
    assert torch.equal(t.output, fn(x))
    assert guardsolve.simplify(t).check(torch.randn(16)) is True
    assert exactness_failures(fn, (x,), count=6) == []


def test_a_partial_views_storage_offset_is_its_own() -> None:
    x = torch.randn(20)[5:15]
    t = guardsolve.trace(lambda x: x.new_zeros(x.storage_offset()), x)
    assert t.output.shape == (5,)
    gs = guardsolve.simplify(t)
    assert gs.check(torch.randn(30)[5:17]) is True and gs.check(torch.randn(12)) is False


def test_a_decision_on_a_strided_inputs_strides_pins_them() -> None:
    # `contiguous()` copies a strided input and returns a contiguous one itself: the trace of a
    # strided input holds only at its strides (op_db's embedding_bag on non-contiguous indices)
    weight, offsets = torch.randn(10, 5), torch.tensor([0, 3])
    strided = torch.arange(10)[::2]
    for fn in (lambda idx: idx.contiguous() + 1, lambda idx: F.embedding_bag(idx, weight, offsets)):
        gs = guardsolve.simplify(guardsolve.trace(fn, strided))
        assert gs.check(torch.arange(14)[::2]) is True
        assert gs.check(torch.arange(7)) is False
        assert exactness_failures(fn, (strided,), count=6) == []
    with_weight = (torch.randn(10, 5), strided)
    assert exactness_failures(lambda w, idx: F.embedding_bag(idx, w, offsets), with_weight, count=6) == []

# -- re-execution ----------------------------------------------------------------------------------


def test_reexecution_and_guard_failure_names_the_line() -> None:
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    a, b = torch.randn(4), torch.randn(4)
    assert torch.equal(guardsolve.run_trace(t.graph, a, b), a + b)
    with pytest.raises(guardsolve.GuardFailure) as info:
        guardsolve.run_trace(t.graph, torch.randn(4), torch.randn(8))
    err = info.value
    assert err.loc is not None and err.loc.code == "return a + b"
    assert "test_tracer.py" in str(err)


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


# -- user code over sizes --------------------------------------------------------------------------


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


def test_shape_branch_records_bailout_at_the_users_line() -> None:
    def f(x):
        if x.shape[0] > 16:
            return x * x
        return x + x

    t = guardsolve.trace(f, torch.randn(20))
    first = t.guard_graph().bailouts()[0]
    assert guardsolve.print_guards(t.guard_graph())[0] == "assert (x0 > 16)"
    assert first.meta["loc"].code == "if x.shape[0] > 16:"
    assert "x0 >= 17" in str(guardsolve.simplify(t))


def test_int_arguments_are_traced() -> None:
    def f(x, n):
        assert x.shape[0] == n * 2
        return x + x

    t = guardsolve.trace(f, torch.randn(6), 3)
    assert str(t.graph).splitlines()[1] == "n = int_arg(name=n, val=3)"
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


def test_module_parameters_are_named_constants_and_ops_on_them_are_recorded() -> None:
    model = torch.nn.Linear(8, 4)
    t = guardsolve.trace(model, torch.randn(3, 8))
    text = str(t.graph)
    assert "weight = var_param(name=weight, shape=[4, 8], dtype=float32)" in text
    assert "v0 = aten.linear.default(input, weight, bias)" in text  # the op eager runs, whole
    with torch.no_grad():
        model.weight.mul_(2)  # a replay sees in-place updates of the weights
    x = torch.randn(5, 8)
    torch.testing.assert_close(guardsolve.run_trace(t.graph, x, constants=t.constants), model(x))


# -- what does not trace ---------------------------------------------------------------------------


def test_op_without_a_symbolic_shape_rule_names_op_and_line() -> None:
    def f(x):
        return x.to_sparse()

    with pytest.raises(guardsolve.UnsupportedOpError) as info:
        guardsolve.trace(f, torch.randn(3, 4))
    msg = str(info.value)
    assert msg.startswith("aten._to_sparse") and "no fake impl or Meta kernel" in msg
    assert "test_tracer.py" in msg and "return x.to_sparse()" in msg


def test_data_dependent_control_flow_names_the_line() -> None:
    def f(x):
        if x.sum() > 0:  # data, not shape
            return x + x
        return x - x

    with pytest.raises(guardsolve.DataDependentError) as info:
        guardsolve.trace(f, torch.ones(3))
    assert "if x.sum() > 0:  # data, not shape" in str(info.value) and "value_guards=True" in str(info.value)
    with pytest.raises(guardsolve.DataDependentError, match=r"\.item\(\).*x\.sum\(\)\.item\(\) > 1.*value_guards"):
        guardsolve.trace(lambda x: x if x.sum().item() > 1 else -x, torch.ones(3))
    with pytest.raises(guardsolve.DataDependentError, match="u0, the size aten.nonzero.default computes from "
                       r"tensor data.*len\(torch.nonzero\(x\)\)"):
        guardsolve.trace(lambda x: x[:len(torch.nonzero(x))], torch.ones(3))
    with pytest.raises(guardsolve.DataDependentError, match="aten.linalg_lstsq.*depends on tensor data"):
        guardsolve.trace(lambda a, b: torch.linalg.lstsq(a, b).solution, torch.randn(3, 2), torch.randn(3, 1))


@pytest.mark.parametrize("fn", [
    lambda x: torch.nonzero(x),
    lambda x: torch.argwhere(x).sum(0) + x.shape[0],
    lambda x: torch.masked_select(x, x > 0),
    lambda x: torch.unique(x, return_inverse=True, return_counts=True),
    lambda x: torch.unique_consecutive(x, return_counts=True),
    lambda x: torch.unique(x, dim=0),
    lambda x: x[x > 0] * 2,
    lambda x: torch.masked_select(x, x > 1) + 1,
    lambda x: torch.nonzero(x).float().mean(0),
    lambda x: x[x > 1].sum() + x[x > 0].sum(),  # NOTE: two masks of one shape, counts of their own
])
def test_data_shaped_outputs_get_unbacked_sizes(fn) -> None:
    """An op whose output size depends on data gets a fresh unbacked size (as FakeTensor's
    `fake_impls` do): it traces, equals eager, and its guards are exact on other shapes."""
    x = torch.tensor([[0.0, 1.0, 1.0], [2.0, 0.0, 2.0]])
    t = guardsolve.trace(fn, x)
    for got, want in zip(torch.utils._pytree.tree_leaves(t.output), torch.utils._pytree.tree_leaves(fn(x))):
        assert torch.equal(got, want)
    gs = guardsolve.simplify(t, explore=False)
    assert "u0" not in str(gs) and "int_unbacked" not in str(t.guard_graph())
    assert str(guardsolve.guard_graph(t.graph)) == str(t.guard_graph())  # a saved trace reinterprets alike
    for shape in [(2, 3), (1, 3), (3, 1), (4, 5), (0, 2)]:
        y = torch.randint(0, 3, shape).float()
        retraced = guardsolve.trace(fn, y).guard_graph()
        assert gs.check(y) == (str(retraced) == str(t.guard_graph())), shape


def test_unbacked_sizes_decide_only_what_holds_for_every_value() -> None:
    """`u0 < 0` is False and `u0 + 1 != 0` True whatever u0 (a size, so >= 0): no guard needed.
    `u0 == 1` depends on the data: DataDependentError, as does comparing u0 with a dim."""
    from guardsolve.guards.recorder import Recorder

    rec = Recorder(None)
    u = rec.unbacked("aten.nonzero.default", 3)
    x = rec.input_dim("x0", 4, guardsolve.ir.ops.Op.INT_PLACEHOLDER, None, 0)
    c = u._wrap
    assert u.lt(c(0)).guard_bool("", 0) is False
    assert u.add(c(1)).ne(c(0)).guard_bool("", 0) is True
    assert u.mul(c(2)).ge(c(0)).sym_and(u.ge(c(0))).guard_bool("", 0) is True
    assert u.sub(c(1)).ge(c(0)).sym_or(u.ge(c(-1))).guard_bool("", 0) is True
    for undecided in (u.eq(c(1)), u.sub(c(1)).ge(c(0)), u.le(x), u.mul(u).lt(c(5))):
        with pytest.raises(guardsolve.DataDependentError, match="u0, the size aten.nonzero.default computes"):
            undecided.guard_bool("", 0)
    assert u.eq(c(1)).guard_or_false("", 0) is False and u.eq(c(1)).guard_or_true("", 0) is True
    m = u.sym_max(c(1))  # NOTE: PyTorch keeps Max(u0, 1) symbolic; bounds still decide
    assert m.ge(c(1)).guard_bool("", 0) is True and m.data == u.data
    with pytest.raises(guardsolve.DataDependentError):
        m.ge(c(2)).guard_bool("", 0)
    assert u.add(c(3)).sym_max(c(1)) is not None and u.add(c(3)).sym_max(c(1)).hint == 6
    assert not [n for n in rec.guards.nodes if n.op is guardsolve.ir.ops.Op.BOOL_BAILOUT]


def test_value_guards_opt_in() -> None:
    def f(x):
        if x.sum() > 0:
            return x + x
        return x - x

    t = guardsolve.trace(f, torch.ones(3), value_guards=True)
    gs = guardsolve.simplify(t.graph)
    assert len(gs.value_guards) == 1
    assert "not checkable from shapes alone" in gs.explain() and "if x.sum() > 0:" in gs.explain()
    assert "x.sum() > 0" not in str(gs)  # the value guard is not a shape guard
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


# -- isolation -------------------------------------------------------------------------------------


def test_interleaved_traces_do_not_interfere() -> None:
    results = {}

    def inner(x):
        results["inner"] = guardsolve.trace(lambda p, q: p * q, torch.randn(2), torch.randn(2))
        return x + x

    outer = guardsolve.trace(inner, torch.randn(5))
    alone = guardsolve.trace(lambda x: x + x, torch.randn(5))
    assert str(outer.graph) == str(alone.graph)
    assert str(outer.guard_graph()) == str(alone.guard_graph())
    assert str(results["inner"].graph) == str(guardsolve.trace(lambda p, q: p * q, torch.randn(2), torch.randn(2)).graph)


def test_values_cannot_cross_traces() -> None:
    leaked = {}

    def grab(x):
        leaked["x"] = x
        return x

    guardsolve.trace(grab, torch.randn(2))
    assert isinstance(leaked["x"], TracedTensor)
    with pytest.raises(TraceError, match="different trace"):
        guardsolve.trace(lambda y: y + leaked["x"], torch.randn(2))


def test_threaded_traces_do_not_interfere() -> None:
    expected = {n: str(guardsolve.trace(add, torch.randn(n), torch.randn(n)).guard_graph()) for n in (1, 3)}
    errors: list[str] = []

    def work(n: int) -> None:
        for _ in range(10):
            got = str(guardsolve.trace(add, torch.randn(n), torch.randn(n)).guard_graph())
            if got != expected[n]:
                errors.append(got)

    threads = [threading.Thread(target=work, args=(n,)) for n in (1, 3, 1, 3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert torch.compiler.is_compiling() is False  # the tracing flags are restored


def test_small_eager_calls_run_on_one_thread_and_the_setting_is_restored() -> None:
    """A trace runs eager kernels on small tensors single-threaded (OpenMP barriers on a loaded
    machine cost more than the kernels); the process's thread count is put back, also when
    traces run concurrently, and a large tensor's op keeps its threads."""
    from guardsolve.trace.eager_run import threads_for as _threads_for

    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _threads_for([torch.randn(2, 5, 8), 3]):
            assert torch.get_num_threads() == 1
            with _threads_for([torch.randn(4)]):  # nested and concurrent calls share one count
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with _threads_for([torch.randn(4), torch.randn(300, 300)]):
            assert torch.get_num_threads() == 2
        with _threads_for([[1000, 1000], torch.float32]):  # a factory: its size is its arguments
            assert torch.get_num_threads() == 2
        guardsolve.trace(lambda x: torch.nn.functional.linear(x, torch.randn(4, 3)).sum(0), torch.randn(4, 3))
        assert torch.get_num_threads() == 2
        threads = [threading.Thread(target=lambda: [guardsolve.trace(add, torch.randn(3), torch.randn(3))
                                                     for _ in range(10)]) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_a_parameter_named_like_the_fresh_names_keeps_its_dims_apart() -> None:
    """A parameter `i` has dims `i0, i1`, which are also the guard graph's fresh int names."""
    t = guardsolve.trace(lambda w, i: w[:, :1] + i, torch.randn(3, 4), torch.randn(3, 1))
    gs = guardsolve.simplify(t, explore=False)
    assert {c.text for c in gs.constraints} >= {"w0 == i0", "i1 == 1"}
    assert gs.check(torch.randn(5, 2), torch.randn(5, 1))
    assert not gs.check(torch.randn(5, 2), torch.randn(4, 1))


def test_guarded_replays_unbacked_sizes_with_each_call_s_data() -> None:
    """A replay recomputes the data-dependent size from the op it runs, so a size derived from
    it (`y.shape[0] + 1`) follows each call's data, not the traced one."""
    calls = []

    @guardsolve.guarded(explore=False)  # NOTE: exploring would call f again at other sizes
    def f(x):
        calls.append(1)
        y = x[x > 0] * 2
        return torch.zeros(y.shape[0] + 1) + y.sum(), torch.nonzero(x)

    for x in [torch.tensor([[0., 1.], [2., 0.], [3., 4.]]), torch.tensor([[1., 1.], [2., 3.], [3., 4.]]),
              torch.tensor([[0., 0.], [0., 0.], [3., 0.]])]:
        y = x[x > 0] * 2
        got = f(x)
        assert torch.equal(got[0], torch.zeros(y.shape[0] + 1) + y.sum()) and torch.equal(got[1], torch.nonzero(x))
    assert len(calls) == 1  # NOTE: one trace; the other calls replayed it


def test_a_size_of_an_output_eager_and_the_shape_rule_disagree_on_cannot_be_decided() -> None:
    """native_batch_norm's saved statistics in eval mode: eager returns them empty, the shape
    rule full-size. Passing their size on traces (a replay reads it from the tensor); deciding
    on it raises, where it used to specialize silently on eager's value."""
    def f(x, rm, rv, w, b):
        out = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
        return out[0] * 2 if out[1].shape[0] > 0 else out[0]

    args = (torch.randn(2, 3, 4, 4), torch.zeros(3), torch.ones(3), torch.ones(3), torch.zeros(3))
    with pytest.raises(guardsolve.DataDependentError, match=r"a size of v\d+, whose .*shape rule gives \[3\].*eager \[0\]"):
        guardsolve.trace(f, *args)
    t = guardsolve.trace(lambda x, rm, rv, w, b: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
                         *args)
    assert "x1 == rm0" in str(guardsolve.simplify(t))


@pytest.mark.parametrize("op", ["_batch_norm_with_update", "_batch_norm_with_update_functional",
                                "_batch_norm_no_update"])
def test_batch_norms_per_channel_tensors_are_checked_before_eager_runs(op: str) -> None:
    """The CPU kernels of the `_batch_norm_with_update` family index the per-channel tensors by
    channel; their meta kernels do not check their lengths. Exploring ran the eager kernel at a
    running mean of size 0 and the process died (SIGSEGV); the guards now say what eager's
    `batch_norm` checks, and exploring never runs the kernel there."""
    func = getattr(torch.ops.aten, op).default
    f = lambda x, w, b, rm, rv: func(x, w, b, rm, rv, 0.5, 0.6)[0]  # noqa: E731
    args = (torch.randn(5, 3, 4), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 1)
    gs = guardsolve.simplify(guardsolve.trace(f, *args))
    assert {"x1 == rm0", "x1 == w0", "x1 == b0", "x1 == rv0"} <= {c.text for c in gs}, str(gs)
    assert not gs.check(args[0], args[1], args[2], torch.randn(0), args[4])
    assert gs.check(torch.randn(2, 3, 7), *args[1:])


def test_resize_in_place_traces_only_to_the_same_sizes() -> None:
    """`resize_as_` / `resize_` to the tensor's own sizes trace with a guard that says so; a
    resize to other sizes raises UnsupportedOpError at the user's line (a traced tensor's
    sizes cannot change in place, so later reads of it would be stale)."""
    f = lambda a, b: a.clone().resize_as_(b) * 2  # noqa: E731
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    t = guardsolve.trace(f, a, b)
    assert torch.equal(t.output, f(a, b))
    gs = guardsolve.simplify(t, explore=False)
    assert {"a0 == b0", "a1 == b1"} <= {c.text for c in gs}
    assert not gs.check(torch.randn(3, 3), b)
    assert exactness_failures(f, (a, b), count=6) == []
    with pytest.raises(UnsupportedOpError, match=r"resize_as_.*own sizes.*test_tracer.py"):
        guardsolve.trace(f, torch.randn(3, 3), b)
    with pytest.raises(UnsupportedOpError, match=r"resize_.*own sizes"):
        guardsolve.trace(lambda x: x.clone().resize_(4), torch.randn(3))


@pytest.mark.parametrize("fn, inputs", [
    (lambda x: x.item(), (torch.tensor([2.5]),)),
    (lambda x: x * x.sum().item(), (torch.randn(3),)),
    (lambda x: x.sum().item() + 1, (torch.tensor([2, 3]),)),
    (lambda x: torch.full((2,), x.max().item()), (torch.randn(3),)),
    (lambda x, s: torch.narrow(x, 0, s, 2), (torch.randn(5), torch.tensor(1))),
    (lambda x, i: torch.tensor_split(x, i), (torch.randn(7), torch.tensor([1, 4]))),
    (lambda x, n: x[: n.item()] * 2, (torch.randn(6), torch.tensor(4))),
])
def test_item_is_an_unbacked_value(fn, inputs) -> None:
    """`.item()` is a value read from data (torch.export's unbacked symbol): recorded in the
    trace, passed to later ops by name, recomputed by every replay; its checks (a C++
    composite's, `narrow`'s bounds) run in the replay; it never reaches a shape guard."""
    t = guardsolve.trace(fn, *inputs)
    assert "aten.item.default" in str(t.graph)
    expected = fn(*inputs)
    assert str(t.output) == str(expected)
    from guardsolve.ir.graph import Graph
    from guardsolve.trace.replay import run_trace

    parsed = Graph.parse(str(t.graph))
    parsed.validate()
    assert guardsolve.print_guards(guardsolve.guard_graph(parsed)) == guardsolve.print_guards(t.guard_graph())
    g = guardsolve.guarded(fn)
    g(*inputs)
    # other data, same shapes: the replay recomputes the value
    other = tuple(torch.randn_like(a) if a.is_floating_point() else a for a in inputs)
    assert str(g(*other)) == str(fn(*other))
    assert str(run_trace(t.graph, *other, constants=t.constants)) == str(fn(*other))


def test_item_checks_run_in_the_replay() -> None:
    """`narrow` with a start read by `.item()`: its bounds check is a runtime check of the
    trace. Out-of-range data raises as eager does, at trace time and in a replay; it never
    clamps silently."""
    from guardsolve.trace.replay import run_trace

    fn = lambda x, s: torch.narrow(x, 0, s, 2)  # noqa: E731
    x = torch.randn(5)
    t = guardsolve.trace(fn, x, torch.tensor(1))
    assert str(guardsolve.simplify(t)) == ""  # no shape guard: the value is not a size
    with pytest.raises(guardsolve.GuardsolveError, match="exceeds dimension size"):  # eager's kernel's check
        run_trace(t.graph, x, torch.tensor(4), constants=t.constants)
    with pytest.raises(RuntimeError, match="exceeds dimension size"):  # PyTorch's own check, as in eager
        guardsolve.trace(fn, x, torch.tensor(4))
    g = guardsolve.guarded(fn)
    assert torch.equal(g(x, torch.tensor(3)), fn(x, torch.tensor(3)))
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        g(x, torch.tensor(4))


def test_item_with_value_guards_is_a_symbol_of_the_trace() -> None:
    """With value guards, `.item()` of a traced tensor is a value of the trace: passed to later
    ops by name, a decision on it a value bailout (never a size guard), `int()` of it a pin."""
    from guardsolve.guards.shape import value_bailouts
    from guardsolve.trace.replay import run_trace

    t = guardsolve.trace(lambda x: x * x.sum().item(), torch.ones(3), value_guards=True)
    assert "aten.item" in str(t.graph) and not value_bailouts(t.graph)
    y = torch.randn(3)
    assert torch.equal(run_trace(t.graph, y, constants=t.constants), y * y.sum().item())

    def branch(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.mean().item() > 0.5 else -x

    t = guardsolve.trace(branch, torch.ones(3), value_guards=True)
    (i,) = value_bailouts(t.graph)
    assert t.graph.nodes[i].params["expect"] is True and "int_gt" in str(t.graph)
    assert all(c.text.startswith("x0") for c in guardsolve.simplify(t, explore=False))  # NOTE: sizes only
    with pytest.raises(guardsolve.GuardFailure):
        run_trace(t.graph, torch.zeros(3), constants=t.constants)
    t = guardsolve.trace(lambda x, n: x[: int(n.item())], torch.ones(5), torch.tensor(3), value_guards=True)
    assert "int_eq" in str(t.graph) and len(value_bailouts(t.graph)) == 1
    with pytest.raises(guardsolve.GuardFailure):
        run_trace(t.graph, torch.ones(5), torch.tensor(2), constants=t.constants)


def test_random_ops_after_a_reseed_inside_the_function_are_never_replayed() -> None:
    """A function that seeds the RNG itself (op_db's `wrapper_set_seed`) draws from that seed;
    its trace's replay would draw from the caller's stream. The trace says so, and `guarded`
    serves the call from the trace's own run (eager's values), keeps no entry, and runs later
    calls at that signature eagerly (a trace each cost many times eager's call)."""

    def reseeds(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(42)
        return F.dropout(x, 0.5)

    def untraced_draw(x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(3)  # NOTE: no traced input: a constant of the trace, drawn once
        return F.dropout(x, 0.5) + noise

    t = guardsolve.trace(reseeds, torch.ones(4, 3))
    assert t.unreplayable is not None and "aten.dropout.default" in t.unreplayable, t.unreplayable
    assert guardsolve.trace(untraced_draw, torch.ones(4, 3)).unreplayable is not None
    assert guardsolve.trace(lambda x: F.dropout(x, 0.5) * 2, torch.ones(4, 3)).unreplayable is None
    g = guardsolve.guarded(reseeds)
    for n in (4, 4, 5):
        torch.manual_seed(n)
        assert torch.equal(g(torch.ones(n, 3)), reseeds(torch.ones(n, 3)))
    info = g.cache_info()
    assert info.entries == 0 and info.traces == 2 and info.eager_calls == 1, info
    assert "draws from a generator state set outside the trace" in info.miss_reasons[-1]
    assert "draws from a generator state set outside the trace" in info.eager_reasons[0][0]
