"""Where two traces of one function part ways: the first node, or the output structure, that differs."""

from __future__ import annotations

from typing import Any
import torch
from guardsolve.ir.ops import Op
from guardsolve.trace.why import Why, node_loc, node_op
from guardsolve.trace.record import Trace


class Diverged(Exception):
    """A trace run against an expected one (`trace_once(..., expect=)`) recorded another node:
    said by the user's line and op first, the trace's own nodes after (`why`)."""

    def __init__(self, index: int, found: Any, expected: Any, loc: Any = None) -> None:
        self.index, self.found, self.expected = index, found, expected
        self.loc = loc if loc is not None else (found.meta.get("loc") if found.meta else None)
        op = node_op(found)
        at = f"{self.loc}: " if self.loc is not None else ""
        tail = f" where the trace has `{expected}`" if expected is not None else " past the trace's end"
        self.why = Why(f"records another trace from {at}{op} records `{found}`{tail} (trace line {index + 1})",
                       self.loc, op)
        super().__init__(self.why.text)


def same_node(a: Any, b: Any) -> bool:
    """Are two trace nodes the same, the example values of inputs aside (a placeholder's
    `shape`, an int argument's `val`)?"""
    if a.op is not b.op or a.inputs != b.inputs or a.outputs != b.outputs:
        return False
    if a.op is Op.VAR_PLACEHOLDER or a.op is Op.INT_ARG:
        return {k: v for k, v in a.params.items() if k not in ("shape", "val")} == \
            {k: v for k, v in b.params.items() if k not in ("shape", "val")}
    return a.params == b.params


def difference(t: Trace, u: Trace) -> Why | None:
    """Why `u` is not the same trace as `t` (None when it is): its nodes (example values of
    inputs aside, `same_node`), its output structure, its static guards; the first node that
    differs is named by its user line and op.

    >>> import torch
    >>> from guardsolve.trace.tracer import trace
    >>> f = lambda x: x.sin()
    >>> difference(trace(f, torch.ones(3, 4)), trace(f, torch.ones(1, 4))) is None
    True
    >>> g = lambda x: x.sin() if x.shape[0] > 2 else x
    >>> why = difference(trace(g, torch.ones(3, 4)), trace(g, torch.ones(1, 4)))
    >>> print(why)  # the user's line, the op, then the trace's own nodes
    records another trace from <doctest ...>:1  g = lambda x: x.sin() if x.shape[0] > 2 else x: the program's own \
test of a size records `bool_bailout(i2, expect=False)` where the trace has `bool_bailout(i2, expect=True)` (trace line 6)
    """
    nodes = u.graph.nodes
    for i, (a, b) in enumerate(zip(nodes, t.graph.nodes)):
        if not same_node(a, b):
            return Diverged(i, a, b, node_loc(nodes, i)).why
    if len(nodes) != len(t.graph.nodes):
        short, more = (u, t) if len(nodes) < len(t.graph.nodes) else (t, u)
        i = len(short.graph.nodes)
        extra = more.graph.nodes[i]
        loc = node_loc(more.graph.nodes, i)
        which = "the trace's" if more is t else "its"
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace: {len(nodes)} nodes where the trace has {len(t.graph.nodes)}; "
                   f"{which} first extra node is {node_op(extra)}{at}: `{extra}`", loc, node_op(extra))
    if not _same_spec(u.out_spec, t.out_spec):
        return Why("records another trace: another output structure")
    if [g.text for g in u.static] != [g.text for g in t.static]:
        return Why("records another trace: another memory layout")
    if u.opaque != t.opaque:
        return Why("records another trace: output objects a replay cannot rebuild")
    if (u.unreplayable is None) != (t.unreplayable is None):
        return Why(f"records another trace: {u.unreplayable or t.unreplayable}")
    return None


def _same_spec(a: Any, b: Any) -> bool:
    """Equal output structures (`OutRef`s and constants; constant tensors compared by value)."""
    from torch.utils._pytree import tree_flatten

    (la, sa), (lb, sb) = tree_flatten(a), tree_flatten(b)
    if sa != sb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
