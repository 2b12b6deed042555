"""Hand-written cases for each branch of the solver layers, with the exact answer.

The ordering layer's disequality tightening (`OrderLayer._tighten`: outside the interval,
on its upper or lower end, strictly inside, repeated rounds, a tightening that closes the
interval), z3's removal order (`reduce_component`: most complex first, exactly one of two
equivalent constraints goes), the unifier's offsets and conflict chains, and the shapes a
broadcast accepts (checked shape by shape against re-tracing, not by counting nodes).
"""

from __future__ import annotations

import ast
import itertools

import pytest
import torch

import guardsolve
from guardsolve import Graph, UnsatisfiableGuardsError, simplify
from guardsolve.guards.expr import Poly, rel
from guardsolve.ir.ops import Op
from guardsolve.ir.printer import print_guards
from guardsolve.solve.difference import Z
from guardsolve.solve.order import OrderLayer
from guardsolve.solve.smt import reduce_component
from guardsolve.solve.unify import Conflict, UnionFind
from guardsolve.testing import accepts

_BIN = {ast.Add: Op.INT_ADD, ast.Sub: Op.INT_SUB, ast.Mult: Op.INT_MUL, ast.FloorDiv: Op.INT_FLOORDIV,
        ast.Mod: Op.INT_MOD}
_CMP = {ast.Eq: Op.INT_EQ, ast.NotEq: Op.INT_NE, ast.Lt: Op.INT_LT, ast.LtE: Op.INT_LE, ast.Gt: Op.INT_GT,
        ast.GtE: Op.INT_GE}


def graph(*asserts: str, sizes: str = "x0 y0 z0", ints: str = "n0") -> Graph:
    """A guard graph with one bailout per Python assert (`not (...)` expects False, as a trace's do)."""
    g = Graph()
    for d in sizes.split():
        g.emit(Op.INT_PLACEHOLDER, (), out=d, name=d)
    for d in ints.split():
        g.emit(Op.INT_ARG, (), out=d, name=d)

    def emit(e: ast.expr) -> str:
        match e:
            case ast.Name(id=name):
                return name
            case ast.Constant(value=int(v)):
                return g.emit(Op.INT_CONST, (), val=v)
            case ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=int(v))):
                return g.emit(Op.INT_CONST, (), val=-v)
            case ast.UnaryOp(op=ast.Not(), operand=a):
                return g.emit(Op.BOOL_NOT, (emit(a),))
            case ast.BinOp(left=a, op=op, right=b):
                return g.emit(_BIN[type(op)], (emit(a), emit(b)))
            case ast.Compare(left=a, ops=[op], comparators=[b]):
                return g.emit(_CMP[type(op)], (emit(a), emit(b)))
            case ast.BoolOp(op=op, values=[a, *rest]):
                out = emit(a)
                for b in rest:
                    out = g.emit(Op.BOOL_AND if isinstance(op, ast.And) else Op.BOOL_OR, (out, emit(b)))
                return out
        raise AssertionError(f"unsupported: {ast.dump(e)}")

    for a in asserts:
        e = ast.parse(a, mode="eval").body
        expect = not (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not))
        g.emit(Op.BOOL_BAILOUT, (emit(e if expect else e.operand),), expect=expect)  # type: ignore[attr-defined]
    return g


def texts(gs: guardsolve.GuardSet) -> list[str]:
    return [str(c) for c in gs]


def exact(asserts: list[str], sizes: str = "x0 y0 z0", ints: str = "n0", lo: int = -1, hi: int = 7) -> list[str]:
    """simplify()'s guards, after checking them against the original bailouts at every point of
    a small grid (sizes from 0, int args from `lo`), and z3's proof of equivalence and minimality."""
    g = graph(*asserts, sizes=sizes, ints=ints)
    gs = simplify(g, verify=True)
    dims = sizes.split() + ints.split()
    for values in itertools.product(*[range(0 if d in sizes.split() else lo, hi) for d in dims]):
        env = dict(zip(dims, values))
        assert gs.check_dims(env) == accepts(g, env), (env, texts(gs))
    return texts(gs)


# -- the ordering layer: disequality tightening ----------------------------------------------


@pytest.mark.parametrize("asserts, expected", [
    # outside the interval: implied, dropped
    (["x0 <= 5", "x0 != 7"], ["x0 <= 5"]),
    (["x0 >= 5", "x0 != 2"], ["x0 >= 5"]),
    (["x0 <= y0 + 1", "not (x0 == y0 + 3)"], ["x0 <= y0 + 1"]),
    (["x0 >= y0 + 2", "y0 != x0"], ["x0 >= y0 + 2"]),
    # on the upper end: the bound tightens by one
    (["x0 <= 5", "x0 != 5"], ["x0 <= 4"]),
    (["x0 <= y0 + 3", "x0 != y0 + 3"], ["x0 <= y0 + 2"]),
    (["y0 <= x0 + 3", "not (x0 + 3 == y0)"], ["x0 >= y0 - 2"]),
    # on the lower end
    (["x0 >= 2", "x0 != 2"], ["x0 >= 3"]),
    (["x0 >= y0 - 1", "x0 != y0 - 1"], ["x0 >= y0"]),
    (["not (x0 == 0)"], ["x0 >= 1"]),  # the size bound x0 >= 0 is the lower end
    # strictly inside: kept
    (["x0 >= 1", "x0 <= 5", "x0 != 3"], ["x0 <= 5", "x0 >= 1", "x0 != 3"]),
    (["x0 <= y0 + 4", "y0 <= x0 + 4", "x0 != y0"], ["x0 <= y0 + 4", "x0 >= y0 - 4", "x0 != y0"]),
    # repeated rounds: each tightening puts the next disequality on the end
    (["x0 <= 5", "x0 != 5", "x0 != 4"], ["x0 <= 3"]),
    (["x0 != 0", "x0 != 1", "x0 != 2"], ["x0 >= 3"]),
    (["x0 <= y0", "x0 != y0", "x0 != y0 - 1"], ["x0 <= y0 - 2"]),
    # a tightening that closes the interval gives an equality
    (["x0 >= 1", "x0 <= 2", "x0 != 1"], ["x0 == 2"]),
    (["x0 >= y0", "x0 <= y0 + 1", "x0 != y0 + 1"], ["x0 == y0"]),
    # int arguments have no lower bound: only a real bound tightens
    (["n0 <= 0", "n0 != 0"], ["n0 <= -1"]),
    (["n0 != 0", "n0 != 1"], ["n0 != 0", "n0 != 1"]),
    (["n0 >= -2", "n0 != -2", "n0 != -1"], ["n0 >= 0"]),
])
def test_disequality_tightening(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts) == expected


def test_tightening_that_empties_the_interval_is_a_contradiction() -> None:
    with pytest.raises(UnsatisfiableGuardsError) as info:
        simplify(graph("x0 <= 1", "x0 != 0", "x0 != 1"))
    # NOTE: it names the two disequalities; the bound each was tightened against (x0 <= 1) is
    # not carried into the tightened edge's provenance (benchmarks/MUTATION.md, left alone)
    assert len(info.value.conflict) >= 2


def test_layer_drops_a_disequality_outside_and_keeps_its_provenance() -> None:
    layer = OrderLayer()
    layer.add_edge(Z, "x", 5, {"x <= 5"})
    layer.add_diseq(Z, "x", 7, {"x != 7"})
    layer.add_diseq("x", Z, 2, {"x != -2"})  # Z - x != 2: x != -2, below any size
    layer.add_edge("x", Z, 0, background=True)
    res = layer.solve()
    assert res.diseqs == [] and res.implied == {"x != 7", "x != -2"}
    assert [(e.u, e.v, e.w) for e in res.edges] == [(Z, "x", 5)]


@pytest.mark.parametrize("k, edges", [
    (5, [(Z, "x", 4)]),                   # on the upper end
    (0, [(Z, "x", 5), ("x", Z, -1)]),     # on the lower end (the background x >= 0)
    (3, [(Z, "x", 5)]),                   # inside: kept as a disequality
])
def test_layer_tightens_at_either_end(k: int, edges: list[tuple[str, str, int]]) -> None:
    layer = OrderLayer()
    layer.add_edge(Z, "x", 5, {"x <= 5"})
    layer.add_edge("x", Z, 0, background=True)
    layer.add_diseq(Z, "x", k, {f"x != {k}"})
    res = layer.solve()
    assert sorted((e.u, e.v, e.w) for e in res.edges) == sorted(edges)
    assert [(d.u, d.v, d.k) for d in res.diseqs] == ([(Z, "x", 3)] if k == 3 else [])
    if k != 3:  # the tightened bound stands for the disequality
        assert any(f"x != {k}" in e.prov for e in res.edges)


def test_layer_disequality_on_a_single_point_is_a_conflict() -> None:
    layer = OrderLayer()
    layer.add_diseq("x", "x", 0, {"x != x"})
    with pytest.raises(Conflict) as info:
        layer.solve()
    assert "x != x" in info.value.ids


def test_layer_both_orientations_are_one_disequality() -> None:
    layer = OrderLayer()
    layer.add_diseq("x", "y", 2, {"y - x != 2"})
    layer.add_diseq("y", "x", -2, {"x - y != -2"})
    assert len(layer.diseqs) == 1 and next(iter(layer.diseqs.values())).prov == {"y - x != 2", "x - y != -2"}


def test_layer_equality_from_a_zero_cycle() -> None:
    layer = OrderLayer()
    layer.add_edge("x", "y", 2, {"y <= x + 2"})
    layer.add_edge("y", "x", -2, {"x <= y - 2"})
    res = layer.solve()
    assert [(v, u, k) for v, u, k, _ in res.equalities] == [("y", "x", 2)]
    assert res.equalities[0][3] == {"y <= x + 2", "x <= y - 2"}


def test_layer_transitive_reduction_and_positive() -> None:
    layer = OrderLayer()  # an edge u -> v (w) is v - u <= w
    layer.add_edge("y", "x", -1, {"x < y"})
    layer.add_edge("z", "y", -1, {"y < z"})
    layer.add_edge("z", "x", -1, {"x < z"})
    layer.add_edge("x", Z, -3, {"x >= 3"})
    layer.add_edge("y", Z, -1, {"y >= 1"})
    for d in "xyz":
        layer.add_edge(d, Z, 0, background=True)
    res = layer.solve()
    assert sorted(e.prov.pop() for e in res.edges) == ["x < y", "x >= 3", "y < z"]
    assert res.implied == {"x < z", "y >= 1"}
    assert res.positive("z") and res.positive("x") and not res.positive("nothing")


def test_layer_keeps_the_tighter_of_two_parallel_bounds() -> None:
    layer = OrderLayer()
    layer.add_edge(Z, "x", 8, {"x <= 8"})
    layer.add_edge(Z, "x", 5, {"x <= 5"})
    layer.add_edge(Z, "x", 9, {"x <= 9"})
    layer.add_edge(Z, "x", 5, {"x < 6"})
    res = layer.solve()
    assert [(e.w, e.prov) for e in res.edges] == [(5, {"x <= 5", "x < 6"})]
    assert res.implied == {"x <= 8", "x <= 9"}


def test_negative_cycle_names_its_edges() -> None:
    layer = OrderLayer()
    layer.add_edge("x", "y", -1, {"y < x"})
    layer.add_edge("y", "z", 0, {"z <= y"})
    layer.add_edge("z", "x", 0, {"x <= z"})
    layer.add_edge(Z, "x", 4, {"x <= 4"})
    with pytest.raises(Conflict) as info:
        layer.solve()
    assert sorted(info.value.ids) == ["x <= z", "y < x", "z <= y"]


# -- z3: which of two equivalent constraints goes ---------------------------------------------


@pytest.mark.parametrize("asserts, expected", [
    # most complex first: the product goes, the bound stays (either order of recording)
    (["x0 * x0 >= 4", "x0 >= 2"], ["x0 >= 2"]),
    (["x0 >= 2", "x0 * x0 >= 4"], ["x0 >= 2"]),
    (["(x0 + 2) % 2 == 0", "x0 % 2 == 0"], ["x0 % 2 == 0"]),
    (["x0 % 2 == 0", "(x0 + 2) % 2 == 0"], ["x0 % 2 == 0"]),
    (["x0 % 4 == 0", "x0 % 2 == 0"], ["x0 % 4 == 0"]),
    (["x0 * y0 == 6", "x0 * y0 >= 6"], ["x0*y0 == 6"]),
    # a disequality that z3 finds implied by a general constraint
    (["x0 % 2 == 1", "x0 != 0"], ["x0 % 2 == 1"]),
    # nothing implied: all stay
    (["x0 % 2 == 0", "x0 % 3 == 0"], ["x0 % 6 == 0"]),  # NOTE: the guards over one size read together (solve.readable)
])
def test_removal_order_keeps_the_simpler_guard(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts, sizes="x0 y0", ints="", hi=8) == expected


def _f(text: str) -> object:
    """One normalized atom from a Python comparison over x and y."""
    e = ast.parse(text, mode="eval").body
    assert isinstance(e, ast.Compare)

    def poly(n: ast.expr) -> Poly:
        match n:
            case ast.Name(id=name):
                return Poly.var(name)
            case ast.Constant(value=int(v)):
                return Poly.const(v)
            case ast.BinOp(left=a, op=ast.Add(), right=b):
                return poly(a) + poly(b)
            case ast.BinOp(left=a, op=ast.Sub(), right=b):
                return poly(a) - poly(b)
            case ast.BinOp(left=a, op=ast.Mult(), right=b):
                return poly(a) * poly(b)
            case ast.BinOp(left=a, op=ast.Mod(), right=b):
                from guardsolve.guards.expr import divide
                return divide("mod", poly(a), poly(b))
        raise AssertionError(ast.dump(n))

    name = {ast.Eq: "eq", ast.NotEq: "ne", ast.LtE: "le", ast.GtE: "ge", ast.Lt: "lt", ast.Gt: "gt"}
    return rel(name[type(e.ops[0])], poly(e.left), poly(e.comparators[0]))


def _reduce(texts_: list[str], sizes: set[str] = frozenset({"x", "y"}), background: list[str] = ()) -> tuple:  # type: ignore[assignment]
    def unsat(idx: list[int]) -> Exception:
        return UnsatisfiableGuardsError([texts_[i] for i in idx], "")
    r = reduce_component([_f(t) for t in texts_], set(sizes), 5000, texts_, unsat, [_f(t) for t in background])
    return r.kept, r.removed, r.undecided


def _reduce_counting(texts_: list[str], example: dict[str, int] | None, monkeypatch: pytest.MonkeyPatch) -> tuple:
    import z3

    checks: list[int] = []
    real = z3.Solver.check
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: checks.append(len(a)) or real(self, *a))
    r = reduce_component([_f(t) for t in texts_], {"x", "y"}, 5000, texts_, lambda idx: AssertionError(idx),
                         example=example)
    return (r.kept, r.removed), len(checks)


def test_reduce_component_starts_from_a_trace_example_instead_of_a_solver_model(monkeypatch: pytest.MonkeyPatch) -> None:
    texts_ = ["x % 2 == 0", "x != 1", "y <= x + 3", "x * y != 5"]
    plain, plain_checks = _reduce_counting(texts_, None, monkeypatch)
    assert plain == ([0, 2], [1, 3])
    # the example satisfies every formula: no satisfiability call, the same result
    good, good_checks = _reduce_counting(texts_, {"x": 4, "y": 2}, monkeypatch)
    assert good == plain and good_checks == plain_checks - 1
    # an example that breaks a formula (or misses a dim) is not trusted
    for bad in ({"x": 3, "y": 2}, {"x": 4}, {"x": -2, "y": 0}):
        assert _reduce_counting(texts_, bad, monkeypatch) == (plain, plain_checks)


def test_reduce_component_without_questions_builds_no_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the example and nearby points show every formula irredundant, z3 is never called."""
    import z3

    monkeypatch.setattr(z3, "Solver", lambda *a, **k: pytest.fail("built a solver"))
    texts_ = ["x >= 2", "y <= 9", "x != y"]
    r = reduce_component([_f(t) for t in texts_], {"x", "y"}, 5000, texts_, lambda idx: AssertionError(idx),
                         example={"x": 3, "y": 5})
    assert (r.kept, r.removed) == ([0, 1, 2], [])


def test_reduce_component_tries_removal_in_the_given_order() -> None:
    assert _reduce(["x * x >= 4", "x >= 2"]) == ([1], [0], [])
    assert _reduce(["x >= 2", "x * x >= 4"]) == ([1], [0], [])


def test_reduce_component_removes_one_of_two_equivalent_constraints_never_both() -> None:
    assert _reduce(["x % 2 == 0", "(x + 4) % 2 == 0"]) == ([1], [0], [])
    assert _reduce(["x + y >= 3", "y + x >= 3", "x + y >= 3 + 0"])[0] == [2]


def test_reduce_component_uses_sizes_and_background() -> None:
    assert _reduce(["x + y >= 0", "x * y != 7"]) == ([1], [0], [])
    assert _reduce(["x + y >= 0", "x * y != 7"], sizes=set()) == ([0, 1], [], [])
    assert _reduce(["x >= 3", "x * y != 7"], background=["x >= 5"]) == ([1], [0], [])
    assert _reduce(["x >= 3", "x * y != 7"]) == ([0, 1], [], [])


def test_reduce_component_names_the_unsatisfiable_core() -> None:
    with pytest.raises(UnsatisfiableGuardsError) as info:
        _reduce(["x % 2 == 0", "y >= 1", "2 * x == 6", "x * y != 5"])
    assert sorted(info.value.conflict) == ["2 * x == 6", "x % 2 == 0"]


# -- the unifier --------------------------------------------------------------------------


def test_union_find_offsets_and_bound_values() -> None:
    uf = UnionFind(["x", "y", "z", "w"])
    uf.union("x", "y", 2, "x == y + 2")
    uf.union("z", "y", -5, "z == y - 5")
    assert uf.find("x")[0] == uf.find("z")[0] and uf.value("x") is None
    uf.bind("z", 10, "z == 10")
    assert (uf.value("x"), uf.value("y"), uf.value("z"), uf.value("w")) == (17, 15, 10, None)
    uf.union("w", "x", 0, "w == x")
    assert uf.value("w") == 17
    assert sorted(len(m) for m in uf.classes().values()) == [4]


def test_union_find_conflicts_name_the_chain() -> None:
    uf = UnionFind(["x", "y", "z"])
    uf.union("x", "y", 1, "x == y + 1")
    uf.union("y", "z", 1, "y == z + 1")
    with pytest.raises(Conflict) as info:
        uf.union("x", "z", 3, "x == z + 3")
    assert sorted(info.value.ids) == ["x == y + 1", "x == z + 3", "y == z + 1"]
    uf.union("x", "z", 2, "x == z + 2")  # consistent: nothing happens
    uf.bind("z", 0, "z == 0")
    with pytest.raises(Conflict) as info:
        uf.bind("x", 5, "x == 5")
    assert sorted(info.value.ids) == ["x == 5", "x == y + 1", "y == z + 1", "z == 0"]


def test_union_find_two_bound_classes() -> None:
    uf = UnionFind(["a", "b", "c", "d"])
    uf.bind("a", 1, "a == 1")
    uf.union("b", "a", 0, "b == a")
    uf.bind("c", 3, "c == 3")
    uf.union("d", "c", 1, "d == c + 1")
    uf.union("b", "c", -2, "b == c - 2")  # 1 == 3 - 2: consistent
    assert [uf.value(x) for x in "abcd"] == [1, 1, 3, 4]
    uf2 = UnionFind(["a", "b"])
    uf2.bind("a", 1, "a == 1")
    uf2.bind("b", 2, "b == 2")
    with pytest.raises(Conflict) as info:
        uf2.union("a", "b", 0, "a == b")
    assert sorted(info.value.ids) == ["a == 1", "a == b", "b == 2"]


@pytest.mark.parametrize("asserts, expected", [
    (["x0 == y0 + 2", "z0 == y0 - 1", "z0 == 3"], ["x0 == 6", "y0 == 4", "z0 == 3"]),
    (["x0 == y0 + 2", "z0 == x0"], ["y0 == x0 - 2", "x0 == z0"]),
    (["n0 == x0 - 3", "x0 <= 2"], ["n0 == x0 - 3", "x0 <= 2"]),
])
def test_equalities_through_the_unifier(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts, hi=6) == expected


def test_size_forced_negative_is_a_contradiction() -> None:
    with pytest.raises(UnsatisfiableGuardsError, match="size"):
        simplify(graph("x0 == y0 - 3", "y0 == 1"))


# -- the shapes a broadcast accepts ---------------------------------------------------------


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def _same_trace(shapes: tuple[tuple[int, ...], ...], reference: str) -> bool:
    """The oracle: eager runs at these shapes and re-tracing records the same guards."""
    args = [torch.randn(s) for s in shapes]
    try:
        _add(*args)
    except RuntimeError:
        return False
    return print_guards(guardsolve.trace(_add, *args).guard_graph()) == reference


@pytest.mark.parametrize("example, values, accept, reject", [
    (((4,), (4,)), range(0, 5), [((7,), (7,)), ((2,), (2,)), ((0,), (0,))], [((1,), (1,)), ((4,), (1,)), ((1,), (4,)), ((4,), (5,))]),
    (((4,), (1,)), range(0, 5), [((7,), (1,)), ((0,), (1,)), ((2,), (1,))], [((1,), (1,)), ((4,), (4,)), ((1,), (4,))]),
    (((4, 1), (1, 3)), (0, 1, 3), [((2, 1), (1, 5)), ((7, 1), (1, 2))],
     [((4, 3), (1, 3)), ((4, 1), (4, 3)), ((1, 1), (1, 3)), ((4, 1), (1, 1)), ((4, 1), (1, 0)), ((0, 1), (1, 3))]),
])
def test_broadcast_accepts_exactly_the_shapes_of_its_path(example: tuple, values: range, accept: list,
                                                          reject: list) -> None:
    reference = print_guards(guardsolve.trace(_add, *[torch.randn(s) for s in example]).guard_graph())
    gs = simplify(guardsolve.trace(_add, *[torch.randn(s) for s in example]), explore=False)
    for shapes in accept:
        assert gs.check(*[torch.randn(s) for s in shapes]), shapes
    for shapes in reject:
        assert not gs.check(*[torch.randn(s) for s in shapes]), shapes
    ranks = [len(s) for s in example]
    for flat in itertools.product(values, repeat=sum(ranks)):
        shapes = (tuple(flat[:ranks[0]]), tuple(flat[ranks[0]:]))
        want = _same_trace(shapes, reference)
        assert gs.check(*[torch.randn(s) for s in shapes]) == want, (shapes, texts(gs))


def test_reduce_component_sets_its_timeout_on_the_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every solver call has a limit (unknown is then a result, see test_simplify): z3's own work
    count for `timeout_ms` (`smt.limit`: the same answer on a busy machine), a wall clock behind it."""
    import z3

    from guardsolve.solve.smt import BACKSTOP, RLIMIT_PER_MS

    seen: list[tuple] = []
    real = z3.Solver.set

    def record(self: z3.Solver, *args: object, **kwargs: object) -> None:
        seen.append(args)
        real(self, *args, **kwargs)

    monkeypatch.setattr(z3.Solver, "set", record)
    _reduce(["x * x >= 4", "x >= 2"])
    assert ("rlimit", 5000 * RLIMIT_PER_MS) in seen and ("timeout", 5000 * BACKSTOP) in seen


# -- cases from the sampled mutation run (benchmarks/MUTATION.md) ----------------------------


@pytest.mark.parametrize("asserts, expected", [
    # a dim that the bounds make positive divides out of a whole comparison, and of each branch of `or`
    (["x0 >= 1", "x0 * y0 <= x0 * z0"], ["x0 >= 1", "y0 <= z0"]),
    (["x0 >= 1", "x0 * y0 <= x0 * z0 or y0 * x0 == 3 * x0"], ["x0 >= 1", "(y0 <= z0) or (y0 == 3)"]),
    (["x0 >= 1", "(x0 * y0) % (x0 * 2) == 0 or z0 == 1"], ["x0 >= 1", "(y0 % 2 == 0) or (z0 == 1)"]),
])
def test_cancel_divides_a_positive_dim_out_of_a_comparison(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts, hi=6) == expected


@pytest.mark.parametrize("asserts, expected", [
    # each pair is equivalent over sizes and ties on `complexity` (12 and 14): the first recorded
    # is tried first and goes. A measure that weighs `or`, monomial degree or divisions
    # differently breaks the tie the other way.
    (["x0 <= 2 or x0 >= 5", "(x0 - 3) * (x0 - 4) > 0"], ["7*x0 <= x0*x0 + 11"]),
    # NOTE: `x0 // 3 == 0` is decided as the bound `x0 <= 2` before z3 (a closed form): no tie left
    (["x0 // 3 == 0", "x0*x0*x0*x0 <= 16"], ["x0 <= 2"]),
    (["x0*x0*x0*x0 <= 16", "x0 // 3 == 0"], ["x0 <= 2"]),  # NOTE: kept, and read as what it means (solve.readable)
])
def test_z3_removal_order_on_a_complexity_tie(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts, hi=8) == expected


def test_complexity_of_each_formula_shape() -> None:
    """The measure behind the removal order: a monomial costs 1 + 3 per factor, a division 5 more
    plus its numerator and denominator, a connective 2 plus its arguments."""
    from guardsolve.guards.expr import Poly, conj, disj, divide
    from guardsolve.solve.atom_kind import complexity

    x, y = Poly.var("x"), Poly.var("y")
    assert complexity(rel("le", x, Poly.const(2))) == 5                       # x - 2 <= 0: 4 + 1
    assert complexity(rel("le", x * x, Poly.const(4))) == 8                   # 7 + 1
    assert complexity(rel("eq", divide("mod", x, Poly.const(2)), Poly.const(0))) == 14   # 4 + 5 + 4 + 1
    assert complexity(rel("eq", divide("mod", x, y + Poly.const(1)), Poly.const(0))) == 18  # den y + 1: 5
    assert complexity(disj([rel("le", x, Poly.const(2)), rel("ge", x, Poly.const(5))])) == 12
    assert complexity(conj([rel("le", x, Poly.const(2)), rel("le", y, Poly.const(5))])) == 12


def test_conj_keeps_every_distinct_argument() -> None:
    from guardsolve.guards.expr import FALSE, TRUE, And, Poly, conj

    a, b = rel("le", Poly.var("x"), Poly.const(2)), rel("le", Poly.var("y"), Poly.const(5))
    assert conj([a, TRUE, b, a]) == And(frozenset({a, b}))
    assert conj([conj([a, b]), a]) == And(frozenset({a, b}))
    assert conj([a, TRUE]) == a and conj([]) == TRUE and conj([a, FALSE, b]) == FALSE


def test_needs_solver_follows_reachability_through_a_cycle() -> None:
    """y reaches z only through the cycle a <-> b; z reaches y once `p - q <= 5` fails (q -> p
    reversed), so the disequality `z - y != 0` is bounded where that edge fails."""
    from guardsolve.solve.difference import Diseq, Edge
    from guardsolve.solve.tight import needs_solver

    es = [Edge("y", "a", 1), Edge("a", "b", 1), Edge("b", "a", 1), Edge("b", "z", 1), Edge("q", "p", 5),
          Edge("z", "p", 0, background=True), Edge("q", "y", 0, background=True)]
    ne = [Diseq("y", "z", 0, frozenset())]
    assert needs_solver(es, ne) is True
    assert needs_solver([e for e in es if e.v != "p"], ne) is False  # without the failing edge


def test_unsatisfiable_guard_names_its_source_location() -> None:
    from guardsolve.guards.normalize import describe

    g = Graph()
    g.emit(Op.INT_PLACEHOLDER, (), out="x0", name="x0")
    zero = g.emit(Op.INT_CONST, (), val=-1)
    lt = g.emit(Op.INT_LT, ("x0", zero))
    g.emit(Op.BOOL_BAILOUT, (lt,), meta={"loc": "model.py:7"}, expect=True)
    g.emit(Op.BOOL_BAILOUT, (lt,), meta={"line": 4}, expect=True)
    g.emit(Op.BOOL_BAILOUT, (lt,), meta={"loc": "model.py:9", "line": 5}, expect=True)
    g.emit(Op.BOOL_BAILOUT, (lt,), expect=True)
    node = [str(n) for n in g.nodes]
    named = [f"`{node[3]}` at model.py:7", f"`{node[4]}` (line 4)", f"`{node[5]}` at model.py:9", f"`{node[6]}`"]
    assert [describe(g, i) for i in (3, 4, 5, 6)] == named  # `loc` (a trace's) wins over `line` (a parse's)
    with pytest.raises(UnsatisfiableGuardsError) as info:
        simplify(g)
    assert str(info.value) == f"unsatisfiable guards: {' and '.join(named)} (the comparisons contradict each other)"


def test_implies_answers_with_a_counterexample() -> None:
    import z3

    from guardsolve.solve.smt import implies

    x, y = z3.Int("x"), z3.Int("y")
    r, model = implies([x >= 2, y == x + 1], y >= 3, 1000)
    assert r == z3.unsat and model == {}
    r, model = implies([x >= 2, y >= x], y >= 5, 1000)
    assert r == z3.sat and set(model) == {"x", "y"} and 2 <= model["x"] <= model["y"] < 5


def test_a_component_asks_all_its_questions_in_one_solver_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """The component's scope is opened on its first question and reused (and popped at the end)."""
    import z3

    from guardsolve.solve.smt import Contexts

    scopes: list[set[str]] = []
    real = Contexts.scope
    monkeypatch.setattr(Contexts, "scope", lambda self, dims: scopes.append(dims) or real(self, dims))
    checks: list[int] = []
    real_check = z3.Solver.check
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: checks.append(len(a)) or real_check(self, *a))
    contexts = Contexts(5000)
    texts_ = ["x % 2 == 0", "x != 1", "y <= x + 3", "x * y != 5"]
    r = reduce_component([_f(t) for t in texts_], {"x", "y"}, 5000, texts_, lambda idx: AssertionError(idx),
                         contexts=contexts)
    assert (r.kept, r.removed) == ([0, 2], [1, 3])
    assert len(checks) >= 2 and scopes == [{"x", "y"}]
    assert contexts._s is not None and contexts._s.num_scopes() == 0


def test_check_source_names_its_parameters_from_the_signature() -> None:
    from guardsolve.ir.signature import Param
    from guardsolve.solve.codegen import check_source, compile_function

    sig = (Param("a", "tensor", 1, ("a0",)), Param("n", "int", 0, ("n",)))
    src = check_source(["a0 == n"], sig, False)
    assert src.splitlines()[0] == "def check(a, n):"
    check = compile_function(src, "check")
    assert [check(torch.zeros(3), 3), check(torch.zeros(3), 2), check(torch.zeros(3), True)] == [True, False, False]
    assert check_source(["a0 == n"], sig, False, params=["a", "n", "flag"]).splitlines()[0] == "def check(a, n, flag):"


def test_an_unknown_satisfiability_check_is_noted_with_every_label(monkeypatch: pytest.MonkeyPatch) -> None:
    import z3

    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "timeout")
    kept, removed, undecided = _reduce(["x % 2 == 0", "x * y != 5"])
    assert (kept, removed) == ([0, 1], [])
    assert undecided == ["satisfiability of {x % 2 == 0, x * y != 5}: timeout",
                         "is `x % 2 == 0` implied by the rest? solver said unknown (timeout)",
                         "is `x * y != 5` implied by the rest? solver said unknown (timeout)"]


def test_a_disequality_on_a_single_point_names_its_mixed_provenance() -> None:
    """Provenance mixes atom ids and texts; the conflict lists them in `str` order, then why."""
    layer = OrderLayer()
    layer.add_diseq("x", "x", 0, {"x != x", 12, 3})
    with pytest.raises(Conflict) as info:
        layer.solve()
    assert info.value.ids == [12, 3, "x != x", "the bounds around it"]


@pytest.mark.parametrize("asserts, sizes, expected", [
    # a division inside a sum renders with the dim order, parenthesized
    (["x0 + y0 % 3 <= 5"], "x0 y0", ["x0 + (y0 % 3) <= 5"]),
    (["x0 + x0 % 3 <= 5"], "x0 y0", ["x0 <= 4"]),  # NOTE: over one dim, read as what it means (solve.readable)
    (["2 * (x0 % 3) + y0 != 4"], "x0 y0", ["y0 + 2*(x0 % 3) != 4"]),
    (["(y0 + x0) % 3 == 0"], "y0 x0", ["(y0 + x0) % 3 == 0"]),
    # guards sort by their dims in input order (y0 first here), not by name
    (["x0 <= y0 + 1", "x0 <= 7", "y0 <= 9"], "y0 x0", ["y0 <= 9", "y0 >= x0 - 1", "x0 <= 7"]),
])
def test_rendering_and_order_follow_the_input_order_of_dims(asserts: list[str], sizes: str, expected: list[str]) -> None:
    assert exact(asserts, sizes=sizes, ints="") == expected


def test_a_tighter_bound_keeps_every_bound_it_replaced_as_implied() -> None:
    layer = OrderLayer()
    for w in (9, 8, 5):
        layer.add_edge(Z, "x", w, {f"x <= {w}"})
    res = layer.solve()
    assert [(e.w, e.prov) for e in res.edges] == [(5, {"x <= 5"})]
    assert res.implied == {"x <= 9", "x <= 8"}


def test_value_bailouts_are_left_out_of_the_exact_acceptance_condition() -> None:
    """A data-dependent branch is a value guard, checked apart: the z3 encoding of the guard
    graph (which verify=True compares against) has no opaque literal for it."""
    import z3

    from guardsolve.solve.smt import graph_to_z3, z3_vars

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if (x * 2).sum() > 0:
            return x + y
        return x

    t = guardsolve.trace(f, torch.ones(3), torch.ones(3), value_guards=True)
    assert "__value" not in str(graph_to_z3(t.guard_graph(), z3_vars(z3.Context())))
    assert texts(simplify(t, verify=True)) == ["(x0 == 1) or (x0 == y0) or (y0 == 1)"]
    assert texts(simplify(t, explore=False, verify=True)) == ["x0 == y0", "x0 != 1"]


def test_negative_cycle_among_dims_unreached_from_the_first_roots() -> None:
    """b and c come after `a` (reached from Z) in the search order and are reached from neither."""
    layer = OrderLayer()
    layer.add_edge(Z, "a", 5, {"a <= 5"})
    layer.add_edge("b", "c", -1, {"c < b"})
    layer.add_edge("c", "b", 0, {"b <= c"})
    with pytest.raises(Conflict) as info:
        layer.solve()
    assert sorted(info.value.ids) == ["b <= c", "c < b"]


def test_layer_equalities_come_back_with_what_is_implied_so_far() -> None:
    layer = OrderLayer()
    layer.add_edge("x", "y", 2, {"y <= x + 2"})
    layer.add_edge("x", "y", 3, {"y <= x + 3"})
    layer.add_edge("y", "x", -2, {"x <= y - 2"})
    res = layer.solve()
    assert [(v, u, k) for v, u, k, _ in res.equalities] == [("y", "x", 2)]
    assert res.edges == [] and res.implied == {"y <= x + 3"}


@pytest.mark.parametrize("text, kind", [
    ("x == y + 2", ("eq", "x", "y", 2)), ("x == 3", ("bind", "x", 3)), ("x <= y + 1", ("le", "y", "x", 1)),
    ("x >= 2", ("le", "x", Z, -2)), ("x != y", ("ne", "y", "x", 0)), ("x != 4", ("ne", Z, "x", 4)),
    ("x * y <= 3", ("general",)), ("x + y <= 3", ("general",)),
    ("2 * x <= y", ("general",)),
])
def test_classify_names_the_layer_of_each_atom(text: str, kind: tuple) -> None:
    from guardsolve.solve.atom_kind import classify

    assert classify(_f(text)) == kind


def test_simplify_hands_the_trace_example_to_z3_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace's example sizes replace z3's first model (see the reduce_component example test)."""
    import guardsolve.solve.simplifier as simplifier_module

    seen: list[object] = []
    real = simplifier_module.reduce_component
    monkeypatch.setattr(simplifier_module, "reduce_component",
                        lambda *a, **k: seen.append(a[7] if len(a) > 7 else k.get("example")) or real(*a, **k))
    gs = simplify(guardsolve.trace(lambda x: x.reshape(-1, 2), torch.ones(6)), explore=False)
    assert seen == [{"x0": 6}]
    assert texts(gs) == ["x0 >= 2", "x0 % 2 == 0"]


def test_contradicting_equalities_name_their_bailouts_and_why() -> None:
    with pytest.raises(UnsatisfiableGuardsError) as info:
        simplify(graph("x0 == y0 + 1", "y0 == x0 + 1"))
    assert str(info.value) == ("unsatisfiable guards: `bool_bailout(i2, expect=True)` and "
                               "`bool_bailout(i5, expect=True)` (the equalities contradict each other)")
    # only the equalities about the forced size are named, not `z0 == 2` or `n0 == 4`
    with pytest.raises(UnsatisfiableGuardsError) as info:
        simplify(graph("z0 == 2", "x0 == y0 - 3", "y0 == 1", "n0 == 4"))
    assert str(info.value) == ("unsatisfiable guards: `bool_bailout(i4, expect=True)` and "
                               "`bool_bailout(i6, expect=True)` (they force size x0 to be -2)")


def test_implied_collects_the_order_layer_and_z3_removals() -> None:
    g = graph("x0 <= 5", "x0 <= 8", "x0 * x0 >= 4", "x0 >= 2")
    bailouts = [i for i, n in enumerate(g.nodes) if n.op is Op.BOOL_BAILOUT]
    gs = simplify(g)
    assert texts(gs) == ["x0 <= 5", "x0 >= 2"]
    assert sorted(gs.implied) == [bailouts[1], bailouts[2]]  # `x0 <= 8` (order layer), `x0*x0 >= 4` (z3)


def test_each_constraint_lists_its_dims_in_input_order() -> None:
    gs = simplify(graph("x0 != y0 + 1", "x0 != 3", "y0 != 2"))
    assert [(str(c), c.dims) for c in gs] == [("x0 != 3", ("x0",)), ("y0 != x0 - 1", ("x0", "y0")),
                                               ("y0 != 2", ("y0",))]


# -- the held-out mutation sample's survivors (benchmarks/MUTATION.md), each pinned ------------

def test_disj_flattens_a_nested_or() -> None:
    from guardsolve.guards.expr import Or, disj

    a, b, c = (rel("le", Poly.var(d), Poly.const(3)) for d in "xyz")
    nested = disj([disj([a, b]), c])
    assert isinstance(nested, Or) and nested.args == frozenset({a, b, c})


def test_the_zero_polynomial_renders_as_0() -> None:
    assert Poly.const(0).render() == "0"


def test_propagation_takes_one_link_of_a_reversed_chain_per_round() -> None:
    from guardsolve.solve.bounded import INF, propagate

    # x0 <= 3, x1 <= x0, ..., x7 <= x6, listed far end first: each round bounds one more dim
    rows = [({f"x{k}": 1, f"x{k - 1}": -1}, 0, "le") for k in range(7, 0, -1)] + [({"x0": 1}, -3, "le")]
    for rounds, bounded in ((3, 3), (6, 6)):
        lo, hi = {f"x{k}": 0 for k in range(8)}, {f"x{k}": INF for k in range(8)}
        assert propagate(rows, lo, hi, rounds=rounds)
        assert [k for k in range(8) if hi[f"x{k}"] == 3] == list(range(bounded))
    lo, hi = {f"x{k}": 0 for k in range(8)}, {f"x{k}": INF for k in range(8)}
    propagate(rows, lo, hi)  # the default: 6 rounds
    assert hi["x5"] == 3 and hi["x6"] == INF


def test_needs_solver_with_disequalities_between_unordered_int_args() -> None:
    from guardsolve.solve.difference import Diseq
    from guardsolve.solve.tight import needs_solver

    ds = [Diseq("n0", "n1", 0, frozenset({1})), Diseq("n2", "n3", 2, frozenset({2}))]
    assert needs_solver([], ds) is False
    assert needs_solver([], [Diseq("n0", "n1", 0, frozenset({1})), Diseq("n0", "n1", 3, frozenset({2}))]) is True
    # sharing n0: the failing edge n0 -> n2 starts where the question n0 -> n1 does, and n2 reaches nothing
    assert needs_solver([], [Diseq("n0", "n1", 0, frozenset({1})), Diseq("n0", "n2", 1, frozenset({2}))]) is False


def test_an_implied_out_edge_decided_before_the_adjacency_ends() -> None:
    layer = OrderLayer()
    layer.add_edge("a", "b", 0, {"a <= b"})     # b - a <= 0
    layer.add_edge("b", "c", 0, {"b <= c"})
    layer.add_edge("a", "c", 0, {"a <= c"})     # implied by the two above
    layer.add_edge("a", "d", 9, {"d <= a + 9"})
    layer.add_edge("a", "e", 7, {"e <= a + 7"})
    res = layer.solve()
    assert {(e.u, e.v) for e in res.edges} == {("a", "b"), ("b", "c"), ("a", "d"), ("a", "e")}
    assert "a <= c" in res.implied


def test_the_last_out_edge_decided_through_z_while_z_has_more_edges() -> None:
    """`c <= a + 3` follows from `a >= 5` and `c <= 7` (a path a -> Z -> c); the search from a
    decides it at Z and must stop cleanly although Z has another edge (`d <= 100`)."""
    layer = OrderLayer()
    layer.add_edge("a", Z, -5, {"a >= 5"})
    layer.add_edge(Z, "c", 7, {"c <= 7"})
    layer.add_edge("a", "c", 3, {"c <= a + 3"})
    layer.add_edge(Z, "d", 100, {"d <= 100"})
    res = layer.solve()
    assert {(e.u, e.v) for e in res.edges} == {("a", Z), (Z, "c"), (Z, "d")}
    assert "c <= a + 3" in res.implied


def test_graph_to_z3_of_a_graph_without_facts_lives_in_the_given_context() -> None:
    import z3

    from guardsolve.solve.smt import Vars, graph_to_z3

    g = Graph()
    g.emit(Op.INT_PLACEHOLDER, (), out="a0", name="a0")
    var = Vars(z3.Context())
    f = graph_to_z3(g, var)
    assert f.ctx == var.ctx and z3.is_true(f)


def test_a_divisor_of_one_is_allowed_and_zero_is_not() -> None:
    import z3

    from guardsolve.solve.smt import Vars, graph_to_z3

    g = Graph.parse("n0 = int_arg(name=n0)\nn1 = int_arg(name=n1)\ni0 = int_floordiv(n0, n1)\n"
                    "i1 = int_const(val=5)\ni2 = int_eq(i0, i1)\nbool_bailout(i2, expect=True)")
    var = Vars(z3.Context())
    for d, n, want in ((1, 5, z3.sat), (0, 5, z3.unsat), (2, 11, z3.sat)):
        s = z3.Solver(ctx=var.ctx)
        s.add(graph_to_z3(g, var), var("n1") == d, var("n0") == n)
        assert s.check() == want, (d, n)


def test_poly_to_z3_of_the_zero_polynomial() -> None:
    import z3

    from guardsolve.solve.smt import Vars, poly_to_z3

    var = Vars(z3.Context())
    z = poly_to_z3(Poly.const(0), var)
    assert z.ctx == var.ctx and z3.simplify(z).as_long() == 0
