"""Guards Dynamo left without a user line, attributed from guardsolve's own trace of the function."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence
import sympy
import torch
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import short_path
from guardsolve.pytorch.explain.frame import DynamoGuard, Frame
from guardsolve.pytorch.explain.provenance import GuardSource


def unattributed(g: DynamoGuard) -> bool:
    return g.kind in ("shape", "static size") and all(s.assumption in ("Dynamo's own", "symbol replacement")
                                                      for s in g.sources)


def attribute_from_trace(frame: Frame, fn: Callable[..., Any], args: Sequence[Any]) -> None:
    """Where Dynamo names no source for a size guard, guardsolve's own trace of the same call
    does: the user lines of its bailouts that read the same dims and decide as the guard does
    at each size of those dims up to twice the example's (the outermost frame's dims are named
    as guardsolve's trace names them). A program guardsolve cannot trace keeps Dynamo's word."""
    from guardsolve.ir.interp import interpret
    from guardsolve.ir.printer import print_rules
    from guardsolve.trace.tracer import trace

    try:
        with torch.no_grad():
            graph = trace(fn, *args).guard_graph()
    except Exception:  # NOTE: an attribution only: a program guardsolve cannot trace keeps Dynamo's comment
        return
    printed = interpret(graph, print_rules([]))
    example = frame.guards.graph.meta.get("example", {})
    candidates = []
    for n in graph.bailouts():
        loc = n.meta.get("loc")
        if loc is not None:
            cond = printed[n.inputs[0]]
            candidates.append((_dims_read(graph, n), cond if n.params["expect"] else f"not {cond}", loc))
    for k, g in enumerate(frame.dynamo_guards):
        if not unattributed(g) or g.expr is None or not g.dims:
            continue
        dims = {d for _, d in g.dims}
        points = [{**example, d: v} for d in sorted(dims) for v in range(0, 2 * example.get(d, 1) + 5)]
        found: dict[str, GuardSource] = {}
        for read, cond, loc in candidates:
            if read == dims and all(_decides(g, cond, p) for p in points):
                src = GuardSource(None, short_path(loc.file), loc.line, loc.function, loc.code or None,
                                  "from guardsolve's trace of the same call")
                found.setdefault(str(src), src)
        if found:
            frame.dynamo_guards[k] = DynamoGuard(g.code, g.kind, (*g.sources, *found.values()), g.comment, g.expr,
                                                 g.dims)


def _decides(g: DynamoGuard, cond: str, point: Mapping[str, int]) -> bool:
    """Do the Dynamo guard and a printed guardsolve bailout condition agree at `point`?"""
    try:
        ours = bool(eval(cond, {}, dict(point)))  # NOTE: the printer's Python form over dim names
    except ZeroDivisionError:
        ours = False
    except Exception:
        return False
    try:
        theirs = bool(g.expr.xreplace({sym: sympy.Integer(point[d]) for sym, d in g.dims}))
    except (TypeError, ZeroDivisionError):
        return False
    return ours == theirs


def _dims_read(graph: Graph, node: Any) -> set[str]:
    """The input dims a guard-graph node reads."""
    dims = {n.outputs[0] for n in graph.placeholders()}
    by_name = {o: n for n in graph.nodes for o in n.outputs}
    out: set[str] = set()
    stack = list(node.inputs)
    seen: set[str] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in dims:
            out.add(v)
        elif v in by_name:
            stack.extend(by_name[v].inputs)
    return out
