"""The Python lines a segment's code is made of: direct calls, renamed nodes, int expressions."""

from __future__ import annotations

from typing import Any
from guardsolve.errors import TraceError
from guardsolve.ir.aten import Ref as ArgRef
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.trace.replay import INT_EXPR


READS = frozenset({"aten._local_scalar_dense.default", "aten.item.default"})


def fast_call(n: Node, ns: dict[str, Any]) -> str | None:
    """A cut op the replay's generic call would run through pytree: `.item()` as a method call,
    an op returning a list of tensors (`unbind` of a `nonzero`) unpacked directly."""
    from guardsolve.ir.aten import resolve

    fn = str(n.params["fn"])
    args, kwargs = n.params["args"], n.params["kwargs"]
    if fn in READS and len(args) == 1 and isinstance(args[0], ArgRef) and not kwargs:
        return f"{n.outputs[0]} = {args[0].name}.item()"
    returns = resolve(fn)._schema.returns
    if len(returns) == 1 and str(returns[0].type) == "List[Tensor]" and not kwargs and all(
            isinstance(a, ArgRef) or type(a) in (int, bool) for a in args):
        ns[f"k_{n.outputs[0]}"] = resolve(fn)._op
        parts = ", ".join(a.name if isinstance(a, ArgRef) else repr(a) for a in args)
        return f"{''.join(o + ', ' for o in n.outputs)}= k_{n.outputs[0]}({parts})"
    return None


def renamed_node(n: Node, names: dict[str, str]) -> Node:
    from guardsolve.ir.aten import substitute
    from guardsolve.ir.ops import Args, Kwargs

    params = dict(n.params)
    if n.op is Op.ATEN:
        def ref(x: str) -> ArgRef:
            return ArgRef(names.get(x, x))
        params["args"] = Args(substitute(tuple(n.params["args"]), ref))
        params["kwargs"] = Kwargs(substitute(dict(n.params["kwargs"]), ref))
    return Node(n.op, tuple(names.get(x, x) for x in n.inputs), tuple(names.get(o, o) for o in n.outputs),
                params, n.meta)


def int_line(n: Node) -> str:
    if n.op in INT_EXPR:
        return f"{n.outputs[0]} = " + INT_EXPR[n.op].format(*n.inputs, **n.params)
    if n.op is Op.SIZE_CTOR:
        return f"{n.outputs[0]} = (" + "".join(f"{x}, " for x in n.inputs) + ")"
    raise TraceError(f"a segment's glue cannot compute {n.op.value} ({', '.join(n.outputs)}) in Python")
