"""A guard graph simplified part by part (its components, their independent parts), on forked
processes for a large one (`simplify_graph`).
"""

from __future__ import annotations

import os
from typing import Sequence

from guardsolve.errors import InterpretError, MissingRuleError, UnsatisfiableGuardsError
from guardsolve.guards.normalize import DIVISIONS, Normalized, Outline, normalize, outline
from guardsolve.ir.graph import Graph
from guardsolve.solve.constraint import Constraint, DimOrder
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.parallel import map_forked
from guardsolve.solve.smt import Contexts
from guardsolve.solve.parts import parts
from guardsolve.solve.simplifier import Simplifier, finish


# Exploring other routes (`merge_paths`) probes the far side of each of the example's decisions
# and each dim at 0 and 1, then stops after a number of probes run that the trace's size sets
# (`explore.budget.run_budget`: no clock, so the guards are the same however loaded the machine is).
# Below this many bailouts a graph simplifies in well under a second: forking costs more than it saves
PARALLEL_MIN_BAILOUTS = 4000


class _SharedContexts:
    """The z3 contexts of this process, made on first use (after a fork, the child's own)."""

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms
        self._pid = -1
        self._contexts: Contexts | None = None

    def get(self) -> Contexts:
        pid = os.getpid()
        if self._contexts is None or pid != self._pid:
            self._contexts, self._pid = Contexts(self.timeout_ms), pid
        return self._contexts


def simplify_graph(gg: Graph, verify: bool, timeout_ms: int, jobs: int = 1, *, auto: bool = False) -> GuardSet:
    signature = gg.meta.get("signature")
    lay = outline(gg)
    constraints, implied, undecided, tautologies = _run(gg, lay, timeout_ms, jobs, auto=auto)
    gs = GuardSet(constraints, gg, lay.dims, lay.sizes, signature, implied, undecided,
                  tuple(tautologies), tuple(sorted(lay.values)))
    if verify:
        gs.verify(timeout_ms=timeout_ms)
    return gs


Reduced = tuple[list[Constraint], set[int], list[str]]


def _run(gg: Graph, lay: Outline, timeout_ms: int, jobs: int = 1, *, auto: bool = False
         ) -> tuple[list[Constraint], set[int], list[str], list[int]]:
    """`Simplifier.run` part by part: the graph's components (`outline`) each normalized and
    split into `parts` on their own, on up to `jobs` processes (`auto`: only from
    `PARALLEL_MIN_BAILOUTS` bailouts on); each part goes round the stages only as often as it
    needs, and over its own dims only. Also returns the tautologies.

    NOTE: an error (unsatisfiable guards above all) is named by the whole graph's run, as
    before: which one is met first depends on the order of the whole.
    """
    order = DimOrder(lay.dims)
    if auto and lay.bailouts < PARALLEL_MIN_BAILOUTS:
        jobs = 1
    if len(lay.components) < 2:
        return _whole(gg, timeout_ms, order, jobs)
    shared = _SharedContexts(timeout_ms)  # NOTE: one per process; a forked child makes its own on first use

    def reduce(nodes: Sequence[int]) -> tuple[list[tuple[tuple[int, int], Reduced]], list[int]] | None:
        norm = normalize(gg, validate=False, nodes=nodes, values=lay.values)
        if not all(a.formula.dims() for a in norm.atoms):
            return None
        return [(_first(gg, p), Simplifier(gg, timeout_ms, p, order, shared.get()).reduce())
                for p in parts(norm)], norm.tautologies

    try:
        done = map_forked(reduce, lay.components, jobs)
    except (UnsatisfiableGuardsError, MissingRuleError, InterpretError):
        done = [None]
    if any(d is None for d in done):
        return _whole(gg, timeout_ms, order, jobs)
    # NOTE: the parts in the order of their first atoms in the whole graph (`normalize` puts
    # the divisions' atoms first): the order `undecided` lists them in
    results = sorted((r for d in done for r in d[0]), key=lambda r: r[0])  # type: ignore[index]
    tautologies = sorted((i for d in done for i in d[1]),  # type: ignore[index]
                         key=lambda i: (gg.nodes[i].op not in DIVISIONS, i))
    return (*_merge([r for _, r in results], order, tautologies), tautologies)


def _first(gg: Graph, part: Normalized) -> tuple[int, int]:
    """Where the part's first atom comes first in the whole graph's `normalize`."""
    return min((gg.nodes[i].op not in DIVISIONS, i) for a in part.atoms for i in a.prov)


def _merge(results: Sequence[Reduced], order: DimOrder, tautologies: Sequence[int] = ()) -> Reduced:
    out: list[Constraint] = []
    implied: set[int] = set()
    undecided: list[str] = []
    for o, i, u in results:
        out += o
        implied |= i
        undecided += u
    return (*finish(out, implied, tautologies, order), undecided)


def _whole(gg: Graph, timeout_ms: int, order: DimOrder, jobs: int
           ) -> tuple[list[Constraint], set[int], list[str], list[int]]:
    """The whole graph normalized at once, then part by part (`parts`) on up to `jobs` processes."""
    norm = normalize(gg, validate=False)  # NOTE: guard_graph() validated it
    split = parts(norm) if all(a.formula.dims() for a in norm.atoms) else []
    if len(split) < 2:
        return (*Simplifier(gg, timeout_ms, norm, order).run(), norm.tautologies)
    shared = _SharedContexts(timeout_ms)

    def reduce(part: Normalized) -> Reduced:
        return Simplifier(gg, timeout_ms, part, order, shared.get()).reduce()

    try:
        results = map_forked(reduce, split, jobs)
    except UnsatisfiableGuardsError:
        return (*Simplifier(gg, timeout_ms, norm, order).run(), norm.tautologies)
    return (*_merge(results, order, norm.tautologies), norm.tautologies)
