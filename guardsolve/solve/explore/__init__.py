"""explore: other routes to the same trace, probed at sizes 0 and 1 and merged (`explore`,
`explore_saved`, `merge_paths`)."""

from guardsolve.solve.explore.saved import (  # noqa: F401
    ROUTE_WHY, SMALL_TRACE, WIDE_CLAUSES, Exploration, Path, Probe, equal_classes, explore,
    explore_saved, guard_budget, implied_atoms, merged_clauses, one_of_routes, prove_union, resized, run_budget,
    solver_flip)
