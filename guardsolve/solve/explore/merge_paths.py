"""The example's guards joined with every route exploring finds: minimal, and proved by z3 to be
the routes' disjunction (`merge_paths`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.solve.explore.budget import WIDE_CLAUSES
from guardsolve.solve.explore.live import explore
from guardsolve.solve.explore.merge import guard_budget, implied_atoms, merged_clauses, one_of_routes, prove_union
from guardsolve.solve.explore.saved import explore_saved
from guardsolve.solve.constraint import Constraint
from guardsolve.solve.guardset import GuardSet, has_division
from guardsolve.solve.tograph import emit_bailout
from guardsolve.trace.gcpause import paused_gc
from guardsolve.trace.record import Trace
from guardsolve.solve.partwise import simplify_graph
from guardsolve.solve.readable_set import readable_guards
from guardsolve.solve.simplifier import DEFAULT_TIMEOUT_MS


def merge_paths(t: Any, base: GuardSet, timeout_ms: int = DEFAULT_TIMEOUT_MS, limit: int | None = None,
                runs: int | None = None) -> GuardSet:
    """`base` (the example's path) joined with every route `explore.live.explore` (or `explore.saved.explore_saved`) finds that records
    the same trace: the disjunction of their guards (`disjoin`), made minimal by the same
    stages, and proved by z3 equal to the disjunction. Provenance stays with the example's
    bailouts; those a path answers otherwise are `widened`."""
    with paused_gc():
        reduce = lambda g: simplify_graph(g, False, timeout_ms, 1)  # noqa: E731
        if isinstance(t, Trace) and t.fn is None:
            t = t.graph
        ex = (explore(t, base, reduce, limit=limit, runs=runs) if isinstance(t, Trace)
              else explore_saved(t, base, reduce, limit=limit, runs=runs))
    if not ex.paths:
        return base.with_routes(ex)
    ctx = z3.Context()  # NOTE: one context for the merge's questions (making one costs ~4 ms)

    def reduced(base: GuardSet, paths: list[Any], max_clauses: int | None, one_of: bool = False
                ) -> tuple[list[Constraint], Any] | None:
        """The minimal guards of the routes' disjunction (None past `max_clauses` raw clauses);
        `one_of`: as the constraints every route implies and one `(route) or (route) ...`."""
        if one_of:
            clauses = one_of_routes(base, paths, implied_atoms(base, paths, [], timeout_ms, ctx))
        else:
            clauses = merged_clauses(base, paths, max_clauses)
            if clauses is None:
                return None
            clauses += implied_atoms(base, paths, [f for f, _ in clauses], timeout_ms, ctx)
        g = Graph(meta={"signature": base.signature})
        for d in base.dims:
            g.emit(Op.INT_PLACEHOLDER if d in base.sizes else Op.INT_ARG, (), name=d)
        prov_of: dict[int, frozenset[int]] = {}
        for f, prov in clauses:
            emit_bailout(g, f)
            prov_of[len(g.nodes) - 1] = prov
        merged = simplify_graph(g, False, timeout_ms, 1) if clauses else None
        return [Constraint(c.kind, c.formula, c.text, frozenset().union(*(prov_of.get(i, frozenset()) for i in c.prov)),
                           c.dims) for c in (merged or ())], merged

    def merge(base: GuardSet, paths: list[Any]) -> tuple[list[Constraint], Any, str | None]:
        """The merged guards, the GuardSet they came from, and why z3 did not prove them the
        routes' disjunction (None when it did)."""
        # NOTE: every route first, its raw clauses up to WIDE_CLAUSES: the constraints every route
        # implies often make most of them redundant (`mv`: 1 guard); kept when the minimal set fits
        # the reader's budget, else what every route implies and one `(route) or (route) ...`
        wide = reduced(base, paths, WIDE_CLAUSES) if len(paths) > 1 else None
        if wide is not None and len(wide[0]) <= guard_budget(base):
            constraints, merged = wide
        elif len(paths) == 1:
            constraints, merged = reduced(base, paths, None) or ([], None)
        else:
            constraints, merged = reduced(base, paths, None, one_of=True) or ([], None)
        failed = prove_union(constraints, [base.constraints] + [p.guards.constraints for p in paths], base.sizes,
                             timeout_ms, ctx)
        return constraints, merged, failed

    constraints, merged, failed = merge(base, ex.paths)
    if failed is not None:
        # NOTE: a division's divisor is a guard of its own at the top level (a zero divisor
        # rejects), so inside a clause `(x + (x + 1) // 2 - 1) // ((x + 1) // 2) == 2 or x == 0`
        # it still rejects x == 0. Then each route is merged again in its proven readable form
        # (`x >= 2`) where one is found: the same set of inputs, so the same disjunction.
        def plain(gs: GuardSet) -> GuardSet:
            return readable_guards(gs, timeout_ms) if any(has_division(c) for c in gs.constraints) else gs

        if any(has_division(c) for g in [base] + [p.guards for p in ex.paths] for c in g.constraints):
            base = plain(base)
            ex.paths = [replace(p, guards=plain(p.guards)) for p in ex.paths]
            constraints, merged, failed = merge(base, ex.paths)
    if failed is not None:
        # NOTE: never a guard set that is not the paths' disjunction: the example's path alone
        ex.skipped = f"the merged guards were not proved equal to the paths' ({failed}); kept the example's path"
        ex.paths.clear()
        return base.with_routes(ex)
    kept = frozenset().union(*(c.prov for c in constraints))
    widened = frozenset().union(*(c.prov for c in base.constraints)) - kept
    return base.with_routes(ex, constraints, merged.undecided if merged else (), widened)
