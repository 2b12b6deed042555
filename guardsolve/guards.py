"""`guard_graph(trace_graph)`: the shape interpretation, turning a tensor trace into guards.

Each tensor becomes the tuple of its dims; int and bool ops are re-recorded into a new graph
of int/bool nodes over input dims; bailouts keep their user source location.

>>> import torch, guardsolve
>>> print(guard_graph(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)).graph))
a0 = int_placeholder(name=a0)
b0 = int_placeholder(name=b0)
i0 = int_const(val=1)
i1 = int_eq(a0, i0)
bool_bailout(i1, expect=False)
i2 = int_const(val=1)
i3 = int_eq(b0, i2)
bool_bailout(i3, expect=False)
i4 = int_eq(a0, b0)
bool_bailout(i4, expect=True)
i5 = int_eq(a0, a0)
bool_bailout(i5, expect=True)
i6 = int_eq(b0, a0)
bool_bailout(i6, expect=True)
"""

from __future__ import annotations

from typing import Any, Callable

from guardsolve.interp import RuleTable, interpret
from guardsolve.ir import Graph, Node
from guardsolve.ops import BOOL_LOGIC, INT_ARITH, INT_COMPARE, TENSOR_ELEMENTWISE, Op
from guardsolve.signature import Param, dim_names


def signature_of(graph: Graph) -> tuple[Param, ...]:
    """The input signature of a tensor trace, from its placeholders."""
    sig = graph.meta.get("signature")
    if sig is not None:
        return sig
    kinds = [(n.params["name"], "tensor" if n.op is Op.VAR_PLACEHOLDER else "int", n.params.get("rank", 0))
             for n in graph.placeholders()]
    return dim_names(kinds)


def is_guard_graph(graph: Graph) -> bool:
    """True when the graph holds only int/bool nodes (no tensors or sizes)."""
    return all(n.op not in (Op.VAR_PLACEHOLDER, Op.VAR_SIZE, Op.SIZE_INDEX, Op.SIZE_CTOR,
                            Op.VAR_EXPAND) and n.op not in TENSOR_ELEMENTWISE for n in graph.nodes)


def shape_rules(out: Graph, signature: tuple[Param, ...]) -> RuleTable:
    """Rules mapping tensors to tuples of dim names and recording int/bool ops into `out`."""
    dims = {p.name: p.dims for p in signature}
    current: dict[str, Any] = {}

    def enter(node: Node) -> None:
        current["meta"] = {"loc": node.meta.get("loc"), "trace_line": node.meta.get("line"),
                           "trace_node": str(node)}

    def emit(op: Op) -> Callable[..., Any]:
        return lambda *inputs, **params: out.emit(op, inputs, meta=dict(current["meta"]), **params)

    def same_shape(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
        return a

    return RuleTable("shape", {
        **{op: emit(op) for op in INT_ARITH | INT_COMPARE | BOOL_LOGIC},
        Op.INT_CONST: emit(Op.INT_CONST),
        Op.BOOL_CONST: emit(Op.BOOL_CONST),
        Op.BOOL_BAILOUT: emit(Op.BOOL_BAILOUT),
        Op.INT_PLACEHOLDER: lambda *, name: name,
        Op.INT_ARG: lambda *, name: name,
        Op.VAR_PLACEHOLDER: lambda *, name, rank: dims[name],
        Op.VAR_SIZE: lambda a: a,
        Op.SIZE_INDEX: lambda s, *, index: s[index],
        Op.SIZE_CTOR: lambda *ds: tuple(ds),
        Op.VAR_EXPAND: lambda a, size: size,
        **{op: same_shape for op in TENSOR_ELEMENTWISE},
    }, enter)


def guard_graph(graph: Graph) -> Graph:
    """Reinterpret a tensor trace with shape rules: a graph of int/bool guards over input dims.

    A graph that already is a guard graph is returned unchanged.
    """
    graph.validate()
    if is_guard_graph(graph):
        return graph
    signature = signature_of(graph)
    out = Graph(meta={"signature": signature})
    for p in signature:
        for d in p.dims:
            out.emit(Op.INT_ARG if p.kind == "int" else Op.INT_PLACEHOLDER, (), out=d, name=d)
    interpret(graph, shape_rules(out, signature), validate=False)
    return out
