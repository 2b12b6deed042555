"""Ops that are the identity at some sizes, and traces equal once those are set aside.

`position_ids.expand(batch, -1)` on a `[1, seq]` tensor is the tensor itself at batch 1, and
`t[:, :1]` slices dim 0 fully: PyTorch skips a full slice of a dim whose size is a constant,
and transformers' GPT-2 skips the `expand` at batch 1 (`if batch_size != position_ids.shape[0]`).
The trace at batch 2 then has ops the trace at batch 1 has not, though each computes its input
unchanged there. A route that records the trace with such ops left out (or added) serves the
same inputs, where those ops are identities: `same_but_identities` compares two traces so, and
gives the conditions (each identity op's output sizes equal to its input's) under which they
are, as guard-graph bailouts over the input dims.

An op is an identity here when its output has its input's sizes and it is one of
`IDENTITY_OPS`: a view of the same elements in the same places (an `expand` that expands no
dim, a `slice` from 0 by 1 that keeps every element, a `view`/`reshape` to the same shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from guardsolve.ir.aten import Ref, substitute
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op

_aten = torch.ops.aten
IDENTITY_OPS = frozenset({_aten.expand.default, _aten.slice.Tensor, _aten.view.default, _aten._unsafe_view.default,
                          _aten.reshape.default, _aten.alias.default})
_DIMS = frozenset({Op.INT_PLACEHOLDER, Op.INT_ARG})


@dataclass(frozen=True)
class Identity:
    """An op of a trace that is the identity at some sizes: output `out` is input `src` where
    each `(a, b)` of `equal` holds (guard-graph names of the recorded graph, or ints)."""

    out: str
    src: str
    equal: tuple[tuple[Any, Any], ...]


def _size_name(s: Any) -> Any:
    """A meta size as a recorded guard-graph name, or its int value (None: neither)."""
    if isinstance(s, int):
        return s
    node = getattr(s, "node", None)
    if node is None or getattr(node, "lazy", None) is not None or getattr(node, "data", None) is not None:
        return None
    return node.hint if node.const else node.g


def candidates(t: Any) -> list[Identity]:
    """The calls of trace `t` that are identities wherever their output sizes equal their
    input's (`t.recorded` is needed; none without it)."""
    rec = getattr(t, "recorded", None)
    if rec is None:
        return []
    out: list[Identity] = []
    nodes = t.graph.nodes
    for c in rec.calls:
        if c.func not in IDENTITY_OPS or c.nodes != 1 or c.flat is None or c.names is None or c.names[0] is None:
            continue
        if not isinstance(c.out, torch.Tensor) or not isinstance(c.flat[0], torch.Tensor):
            continue
        node = nodes[c.first]
        if c.func is _aten.slice.Tensor:
            args = node.params["args"]
            start = args[2] if len(args) > 2 else 0
            step = args[4] if len(args) > 4 else 1
            if start not in (0, None) or step != 1:
                continue
        a, b = list(c.out.shape), list(c.flat[0].shape)
        if len(a) != len(b):
            continue
        pairs = tuple((_size_name(x), _size_name(y)) for x, y in zip(a, b))
        if any(x is None or y is None for x, y in pairs):
            continue
        out.append(Identity(node.outputs[0], c.names[0], tuple(p for p in pairs if p[0] != p[1])))
    return out


def holding(ids: list[Identity], env: Mapping[str, Any]) -> list[Identity]:
    """The identities whose sizes are equal in `env` (values of the recorded guard graph)."""
    from guardsolve.trace.local import UNKNOWN

    def value(x: Any) -> Any:
        v = x if isinstance(x, int) else env.get(x, UNKNOWN)
        return None if v is UNKNOWN else v

    return [i for i in ids if all(value(a) is not None and value(a) == value(b) for a, b in i.equal)]


def identities_at(t: Any, point: Mapping[str, int]) -> list[Identity]:
    """The ops of trace `t` that are identities at input dims `point`."""
    from guardsolve.trace.local import values_at

    ids = candidates(t)
    return holding(ids, values_at(t.recorded.nodes, point)) if ids else []


def _canonical(t: Any, skip: Mapping[str, str]) -> tuple[list[Any], Any] | None:
    """Trace `t`'s dataflow with the ops in `skip` (output -> input) left out: its op calls in
    order, each argument named by what computes it, and its outputs; None where it cannot be
    read so (a node this does not know)."""
    canon: dict[str, Any] = {}
    calls: list[Any] = []

    def name(n: str) -> Any:
        return canon[n]

    for n in t.graph.nodes:
        op = n.op
        if op is Op.ATEN:
            if n.outputs and n.outputs[0] in skip:
                canon[n.outputs[0]] = canon[skip[n.outputs[0]]]
                continue
            key = (str(n.params["fn"]), substitute(n.params["args"], name), substitute(n.params["kwargs"], name))
            k = len(calls)
            calls.append(key)
            for j, o in enumerate(n.outputs):
                canon[o] = ("out", k, j)
        elif op is Op.BOOL_BAILOUT:
            continue  # NOTE: the user's decisions: the route's own guards hold them
        elif op in (Op.VAR_PLACEHOLDER, Op.INT_ARG):
            canon[n.outputs[0]] = (op.value, n.params["name"])
            calls.append((op.value, tuple(sorted((k, v) for k, v in n.params.items() if k not in ("shape", "val")))))
        elif op is Op.VAR_PARAM:
            canon[n.outputs[0]] = ("param", n.params["name"])
            calls.append(("param", n.params["name"], tuple(n.params.get("shape", ())), n.params.get("crc")))
        else:
            try:
                params = tuple(sorted((k, repr(v)) for k, v in n.params.items()))
                key = (op.value, tuple(canon[i] for i in n.inputs), params)
            except KeyError:
                return None
            for j, o in enumerate(n.outputs):
                canon[o] = (key, j)
    from torch.utils._pytree import tree_map

    from guardsolve.trace.record import OutRef

    try:
        spec = tree_map(lambda x: canon[x.name] if isinstance(x, (OutRef, Ref)) else x, t.out_spec)
    except KeyError:
        return None
    return calls, spec


def _copy(by_out: Mapping[str, Node], dst: Graph, name: str, memo: dict[str, str], dims: Mapping[str, str]) -> str:
    """Guard-graph value `name` of the recorded nodes (`by_out`: each by its output), emitted
    into `dst` (placeholders by dim name, `dims`); its name there."""
    got = memo.get(name)
    if got is not None:
        return got
    n = by_out[name]
    if n.op in _DIMS:
        out = dims[n.params["name"]]
    else:
        ins = tuple(_copy(by_out, dst, i, memo, dims) for i in n.inputs)
        out = dst.emit(n.op, ins, **n.params)
    memo[name] = out
    return out


def with_conditions(g: Graph, ids: list[Identity], src: list[Node], why: str) -> Graph:
    """Guard graph `g` with a bailout for each size equality of `ids` (recorded as `src`'s
    names), so that the route's guards hold only where those ops are identities."""
    out = Graph(list(g.nodes), meta=dict(g.meta))
    dims = {n.params["name"]: n.outputs[0] for n in g.nodes if n.op in _DIMS}
    by_out = {o: n for n in src for o in n.outputs}
    memo: dict[str, str] = {}
    for i in ids:
        for a, b in i.equal:
            xa = out.emit(Op.INT_CONST, (), val=a) if isinstance(a, int) else _copy(by_out, out, a, memo, dims)
            xb = out.emit(Op.INT_CONST, (), val=b) if isinstance(b, int) else _copy(by_out, out, b, memo, dims)
            eq = out.emit(Op.INT_EQ, (xa, xb))
            out.emit(Op.BOOL_BAILOUT, (eq,), meta={"why": why}, expect=True)
    return out


def same_but_identities(t: Any, u: Any, point: Mapping[str, int]) -> Graph | None:
    """Where trace `u` (of `t.fn`, at input dims `point`) records `t`'s computation with ops
    that are identities at `point` left out of either: `u`'s guard graph with those ops'
    conditions added (the inputs `u`'s route serves, where the left-out ops change nothing).
    None where the traces differ otherwise, or where `u` leaves nothing out.

    >>> import torch, guardsolve
    >>> from guardsolve.trace.tracer import trace_once
    >>> def f(x):
    ...     y = x.sum(0, keepdim=True)
    ...     return (y.expand(x.shape[0], -1) if x.shape[0] != 1 else y) * 2
    >>> t = guardsolve.trace(f, torch.randn(3, 4))
    >>> g = same_but_identities(t, trace_once(f, (torch.randn(1, 4),), False), {"x0": 1, "x1": 4})
    >>> g is not None and g.bailouts()[-1].meta["why"]
    'aten.expand.default is the identity'
    """
    import torch.utils._pytree as pytree

    if t.value_guards or u.value_guards:
        return None  # NOTE: decisions on tensor data are bailouts this comparison sets aside
    tid, uid = identities_at(t, point), identities_at(u, point)
    if not tid and not uid:
        return None
    a = _canonical(t, {i.out: i.src for i in tid})
    b = _canonical(u, {i.out: i.src for i in uid})
    if a is None or b is None or a[0] != b[0]:
        return None
    la, sa = pytree.tree_flatten(a[1])
    lb, sb = pytree.tree_flatten(b[1])
    if sa != sb or len(la) != len(lb) or any(
            (isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor)) and not (
                isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                and torch.equal(x, y)) or (not isinstance(x, torch.Tensor) and x != y) for x, y in zip(la, lb)):
        return None
    if [s.text for s in t.static] != [s.text for s in u.static] or t.opaque != u.opaque:
        return None
    g = u.guard_graph()
    for tr, ids in ((t, tid), (u, uid)):
        ops = {n.outputs[0]: str(n.params["fn"]) for n in tr.graph.nodes if n.op is Op.ATEN and n.outputs}
        for i in ids:
            g = with_conditions(g, [i], tr.recorded.nodes, f"{ops.get(i.out, 'an op')} is the identity")
    return g
