"""Exploring a saved trace (no function to trace again): its own ops replayed with PyTorch's shape
rules at other sizes (`explore_saved`), and the routes the text records (`ir.routes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

from guardsolve.errors import GuardFailure, GuardsolveError, UnsupportedOpError
from guardsolve.guards.pytorch import ReadsOtherwise, dtype_of, pytorch_guard_graph, signature_of
from guardsolve.ir.concrete import concrete_rules
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import interpret
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.trace.why import Why, node_op
from guardsolve.solve.explore.probes import Outcome, inside_region, on_data, run_at, why_not
from guardsolve.solve.explore.results import Exploration
from guardsolve.solve.explore.search import search_points


ROUTE_WHY = "a route the trace records (traced again: this trace but for ops that are identities there)"


def _route_holding(graph: Graph, point: Mapping[str, int]) -> Any:
    """The first route saved trace `graph` records (`ir.routes`) whose guards hold at `point`;
    None if none does."""
    for r in graph.meta.get("routes", ()):
        try:
            run_at(r.guards, point)
        except (GuardFailure, GuardsolveError, ArithmeticError, KeyError):
            continue
        return r
    return None


def _route_graph(route: Any) -> Graph:
    """A recorded route's guard graph, each bailout saying where it comes from (`ROUTE_WHY`)."""
    return Graph([Node(n.op, n.inputs, n.outputs, n.params, {"why": ROUTE_WHY}) if n.op is Op.BOOL_BAILOUT
                  else n for n in route.guards.nodes], meta=dict(route.guards.meta))


def explore_saved(graph: Graph, base: Any, reduce: Callable[[Graph], Any], *, limit: int | None = None,
                  runs: int | None = None) -> Exploration:
    """The routes of a saved tensor trace (no function to trace again): its own ops replayed
    with PyTorch's shape rules at sizes 0 and 1, as `explore` traces the function again.

    The trace is the program: a replay that runs through, every recorded decision of the
    user's code answered as recorded and every size the user's code reads read as recorded (a
    size where the trace reads one, not a constant: `pytorch.ReadsOtherwise`), records the
    same trace, and its guard graph is that route's path condition. A replay that stops (a
    rule rejects the sizes, a decision or a read answers otherwise) rejects the region of
    every point that makes the decisions it made up to there, as a fresh trace's does, unless
    a route the text records (`ir.routes`: found by tracing the function again, down another
    branch of the program, its identity ops left out) holds there: that route is merged. Past
    the first points, none once `runs` probes have run, as `explore` (the same trace's budget:
    the same points probed, so the same guards)."""
    out = Exploration()
    signature = signature_of(graph)
    example: dict[str, int] = {}
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            shape = n.params.get("shape")
            if shape is None:
                out.skipped = f"placeholder {n.params['name']} has no example shape"
                return out
            example.update(zip(next(p.dims for p in signature if p.name == n.params["name"]), shape))
        elif n.op is Op.INT_ARG:
            example[n.params["name"]] = n.params.get("val", 0)
    reads: dict[str, Any] = {}
    try:
        pytorch_guard_graph(graph, signature, reads=reads)  # NOTE: what the user's code reads at the example
    except Exception as e:  # NOTE: `simplify` replayed it already; an error here is its own
        out.skipped = f"the trace does not replay at its example ({type(e).__name__}: {e})"
        return out

    def probe(point: Mapping[str, int]) -> Outcome:
        out.traces += 1
        try:
            gg = pytorch_guard_graph(_graph_at(graph, signature, point), signature, expect=reads)
        except Exception as e:
            # NOTE: a route the live trace found by tracing the function again, recorded in the text
            route = _route_holding(graph, point)
            if route is not None:
                return ("same", _route_graph(route))
            prefix = getattr(e, "prefix_guards", None)
            decided = (prefix is not None and _replay_decided(e) and not on_data(prefix)
                       and not inside_region(prefix, example))
            if 0 in point.values() and _rejected_by_rule(e):
                # NOTE: as a live probe's rejection at a size 0, found on plain meta tensors
                # (`LocalReplay._stops`): outside the probe budget, and with no region
                out.stopped += 1
                decided = False
            return ("other", _replay_why(e), prefix if decided else None)
        why = _eager_rejects(graph, point)
        if why is not None:
            return ("other", why, None)
        gg.meta["static"] = graph.meta.get("static", ())
        return ("same", gg)

    # NOTE: where a recorded route holds, the program's own decisions and the regions rejected
    # before do not decide the point: it is probed (as a live exploration's `widen`)
    widen = (lambda point: _route_holding(graph, point) is not None) if graph.meta.get("routes") else None
    return search_points(out, example, base, probe, reduce, limit, size=len(graph.nodes), widen=widen, runs=runs)


def _eager_rejects(graph: Graph, point: Mapping[str, int]) -> Any:
    """Why eager's kernels raise on the saved trace at `point`, or None. A live probe runs them
    (`LocalReplay._eager_agrees`, or the fresh trace itself); a meta kernel may check less than
    eager's (`upsample_nearest2d` of no channels: "Non-empty 4D data tensor expected"). The
    text holds no data: inputs and constants are drawn (floats normal, the rest zeros), which
    decides nothing about sizes; a decision of the trace on such data is left to the replay.

    >>> g = Graph.parse("x = var_placeholder(name=x, rank=2, shape=[2, 3], dtype=float32)\\n"
    ...                 "v0 = aten.max.dim(x, 0)")
    >>> print(_eager_rejects(g, {"x0": 0, "x1": 3}))
    eager raises at these sizes: aten.max.dim: max(): Expected reduction dim 0 to have non-zero size.
    """
    dims = {p.name: p.dims for p in signature_of(graph)}
    gen = torch.Generator().manual_seed(0)

    def drawn(shape: Sequence[int], dtype: str) -> torch.Tensor:
        d = dtype_of(dtype)
        return torch.randn(list(shape), generator=gen, dtype=d) if d.is_floating_point else torch.zeros(shape, dtype=d)

    env: dict[str, Any] = {}
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            env[n.params["name"]] = drawn([point[d] for d in dims[n.params["name"]]], n.params.get("dtype", "float32"))
        elif n.op is Op.VAR_PARAM:
            env[n.params["name"]] = drawn(n.params["shape"], n.params.get("dtype", "float32"))
        elif n.op is Op.INT_ARG:
            env[n.params["name"]] = point[n.params["name"]]
    where: dict[str, Any] = {}
    table = dataclasses.replace(concrete_rules(env), enter=lambda n: where.__setitem__("node", n))
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            interpret(graph, table, validate=False)
    except GuardFailure:
        return None  # NOTE: a decision on the drawn data, not on sizes: the replay decided those
    except Exception as e:  # NOTE: an eager kernel raised: no trace serves these sizes
        cause = e.__cause__ if e.__cause__ is not None else e
        node = where.get("node")
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        op = node_op(node) if node is not None else None
        loc = node.meta.get("loc") if node is not None else None
        return Why(f"eager raises at these sizes: {op + ': ' if op else ''}{first}", loc, op)
    return None


def _replay_decided(e: BaseException) -> bool:
    """Does a saved trace's replay stop for the decisions it recorded before (so that every
    point making them stops the same way)? A decision of the trace answered otherwise does, a
    read answered otherwise, and a shape rule that rejects the sizes (its checks are recorded
    decisions); a decision on tensor data, or an op the rules cannot run, need not."""
    if isinstance(e, (GuardFailure, ReadsOtherwise)):
        return True
    if not isinstance(e, UnsupportedOpError) or not e.reason.startswith("PyTorch's shape rule fails while replaying"):
        return False
    return not isinstance(e.__cause__, (DataDependentOutputException, DynamicOutputShapeException))


def _rejected_by_rule(e: BaseException) -> bool:
    """Did a shape rule reject the sizes (not a decision of the trace, nor data)?"""
    return (isinstance(e, UnsupportedOpError) and e.reason.startswith("PyTorch's shape rule fails while replaying")
            and _replay_decided(e))


def _replay_why(e: BaseException) -> Any:
    """A saved trace's replay that stops, said as a fresh trace's rejection (`why_not`)."""
    if isinstance(e, ReadsOtherwise):
        return Why(str(e), e.loc, node_op(e.node))
    if isinstance(e, GuardFailure) and getattr(e, "node", None) is not None:
        loc = e.node.meta.get("loc")
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace{at}: the program's own test of a size answers otherwise", loc,
                   node_op(e.node))
    return why_not(e)


def _graph_at(graph: Graph, signature: Any, point: Mapping[str, int]) -> Graph:
    """The trace with its placeholders' example shapes (and int arguments' values) at `point`."""
    dims = {p.name: p.dims for p in signature}
    nodes = []
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            n = Node(n.op, n.inputs, n.outputs, {**n.params, "shape": tuple(point[d] for d in dims[n.params["name"]])},
                     n.meta)
        elif n.op is Op.INT_ARG:
            n = Node(n.op, n.inputs, n.outputs, {**n.params, "val": point[n.params["name"]]}, n.meta)
        nodes.append(n)
    return Graph(nodes, meta=graph.meta)
