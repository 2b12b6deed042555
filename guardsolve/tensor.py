"""The traced tensor and the tracer's rule table for torch functions.

`TracedTensor` is a tensor-like object (not a `torch.Tensor` subclass) that takes part in
torch's `__torch_function__` protocol, so `torch.add(a, b)`, `a + b` and `a.size(1)` reach
the rules below. Each rule runs PyTorch's shape logic over guarded ints, so every shape
decision becomes a bailout, then records a shape-explicit op:

    i6 = int_eq(i0, i1)
    bool_bailout(i6, expect=True)
    s2 = size_ctor(i0)
    v0 = var_add(a, b)
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping

import torch

from guardsolve.errors import TraceError, UnsupportedOpError
from guardsolve.guarded import GuardedInt, GuardedSize
from guardsolve.ops import Op
from guardsolve.record import Recorder


class TracedTensor:
    """A real tensor plus its name in the trace (the notebook's `Variable`)."""

    __slots__ = ("value", "name", "rec", "_shape")

    def __init__(self, value: torch.Tensor, name: str, rec: Recorder):
        self.value = value
        self.name = name
        self.rec = rec
        self._shape: GuardedSize | None = None

    def __repr__(self) -> str:
        return f"{self.name}~TracedTensor{tuple(self.value.shape)}"

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        rule = TORCH_RULES.get(func)
        if rule is None:
            raise UnsupportedOpError(_func_name(func), supported_names())
        return rule(*args, **(kwargs or {}))

    # -- shape queries ----------------------------------------------------------

    @property
    def shape(self) -> GuardedSize:
        # NOTE: recorded once, lazily, so repeated `.shape` reads do not spam the trace.
        if self._shape is None:
            self._shape = GuardedSize(tuple(self.value.shape), self.rec.record(Op.VAR_SIZE, (self,)), self.rec)
        return self._shape

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        # NOTE: traces are rank specialized; the rank is part of the placeholder, not a guard.
        return self.value.dim()

    @property
    def ndim(self) -> int:
        return self.dim()

    def numel(self) -> Any:
        return self.shape.numel()

    def __len__(self) -> int:
        if self.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0].specialize()

    # -- arithmetic -------------------------------------------------------------

    def __add__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_ADD, self, o)
    def __radd__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_ADD, o, self)
    def __sub__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_SUB, self, o)
    def __rsub__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_SUB, o, self)
    def __mul__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_MUL, self, o)
    def __rmul__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_MUL, o, self)
    def __truediv__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_DIV, self, o)
    def __rtruediv__(self, o: Any) -> "TracedTensor": return elementwise(Op.VAR_DIV, o, self)

    def __getattr__(self, name: str) -> Any:
        method = getattr(torch.Tensor, name, None)
        if method is not None:
            rule = TORCH_RULES.get(method)
            if rule is None:
                raise UnsupportedOpError(f"Tensor.{name}", supported_names())
            return lambda *args, **kwargs: rule(self, *args, **kwargs)
        raise AttributeError(f"'TracedTensor' object has no attribute {name!r}")

    def __bool__(self) -> bool:
        raise UnsupportedOpError("Tensor.__bool__ (data-dependent control flow)", supported_names())


# -- shape logic over guarded ints (PyTorch's, written as in the notebook) ------------------


def broadcast_shape(lhs: TracedTensor, rhs: TracedTensor) -> GuardedSize:
    """Right-aligned broadcasting; each `== 1` test and the final agreement are bailouts."""
    out: list[Any] = []
    for x, y in itertools.zip_longest(reversed(lhs.shape), reversed(rhs.shape), fillvalue=1):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            if not (x == y):
                raise TraceError(f"shapes {tuple(lhs.value.shape)} and {tuple(rhs.value.shape)} do not broadcast")
            out.append(x)
    return GuardedSize.make(lhs.rec, list(reversed(out)))


def expand(t: TracedTensor, size: GuardedSize) -> TracedTensor:
    """Expand `t` to `size`, eliding the expand when the sizes already match."""
    if t.shape == size:
        return t
    value = t.value.expand(size.value)
    return TracedTensor(value, t.rec.record(Op.VAR_EXPAND, (t, size)), t.rec)


_EAGER: Mapping[Op, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Op.VAR_ADD: torch.add, Op.VAR_SUB: torch.sub, Op.VAR_MUL: torch.mul, Op.VAR_DIV: torch.div,
}


def elementwise(op: Op, a: Any, b: Any) -> TracedTensor:
    """A broadcasting binary op, lowered to explicit expands and a same-shape prim."""
    if not isinstance(a, TracedTensor) or not isinstance(b, TracedTensor):
        other = b if isinstance(a, TracedTensor) else a
        raise UnsupportedOpError(f"{op.value[4:]} with a {type(other).__name__} operand "
                                 "(only traced tensors are supported so far)", supported_names())
    if a.rec is not b.rec:
        raise TraceError(f"{op}: {a.name} and {b.name} belong to different traces")
    shape = broadcast_shape(a, b)
    ea, eb = expand(a, shape), expand(b, shape)
    value = _EAGER[op](ea.value, eb.value)
    return TracedTensor(value, a.rec.record(op, (ea, eb)), a.rec)


def _binary_rule(op: Op) -> Callable[..., TracedTensor]:
    def rule(a: Any, b: Any, **kwargs: Any) -> TracedTensor:
        if kwargs:
            raise UnsupportedOpError(f"{op.value[4:]} with keyword arguments {sorted(kwargs)}", supported_names())
        return elementwise(op, a, b)
    return rule


def _method(name: str) -> Callable[..., Any]:
    return lambda self, *args, **kwargs: getattr(TracedTensor, name)(self, *args, **kwargs)


TORCH_RULES: Mapping[Any, Callable[..., Any]] = {
    **{f: _binary_rule(op) for op, fs in {
        Op.VAR_ADD: (torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__),
        Op.VAR_SUB: (torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.__sub__),
        Op.VAR_MUL: (torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.__mul__),
        Op.VAR_DIV: (torch.div, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__),
    }.items() for f in fs},
    torch.Tensor.size: _method("size"),
    torch.Tensor.dim: _method("dim"),
    torch.Tensor.numel: _method("numel"),
    torch.numel: _method("numel"),
}


def _func_name(func: Any) -> str:
    """`torch.add`, `Tensor.add`, `torch.nn.functional.relu`: how a user would spell it."""
    name = getattr(func, "__name__", None) or repr(func)
    for prefix, namespace in (("torch.", torch), ("Tensor.", torch.Tensor),
                              ("torch.nn.functional.", torch.nn.functional)):
        if getattr(namespace, name, None) is func:
            return prefix + name
    mod = getattr(func, "__module__", None)
    return f"{mod}.{name}" if mod else name


def supported_names() -> list[str]:
    """The torch functions and tensor methods the tracer understands."""
    return sorted({_func_name(f) for f in TORCH_RULES} | {"Tensor.shape", "Tensor.ndim", "len(Tensor)"})


def is_traced(v: Any) -> bool:
    return isinstance(v, (TracedTensor, GuardedInt))
