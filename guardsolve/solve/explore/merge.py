"""Merging the routes found: their guards' disjunction as clauses (`disjoin`), the constraints every
route implies, and z3's proof that the merged guards are that disjunction (`prove_union`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import z3

from guardsolve.guards.expr import TRUE as _TRUE
from guardsolve.guards.expr import conj, conjuncts, disj
from guardsolve.solve.constraint import Constraint
from guardsolve.solve.disjoin import disjoin, one_term_set
from guardsolve.solve.disjoin import routes as _routes
from guardsolve.solve.smt import formula_to_z3, limit, why_unknown, z3_vars
from guardsolve.solve.explore.results import Path


def path_literals(gs: Any, provenance: bool, terms: dict[str, Any]) -> dict[str, Any]:
    """One path's constraints as `disjoin` takes them: sets of one dim or one term (`x0*x1`),
    and other formulas; `terms` collects the terms by key."""
    sets: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for c in gs.constraints:
        prov = c.prov if provenance else frozenset()
        one = one_term_set(c.formula)
        if one is not None:
            term, s = one
            key = str(term)
            if not (len(term.terms) == 1 and len(next(iter(term.terms))[0]) == 1
                    and isinstance(next(iter(term.terms))[0][0], str)):
                terms[key] = term  # NOTE: a product or a division: not a plain dim
            if key in sets:
                sets[key] = (sets[key][0].inter(s), sets[key][1] | prov)
            else:
                sets[key] = (s, prov)
        else:
            rest[c.text] = (c.formula, prov)
    return {"sets": sets, "rest": rest}


def _all_literals(base: Any, paths: Sequence[Path]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The base's and each path's constraints as `disjoin` takes them (the base's with their
    provenance), every dim they mention, and the product terms by key."""
    terms: dict[str, Any] = {}
    literals = [path_literals(base, True, terms)] + [path_literals(p.guards, False, terms) for p in paths]
    dims = list(base.dims) + [d for p in paths for d in p.guards.dims if d not in base.dims]
    return literals, dims, terms


def merged_clauses(base: Any, paths: Sequence[Path], max_clauses: int | None = None
                   ) -> list[tuple[Any, frozenset[int]]] | None:
    """The disjunction of the base guards and each path's, as clauses with the base's provenance
    (None past `max_clauses`, the reader's budget by default)."""
    literals, dims, terms = _all_literals(base, paths)
    return disjoin(literals, dims, base.sizes, terms, guard_budget(base) if max_clauses is None else max_clauses)


def one_of_routes(base: Any, paths: Sequence[Path], common: Sequence[tuple[Any, frozenset[int]]]
                  ) -> list[tuple[Any, frozenset[int]]]:
    """The routes' disjunction as `common` (constraints every route implies) and one
    constraint `(route 1) or (route 2) or ...`, each route without the literals `common`
    already says: exact, since every route implies `common`. For routes whose CNF is past the
    reader's budget (a broadcast of many operands, each at size 1 in each dim)."""
    literals, dims, terms = _all_literals(base, paths)
    said = {f for f, _ in common}
    routes = [(conj(g for g in conjuncts(f) if g not in said), prov)
              for f, prov in _routes(literals, dims, base.sizes, terms)]
    union = disj(f for f, _ in routes)
    prov = frozenset().union(*(p for _, p in routes))
    return list(common) + ([] if union == _TRUE else [(union, prov)])


def guard_budget(base: Any) -> int:
    """How many guards the routes' clauses may take: a reader's budget, not the solver's (past
    it, they read as what every route implies and one of the routes: `one_of_routes`)."""
    return max(16, 4 * len(base.constraints) + 4)


def implied_atoms(base: Any, paths: Sequence[Path], have: Sequence[Any], timeout_ms: int,
                  ctx: z3.Context | None = None) -> list[tuple[Any, frozenset[int]]]:
    """Constraints of any route that every route implies (z3) and that are not clauses yet:
    `x1 == y0` where one route says it and the others say `x1 == 1, y0 == 1`. As clauses of
    their own they let `simplify` drop the longer clauses they imply. A constraint false at a
    route's own point (or the example's) is no candidate: no solver call for it."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)
    points = [dict(p.point) for p in paths]
    if base.signature is not None and base.graph.meta.get("example"):
        points.append(dict(base.graph.meta["example"]))
    sets = [base.constraints] + [p.guards.constraints for p in paths]
    dims = {d for s in sets for c in s for d in c.dims}
    background = [var(d) >= 0 for d in dims if d in base.sizes]
    routes = [z3.And([formula_to_z3(c.formula, var) for c in s]) if s else z3.BoolVal(True, ctx) for s in sets]
    seen = {repr(f) for f in have}
    out: list[tuple[Any, frozenset[int]]] = []
    for s in sets:
        for c in s:
            if repr(c.formula) in seen:
                continue
            seen.add(repr(c.formula))
            if not all(_holds(c.text, q) for q in points):
                continue
            goal = formula_to_z3(c.formula, var)
            solver = z3.Solver(ctx=ctx)
            limit(solver, timeout_ms)
            solver.add(*background, z3.Or(routes), z3.Not(goal))
            if solver.check() == z3.unsat:
                out.append((c.formula, c.prov if s is base.constraints else
                            _prov_in_base(base, goal, background, var, ctx, timeout_ms)))
    return out


def _prov_in_base(base: Any, goal: Any, background: list[Any], var: Any, ctx: z3.Context,
                  timeout_ms: int) -> frozenset[int]:
    """The example's bailouts that a route's constraint follows from on the example's side (an
    unsat core): the merged guard names the lines that ask it (DistilBERT's `attention_mask0 >= 2`
    was a guard with no source)."""
    solver = z3.Solver(ctx=ctx)
    limit(solver, timeout_ms)
    solver.add(*background, z3.Not(goal))
    for k, c in enumerate(base.constraints):
        solver.assert_and_track(formula_to_z3(c.formula, var), z3.Bool(f"_base_{k}", ctx))
    if solver.check() != z3.unsat:
        return frozenset()
    core = {str(m) for m in solver.unsat_core()}
    return frozenset().union(*(c.prov for k, c in enumerate(base.constraints) if f"_base_{k}" in core))


def _holds(text: str, point: Mapping[str, int]) -> bool:
    """Does a printed constraint hold at `point` (a zero divisor: no)?"""
    try:
        return bool(eval(text, {}, dict(point)))  # NOTE: guardsolve's own printed guards over dims
    except (ZeroDivisionError, NameError):
        return False


def prove_union(constraints: Sequence[Constraint], sets: Sequence[Sequence[Constraint]], sizes: Any,
                timeout_ms: int, ctx: z3.Context | None = None) -> str | None:
    """z3: are `constraints` equivalent to the disjunction of `sets` (sizes >= 0)? None when
    proved, else what failed."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)

    def conj(cs: Sequence[Constraint]) -> Any:
        return z3.And([formula_to_z3(c.formula, var) for c in cs]) if cs else z3.BoolVal(True, ctx)

    mine = conj(constraints)
    union = z3.Or([conj(s) for s in sets]) if sets else z3.BoolVal(False, ctx)
    dims = {d for s in [constraints, *sets] for c in s for d in c.dims}
    background = [var(d) >= 0 for d in dims if d in sizes]
    for premise, goal, what in ((mine, union, "accepts an input no path accepts"),
                                (union, mine, "rejects an input a path accepts")):
        s = z3.Solver(ctx=ctx)
        limit(s, timeout_ms)
        s.add(*background, premise, z3.Not(goal))
        r = s.check()
        if r != z3.unsat:
            return what if r == z3.sat else f"undecided ({why_unknown(s)}): {what}?"
    return None
