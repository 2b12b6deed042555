"""Exact redundancy answers without z3 where a constraint's failure leaves only a few points.

To ask whether `f` is implied by the others, look at where `f` fails: bound propagation over the
linear constraints (the others, `not f`, `size >= 0`, background facts) gives each dim an
interval. Dims with a finite interval span a box; when it holds few points, enumerate it with
Python's arithmetic (the guards' semantics). If no point of the box satisfies the constraints
that mention only boxed dims, nothing satisfies the others with `f` false: `f` is implied. If
the box covers every dim and a point satisfies everything with `f` false, `f` is irredundant.
Otherwise the caller asks z3. Dropping constraints only widens the region, so every "implied"
is a proof; every "irredundant" comes with its point.

    x % 2 == 0, y <= x - 1, x != 1      `x != 1` fails only at x = 1, where y <= 0 and
                                        1 % 2 == 0 is false: implied, no solver call
"""

from __future__ import annotations

import itertools
import math
from typing import Mapping, Sequence

from guardsolve.guards.expr import And, Atom, Const, Formula, Or, Poly, Rel, negate
from guardsolve.solve.witness import Witnesses, coefficient_at, holds_at, poly_value

Linear = tuple[dict[str, int], int, str]  # sum(c*x) + k  op  0, op in {"le", "eq"}
INF = math.inf


def linear(f: Formula) -> Linear | None:
    """`f` as (coefficients, constant, op) when it is a linear `<=` or `==`, else None."""
    if not isinstance(f, Rel) or f.op not in ("le", "eq"):
        return None
    coef: dict[str, int] = {}
    k = 0
    for m, c in f.poly.terms:
        if not m:
            k = c
        elif len(m) == 1 and isinstance(m[0], str):
            coef[m[0]] = c
        else:
            return None
    return coef, k, f.op


def propagate(constraints: Sequence[Linear], lo: dict[str, float], hi: dict[str, float], rounds: int = 6) -> bool:
    """Tighten the intervals `lo`/`hi` in place; False when they become empty (no point at all).

    >>> lo, hi = {"x": 0, "y": 0}, {"x": INF, "y": INF}
    >>> propagate([({"x": 1}, -1, "le"), ({"y": 1, "x": -1}, 1, "le")], lo, hi), hi
    (True, {'x': 1, 'y': 0})
    """
    rows = [(c, k) for c, k, op in constraints] + [({x: -a for x, a in c.items()}, -k)
                                                     for c, k, op in constraints if op == "eq"]
    for _ in range(rounds):
        changed = False
        for coef, k in rows:  # sum(a*x) + k <= 0
            low = [a * (lo[x] if a > 0 else hi[x]) for x, a in coef.items()]  # each term's minimum
            finite = [v for v in low if v != -INF]
            if len(low) - len(finite) > 1:
                continue
            total = sum(finite)
            for (x, a), v in zip(coef.items(), low):
                if v == -INF:
                    rest = total
                elif len(finite) < len(low):
                    continue  # NOTE: another term is unbounded below: nothing to learn for x
                else:
                    rest = total - v
                bound = int(-k - rest)  # a*x <= bound
                if a > 0:
                    if bound // a < hi[x]:
                        hi[x], changed = bound // a, True
                elif -(bound // -a) > lo[x]:  # x >= ceil(bound / a) = -floor(bound / -a)
                    lo[x], changed = -(bound // -a), True
                if lo[x] > hi[x]:
                    return False
        if not changed:
            break
    return True


def _solving(f: Formula, d: str, point: dict) -> list[int]:
    """Values of `d` that make a false `f` true when `f` is linear in `d` (others held)."""
    if not isinstance(f, Rel):
        return []
    try:
        c = coefficient_at(f.poly, d, point)
        if c is None:
            return []
        r = poly_value(f.poly, point) - c * point[d]
    except ZeroDivisionError:
        return []
    if f.op == "eq":
        return [-r // c] if r % c == 0 else []
    if f.op == "le":  # c*x + r <= 0
        return [(-r) // c] if c > 0 else [-((-r) // -c)]  # x <= floor(-r/c), or x >= ceil(r/-c)
    return [point[d] + 1, point[d] - 1]  # ne: any other value


class Boxes:
    """Decides `is formulas[i] implied by the active others?` by enumerating small boxes."""

    def __init__(self, w: Witnesses, background: Sequence[Formula], limit: int = 64):
        self.w = w
        self.limit = limit
        self.lin = [linear(f) for f in w.formulas]
        self.neg_lin = [linear(negate(f)) if isinstance(f, Rel) and f.op != "eq" else None for f in w.formulas]
        self.background = [b for b in (linear(f) for f in background) if b is not None]
        self.bg_fns = [(f.dims(), fn) for f, fn in zip(background, w.extra_fns)]
        self.dims = sorted(set(w.users) | {d for f in background for d in f.dims()})
        self.fdims = [f.dims() for f in w.formulas]

    def decide(self, i: int, active: set[int]) -> bool | None:
        """True: implied (no point exists). False: irredundant (a point exists). None: ask z3."""
        lo: dict[str, float] = {d: (0 if d in self.w.sizes else -INF) for d in self.dims}
        hi: dict[str, float] = {d: INF for d in self.dims}
        rows = [self.lin[j] for j in active if j != i and self.lin[j] is not None] + self.background
        if self.neg_lin[i] is not None:
            rows.append(self.neg_lin[i])  # type: ignore[arg-type]
        if not propagate(rows, lo, hi):  # type: ignore[arg-type]
            return True
        if self._clamped_point(i, active, lo, hi):
            return False
        boxed = [d for d in self.dims if lo[d] != -INF and hi[d] != INF]
        # NOTE: first the box of f's own dims (often one pinned dim), then every boxed dim
        own = [d for d in boxed if d in self.fdims[i]]
        for dims in ([own] if own and len(own) < len(boxed) else []) + [boxed]:
            if dims and math.prod(int(hi[d] - lo[d] + 1) for d in dims) <= self.limit:
                verdict = self._enumerate(i, active, dims, lo, hi)
                if verdict is not None:
                    return verdict
            elif dims is boxed and own:
                return self._grow(i, active, own, boxed, lo, hi)
        return None

    def _grow(self, i: int, active: set[int], own: list[str], boxed: list[str], lo: dict[str, float],
              hi: dict[str, float]) -> bool | None:
        """All boxed dims make too many points: grow f's own box by one neighbouring boxed dim
        at a time (the narrowest first), enumerating whenever a constraint falls wholly inside.

        Only "implied" can come out of a part of the box (a point found there may not extend
        to the dims outside it), and only a part can be small enough: `x7 >= 2` with
        `x2 < x7`, `x2 % 2 != 0` and a wide `x1` elsewhere is settled on {x7, x2}.
        """
        width = {d: int(hi[d] - lo[d] + 1) for d in boxed}
        inside = set(own)
        points = math.prod(width[d] for d in own)
        others = [j for j in active if j != i]
        seen = sum(1 for j in others if self.fdims[j] <= inside)
        while True:
            near = {d for j in others if self.fdims[j] & inside for d in self.fdims[j]}
            near |= {d for dims, _ in self.bg_fns if dims & inside for d in dims}
            grow = [d for d in boxed if d in near and d not in inside and points * width[d] <= self.limit]
            if not grow:
                return None
            d = min(grow, key=lambda d: width[d])
            inside.add(d)
            points *= width[d]
            now = sum(1 for j in others if self.fdims[j] <= inside)
            if now > seen:
                seen = now
                if self._enumerate(i, active, [x for x in boxed if x in inside], lo, hi):
                    return True

    def _clamped_point(self, i: int, active: set[int], lo: dict[str, float], hi: dict[str, float]) -> bool:
        """Does the current point, moved into the intervals and then nudged (a dim of each
        broken formula by +-1 or +-2), break only `formulas[i]`? A witness that one-dim moves
        miss when a chain of bounds must move together."""
        env = self.w.env
        saved = {d: env[d] for d in self.dims}
        others = [j for j in active if j != i]

        def broken() -> list[int] | None:
            if holds_at(self.w.fns[i]) is not False or not all(holds_at(fn) for _, fn in self.bg_fns):
                return None
            return [j for j in others if not holds_at(self.w.fns[j])]

        try:
            env.update({d: int(min(max(saved[d], lo[d]), hi[d])) for d in self.dims})  # type: ignore[call-overload]
            bad = broken()
            for _ in range(6):
                if bad is None or not bad:
                    break
                best = None
                for d in sorted(self.fdims[bad[0]]):
                    here = env[d]
                    for v in [here + 1, here + 2, here - 1, here - 2, *_solving(self.w.formulas[bad[0]], d, env)]:  # type: ignore[operator]
                        if v != here and lo[d] <= v <= hi[d]:
                            env[d] = v
                            now = broken()
                            if now is not None and now != bad and (best is None or len(now) < len(best[2])):
                                best = (d, v, now)
                    env[d] = here
                # NOTE: sideways moves (as many broken, but others) let a fix travel along a chain
                if best is None or len(best[2]) > len(bad):
                    break
                env[best[0]] = best[1]
                bad = best[2]
            return bad == []
        finally:
            env.update(saved)

    def _enumerate(self, i: int, active: set[int], boxed: list[str], lo: dict[str, float],
                   hi: dict[str, float]) -> bool | None:
        inside = set(boxed)
        checks = [self.w.fns[j] for j in sorted(active) if j != i and self.fdims[j] <= inside]
        checks += [fn for dims, fn in self.bg_fns if dims <= inside]
        fails_i = self.fdims[i] <= inside
        complete = inside >= set(self.dims)
        env = self.w.env
        saved = {d: env[d] for d in boxed}
        try:
            for values in itertools.product(*(range(int(lo[d]), int(hi[d]) + 1) for d in boxed)):
                env.update(zip(boxed, values))
                held = [holds_at(fn) for fn in checks]
                if None in held:
                    return None  # NOTE: a division by zero somewhere: leave it to z3
                if not all(held):
                    continue
                if not fails_i:
                    return None  # NOTE: a point of the others; whether `f` can fail there is open
                f_here = holds_at(self.w.fns[i])
                if f_here is None:
                    return None
                if not f_here:
                    return False if complete else None
            return True
        finally:
            env.update(saved)


# -- intervals ------------------------------------------------------------------------------


def holds_on_box(f: Formula, lo: Mapping[str, float], hi: Mapping[str, float]) -> bool:
    """Does `f` hold at every integer point of the box (each dim d in [lo[d], hi[d]])?

    Interval arithmetic over the polynomial, its products, `//` and `%` (Python semantics): a
    True is a proof, a False only means "not shown". The bounds the ordering layer implies
    settle many of the checks PyTorch's view rules leave (`1 % x0 != 0` once `x0 >= 2`):

    >>> from guardsolve.guards.expr import Poly, Rel, divide
    >>> x = Poly.var("x0")
    >>> holds_on_box(Rel("ne", divide("mod", Poly.const(1), x)), {"x0": 2}, {"x0": INF})
    True
    >>> holds_on_box(Rel("ne", divide("mod", Poly.const(1), x)), {"x0": 1}, {"x0": INF})
    False
    """
    if isinstance(f, Const):
        return f.value
    if isinstance(f, Or):
        return any(holds_on_box(a, lo, hi) for a in f.args)
    if isinstance(f, And):
        return all(holds_on_box(a, lo, hi) for a in f.args)
    a, b = poly_range(f.poly, lo, hi)
    if f.op == "le":
        return b <= 0
    if f.op == "eq":
        return a == b == 0
    return a > 0 or b < 0  # ne


def _mul(x: float, y: float) -> float:
    return 0 if x == 0 or y == 0 else x * y  # NOTE: 0 * inf is 0 here (an exact 0 factor)


def _times(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    ends = [_mul(x, y) for x in a for y in b]
    return min(ends), max(ends)


def poly_range(p: Poly, lo: Mapping[str, float], hi: Mapping[str, float], memo: dict | None = None
                ) -> tuple[float, float]:
    """An interval holding `p` on the box; `memo` (one per box) keeps each division's."""
    total = (0.0, 0.0)
    for mono, c in p.terms:
        r: tuple[float, float] = (1, 1)
        for atom in mono:
            r = _times(r, atom_range(atom, lo, hi, memo))
        r = _times(r, (c, c))
        total = (total[0] + r[0], total[1] + r[1])
    return total


def atom_range(atom: Atom, lo: Mapping[str, float], hi: Mapping[str, float], memo: dict | None = None
                ) -> tuple[float, float]:
    if isinstance(atom, str):
        return lo.get(atom, -INF), hi.get(atom, INF)
    if memo is not None and atom in memo:
        return memo[atom]
    n0, n1 = poly_range(atom.num, lo, hi, memo)
    d0, d1 = poly_range(atom.den, lo, hi, memo)
    if d0 < 1 or n0 < 0:
        out = (-INF, INF)  # NOTE: only nonnegative numerators over positive divisors
    elif atom.kind == "mod":
        out = (n0, n1) if n1 < d0 else (0, d1 - 1)
    else:
        out = (0 if d1 == INF else n0 // d1), (INF if n1 == INF else n1 // d0)
    if memo is not None:
        memo[atom] = out
    return out
