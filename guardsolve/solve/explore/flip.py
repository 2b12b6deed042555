"""The far side of each guard: the point nearest another where that guard alone is false (local
moves, then z3: `solver_flip`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import z3

from guardsolve.guards.expr import Formula
from guardsolve.solve.smt import formula_to_z3, limit, z3_vars
from guardsolve.solve.witness import flip_points


def decision_flips(gs: Any, point: Mapping[str, int]) -> list[dict[str, int]]:
    """For each guard of `gs`, the point nearest `point` where it alone is false (local moves,
    then z3)."""
    formulas = [c.formula for c in gs.constraints]
    sizes = set(gs.sizes)
    return flip_points(formulas, sizes, point, fallback=lambda i: solver_flip(formulas, i, sizes, point))


def solver_flip(formulas: Sequence[Formula], i: int, sizes: set[str], example: Mapping[str, int],
                largest: int = 1 << 20, timeout_ms: int = 200) -> dict[str, int] | None:
    """A point where `formulas[i]` alone is false, asked of z3 where local moves find none:
    first moving only the dims it reads, then those of the formulas that share a dim with it
    (and so on), each time within a box around `example` that widens (8, 64, 1024, `largest`)
    so the point found is near. None where z3 finds none in time.

    >>> from guardsolve.guards.expr import Poly, divide, rel
    >>> x2, x3 = Poly.var("x2"), Poly.var("x3")
    >>> patches = rel("eq", Poly.const(16), divide("floordiv", x2, Poly.const(4)) * divide("floordiv", x3, Poly.const(4)))
    >>> solver_flip([rel("le", Poly.const(8), x2), patches], 0, {"x2", "x3"}, {"x2": 16, "x3": 16})
    {'x2': 4, 'x3': 64}
    """
    ctx = z3.Context()
    var = z3_vars(ctx)
    dims = sorted({d for f in formulas for d in f.dims()})
    if any(d not in example for d in dims):
        return None
    s = z3.Solver(ctx=ctx)
    limit(s, timeout_ms)
    s.add(z3.Not(formula_to_z3(formulas[i], var)))
    s.add(*[formula_to_z3(f, var) for j, f in enumerate(formulas) if j != i])
    s.add(*[var(d) >= 0 for d in dims if d in sizes])
    moved = set(formulas[i].dims())
    while True:
        for box in (8, 64, 1024, largest):
            s.push()
            for d in dims:
                if d in moved:
                    s.add(var(d) >= example[d] - box, var(d) <= example[d] + box)
                else:
                    s.add(var(d) == example[d])
            got = s.check()
            if got == z3.sat:
                m = s.model()
                return {d: (m.eval(var(d), model_completion=True).as_long() if d in dims else v)
                        for d, v in example.items()}
            s.pop()
            if got == z3.unknown:
                return None
        more = moved | {d for f in formulas if set(f.dims()) & moved for d in f.dims()}
        if more == moved:
            return None
        moved = more
