"""What a constraint over one size says: its divisions, its truth over a span of sizes, and the
range, residue or exclusion it reads as.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence
from guardsolve.guards.expr import And, Const, Div, Formula, Or, Poly, Rel, conj, disj, rel
from guardsolve.solve.witness import poly_value


PERIODS = 4  # NOTE: sizes read off: past the constants, this many periods of the lcm of the divisors


MAX_SPAN = 8192  # the sizes a one-dim constraint is read at, at most


def divisions_of(f: Formula) -> Iterable[Div]:
    if isinstance(f, Rel):
        yield from _poly_divs(f.poly)
    elif isinstance(f, (Or, And)):
        for a in f.args:
            yield from divisions_of(a)


def _poly_divs(p: Poly) -> Iterable[Div]:
    for m, _ in p.terms:
        for a in m:
            if isinstance(a, Div):
                yield a
                yield from _poly_divs(a.num)
                yield from _poly_divs(a.den)


def constant_divisors(f: Formula) -> list[int] | None:
    """The divisors of `f`, when every one is a positive constant; else None."""
    out = []
    for d in divisions_of(f):
        if not d.den.is_const() or d.den.constant <= 0:
            return None
        out.append(d.den.constant)
    return out


def has_divisions(f: Formula) -> bool:
    return next(iter(divisions_of(f)), None) is not None


def holds(f: Formula, env: dict[str, int]) -> bool:
    """`f` at concrete dims, as the compiled check reads it (a zero divisor rejects)."""
    if isinstance(f, Const):
        return f.value
    if isinstance(f, Rel):
        try:
            v = poly_value(f.poly, env)
        except ZeroDivisionError:
            return False
        return {"eq": v == 0, "ne": v != 0, "le": v <= 0}[f.op]
    vals = (holds(a, env) for a in f.args)
    return any(vals) if isinstance(f, Or) else all(vals)


def truth_table(f: Formula, x: str, span: int) -> list[bool]:
    """`holds(f, {x: v})` for v in range(span), from one compiled function (Swin's nested
    divisions are a DAG that interpreting walks as a tree at every size).

    >>> from guardsolve.guards.expr import Div, Poly, rel
    >>> truth_table(rel("eq", Poly.var(Div("mod", Poly.var("x"), Poly.const(3))), Poly.const(0)), "x", 7)
    [True, False, False, True, False, False, True]
    """
    from guardsolve.solve.witness import formula_source

    if isinstance(f, Const):
        return [f.value] * span
    fn = eval(compile(f"lambda {x}: ({formula_source(f, {x: x})})", "<readable>", "eval"),  # noqa: S307 - our own source
              {"__builtins__": {}})
    out = []
    for v in range(span):
        try:
            out.append(bool(fn(v)))
        except ZeroDivisionError:
            out.append(False)
    return out


def _linear(p: Poly) -> bool:
    """Is `p` of degree at most 1 in its atoms, each division by a positive constant of a
    numerator that is itself linear? Then `p` is linear in k on each residue class
    `x = r + k*P` of its period P (a division by c of something that steps by s*c steps by s)."""
    for m, _ in p.terms:
        if len(m) > 1:
            return False
        for a in m:
            if isinstance(a, Div) and not (a.den.is_const() and a.den.constant > 0 and _linear(a.num)):
                return False
    return True


def _rels(f: Formula) -> Iterable[Rel]:
    if isinstance(f, Rel):
        yield f
    elif isinstance(f, (Or, And)):
        for a in f.args:
            yield from _rels(a)


def periodic_equal(f: Formula, g: Formula, x: str, most: int = 200_000) -> bool | None:
    """Decide `f(x) == g(x)` for every size x >= 0, exactly and without a solver, when both are
    over x alone and every comparison in them is linear in x's divisions by constants (None
    otherwise, or past `most` evaluations).

    Proof: on each residue class `x = r + k*P` (P a common period, `_period`), each compared
    polynomial is exactly `a + b*k` (`_linear`), so its sign, and whether it is zero, is the
    same for every k above |a| / |b| + 1. Past the largest such k on every class, f and g are
    constant in k, so they agree everywhere iff they agree at every x up to P times that k + 2.

    >>> from guardsolve.guards.expr import Poly, rel
    >>> q = Poly.var(Div("floordiv", Poly.var("x") - Poly.const(2), Poly.const(2)))
    >>> X, K = Poly.var("x"), Poly.const
    >>> periodic_equal(rel("ne", q, K(0)), disj([rel("le", X, K(1)), rel("ge", X, K(4))]), "x")  # (-2) // 2 == -1
    True
    >>> periodic_equal(rel("ne", q, K(0)), rel("ge", X, K(4)), "x")
    False
    """
    rels = list(_rels(f)) + list(_rels(g))
    if not all(r.dims() <= {x} and _linear(r.poly) for r in rels):
        return None
    period = math.lcm(_period(f), _period(g))
    if period > most:
        return None
    steps = 0
    for r in range(period):
        for rel_ in rels:
            a = poly_value(rel_.poly, {x: r})
            b = poly_value(rel_.poly, {x: r + period}) - a
            if b:
                steps = max(steps, abs(a) // abs(b) + 1)
    span = period * (steps + 2)
    if span > most:
        return None
    return truth_table(f, x, span) == truth_table(g, x, span)


def _period(f: Formula) -> int:
    """A period of `f`'s divisions in their one dim: a division by k of something of period p
    has period k*p; a sum or product of parts, the lcm of theirs.

    >>> from guardsolve.guards.expr import Div, Poly, rel
    >>> u = Poly.var(Div("floordiv", Poly.var("x") + Poly.const(4), Poly.const(8)))
    >>> _period(rel("eq", Poly.var(Div("mod", u, Poly.const(4))), Poly.const(0)))
    32
    """
    def poly(p: Poly) -> int:
        return math.lcm(1, *(atom(a) for m, _ in p.terms for a in m))

    def atom(a: Any) -> int:
        if isinstance(a, str):
            return 1
        k = a.den.constant if a.den.is_const() and a.den.constant > 0 else 1  # NOTE: a varying divisor has no period
        return min(k * poly(a.num), 10 ** 9)

    if isinstance(f, Rel):
        return poly(f.poly)
    if isinstance(f, (Or, And)):
        return math.lcm(1, *(_period(a) for a in f.args))
    return 1


def _constants(f: Formula) -> int:
    """The largest constant in `f` (its offsets and coefficients)."""
    best = 0
    if isinstance(f, Rel):
        stack = [f.poly]
        while stack:
            p = stack.pop()
            for m, c in p.terms:
                best = max(best, abs(c))
                for a in m:
                    if isinstance(a, Div):
                        stack += [a.num, a.den]
    elif isinstance(f, (Or, And)):
        best = max((_constants(a) for a in f.args), default=0)
    return best


def one_dim_forms(f: Formula, x: str, divisors: Sequence[int]) -> list[tuple[Formula, str]]:
    """Candidate meanings of a one-dim constraint over a size `x`: ranges, an exclusion, a
    residue. Sizes the other guards exclude are not known here, so each candidate reads the
    truth from some size on; the caller proves which hold under the other guards."""
    # NOTE: nested divisions multiply their periods (`(x // 4) % 4` repeats every 16)
    period = math.lcm(_period(f), *divisors) if divisors else 1
    # NOTE: past `start` (beyond every constant, scaled by the period) the truth is periodic in
    # x with the period; a few periods show it. The window is capped: a form read off it is a
    # candidate only, and z3 proves each one after
    start = _constants(f) * period + period
    span = start + PERIODS * period
    if span > MAX_SPAN:
        span, start = MAX_SPAN, MAX_SPAN // 2
    truth = truth_table(f, x, span)
    tail = truth[start:]
    X = Poly.var(x)
    K = Poly.const
    out: list[tuple[Formula, str]] = []
    false_at = [v for v in range(span) if not truth[v]]
    true_at = [v for v in range(span) if truth[v]]
    if all(tail) and false_at:
        lo = false_at[-1] + 1
        out.append((rel("ge", X, K(lo)), f"{x} >= {lo}"))
        out += [(rel("ne", X, K(k)), f"{x} != {k}") for k in false_at[-2:]]
        first = false_at[0]
        if first > 0 and false_at == list(range(first, lo)):
            out.append((disj([rel("lt", X, K(first)), rel("ge", X, K(lo))]), f"({x} < {first}) or ({x} >= {lo})"))
    if not any(tail) and true_at:
        hi = true_at[-1]
        lo = next(v for v in range(hi, -1, -1) if v == 0 or not truth[v - 1])
        out.append((rel("eq", X, K(hi)), f"{x} == {hi}"))
        out.append((rel("le", X, K(hi)), f"{x} <= {hi}"))
        if lo > 0 and lo < hi:
            out.append((conj([rel("ge", X, K(lo)), rel("le", X, K(hi))]), f"{lo} <= {x} <= {hi}"))
    if period > 1 and any(tail) and not all(tail):
        for m in sorted(k for k in range(2, period + 1) if period % k == 0):
            residues = {v % m for v in range(start, span) if truth[v]}
            if any(truth[v] != (v % m in residues) for v in range(start, span)):
                continue
            lo_r, hi_r = min(residues), max(residues)
            if len(residues) > 1 and residues == set(range(lo_r, hi_r + 1)):
                # NOTE: a run of residues: `x % 16 <= 3` (the window padding of `(x // 4) % 4 == 0`)
                mod = Poly.var(Div("mod", X, K(m)))
                if lo_r == 0:
                    out.append((rel("le", mod, K(hi_r)), f"{x} % {m} <= {hi_r}"))
                else:
                    out.append((conj([rel("ge", mod, K(lo_r)), rel("le", mod, K(hi_r))]), f"{lo_r} <= {x} % {m} <= {hi_r}"))
                break
            if len(residues) != 1:
                continue
            (r,) = residues
            res = rel("eq", Poly.var(Div("mod", X, K(m))), K(r))
            out.append((res, f"{x} % {m} == {r}"))
            lo = next(v for v in range(start, -1, -1) if v == 0 or truth[v - 1] != ((v - 1) % m == r))
            if lo > 0:
                out.append((conj([res, rel("ge", X, K(lo))]), f"{x} >= {lo} and {x} % {m} == {r}"))
            break
    return out
