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

from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.node import Node
from guardsolve.ir.ops import BOOL_LOGIC, GUARD_OPS, INT_ARITH, INT_COMPARE, SAME_SHAPE, TENSOR_ELEMENTWISE, Op
from guardsolve.ir.signature import Param, dim_names


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
    return all(n.op in GUARD_OPS for n in graph.nodes)


def value_bailouts(graph: Graph) -> set[int]:
    """Indices of bailouts that depend on tensor data (`var_to_bool` in a tensor trace,
    `bool_opaque` in a guard graph): not checkable from shapes."""
    tainted: set[str] = set()
    out: set[int] = set()
    for i, n in enumerate(graph.nodes):
        if n.op in (Op.BOOL_OPAQUE, Op.VAR_TO_BOOL) or any(x in tainted for x in n.inputs):
            tainted.update(n.outputs)
            if n.op is Op.BOOL_BAILOUT:
                out.add(i)
    return out


def shape_rules(out: Graph, signature: tuple[Param, ...]) -> RuleTable:
    """Rules mapping tensors to tuples of dim names and recording int/bool ops into `out`."""
    dims = {p.name: p.dims for p in signature}
    current: dict[str, Any] = {}

    def enter(node: Node) -> None:
        # NOTE: the trace node itself, printed only when a report asks (most never do).
        current["meta"] = {"loc": node.meta.get("loc"), "trace_line": node.meta.get("line"), "trace_node": node}
        current["outputs"] = node.outputs

    def emit(op: Op) -> Callable[..., Any]:
        return lambda *inputs, **params: out.emit(op, inputs, meta=dict(current["meta"]), **params)

    def same_shape(a: tuple[str, ...], *rest: Any, **params: Any) -> tuple[str, ...]:
        return a

    def const(v: int) -> str:
        return out.emit(Op.INT_CONST, (), meta=dict(current["meta"]), val=v)

    def add(a: str, b: str) -> str:
        return out.emit(Op.INT_ADD, (a, b), meta=dict(current["meta"]))

    def reduce(a: tuple[str, ...], *, fn: str, dims: tuple[int, ...], keepdim: bool) -> tuple[str, ...]:
        if keepdim:
            return tuple(const(1) if i in dims else d for i, d in enumerate(a))
        return tuple(d for i, d in enumerate(a) if i not in dims)

    def cat(*ts: tuple[str, ...], dim: int) -> tuple[str, ...]:
        total = ts[0][dim]
        for t in ts[1:]:
            total = add(total, t[dim])
        return ts[0][:dim] + (total,) + ts[0][dim + 1:]

    def slice_(a: tuple[str, ...], start: str, end: str, *, dim: int, step: int) -> tuple[str, ...]:
        m = dict(current["meta"])
        n = out.emit(Op.INT_SUB, (end, start), meta=m)
        if step != 1:  # ceil((end - start) / step)
            n = out.emit(Op.INT_FLOORDIV, (add(n, const(step - 1)), const(step)), meta=m)
        return a[:dim] + (n,) + a[dim + 1:]

    def opaque(a: tuple[str, ...]) -> str:
        # NOTE: a tensor's truth value is data, not shape: an unknown bool named after its node.
        name = current["outputs"][0] if current["outputs"] else "value"
        return out.emit(Op.BOOL_OPAQUE, (), meta=dict(current["meta"]), name=name)

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
        **{op: same_shape for op in TENSOR_ELEMENTWISE | SAME_SHAPE},
        Op.VAR_WHERE: same_shape,
        Op.VAR_PARAM: lambda *, name, shape: tuple(const(d) for d in shape),
        Op.VAR_REDUCE: reduce,
        Op.VAR_MATMUL: lambda a, b: a[:-1] + b[-1:],
        Op.VAR_RESHAPE: lambda a, size: size,
        Op.VAR_PERMUTE: lambda a, *, dims: tuple(a[d] for d in dims),
        Op.VAR_CAT: cat,
        Op.VAR_SLICE: slice_,
        Op.VAR_SELECT: lambda a, i, *, dim: a[:dim] + a[dim + 1:],
        Op.VAR_CONV2D: lambda x, w, size, **params: size,
        Op.VAR_EMBEDDING: lambda idx, w: idx + w[1:],
        Op.VAR_TO_BOOL: opaque,
        Op.BOOL_OPAQUE: emit(Op.BOOL_OPAQUE),
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
