"""What a trace writes before it reads data (state, the random stream): whether segments may serve it."""

from __future__ import annotations

from typing import Any, Iterator, Sequence
import torch
from guardsolve.ir.aten import Ref as ArgRef
from guardsolve.ir.ops import Op
from guardsolve.jit.segments.plan import Plan


# NOTE: an argument of a random op at which it draws nothing (no dropout at probability 0 or
# outside training: attention's `dropout_p=0.0`, `dropout(x, p, train=False)`). Rule table.
_DRAWS_NOTHING_AT: dict[str, Any] = {"dropout_p": 0.0, "p": 0.0, "train": False}


def draws_random(func: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether the call draws from the random stream: an op PyTorch tags as seeded, unless an
    argument says it draws nothing (`_DRAWS_NOTHING_AT`).

    >>> aten = torch.ops.aten
    >>> draws_random(aten.scaled_dot_product_attention.default, [None, None, None, None, 0.0], {})
    False
    >>> draws_random(aten.native_dropout.default, [None, 0.5, True], {})
    True
    """
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return False
    for k, a in enumerate(func._schema.arguments):
        value = args[k] if k < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value() else None)
        if a.name in _DRAWS_NOTHING_AT and type(value) is type(_DRAWS_NOTHING_AT[a.name]) \
                and value == _DRAWS_NOTHING_AT[a.name]:
            return False
    return True


def state_writes(plan: Plan) -> str | None:
    """Why the trace cannot be cut: an op writes a tensor it did not make (an input, a buffer),
    or draws random numbers, before a decision on data, which a call that fails that decision
    would have done too (and the trace of the other path again). None when every write before
    the last cut is to a tensor the trace made itself."""
    nodes = plan.trace.graph.nodes
    if not plan.cuts:
        return None
    last = max(i for i in plan.cuts if nodes[i].op is Op.BOOL_BAILOUT) if any(
        nodes[i].op is Op.BOOL_BAILOUT for i in plan.cuts) else -1
    for n, what in _writes(nodes[:last]):
        loc = n.meta.get("loc")
        at = f" ({loc})" if loc is not None else ""
        if what is None:
            return f"{n.params['fn']} draws from the random stream before a decision on data{at}"
        return f"{n.params['fn']} writes {what}, a tensor the program did not make, before a decision on data{at}"
    return None


def writes_unmade(t: Any) -> tuple[str, ...]:
    """The tensors the trace writes that it did not make (inputs, buffers), by name, once each.

    >>> from guardsolve.trace.tracer import trace
    >>> writes_unmade(trace(lambda x: x.add_(1), torch.ones(2))), writes_unmade(trace(lambda x: x + 1, torch.ones(2)))
    (('x',), ())
    """
    return tuple(dict.fromkeys(what for _, what in _writes(t.graph.nodes, random=False) if what is not None))


def pure(t: Any) -> bool:
    """Whether the trace writes no tensor it did not make and draws no random numbers: running
    it again changes nothing the program sees.

    >>> from guardsolve.trace.tracer import trace
    >>> pure(trace(lambda x: x * 2, torch.ones(2))), pure(trace(lambda x: x.add_(1), torch.ones(2)))
    (True, False)
    """
    return next(_writes(t.graph.nodes), None) is None


def _writes(nodes: Sequence[Any], random: bool = True) -> Iterator[tuple[Any, str | None]]:
    """Each ATen node of `nodes` that draws random numbers (with None; where `random`) or writes
    a tensor the nodes did not make (with that tensor's name), in order."""
    from guardsolve.ir.aten import resolve

    root: dict[str, str] = {}
    fresh: set[str] = set()
    for n in nodes:
        if n.op is not Op.ATEN:
            continue
        func = resolve(str(n.params["fn"]))
        schema = func._schema
        args = list(n.params["args"])
        if random and draws_random(func, args, dict(n.params.get("kwargs") or {})):
            yield n, None
        for a, arg in zip(schema.arguments, args):
            info = a.alias_info
            if info is not None and info.is_write and isinstance(arg, ArgRef):
                base = root.get(arg.name, arg.name)
                if base not in fresh:
                    yield n, arg.name
        first = next((a.name for a in args if isinstance(a, ArgRef)), None)
        for r, o in zip(schema.returns, n.outputs):
            if r.alias_info is not None and first is not None:
                root[o] = root.get(first, first)
            else:
                fresh.add(o)
