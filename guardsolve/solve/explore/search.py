"""The order of the points probed: the far side of each decision, each dim and class of equal dims at
0 and 1, mixes, then the neighbours of each route found (`search_points`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Iterator, Mapping, Sequence

from guardsolve.ir.graph import Graph
from guardsolve.solve.explore.budget import (
    MAX_DIMS, MAX_PAIRS_UNITS, MAX_PROBES, ROUTE_PROBES, ROUTE_RATE, SMALL_PROBES, SMALL_TRACE, TINY_PROBES,
    TINY_TRACE)
from guardsolve.solve.explore.flip import decision_flips
from guardsolve.solve.explore.probes import Outcome, decided_otherwise, inside_region, user_decisions
from guardsolve.solve.explore.results import Exploration, Path, Probe


VALUES = (0, 1)


def equal_classes(base: Any) -> list[tuple[str, ...]]:
    """Dims the base guards hold equal (`a0 == b0`), as classes of two or more."""
    parent: dict[str, str] = {d: d for d in base.dims}

    def find(d: str) -> str:
        while parent[d] != d:
            d = parent[d]
        return d

    for c in base.constraints:
        f = c.formula
        if c.kind == "eq" and len(c.dims) == 2 and getattr(f, "op", None) == "eq" and f.poly.constant == 0 \
                and sorted(f.poly.nonconst().values()) == [-1, 1]:
            a, b = c.dims
            parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for d in base.dims:
        groups.setdefault(find(d), []).append(d)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def _candidates(example: Mapping[str, int], units: Sequence[tuple[str, ...]], point: Mapping[str, int]
                ) -> Iterator[tuple[dict[str, int], tuple[str, ...]]]:
    for u in units:
        for v in VALUES:
            if any(point[d] != v for d in u):
                new = {**point, **{d: v for d in u}}
                yield new, tuple(d for d in example if new[d] != example[d])


def search_points(out: Exploration, example: dict[str, int], base: Any, probe: Callable[[Mapping[str, int]], Outcome],
            reduce: Callable[[Graph], Any], limit: int | None, size: int = SMALL_TRACE + 1,
            widen: Callable[[Mapping[str, int]], bool] | None = None, runs: int | None = None) -> Exploration:
    """The points to probe, in order (the far side of each decision of the example's path,
    each dim and class at 0 and 1, then mixes, then the neighbours of every route that merged
    and, in a small trace, the far sides of its decisions), skipping those a known route accepts or a known
    region rejects (unless `widen` says an op of the trace is an identity there, which a
    route may leave out); at most `limit` probes, and past the far sides and the 0s and 1s,
    none started once `runs` probes have run (traced again or replayed, not stopped by a rule)."""
    if len(example) > MAX_DIMS:
        out.skipped = f"{len(example)} input dims (more than {MAX_DIMS}: too many routes to try)"
        return out
    start = time.perf_counter()
    # NOTE: classes first: one probe moves every dim the guards hold equal
    units = equal_classes(base) + [(d,) for d in example]
    # NOTE: first the other side of each decision of the example's path, nearest the example
    # (each minimal guard false alone, the others kept): a model traced at batch 2 is asked
    # batch 1 first, one traced at batch 1 batch 2; then each dim and class at 0 and 1
    queue = deque((flip, tuple(d for d in example if flip[d] != example[d])) for flip in decision_flips(base, example))
    queue.extend(_candidates(example, units, example))
    # NOTE: these are always probed; the run budget applies to what comes after them
    essential = len(queue)
    # NOTE: then mixes: every dim at 0, at 1, and each pair of dims or classes at 1, then at 0
    # (a route may need both: a broadcast of two size-1 operands)
    for v in VALUES:
        mix = {d: v for d in example}
        queue.append((mix, tuple(d for d in example if mix[d] != example[d])))
    if len(units) <= MAX_PAIRS_UNITS:
        for v in (1, 0):  # NOTE: pairs at 0 after pairs at 1 (an empty tensor's contiguity asks of two dims)
            for i, a in enumerate(units):
                for b in units[i + 1:]:
                    mix = {**example, **{d: v for d in a + b}}
                    queue.append((mix, tuple(d for d in example if mix[d] != example[d])))
    # NOTE: a small trace (a few ops) is cheap to trace again: every point queued so far, and
    # some neighbours of the routes found
    small = size <= SMALL_TRACE
    cap = TINY_PROBES if size <= TINY_TRACE else SMALL_PROBES
    # NOTE: a small trace probes everything queued first, then more while probes find routes
    # (each route found allows ROUTE_PROBES more: its neighbours and the far sides of its decisions)
    first = min(len(queue) + 8, cap)
    budget = limit if limit is not None else (first if small else min(4 * len(units) + 4, MAX_PROBES))
    seen = {tuple(sorted(example.items()))}
    looked = 0
    accepts: list[Callable[..., bool]] = [base.check_dims]
    user = user_decisions(base.graph)
    # NOTE: regions known to record another trace: the decisions a probe made before it
    # diverged (or before a shape rule rejected its sizes) hold at every point of the region
    rejects: list[Graph] = []
    # NOTE: a small trace's run budget goes on while its probes find routes, at least one probe
    # in ROUTE_RATE (every probe, so far): past `runs`, until ROUTE_PROBES more runs find none
    # (`masked.var`'s 20 probes find 20 routes; a conv net's first probes find some and reject
    # others: its run budget holds)
    probes_run, extra = 0, 0  # NOTE: probes started (stopped ones too), runs allowed past `runs`
    try:
        while queue and out.traces + out.replayed - out.stopped < budget and looked < 32 * budget:
            ran = out.traces + out.replayed - out.stopped
            if runs is not None and looked >= essential and ran >= runs + extra:
                out.left = len(queue)
                out.out_of_runs = runs + extra
                break
            point, changed = queue.popleft()
            key = tuple(sorted(point.items()))
            if key in seen:
                continue
            seen.add(key)
            looked += 1
            if any(ok(point) for ok in accepts):
                queue.extend(_candidates(example, units, point))
                continue
            wide = widen is not None and widen(point)
            asked = decided_otherwise(user, point) if not wide else None
            if asked is not None:
                out.probes.append(Probe(point, changed, asked))
                continue
            known = next((g for g in rejects if inside_region(g, point)), None) if not wide else None
            if known is not None:
                out.probes.append(Probe(point, changed, known.meta["why"], known.meta["probe"]))
                continue
            before = out.replayed
            got = probe(point)
            probes_run += 1
            replayed = out.replayed > before
            if got[0] == "other":
                _, why, region = got
                rejected = Probe(point, changed, why, replayed=replayed)
                out.probes.append(rejected)
                if region is not None:
                    region.meta.update(probe=rejected.describe(), why=why)
                    rejects.append(region)
                continue
            gg = got[1]
            try:
                gs = reduce(gg)
            except Exception as e:
                out.probes.append(Probe(point, changed, f"its guards do not simplify ({type(e).__name__}: {e})"))
                continue
            if not gs.check_dims(point):  # NOTE: the route's own decisions do not hold there
                out.probes.append(Probe(point, changed, "the replay's recorded decisions fail there"))
                continue
            out.paths.append(Path(point, changed, gg, gs, replayed, got[2] if len(got) > 2 else ()))
            accepts.append(gs.check_dims)
            if small and limit is None:
                budget = min(first + ROUTE_PROBES * len(out.paths), cap)
                if runs is not None and len(out.paths) * ROUTE_RATE >= probes_run:
                    extra = max(extra, out.traces + out.replayed - out.stopped - runs) + ROUTE_PROBES
            queue.extend(_candidates(example, units, point))
            # NOTE: and, for a small trace (cheap to probe), the far side of each decision of the
            # route found, nearest its point: the routes beyond it
            if small:
                queue.extend((flip, tuple(d for d in example if flip[d] != example[d]))
                             for flip in decision_flips(gs, point))
    finally:
        out.seconds = time.perf_counter() - start
    return out
