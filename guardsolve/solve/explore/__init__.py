"""explore: other routes to the same trace: trace again at sizes 0 and 1 and on the other side of each
decision of the example's path, keep the paths that record it.

A trace's guards are its *path condition*: every question PyTorch's rules and the user's code
asked about a size, answered as at the example. Other answers often record the very same
trace: the size-1 branch of a contiguity rule changes only the stride of a size-1 dim, a
broadcast of a size-1 operand records the same `aten.add`. `explore` traces the function
again with dims (one at a time, each class of equal dims together, then mixes from every
point that merged) set to 0 and to 1, each probe stopped at the first trace node it records
differently (`tracer.Diverged`). A probe that records the same trace (same nodes, outputs and
static guards) is a *path*: its own path condition, simplified, holds exactly where a fresh
trace takes that route, so each input it accepts records the trace. `merge_paths` joins the paths'
guards into one minimal set (`disjoin`), proved by z3 to be their disjunction.

>>> import torch, guardsolve
>>> gs = guardsolve.simplify(guardsolve.trace(lambda x: x.sin(), torch.randn(32, 8)))
>>> print(gs if len(gs) else "(no size guard)")
(no size guard)
>>> len(gs.paths), gs.check(torch.randn(1, 8)), gs.check(torch.randn(0, 1))
(4, True, True)
"""

from guardsolve.solve.explore.budget import SMALL_TRACE, WIDE_CLAUSES, run_budget
from guardsolve.solve.explore.flip import solver_flip
from guardsolve.solve.explore.live import explore
from guardsolve.solve.explore.merge_paths import merge_paths
from guardsolve.solve.explore.merge import guard_budget, implied_atoms, merged_clauses, one_of_routes, prove_union
from guardsolve.solve.explore.probes import inputs_at, resized
from guardsolve.solve.explore.results import Exploration, Path, Probe
from guardsolve.solve.explore.saved import ROUTE_WHY, explore_saved
from guardsolve.solve.explore.search import equal_classes

__all__ = ["ROUTE_WHY", "SMALL_TRACE", "WIDE_CLAUSES", "Exploration", "Path", "Probe", "equal_classes", "explore",
           "explore_saved", "guard_budget", "implied_atoms", "inputs_at", "merge_paths", "merged_clauses", "one_of_routes",
           "prove_union", "resized", "run_budget", "solver_flip"]
