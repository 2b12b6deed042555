"""Python's `//` and `%` of negatives through the normal form, normalize and simplify.

Python rounds `a // b` toward negative infinity and gives `a % b` the sign of `b`; `int(a / b)`
truncates toward zero. They differ exactly when the signs differ and the division is inexact
(`-3 // 2 == -2`, `int(-3 / 2) == -1`). Int arguments of traced functions may be negative,
so each of these is a soundness path. The property test over random numerators and divisors
is `test_properties.test_floor_division_and_modulo_of_negatives_agree_with_python`.
"""

from __future__ import annotations

import itertools
import textwrap

import pytest
import torch

import guardsolve
from guardsolve import Graph, UnsatisfiableGuardsError, simplify
from guardsolve.guards.expr import Div, Poly, Rel, cancel, divide, normal, rel
from guardsolve.guards.normalize import normalize
from guardsolve.solve.witness import poly_value

x, y = Poly.var("x"), Poly.var("y")
C = Poly.const
SIGNED = [-4, -3, -2, -1, 1, 2, 3, 4]


def texts(gs: guardsolve.GuardSet) -> list[str]:
    return [str(c) for c in gs]


# -- the normal form ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["floordiv", "mod"])
def test_constant_division_folds_with_pythons_rounding(kind: str) -> None:
    for k, c in itertools.product(range(-9, 10), SIGNED):
        expected = k // c if kind == "floordiv" else k % c
        assert divide(kind, C(k), C(c)) == C(expected), (k, c)


@pytest.mark.parametrize("a, k", [(2, -1), (2, 1), (-2, 1), (-2, -3), (3, -1), (3, 2), (-3, 4), (4, -6), (2, -5)])
@pytest.mark.parametrize("c", SIGNED)
@pytest.mark.parametrize("kind", ["floordiv", "mod"])
def test_linear_numerator_agrees_with_python(kind: str, a: int, k: int, c: int) -> None:
    """`(a*x + k) // c` and `% c`, folded or kept opaque, mean Python's value at every x."""
    p = divide(kind, x.scale(a) + C(k), C(c))
    for v in range(-9, 10):
        expected = (a * v + k) // c if kind == "floordiv" else (a * v + k) % c
        assert poly_value(p, {"x": v}) == expected, (p, v)


def test_exact_folds_of_the_issue() -> None:
    assert divide("floordiv", x.scale(2) - C(1), C(2)) == x - C(1)       # not x (truncation)
    assert divide("mod", x.scale(2) - C(1), C(2)) == C(1)                # not -1
    assert divide("floordiv", x.scale(2) - C(1), C(-2)) == -x            # -x + (-1 // -2)
    assert divide("mod", x.scale(2) - C(1), C(-2)) == C(-1)              # sign of the divisor
    assert divide("floordiv", x.scale(-2) + C(3), C(2)) == -x + C(1)     # 3 // 2
    assert divide("floordiv", x.scale(2) + C(3), C(-2)) == -x - C(2)     # 3 // -2 == -2
    assert isinstance(next(iter(divide("floordiv", x.scale(3) + C(1), C(2)).atoms())), Div)  # inexact: opaque


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_relations_normalize_to_the_same_truth(op: str) -> None:
    """gcd division and ceiling of the constant in `normal` (`2*x - 1 <= 0` is `x <= 0`)."""
    py = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
          "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}[op]
    for a, b, k in itertools.product([-4, -2, 2, 3, 6], [-2, 0, 4], range(-7, 8)):
        f = rel(op, x.scale(a) + y.scale(b) + C(k), C(0))
        for xv, yv in itertools.product(range(-4, 5), range(-3, 4)):
            holds = py(a * xv + b * yv + k, 0)
            if isinstance(f, Rel):
                got = {"eq": lambda v: v == 0, "ne": lambda v: v != 0, "le": lambda v: v <= 0}[f.op](
                    poly_value(f.poly, {"x": xv, "y": yv}))
            else:
                got = f.value
            assert got == holds, (op, a, b, k, f, xv, yv)


def test_le_rounds_the_constant_up() -> None:
    assert normal(Rel("le", x.scale(2) - C(1))) == Rel("le", x)            # 2x <= 1  <=>  x <= 0
    assert normal(Rel("le", x.scale(2) + C(1))) == Rel("le", x + C(1))     # 2x <= -1 <=>  x <= -1
    assert normal(Rel("le", x.scale(-3) + C(4))) == Rel("le", -x + C(2))   # 3x >= 4  <=>  x >= 2
    assert normal(Rel("eq", x.scale(2) - C(1))).value is False             # 2x == 1 never
    assert normal(Rel("ne", x.scale(-2) + C(4))) == Rel("ne", x - C(2))


def test_cancelled_divisions_keep_pythons_meaning() -> None:
    """(k*a) // (k*b) == a // b and (k*a) % (k*b) == k*(a % b), also for negative a."""
    def positive(d: str) -> bool:
        return d == "y"
    for kind, k, c in itertools.product(["floordiv", "mod"], [2, 3], [-2, 3]):
        num = (x.scale(k) + C(k)) * y                               # k*(x + 1)*y
        f = Rel("eq", Poly.var(Div(kind, num, y.scale(k * c))) - Poly.var("z"))
        g = cancel(f, positive)
        for xv, yv, zv in itertools.product(range(-5, 6), range(1, 4), range(-6, 7)):
            env = {"x": xv, "y": yv, "z": zv}
            want = poly_value(f.poly, env) == 0
            assert (poly_value(g.poly, env) == 0) == want, (kind, k, c, g, env)


def test_polynomial_factors_cancel_with_pythons_meaning() -> None:
    """`(a*b + a + b + 1) // (a + 1)` is `b + 1` and `% (a + 1)` is 0 where `a + 1 >= 1`; a
    divisor that the numerator divides goes the other way: `(a + 1) % ((a + 1)*(b + 1))` is
    `(a + 1)*(1 % (b + 1))`. Checked at every point of a grid, x and y of either sign (where the
    factor is not positive nothing is cancelled)."""
    a = Poly.var(Div("floordiv", x - C(1), C(4)))   # an atom, as the conv rules make them
    b = y
    prod = (a + C(1)) * (b + C(1))
    cases = [Div("floordiv", prod, a + C(1)), Div("mod", prod, a + C(1)), Div("mod", a + C(1), prod),
             Div("floordiv", a + C(1), prod), Div("floordiv", prod.scale(3), (a + C(1)).scale(3))]
    for d in cases:
        for xv, yv in itertools.product(range(-9, 30), range(-4, 6)):
            env = {"x": xv, "y": yv}
            lo = (xv - 1) // 4 + 1
            if lo < 1 or poly_value(d.den, env) == 0:
                continue

            def positive(t: object, env: dict = env) -> bool:
                p = t if isinstance(t, Poly) else Poly.var(t)  # type: ignore[arg-type]
                return p.dims() <= env.keys() and poly_value(p, env) >= 1
            f = Rel("eq", Poly.var(d) - Poly.var("z"))
            g = cancel(f, positive)
            cancelled = d not in g.poly.atoms()
            # NOTE: by a + 1 (positive here) always; a product divisor only where b + 1 is positive too
            assert cancelled == (d.den == a + C(1) or d.den == (a + C(1)).scale(3) or yv + 1 >= 1), (d, g, env)
            for zv in range(-3, 12):
                env2 = {**env, "z": zv}
                assert (poly_value(g.poly, env2) == 0) == (poly_value(f.poly, env2) == 0), (d, g, env2)


def test_exact_quotient_is_exact_or_none() -> None:
    """`exact_quotient(n, d) * d == n` whenever it answers, and it answers on every product."""
    import random

    from guardsolve.guards.expr import exact_quotient

    rng = random.Random(7)
    atoms = [x, y, Poly.var("z"), Poly.var(Div("floordiv", x, C(3)))]

    def poly() -> Poly:
        p = C(rng.randint(-3, 3))
        for _ in range(rng.randint(1, 3)):
            m = C(rng.choice([-2, -1, 1, 2, 3]))
            for _ in range(rng.randint(0, 2)):
                m = m * rng.choice(atoms)
            p = p + m
        return p
    for _ in range(300):
        n, d = poly(), poly()
        if not d.terms:
            continue
        q = exact_quotient(n * d, d)
        assert q is not None and q * d == n * d, (n, d, q)
        q2 = exact_quotient(n, d)
        assert q2 is None or q2 * d == n, (n, d, q2)


# -- through normalize and simplify ---------------------------------------------------------


def _graph(text: str) -> Graph:
    return Graph.parse(textwrap.dedent(text))


NEG3_FLOOR = """\
    n0 = int_arg(name=n0)
    i0 = int_const(val=-3)
    i1 = int_eq(n0, i0)
    bool_bailout(i1, expect=True)
    i2 = int_const(val=2)
    i3 = int_floordiv(n0, i2)
    i4 = int_const(val=-2)
    i5 = int_eq(i3, i4)
    bool_bailout(i5, expect=True)"""


def test_minus_three_floordiv_two_is_minus_two() -> None:
    gs = simplify(_graph(NEG3_FLOOR), verify=True)
    assert texts(gs) == ["n0 == -3"]
    assert gs.check_dims({"n0": -3}) and not gs.check_dims({"n0": -2})


ALWAYS = """\
    x0 = int_arg(name=x0)
    i0 = int_const(val=2)
    i1 = int_mul(i0, x0)
    i2 = int_const(val=1)
    i3 = int_sub(i1, i2)
    i4 = int_floordiv(i3, i0)
    i5 = int_sub(x0, i2)
    i6 = int_eq(i4, i5)
    bool_bailout(i6, expect=True)"""


def test_two_x_minus_one_floordiv_two_is_x_minus_one() -> None:
    """Always true: it folds away as a tautology (truncation would call it unsatisfiable)."""
    norm = normalize(guardsolve.guard_graph(_graph(ALWAYS)))
    assert norm.atoms == [] and len(norm.tautologies) == 2  # the bailout, and its divisor `2 != 0`
    gs = simplify(_graph(ALWAYS), verify=True)
    assert texts(gs) == []
    assert all(gs.check_dims({"x0": v}) for v in range(-5, 6))


@pytest.mark.parametrize("n, d, op", [(n, d, op) for n in (-7, -4, -3, -1, 0, 3, 5) for d in (-3, -2, 2, 3)
                                      for op in ("int_floordiv", "int_mod")])
def test_a_value_recorded_at_a_negative_argument_is_exact(n: int, d: int, op: str) -> None:
    """`n0 op d == value` recorded at n0 = n: accepted exactly where Python agrees."""
    value = n // d if op == "int_floordiv" else n % d
    g = _graph(f"""\
        n0 = int_arg(name=n0)
        i0 = int_const(val={d})
        i1 = {op}(n0, i0)
        i2 = int_const(val={value})
        i3 = int_eq(i1, i2)
        bool_bailout(i3, expect=True)""")
    gs = simplify(g, verify=True)
    for v in range(-12, 13):
        want = (v // d if op == "int_floordiv" else v % d) == value
        assert gs.check_dims({"n0": v}) == want, (str(gs), v)


def test_coefficient_numerator_with_negative_divisor() -> None:
    """`(2*n0 - 1) % -2 == -1` always holds; `(2*n0 - 1) // -2 < 0` is `n0 >= 1`."""
    g = _graph("""\
        n0 = int_arg(name=n0)
        i0 = int_const(val=2)
        i1 = int_mul(i0, n0)
        i2 = int_const(val=1)
        i3 = int_sub(i1, i2)
        i4 = int_const(val=-2)
        i5 = int_mod(i3, i4)
        i6 = int_const(val=-1)
        i7 = int_eq(i5, i6)
        bool_bailout(i7, expect=True)
        i8 = int_floordiv(i3, i4)
        i9 = int_const(val=0)
        i10 = int_lt(i8, i9)
        bool_bailout(i10, expect=True)""")
    gs = simplify(g, verify=True)
    assert texts(gs) == ["n0 >= 1"]


def test_contradiction_only_under_floor_semantics() -> None:
    """`n0 // 2 == -1` and `n0 == -1`: consistent (-1 // 2 == -1); with `n0 == 1` not."""
    base = """\
        n0 = int_arg(name=n0)
        i0 = int_const(val=2)
        i1 = int_floordiv(n0, i0)
        i2 = int_const(val=-1)
        i3 = int_eq(i1, i2)
        bool_bailout(i3, expect=True)
        i4 = int_const(val={v})
        i5 = int_eq(n0, i4)
        bool_bailout(i5, expect=True)"""
    assert texts(simplify(_graph(base.format(v=-1)))) == ["n0 == -1"]
    with pytest.raises(UnsatisfiableGuardsError):
        simplify(_graph(base.format(v=1)))


def test_traced_int_argument_divided_negative() -> None:
    """A traced function's int argument may be negative: `x[: n // 2]` style sizes."""
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        if (2 * n - 1) // 2 < -1:  # n <= -1: at n == -1, -3 // 2 == -2
            return x * 2
        return x + 1

    gs = simplify(guardsolve.trace(f, torch.randn(3), -3))
    assert [gs.check(torch.randn(3), n) for n in (-3, -1, 0, 2)] == [True, True, False, False]


@pytest.mark.parametrize("kind", ["floordiv", "mod"])
def test_a_divisor_that_is_not_constant_stays_opaque(kind: str) -> None:
    """`n // (y + 1)`: the divisor's constant term is no constant divisor."""
    for num in (x, x.scale(2) - C(1), C(7)):
        p = divide(kind, num, y + C(1))
        assert isinstance(next(iter(p.atoms())), Div), p
        for xv, yv in itertools.product(range(-5, 6), [-3, -2, 1, 2, 4]):
            n = poly_value(num, {"x": xv})
            assert poly_value(p, {"x": xv, "y": yv}) == (n // (yv + 1) if kind == "floordiv" else n % (yv + 1))


def test_divisors_lists_every_opaque_denominator_nested_ones_too() -> None:
    """The divisors a formula needs non-zero: `n // (y + 1)` and, inside its numerator, `% y`."""
    from guardsolve.guards.expr import disj, divisors, formula_divisors

    inner = divide("mod", x, y)
    outer = divide("floordiv", inner + C(3), y + C(1))
    assert divisors(outer) == [y, y + C(1)]
    assert divisors(x.scale(2) - C(1)) == [] and divisors(divide("mod", x, C(2))) == [C(2)]
    assert formula_divisors(disj([rel("eq", outer, C(0)), rel("le", inner, x)])) in ([y, y + C(1), y], [y, y, y + C(1)])
