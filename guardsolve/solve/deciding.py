"""Which sources of each guard decide something (`idle_sources`).

A guard stands for every bailout that normalizes to it, and each is printed as a source line.
Some of them decide nothing the trace records: answered otherwise on the guard's far side, the
op's rule returns the very same sizes, strides and dtypes there (an eval-mode dropout asking a
stride order, on the way to returning its input's layout). The route changes elsewhere (a test
of the program's own, another op's rule), so a report sets those lines apart instead of blaming
them.

>>> import torch, guardsolve
>>> table = torch.randn(10, 32)
>>> f = lambda ids: torch.nn.functional.dropout(table[ids], 0.1, False) * (2 if ids.shape[1] > 1 else 3)
>>> t = guardsolve.trace(f, torch.randint(0, 10, (2, 16)))
>>> gs = guardsolve.simplify(t)
>>> [(c.text, sorted(gs.graph.nodes[i].meta.get("op") or "the program's own test" for i in c.prov)) for c in gs]
[('ids1 >= 2', ['aten.dropout.default', "the program's own test"])]
>>> idle = idle_sources(t, gs)
>>> [(gs.graph.nodes[i].meta["op"], dict(idle[0].point)) for i in idle[0].sources]
[('aten.dropout.default', {'ids1': 1})]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from guardsolve.solve.witness import Witnesses


@dataclass(frozen=True)
class Idle:
    """Sources (bailout indices) of one guard that decide nothing at `point`, where that guard
    is false and every other guard true: each op that asked one returns there what it returned."""

    point: Mapping[str, int]
    sources: frozenset[int]

    def note(self, op: str) -> str:
        """What a source of `op` does at the point.

        >>> Idle({"x0": 1, "x1": 8}, frozenset({3})).note("aten.dropout.default")
        'decides nothing at x0=1, x1=8: aten.dropout.default returns the same sizes and strides there'
        """
        at = ", ".join(f"{d}={v}" for d, v in self.point.items())
        return f"decides nothing at {at}: {op} returns the same sizes and strides there"


def idle_sources(trace: Any, gs: Any) -> dict[int, Idle]:
    """For each guard (by index) with sources that decide nothing on its far side, those
    sources and the point (the nearest one to the example where that guard alone is false).
    Empty where the trace's calls cannot be replayed one by one (`trace.local`), or no such
    point is found."""
    from guardsolve.trace.local import LocalReplay

    replay = LocalReplay.of(trace) if trace is not None else None
    example = gs.graph.meta.get("example") or {}
    if replay is None or not gs.constraints or not set(gs.dims) <= set(example):
        return {}
    found = Witnesses.at([c.formula for c in gs.constraints], [], set(gs.sizes), {d: example[d] for d in gs.dims})
    if found is None:
        return {}
    calls = replay.recorded.calls
    out: dict[int, Idle] = {}
    every = set(range(len(gs.constraints)))
    for k, c in enumerate(gs.constraints):
        asked = [i for i in c.prov if gs.graph.nodes[i].meta.get("op") and gs.graph.nodes[i].meta.get("loc")]
        if len(c.prov) < 2 or not asked:
            continue
        point = found.find(k, every)
        if point is None:
            continue
        idle = set(replay.decides_nothing(point))
        env = replay.values(point)
        quiet = frozenset(i for i in asked if _quiet(gs.graph.nodes[i].meta, calls, idle, env))
        if quiet and quiet != c.prov:
            out[k] = Idle({d: point[d] for d in c.dims}, quiet)
    return out


def _quiet(meta: Mapping[str, Any], calls: Any, idle: set[int], env: Mapping[str, Any]) -> bool:
    """Is every call on the source's line of its op, whose decisions flip at the point, one
    that returns what it returned (and is there one)?"""
    loc, op = meta["loc"], meta["op"]
    flipped = [j for j, c in enumerate(calls)
               if c.loc is not None and (c.loc.file, c.loc.line) == (loc.file, loc.line) and str(c.func) == op
               and not all(isinstance(env.get(g), (bool, int)) and bool(env.get(g)) == e for g, e in c.asked)]
    return bool(flipped) and all(j in idle for j in flipped)
