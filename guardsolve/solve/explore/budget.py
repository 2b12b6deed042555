"""How much exploring may probe and run: probe caps by trace size, and the run budget (`run_budget`),
read from the trace's size alone, never a clock.
"""

from __future__ import annotations

from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op


MAX_PROBES = 16  # points probed per trace, at most (each costs up to a trace)
SMALL_TRACE = 40  # a trace of at most this many nodes is cheap to trace again: up to SMALL_PROBES
SMALL_PROBES = 64
ROUTE_PROBES = 4  # more probes a small trace takes for each route it finds, up to its cap
ROUTE_RATE = 1  # a small trace's run budget goes on while one probe in this many finds a route
TINY_TRACE = 12  # one op or two (a broadcast of three operands): every point queued, up to TINY_PROBES
TINY_OPS = 2
TINY_PROBES = 160
# NOTE: past the points always probed, exploring stops once its probes have *run* (traced again
# or replayed call by call; not those a rule stops on meta tensors, nor those known without a
# run) RUN_WORK // nodes times, at least EXPLORE_RUNS (`run_budget`): a count, so the guards do
# not depend on how loaded the machine is. A run costs about what the trace's nodes cost. It
# replaced a time budget (twice the example's own trace and simplify, timed), which explored a
# process's first, cold trace to the end and cut warm ones short: these constants explore the
# small example nets and models to the end (a conv net of 25 nodes runs 20; its full
# exploration runs 17) and stop GPT-2 and BERT (300 nodes) after their first points, as a warm
# run's time budget did.
EXPLORE_RUNS = 2
RUN_WORK = 500
WIDE_CLAUSES = 96  # raw clauses of every route's disjunction tried before picking routes
MAX_PAIRS_UNITS = 12  # pairs of dims or classes at 1 are tried up to this many dims and classes
MAX_DIMS = 32  # more input dims than this: not explored (the routes' disjunction grows too large)


def run_budget(graph: Graph) -> int | None:
    """How many probes exploring tensor trace `graph` may run (counting those of its first
    points, which always run): `RUN_WORK` nodes' worth, at least `EXPLORE_RUNS`; None (its probe
    budget alone) for a trace of one op or two (at most `TINY_OPS` ops or `TINY_TRACE` nodes),
    which probes a few ms a point. It reads the trace's size alone, never a clock.

    >>> import torch, guardsolve
    >>> m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    ...                         torch.nn.Conv2d(8, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 5 * 5, 4))
    >>> g = guardsolve.trace(m, torch.randn(2, 3, 16, 16)).graph
    >>> len(g.nodes), run_budget(g)
    (13, 38)
    >>> run_budget(guardsolve.trace(lambda x: x.sin(), torch.randn(4)).graph) is None
    True
    """
    ops = sum(1 for n in graph.nodes if n.op is Op.ATEN)
    if len(graph.nodes) <= TINY_TRACE or ops <= TINY_OPS:
        return None
    return max(EXPLORE_RUNS, RUN_WORK // len(graph.nodes))
