"""The shortcuts that keep simplify near-linear (issue 14), each against its plain counterpart."""

from __future__ import annotations

import z3

from guardsolve.guards.expr import Formula, Poly, divide, rel
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.solve.bounded import Boxes
from guardsolve.solve.order import Z, OrderLayer
from guardsolve.solve.smt import Vars, formula_to_z3
from guardsolve.solve.witness import Witnesses, _lambdas

V = {d: Poly.var(d) for d in ("x1", "x2", "x4", "x7", "a", "b", "c", "d")}


def _implied_by_z3(formulas: list[Formula], i: int, sizes: set[str]) -> bool:
    var = Vars(z3.Context())
    s = z3.Solver(ctx=var.ctx)
    s.add(*[var(d) >= 0 for d in sizes])
    s.add(*[formula_to_z3(f, var) for j, f in enumerate(formulas) if j != i])
    s.add(z3.Not(formula_to_z3(formulas[i], var)))
    return s.check() == z3.unsat


def test_a_part_of_a_wide_box_proves_a_bound_implied() -> None:
    # `x7 >= 2` fails only at x7 <= 1, which forces x2 == 0 (x2 < x7), where `x2 % 2 != 0`
    # fails; x1 (65 values) keeps the whole box over the limit, so only the grown part decides
    x1, x2, x4, x7 = V["x1"], V["x2"], V["x4"], V["x7"]
    fs = [rel("ne", divide("mod", x2, Poly.const(2)), Poly.const(0)), rel("le", x1, Poly.const(64)),
          rel("ge", x7, Poly.const(2)), rel("lt", x2, x7), rel("le", x2, x4 - Poly.const(4)), rel("ne", x1, x2)]
    sizes = {"x1", "x2", "x4", "x7"}
    w = Witnesses.at(fs, [], sizes, {"x1": 8, "x2": 3, "x4": 8, "x7": 4})
    assert w is not None
    assert Boxes(w, []).decide(2, set(range(len(fs)))) is True
    assert _implied_by_z3(fs, 2, sizes)


def test_formulas_of_one_shape_share_a_compiled_code_and_read_their_own_dims() -> None:
    a, b, c, d = V["a"], V["b"], V["c"], V["d"]
    fs = [rel("lt", a, b), rel("lt", c, d), rel("eq", divide("mod", a, Poly.const(2)), Poly.const(0))]
    env: dict[str, object] = {"__builtins__": {}, "a": 1, "b": 2, "c": 5, "d": 3}
    codes: dict = {}
    fns = _lambdas(fs, env, codes)
    assert len(codes) == 2  # `a < b` and `c < d` are one shape
    assert set(fns[0].__code__.co_names) == {"a", "b"} and set(fns[1].__code__.co_names) == {"c", "d"}
    assert [bool(fn()) for fn in fns] == [True, False, False]
    env["a"] = 4
    assert [bool(fn()) for fn in fns] == [False, False, True]


def test_tightening_runs_to_its_fixpoint_over_passes_that_ask_only_where_edges_were_added() -> None:
    # `x != 0`, `x != 1` over `x >= 0` tighten in two passes (the second asks about x's part of
    # the graph only); `y != 5` stays
    def layer() -> OrderLayer:
        out = OrderLayer()
        for v in ("x", "y"):
            out.add_edge(v, Z, 0, background=True)
        out.add_diseq(Z, "x", 0, {"x != 0"})
        out.add_diseq(Z, "x", 1, {"x != 1"})
        out.add_diseq(Z, "y", 5, {"y != 5"})
        out.add_edge("y", "x", 3, {"x <= y + 3"})
        return out
    res = layer().solve()
    assert {(e.u, e.v, e.w) for e in res.edges if not e.background} == {("y", "x", 3), ("x", Z, -2)}
    assert [(d.u, d.v, d.k) for d in res.diseqs] == [(Z, "y", 5)]


def test_nodes_without_metadata_share_one_read_only_mapping() -> None:
    g = Graph()
    a = g.emit(Op.INT_PLACEHOLDER, (), name="a0")
    g.emit(Op.INT_CONST, (), val=1, meta={"line": 3})
    b = g.emit(Op.INT_CONST, (), val=2)
    nodes = {n.outputs[0]: n for n in g.nodes if n.outputs}
    assert nodes[a].meta is nodes[b].meta and dict(nodes[a].meta) == {}
    assert nodes["i0"].meta == {"line": 3}
    g.validate()
