"""Calls of PyTorch ops in the tensor trace: `v2 = aten.view.default(v0, [i3, -1])`.

A call node names its op by its qualified overload (resolved from `torch.ops`, never
`eval`'d) and keeps its arguments as a template: Python literals, torch dtypes, layouts,
memory formats and devices, and `Ref`s to earlier values of the trace. It prints as the call
it stands for (`guardsolve.ir.parse` reads that back with Python's own `ast`, walking the
tree, never evaluating it):

>>> render_call(("v2",), "aten.view.default", (Ref("v0"), [Ref("i3"), -1]), {})
'v2 = aten.view.default(v0, [i3, -1])'
>>> resolve("aten.view.default")
<OpOverload(op='aten.view', overload='default')>
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from guardsolve.errors import UnknownOpError


@dataclass(frozen=True)
class Ref:
    """A value of the trace used as an argument, by name."""

    name: str


_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


def resolve(name: str) -> Any:
    """The `torch.ops` overload spelled `ns.op.overload`; `UnknownOpError` when there is none."""
    parts = name.split(".")
    if len(parts) != 3 or not all(p.isidentifier() for p in parts):
        raise UnknownOpError(f"{name!r} is not an op overload (expected namespace.op.overload)")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        overload = getattr(packet, parts[2])
    except (AttributeError, RuntimeError):
        raise UnknownOpError(f"unknown op {name!r}: torch.ops has no such overload") from None
    if not isinstance(overload, torch._ops.OpOverload):
        raise UnknownOpError(f"unknown op {name!r}: not an op overload")
    return overload


def qualified_name(func: Any) -> str:
    """`aten.view.default` for `torch.ops.aten.view.default`."""
    ns, op = func._schema.name.split("::")
    return f"{ns}.{op}.{func._overloadname}"


def refs(template: Any) -> list[str]:
    """Every `Ref` name in a template, in order of first appearance."""
    out: dict[str, None] = {}
    _walk(template, out)
    return list(out)


def _walk(v: Any, out: dict[str, None]) -> None:
    # NOTE: a module-level function, not a closure: a recursive closure is a reference cycle
    # per call, garbage only the cyclic collector frees (one per traced op)
    if isinstance(v, Ref):
        out.setdefault(v.name)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _walk(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _walk(x, out)


def substitute(template: Any, value: Callable[[str], Any]) -> Any:
    """The template with every `Ref` replaced by `value(name)`."""
    if isinstance(template, Ref):
        return value(template.name)
    if isinstance(template, list):
        return [substitute(x, value) for x in template]
    if isinstance(template, tuple):
        return tuple(substitute(x, value) for x in template)
    if isinstance(template, dict):
        return {k: substitute(x, value) for k, x in template.items()}
    return template


def render(v: Any) -> str:
    """One template value as Python source."""
    if isinstance(v, Ref):
        return v.name
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"
    if isinstance(v, _ENUMS):
        return str(v)
    if isinstance(v, torch.device):
        return f"torch.device({str(v)!r})"
    if isinstance(v, list):
        return "[" + ", ".join(render(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(render(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def render_call(outputs: tuple[str, ...], fn: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """`outs = ns.op.overload(args, key=value)`."""
    parts = [render(a) for a in args] + [f"{k}={render(v)}" for k, v in kwargs.items()]
    return (f"{', '.join(outputs)} = " if outputs else "") + f"{fn}({', '.join(parts)})"


