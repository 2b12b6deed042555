"""A data-dependent trace's outline: where it is cut, and what each cut decides, one line a step."""

from __future__ import annotations

from typing import Any
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.trace.replay import INT_EXPR, METADATA_OPS
from guardsolve.jit.segments.lines import READS
from guardsolve.jit.segments.plan import MIN_OPS, Plan, has_data


def outline(graph: Graph) -> list[str]:
    """How a compiled entry (`backend="inductor"`) runs this trace, one line per step: the
    segments (ops and user lines), the ops run eagerly at the cuts, the decisions on data.
    Empty for a trace that reads no data.

    >>> import torch, guardsolve
    >>> t = guardsolve.trace(lambda x: x * 2 if x.sum().item() > 0 else -x, torch.ones(3), value_guards=True)
    >>> for line in outline(t.graph): print(line)  # doctest: +ELLIPSIS
    segment 0: 1 op (aten.sum.default), run as its eager call
    then eagerly: aten.item.default  at ...
    then, on the data: v0.item() > 0.0  at ...
    segment 1: 1 op (aten.mul.Tensor), run as its eager call
    """
    if not has_data(graph):
        return []
    runs, steps, _ = Plan.cut(graph)
    nodes = graph.nodes
    out: list[str] = []
    for kind, idx in steps:
        if kind == "seg":
            ops = [str(nodes[i].params["fn"]) for i in runs[idx] if nodes[i].op is Op.ATEN]
            shown = ", ".join(dict.fromkeys(ops[:4])) + (", ..." if len(set(ops)) > 4 else "")
            how = "compiled at symbolic sizes" if len(ops) >= MIN_OPS else "run as its eager call"
            out.append(f"segment {idx}: {len(ops)} op{'s' if len(ops) != 1 else ''} ({shown}), {how}")
            continue
        cut = cut_point(graph, idx)
        if cut is not None:
            decision, text, loc = cut
            at = f"  at {loc}" if loc is not None else ""
            out.append(f"then, on the data: {text}{at}" if decision else f"then eagerly: {text.split(' -> ')[0]}{at}")
    return out


def cut_point(graph: Graph, i: int) -> tuple[bool, str, Any] | None:
    """A cut step as (a decision?, its text, its user line); None for `var_to_bool` (its
    decision follows it)."""
    n = graph.nodes[i]
    if n.op is Op.BOOL_BAILOUT:
        return True, _decision(graph, i), n.meta.get("loc")
    if n.op is Op.VAR_TO_BOOL:
        return None
    return False, f"{n.params['fn']} -> {', '.join(n.outputs)}", n.meta.get("loc")


def _decision(graph: Graph, i: int) -> str:
    """A value bailout as an expression over the trace's tensors (`v0.item() > 0.0`)."""
    where = {o: n for n in graph.nodes for o in n.outputs}
    n = graph.nodes[i]
    text = _expr(where, n.inputs[0], 0)
    return text if n.params["expect"] else f"not ({text})"


def _expr(where: dict[str, Node], name: str, depth: int) -> str:
    n = where.get(name)
    if n is None or depth > 8:
        return name
    if n.op is Op.INT_CONST or n.op is Op.BOOL_CONST:
        return repr(n.params["val"])
    if n.op is Op.ATEN and str(n.params["fn"]) in READS:
        return f"{n.inputs[0]}.item()"
    if n.op is Op.VAR_TO_BOOL:
        return f"bool({n.inputs[0]})"
    if n.op is Op.SIZE_INDEX:
        src = where.get(n.inputs[0])
        if src is not None and src.op is Op.VAR_SIZE:
            return f"{src.inputs[0]}.shape[{n.params['index']}]"
    if n.op in INT_EXPR and n.op not in METADATA_OPS:
        parts = [_expr(where, x, depth + 1) for x in n.inputs]
        parts = [f"({p})" if " " in p else p for p in parts]
        return INT_EXPR[n.op].format(*parts, **n.params)
    return name
