"""The small-box prover (`guardsolve.solve.bounded`) against z3 as the oracle."""

from __future__ import annotations

import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from guardsolve.guards.expr import And, Const, Formula, Or, Poly, divide, rel
from guardsolve.solve.bounded import INF, Boxes, holds_on_box, propagate
from guardsolve.solve.smt import Vars, formula_to_z3
from guardsolve.solve.witness import Witnesses, poly_value
from guardsolve.testing import examples

X, Y, Z_ = Poly.var("x"), Poly.var("y"), Poly.var("z")
DIMS = {"x": X, "y": Y, "z": Z_}


def _implied_by_z3(formulas: list[Formula], i: int, active: set[int], sizes: set[str]) -> bool:
    var = Vars(z3.Context())
    s = z3.Solver(ctx=var.ctx)
    s.add(*[var(d) >= 0 for d in sizes])
    s.add(*[formula_to_z3(formulas[j], var) for j in active if j != i])
    s.add(z3.Not(formula_to_z3(formulas[i], var)))
    r = s.check()
    assert r != z3.unknown
    return r == z3.unsat


def _boxes(formulas: list[Formula], point: dict[str, int], sizes: set[str]) -> Boxes:
    w = Witnesses.at(formulas, [], sizes, point)
    assert w is not None, "the generator's point satisfies every formula"
    return Boxes(w, [])


def test_a_pinned_dim_that_breaks_a_divisibility_is_implied_without_z3() -> None:
    fs = [rel("eq", divide("mod", X, Poly.const(2)), Poly.const(0)), rel("le", Y, X - Poly.const(1)),
          rel("ne", X, Poly.const(1))]
    b = _boxes(fs, {"x": 4, "y": 2}, {"x", "y"})
    assert b.decide(2, {0, 1, 2}) is True
    assert _implied_by_z3(fs, 2, {0, 1, 2}, {"x", "y"})


def test_a_box_point_shows_a_bound_irredundant() -> None:
    fs = [rel("le", X, Poly.const(3)), rel("ne", X, Y), rel("le", Y, Poly.const(2))]
    b = _boxes(fs, {"x": 0, "y": 1}, {"x", "y"})
    assert b.decide(2, {0, 1, 2}) is False  # y = 3, x in 0..3 but not 3


def test_division_by_zero_in_the_box_is_left_to_z3() -> None:
    fs = [rel("le", X, Poly.const(1)), rel("le", Y, Poly.const(2)), rel("ne", divide("floordiv", Y, X), Poly.const(5))]
    b = _boxes(fs, {"x": 1, "y": 0}, {"x", "y"})
    assert b.decide(2, {0, 1, 2}) is None  # the box x in 0..1, y in 0..2 holds x = 0


def test_propagation_through_a_chain_and_an_empty_interval() -> None:
    lo, hi = {"x": 0, "y": 0, "z": 0}, {"x": INF, "y": INF, "z": INF}
    chain = [({"x": 1}, -5, "le"), ({"y": 1, "x": -1}, 1, "le"), ({"z": 2, "y": -1}, 0, "le")]
    assert propagate(chain, lo, hi) and hi == {"x": 5, "y": 4, "z": 2}
    assert not propagate(chain + [({"z": -1}, 3, "le")], dict(lo), dict(hi))  # z >= 3 and z <= 2


_TERMS = st.sampled_from(["x", "y", "z"])


@st.composite
def components(draw: st.DrawFn) -> tuple[list[Formula], dict[str, int], set[str]]:
    """A few formulas over x, y, z (linear, modulo, product) that all hold at a drawn point."""
    point = {d: draw(st.integers(0, 5)) for d in DIMS}
    sizes = {d for d in DIMS if draw(st.booleans())} | {"x"}
    out: list[Formula] = []
    for _ in range(draw(st.integers(2, 6))):
        a, b = DIMS[draw(_TERMS)], DIMS[draw(_TERMS)]
        kind = draw(st.sampled_from(["lin", "lin", "mod", "mul"]))
        if kind == "lin":
            lhs = a.scale(draw(st.sampled_from([1, 2, -1]))) + b.scale(draw(st.sampled_from([0, 1, -1])))
        elif kind == "mod":
            lhs = divide("mod", a, Poly.const(draw(st.sampled_from([2, 3]))))
        else:
            lhs = a * b
        value = _value(lhs, point)
        op = draw(st.sampled_from(["le", "ge", "eq", "ne"]))
        c = value + draw(st.integers(-2, 2))
        holds = {"le": value <= c, "ge": value >= c, "eq": value == c, "ne": value != c}[op]
        f = rel(op, lhs, Poly.const(c))
        if holds and not isinstance(f, bool) and f.dims():
            out.append(f)
    return out, point, sizes


def _value(p: Poly, point: dict[str, int]) -> int:
    from guardsolve.solve.witness import poly_value

    return poly_value(p, point)


@given(components(), st.data())
@settings(max_examples=examples(200), deadline=None)
def test_every_verdict_agrees_with_z3(comp: tuple[list[Formula], dict[str, int], set[str]], data: st.DataObject) -> None:
    formulas, point, sizes = comp
    if not formulas:
        return
    w = Witnesses.at(formulas, [], sizes, point)
    if w is None:  # NOTE: `rel` may fold a formula to something the point breaks only when not a Rel
        return
    boxes = Boxes(w, [])
    active = set(range(len(formulas)))
    for i in range(len(formulas)):
        verdict = boxes.decide(i, active)
        if verdict is not None:
            assert verdict == _implied_by_z3(formulas, i, active, sizes), (formulas, i, active)
            if verdict and data.draw(st.booleans()):
                active.discard(i)


# -- the witness search's reach (cases from the sampled mutation run, benchmarks/MUTATION.md) --


def test_boundary_is_the_nearest_value_that_breaks_a_linear_formula() -> None:
    from guardsolve.guards.expr import Rel
    from guardsolve.solve.witness import _boundary, poly_value

    # `poly <= 0` breaks past one end: the first value past it, from either sign of coefficient
    for f in [Rel("le", Poly.const(7) - X.scale(2)), Rel("le", X.scale(2) - Poly.const(7)),
              Rel("le", Poly.const(7) - X.scale(3) + Y)]:
        (v,) = _boundary(f, "x", {"x": 10, "y": 1})
        assert poly_value(f.poly, {"x": v, "y": 1}) > 0, (f, v)
        step = -1 if next(c for m, c in f.poly.terms if m == ("x",)) < 0 else 1
        assert poly_value(f.poly, {"x": v - step, "y": 1}) <= 0, (f, v)
    assert list(_boundary(Rel("ne", X.scale(2) - Y), "x", {"x": 0, "y": 6})) == [3]  # 2x - 6 == 0
    assert list(_boundary(Rel("ne", X.scale(2) - Y), "x", {"x": 0, "y": 5})) == []   # 2x == 5: no integer
    assert list(_boundary(Rel("le", X * X - Poly.const(4)), "x", {"x": 1})) == []     # not linear in x


def test_the_one_dim_search_tries_the_next_value_up() -> None:
    """`x*x != 64` at x = 7 breaks only at x = 8 nearby (no boundary: it is not linear)."""
    fs = [rel("ne", X * X, Poly.const(64))]
    w = Witnesses(fs, [], {"x"}, {"x": 7}, spread=False)
    assert w.find(0, {0}) == {"x": 8}


def test_a_broken_neighbour_is_repaired_by_moving_a_second_dim_down() -> None:
    """x = 5 breaks `x*x != 25`, and `(x - 4)*(y*y - 4) == 0` with it; only y = 2 (one down, and
    not a boundary: y*y is not linear) repairs the second."""
    fs = [rel("ne", X * X, Poly.const(25)), rel("eq", (X - Poly.const(4)) * (Y * Y - Poly.const(4)), Poly.const(0))]
    w = Witnesses(fs, [], {"x", "y"}, {"x": 4, "y": 3}, spread=False)
    assert w.find(0, {0, 1}) == {"x": 5, "y": 2}


def test_a_complete_box_enumeration_shows_a_nonlinear_constraint_irredundant() -> None:
    """`x*x >= 14` has no linear negation to clamp to; the box x, y in 0..7 (from x + y <= 7) holds
    x = 0, where it fails and the other holds."""
    fs = [rel("le", X + Y, Poly.const(7)), rel("ge", X * X, Poly.const(14))]
    b = _boxes(fs, {"x": 4, "y": 1}, {"x", "y"})
    assert b.decide(1, {0, 1}) is False
    assert not _implied_by_z3(fs, 1, {0, 1}, {"x", "y"})


def test_solving_gives_the_integer_end_of_a_linear_formula() -> None:
    from guardsolve.guards.expr import Rel
    from guardsolve.solve.bounded import _solving

    assert _solving(Rel("le", X.scale(2) - Poly.const(7)), "x", {"x": 9}) == [3]     # 2x <= 7: x <= 3
    assert _solving(Rel("le", Poly.const(7) - X.scale(2)), "x", {"x": 0}) == [4]     # 2x >= 7: x >= 4
    assert _solving(Rel("eq", X.scale(2) - Y), "x", {"x": 0, "y": 6}) == [3]
    assert _solving(Rel("eq", X.scale(2) - Y), "x", {"x": 0, "y": 5}) == []
    assert _solving(Rel("ne", X - Y), "x", {"x": 2, "y": 2}) == [3, 1]
    assert all(type(v) is int for v in _solving(Rel("le", X.scale(2) - Poly.const(7)), "x", {"x": 9}))


def test_a_clamped_point_is_repaired_by_solving_for_a_dim() -> None:
    """x >= 20 (where `x <= 19` fails) breaks `x*y <= 325` at y = 19; y <= 16 fixes it, three
    steps away: solved for, not nudged. No finite box holds y, so only this point decides."""
    fs = [rel("le", X * Y, Poly.const(325)), rel("le", X, Poly.const(19))]
    b = _boxes(fs, {"x": 17, "y": 19}, {"x", "y"})
    assert b.decide(1, {0, 1}) is False
    assert not _implied_by_z3(fs, 1, {0, 1}, {"x", "y"})


def test_propagation_runs_rounds_until_nothing_changes() -> None:
    """The chain of `test_propagation_through_a_chain...` listed far end first: one round per link."""
    lo, hi = {"x": 0, "y": 0, "z": 0}, {"x": INF, "y": INF, "z": INF}
    chain = [({"z": 2, "y": -1}, 0, "le"), ({"y": 1, "x": -1}, 1, "le"), ({"x": 1}, -5, "le")]
    assert propagate(chain, lo, hi) and hi == {"x": 5, "y": 4, "z": 2}


_ATOMS = st.sampled_from(["x", "y"])


@st.composite
def box_formulas(draw: st.DrawFn) -> Formula:
    """`p op c` over x, y with products, `//` and `%` by a dim or a constant (divisors that may
    be 0 or negative on the box too)."""
    def term() -> Poly:
        a = DIMS[draw(_ATOMS)]
        kind = draw(st.sampled_from(["dim", "mul", "floordiv", "mod", "const"]))
        if kind == "dim":
            return a
        if kind == "const":
            return Poly.const(draw(st.integers(-3, 3)))
        other = DIMS[draw(_ATOMS)] + Poly.const(draw(st.integers(-1, 2))) if draw(st.booleans()) \
            else Poly.const(draw(st.sampled_from([-2, 1, 2, 3])))
        return a * other if kind == "mul" else divide(kind, a + Poly.const(draw(st.integers(-1, 2))), other)
    lhs = term().scale(draw(st.sampled_from([1, -1, 2]))) + term()
    return rel(draw(st.sampled_from(["le", "ge", "eq", "ne", "lt", "gt"])), lhs, Poly.const(draw(st.integers(-4, 8))))


@given(box_formulas(), st.integers(-2, 4), st.integers(0, 4), st.integers(-2, 4), st.integers(0, 4))
@settings(max_examples=examples(400))
def test_holds_on_box_is_a_proof(f: Formula, x0: int, xw: int, y0: int, yw: int) -> None:
    """Whenever the interval check says `f` holds on a box, every point of it satisfies `f`
    (a point where a divisor is 0 would raise: the check must not claim those boxes)."""
    lo, hi = {"x": x0, "y": y0}, {"x": x0 + xw, "y": y0 + yw}
    if not holds_on_box(f, lo, hi):
        return
    for x in range(x0, x0 + xw + 1):
        for y in range(y0, y0 + yw + 1):
            assert _truth(f, {"x": x, "y": y}), (f, x, y)  # NOTE: a zero divisor raises here


def _truth(f: Formula, point: dict[str, int]) -> bool:
    if isinstance(f, Const):
        return f.value
    if isinstance(f, (Or, And)):
        return (any if isinstance(f, Or) else all)(_truth(a, point) for a in f.args)
    v = poly_value(f.poly, point)
    return v <= 0 if f.op == "le" else v == 0 if f.op == "eq" else v != 0


def test_holds_on_box_uses_unbounded_boxes() -> None:
    one_mod_x = rel("ne", divide("mod", Poly.const(1), X), Poly.const(0))
    assert holds_on_box(one_mod_x, {"x": 2}, {"x": INF})
    assert not holds_on_box(one_mod_x, {"x": 1}, {"x": INF})
    assert holds_on_box(rel("ge", X * Y, Poly.const(4)), {"x": 2, "y": 2}, {"x": INF, "y": INF})
    assert not holds_on_box(rel("ge", X * Y, Poly.const(5)), {"x": 2, "y": 2}, {"x": INF, "y": INF})
    assert holds_on_box(rel("le", divide("floordiv", X, Poly.const(4)), Poly.const(2)), {"x": 0}, {"x": 11})
    assert not holds_on_box(rel("le", divide("floordiv", X, Poly.const(4)), Poly.const(2)), {"x": 0}, {"x": 12})
