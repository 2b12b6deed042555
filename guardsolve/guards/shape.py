"""`guard_graph(trace_graph)`: the shape interpretation, turning a tensor trace into guards.

A tensor trace of PyTorch ops (`aten.*` calls) is reinterpreted with PyTorch's own shape
rules (`guardsolve.guards.pytorch`). The seed notebook's five-op IR (`var_add`, `var_mul`,
`var_expand`, `var_size`, sizes and ints) keeps its own hand-written rules, the teaching path:
each tensor becomes the tuple of its dims, int and bool ops are re-recorded over input dims.

>>> seed = Graph.parse("a = var_placeholder(name=a, rank=1)\\nb = var_placeholder(name=b, rank=1)\\n"
...                    "s0 = var_size(a)\\ns1 = var_size(b)\\ni0 = size_index(s0, index=0)\\n"
...                    "i1 = size_index(s1, index=0)\\ni2 = int_eq(i0, i1)\\nbool_bailout(i2, expect=True)\\n"
...                    "v0 = var_add(a, b)")
>>> print(guard_graph(seed))
a0 = int_placeholder(name=a0)
b0 = int_placeholder(name=b0)
i0 = int_eq(a0, b0)
bool_bailout(i0, expect=True)
"""

from __future__ import annotations

from typing import Any, Callable

from guardsolve.errors import TypeMismatchError
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.node import Node
from guardsolve.ir.ops import BOOL_LOGIC, GUARD_OPS, INT_ARITH, INT_COMPARE, TENSOR_ELEMENTWISE, Op
from guardsolve.ir.signature import Param
from guardsolve.guards.pytorch import pytorch_guard_graph, signature_of


def is_guard_graph(graph: Graph) -> bool:
    """True when the graph holds only int/bool nodes (no tensors or sizes)."""
    return all(n.op in GUARD_OPS for n in graph.nodes)


_READS_DATA = frozenset({"aten._local_scalar_dense.default", "aten.item.default"})


def value_bailouts(graph: Graph) -> set[int]:
    """Indices of bailouts that depend on tensor data (`var_to_bool`, `.item()` or a size an op
    computes from data (`nonzero`) in a tensor trace, `bool_opaque` in a guard graph): not checkable from shapes, so a replay checks them."""
    tainted: set[str] = set()
    out: set[int] = set()
    for i, n in enumerate(graph.nodes):
        if (n.op in (Op.BOOL_OPAQUE, Op.VAR_TO_BOOL) or any(x in tainted for x in n.inputs)
                or (n.op is Op.ATEN and (n.params["fn"] in _READS_DATA or n.meta.get("data_sized")))):
            tainted.update(n.outputs)
            if n.op is Op.BOOL_BAILOUT:
                out.add(i)
    return out


def seed_rules(out: Graph, signature: tuple[Param, ...]) -> RuleTable:
    """The seed's hand-written rules: tensors map to tuples of dim names, int and bool ops are
    recorded into `out`."""
    dims = {p.name: p.dims for p in signature}
    current: dict[str, Any] = {}

    def enter(node: Node) -> None:
        # NOTE: the trace node itself, printed only when a report asks (most never do).
        current["meta"] = {"loc": node.meta.get("loc"), "trace_line": node.meta.get("line"), "trace_node": node}
        current["outputs"] = node.outputs

    def emit(op: Op) -> Callable[..., Any]:
        return lambda *inputs, **params: out.emit(op, inputs, meta=dict(current["meta"]), **params)

    def const(v: int) -> str:
        return out.emit(Op.INT_CONST, (), meta=dict(current["meta"]), val=v)

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
        Op.INT_ARG: lambda *, name, val=None: name,
        Op.VAR_PLACEHOLDER: lambda *, name, rank, **example: dims[name],
        Op.VAR_SIZE: lambda a: a,
        Op.SIZE_INDEX: lambda s, *, index: s[index],
        Op.SIZE_CTOR: lambda *ds: tuple(ds),
        Op.VAR_EXPAND: lambda a, size: size,
        **{op: (lambda a, b: a) for op in TENSOR_ELEMENTWISE},
        Op.VAR_PARAM: lambda *, name, shape, dtype=None, crc=None: tuple(const(d) for d in shape),
        Op.VAR_TO_BOOL: opaque,
        Op.BOOL_OPAQUE: emit(Op.BOOL_OPAQUE),
    }, enter)


def uses_pytorch_rules(graph: Graph) -> bool:
    """A trace of PyTorch ops (or with example shapes) takes PyTorch's rules; the seed IR does not."""
    return any(n.op is Op.ATEN or (n.op is Op.VAR_PLACEHOLDER and "shape" in n.params) for n in graph.nodes)


def guard_graph(graph: Graph) -> Graph:
    """Reinterpret a tensor trace with shape rules: a graph of int/bool guards over input dims.

    A graph that already is a guard graph is returned unchanged.
    """
    graph.validate()
    if is_guard_graph(graph):
        for i, n in enumerate(graph.nodes):
            if n.op is Op.INT_CONST and type(n.params["val"]) is not int:
                # NOTE: a float constant is a tensor trace's (a comparison of a value read
                # from data); guards are over ints
                raise TypeMismatchError(f"param val={n.params['val']!r} should be an int in a guard graph", n, i)
        return graph
    signature = signature_of(graph)
    if uses_pytorch_rules(graph):
        return pytorch_guard_graph(graph, signature)
    out = Graph(meta={"signature": signature})
    for p in signature:
        for d in p.dims:
            out.emit(Op.INT_ARG if p.kind == "int" else Op.INT_PLACEHOLDER, (), out=d, name=d)
    interpret(graph, seed_rules(out, signature), validate=False)
    return out
