"""`simplify(graph)`: the minimal, provably equivalent guard set of a trace or guard graph.

outline (components sharing no value but constants) -> normalize each -> independent parts
(no dim shared), each on its own: union-find -> ordering layer -> z3 (per independent component). Each stage is sound on its own; together they leave a set where no constraint is implied by the others
(and by `size >= 0`). For the notebook's `a + b` on two `[4]` tensors:

    assert not (a0 == 1)                 a0 == b0
    assert not (b0 == 1)         ->      a0 != 1
    assert (a0 == b0)
    assert (a0 == a0)
    assert (b0 == a0)
"""

from __future__ import annotations

from typing import Any

from guardsolve.errors import GuardsolveError
from guardsolve.guards.shape import guard_graph, is_guard_graph, uses_pytorch_rules
from guardsolve.ir.graph import Graph
from guardsolve.solve.explore.budget import run_budget
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.parallel import default_jobs
from guardsolve.trace.gcpause import paused_gc
from guardsolve.trace.record import Trace
from guardsolve.solve.explore.merge_paths import merge_paths
from guardsolve.solve.partwise import simplify_graph
from guardsolve.solve.readable_set import readable_guards
from guardsolve.solve.simplifier import DEFAULT_TIMEOUT_MS


def simplify(graph: Any, *, verify: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS,
             jobs: int | None = None, explore: bool | int = True, readable: bool = True) -> GuardSet:
    """The minimal constraint set accepting exactly the inputs all bailouts accept.

    `graph` is a tensor trace, a guard graph (also one parsed from text), or a `Trace`.
    Raises `UnsatisfiableGuardsError` when no input satisfies the guards. `jobs`: processes
    for a large graph's independent parts (`solve.parallel`); None takes the cores this
    process may use (`GUARDSOLVE_JOBS` caps them) when no other Python thread runs, 1 keeps
    to this process. With None, graphs under `PARALLEL_MIN_BAILOUTS` bailouts stay in this
    process. The result does not depend on it.

    A `Trace` of a function is exact to the trace, not to the route PyTorch's rules took:
    `explore` (on by default; an int caps the traces it may run) traces the function again
    at sizes 0 and 1 and merges every route that records the same trace (`solve.explore`);
    the guards are then the disjunction of those routes' path conditions, made minimal and
    proved equal to it by z3. `explore=False` keeps the one path of the example.

    `readable` (on by default) prints each guard in the simplest form found, proven equivalent
    under the others (`solve.readable`); False keeps the solver's own forms.
    """
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise GuardsolveError(f"jobs={jobs!r}: give a number of processes, at least 1 (or None for every core)")
    # NOTE: read (and checked) on every call, so a bad GUARDSOLVE_JOBS is named on a small graph too
    cap = default_jobs() if jobs is None else jobs
    with paused_gc():
        # NOTE: a Trace carries the guard graph recorded while it ran; no need to replay it
        gg = graph.guard_graph() if isinstance(graph, Trace) else guard_graph(graph)
        gs = simplify_graph(gg, False, timeout_ms, cap, auto=jobs is None)
    if explore is not False and explore != 0 and (isinstance(graph, Trace) or _saved_trace(graph)):
        # NOTE: a count of probes given: that many; by default the probe budget and, past the
        # first points, the run budget the trace's size sets (`explore.budget.run_budget`)
        # NOTE: a saved trace's exploration spends the same run budget (its size is the same
        # trace's): else its guards are wider than the live ones (resnet18 at batch 0, issue 49)
        runs = run_budget(graph.graph if isinstance(graph, Trace) else graph) if explore is True else None
        gs = merge_paths(graph, gs, timeout_ms, limit=None if explore is True else int(explore), runs=runs)
    if readable:
        gs = readable_guards(gs, timeout_ms)
    if verify:
        gs.verify(timeout_ms=timeout_ms)
    return gs


def _saved_trace(graph: Any) -> bool:
    """A tensor trace of PyTorch ops (a saved one: its routes are its own ops' replays)?"""
    return isinstance(graph, Graph) and not is_guard_graph(graph) and uses_pytorch_rules(graph)
