"""A GuardSet's guards in their simplest forms, each proven equivalent under the others (`readable_guards`)."""

from __future__ import annotations

from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.readable import irredundant, readable
from guardsolve.solve.simplifier import DEFAULT_TIMEOUT_MS


def readable_guards(gs: GuardSet, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> GuardSet:
    """The guards in their simplest forms (`solve.readable`), each proven equivalent under the
    others; the same GuardSet when none is rewritten."""
    if not any(c.kind == "general" for c in gs.constraints):
        return gs
    out = readable(gs.constraints, gs.sizes, gs.dims, min(timeout_ms, 1000), gs.graph.meta.get("example"))
    if all(a is b for a, b in zip(out, gs.constraints)):
        return gs
    # NOTE: a form read under the others can imply one of them (`x >= 33` read under `x >= 1`
    # makes `x >= 1` redundant): drop those, so the set stays irredundant
    kept, dropped, undecided = irredundant(out, gs.constraints, gs.sizes, min(timeout_ms, 1000))
    out_gs = gs.with_routes(gs.exploration, kept, undecided, widened=gs.widened)
    out_gs.implied = frozenset(out_gs.implied | dropped)
    return out_gs
