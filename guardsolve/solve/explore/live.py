"""Exploring a live trace: its function traced again (or its calls replayed) at other sizes (`explore`)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from guardsolve.errors import UnsupportedOpError
from guardsolve.ir.aten import resolve
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.ir.routes import Route
from guardsolve.trace.identity import candidates, holding, same_but_identities
from guardsolve.trace.local import LocalReplay, values_at
from guardsolve.trace.divergence import Diverged, difference
from guardsolve.trace.tracer import trace_once
from guardsolve.solve.explore.probes import Outcome, inputs_at, inside_region, on_data, why_not
from guardsolve.solve.explore.results import Exploration, Path
from guardsolve.solve.explore.search import search_points


def _mutates_constants(t: Any) -> bool:
    """Does the trace write to a parameter or buffer (BatchNorm's running statistics in
    training mode)? Tracing it again would change the module."""
    for n in t.graph.nodes:
        if n.op is Op.ATEN and any(i in t.constants for i in n.inputs):
            try:
                if resolve(str(n.params["fn"]))._schema.is_mutable:
                    return True
            except Exception:
                return True
    return False


def _decided(e: BaseException) -> bool:
    """Does the failure follow from the decisions recorded before it (so every input that
    makes them fails the same way)? A divergence does, and so does a shape rule that rejects
    the sizes (its checks are recorded decisions); an eager kernel's error need not."""
    return isinstance(e, Diverged) or (isinstance(e, UnsupportedOpError)
                                       and e.reason.startswith("its shape rule rejects these sizes"))


def explore(t: Any, base: Any, reduce: Callable[[Graph], Any], *, limit: int | None = None,
            runs: int | None = None) -> Exploration:
    """Trace `t.fn` again at the example with dims set to 0 and 1; the paths that record
    `t`'s trace, and the probes that do not. At most `limit` traces (None: 4 per dim or
    class of equal dims, plus 4, at most `MAX_PROBES`), and past the first points none once
    `runs` probes have run (`run_budget`; None: no such budget). `reduce` simplifies one path's guard graph. A `Trace`
    without its function (or a tensor trace `Graph`: a saved one) replays its own ops with
    PyTorch's shape rules instead (`explore_saved`)."""
    out = Exploration()
    if t.fn is None or t.inputs is None:
        out.skipped = "no function to trace again (a saved trace or a guard graph)"
        return out
    if any(isinstance(v, torch.Tensor) and not v.is_contiguous() for v in t.inputs):
        out.skipped = "an input is not contiguous (its strides are part of the trace)"
        return out
    if _mutates_constants(t):
        out.skipped = "the trace writes to a parameter or buffer (tracing again would change the module)"
        return out
    example = base.input_dims(*t.inputs)
    if example is None:
        out.skipped = "the example inputs do not fit the traced signature"
        return out

    local = LocalReplay.of(t)
    # NOTE: ops of the trace that are identities at some sizes (an `expand` to the tensor's own
    # size, a full `slice`): where one is an identity at a point and not at the example, a route
    # that leaves it out (or one the trace's own decisions skip there) may compute the same
    ids = candidates(t)
    at_example = {i.out for i in holding(ids, values_at(t.recorded.nodes, example))} if ids else set()

    def identities_here(point: Mapping[str, int]) -> bool:
        return bool(ids) and any(i.out not in at_example for i in holding(ids, values_at(t.recorded.nodes, point)))

    def probe(point: Mapping[str, int]) -> Outcome:
        got = _probe(point)
        if got[0] != "other" or not identities_here(point):
            return got
        # NOTE: the route differs: trace it whole, and compare with the identities set aside
        out.traces += 1
        try:
            u = trace_once(t.fn, inputs_at(t, point), t.value_guards)
        except Exception:
            return got
        g = same_but_identities(t, u, point)
        if g is None:
            return got
        identity_routes.add(id(g))
        return ("same", g, tuple(u.graph.meta.get("value_flips", ())))

    def _probe(point: Mapping[str, int]) -> Outcome:
        inputs = inputs_at(t, point)
        if local is not None:
            got = local(point, inputs)
            out.stopped = local.stopped  # NOTE: one replay per exploration: its count is this one's
            if got is not None:
                out.replayed += 1
                return got
        out.traces += 1
        try:
            u = trace_once(t.fn, inputs, t.value_guards, expect=t.graph.nodes)
        except Exception as e:  # NOTE: any failure at the new sizes is a route not merged
            why = why_not(e)
            prefix = getattr(e, "prefix_guards", None)
            # NOTE: a region with a decision on tensor data (recorded with value_guards), or that
            # holds the example itself, was not decided by sizes alone: not a region then
            decided = (prefix is not None and _decided(e) and not on_data(prefix)
                       and not inside_region(prefix, example))
            return ("other", why, prefix if decided else None)
        why = difference(t, u)
        if why is not None:
            return ("other", why, None)
        return ("same", u.guard_graph(), tuple(u.graph.meta.get("value_flips", ())))

    identity_routes: set[int] = set()  # NOTE: the guard graphs of routes found by tracing again (`id`)
    rng = torch.random.get_rng_state()
    try:
        search_points(out, example, base, probe, reduce, limit, size=len(t.graph.nodes), widen=identities_here,
                      runs=runs)
    finally:
        torch.random.set_rng_state(rng)  # NOTE: the probes' random ops leave the user's stream as it was
    # NOTE: what only tracing the function found goes into the trace's text (`ir.routes`), so
    # that exploring the saved text merges those routes as this exploration did
    _record_routes(t.graph, [p for p in out.paths if id(p.graph) in identity_routes])
    return out


def _record_routes(graph: Graph, paths: Sequence[Path]) -> None:
    """Record `paths` (routes found by tracing the function again) in tensor trace `graph`'s
    `meta["routes"]`, each as its minimal guards (`ir.routes`); a route recorded before is not
    recorded twice."""
    have = list(graph.meta.get("routes", ()))
    keys = {r.key() for r in have}
    for p in paths:
        r = Route(dict(p.point), p.guards.to_graph(), "; ".join(c.text for c in p.guards.constraints))
        if r.key() not in keys:
            keys.add(r.key())
            have.append(r)
    if have:
        graph.meta["routes"] = have
