"""The traced tensor: a tensor-like object that takes part in `__torch_function__`.

`TracedTensor` is not a `torch.Tensor` subclass: torch functions called with one (`torch.add`,
`F.conv2d`, `a @ b`) dispatch to `__torch_function__`, which looks the function up in
`guardsolve.torch_rules.TORCH_RULES`; tensor methods (`x.view(...)`) resolve through
`__getattr__` to the same table. Anything not in the table raises `UnsupportedOpError`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from guardsolve.errors import TraceError, UnsupportedOpError
from guardsolve.guarded import GuardedSize
from guardsolve.ops import Op
from guardsolve.record import Recorder, user_location


class DataDependentError(TraceError):
    """Python looked at tensor data (`if x.sum() > 0`, `.item()`): shapes cannot guard that."""


class TracedTensor:
    """A real tensor plus its name in the trace (the notebook's `Variable`)."""

    __slots__ = ("value", "name", "rec", "_shape", "_shape_fn")

    def __init__(self, value: torch.Tensor, name: str, rec: Recorder, shape: Any = None):
        self.value = value
        self.name = name
        self.rec = rec
        # NOTE: an op's result knows its size symbolically (the IR is shape-explicit): a
        # GuardedSize, a tensor of the same shape, or a thunk computing it on first use.
        self._shape: GuardedSize | None = shape if isinstance(shape, GuardedSize) else None
        self._shape_fn: Callable[[], GuardedSize] | None = (
            (lambda: shape.shape) if isinstance(shape, TracedTensor) else shape if callable(shape) else None)

    def __repr__(self) -> str:
        return f"{self.name}~TracedTensor{tuple(self.value.shape)}"

    __hash__ = object.__hash__

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        from guardsolve.torch_rules import TORCH_RULES, func_name, supported_names

        rule = TORCH_RULES.get(func)
        if rule is None:
            raise UnsupportedOpError(func_name(func), supported_names())
        rec = next((a.rec for a in args if isinstance(a, TracedTensor)), None)
        if rec is None:
            return rule(*args, **(kwargs or {}))
        return rec.call(rule, *args, **(kwargs or {}))

    def __getattr__(self, name: str) -> Any:
        from guardsolve.torch_rules import TORCH_RULES, supported_names

        method = getattr(torch.Tensor, name, None)
        if method is not None:
            rule = TORCH_RULES.get(method)
            if rule is None:
                raise UnsupportedOpError(f"Tensor.{name}", supported_names())
            return lambda *args, **kwargs: self.rec.call(rule, self, *args, **kwargs)
        raise AttributeError(f"'TracedTensor' object has no attribute {name!r}")

    # -- metadata (static: traces specialize on rank, dtype and device) ------------------------

    @property
    def shape(self) -> GuardedSize:
        # NOTE: recorded once, lazily, so repeated `.shape` reads do not spam the trace.
        if self._shape is None:
            if self._shape_fn is not None:
                self._shape = self._shape_fn()
            else:
                self._shape = GuardedSize(tuple(self.value.shape), self.rec.record(Op.VAR_SIZE, (self,)), self.rec)
        return self._shape

    @property
    def ndim(self) -> int:
        return self.value.dim()

    @property
    def dtype(self) -> torch.dtype:
        return self.value.dtype

    @property
    def device(self) -> torch.device:
        return self.value.device

    @property
    def T(self) -> "TracedTensor":
        from guardsolve.torch_rules import permute

        return permute(self, list(range(self.ndim))[::-1])

    def dim(self) -> int:
        return self.value.dim()

    def __len__(self) -> int:
        if self.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0].specialize()

    # -- data: only with value guards ----------------------------------------------------------

    def _observe(self, what: str) -> bool:
        if not self.rec.value_guards:
            loc = user_location()
            raise DataDependentError(
                f"{what} reads tensor data, which shape guards cannot check"
                + (f" — {loc}" if loc else "") + "; pass value_guards=True to trace() to record a value bailout")
        b = bool(self.value)
        self.rec.record(Op.BOOL_BAILOUT, (_ToBool(self),), expect=b)
        return b

    def __bool__(self) -> bool:
        return self._observe("bool(tensor)")

    def item(self) -> Any:
        from guardsolve.torch_rules import scalar_op

        v = self.value.item()
        if not self.rec.value_guards:
            self._observe(".item()")
        scalar_op("eq", self, v)._observe(".item()")
        return v

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        return int(self.item())


class _ToBool:
    """Adapter recording `var_to_bool` so a bailout can take a tensor's truth value."""

    __slots__ = ("name", "rec")

    def __init__(self, t: TracedTensor):
        self.rec = t.rec
        self.name = t.rec.record(Op.VAR_TO_BOOL, (t,))


def _install_operators() -> None:
    """Python operators delegate to the same rules as the torch functions they mirror."""
    from guardsolve import torch_rules as R

    ops = {
        "__add__": lambda a, b: R.arith("add", a, b), "__radd__": lambda a, b: R.arith("add", b, a),
        "__sub__": lambda a, b: R.arith("sub", a, b), "__rsub__": lambda a, b: R.arith("sub", b, a),
        "__mul__": lambda a, b: R.arith("mul", a, b), "__rmul__": lambda a, b: R.arith("mul", b, a),
        "__truediv__": lambda a, b: R.arith("div", a, b), "__rtruediv__": lambda a, b: R.arith("div", b, a),
        "__pow__": lambda a, b: R.arith("pow", a, b), "__rpow__": lambda a, b: R.arith("pow", b, a),
        "__matmul__": lambda a, b: R.matmul(a, b), "__rmatmul__": lambda a, b: R.matmul(b, a),
        "__eq__": lambda a, b: R.arith("eq", a, b), "__ne__": lambda a, b: R.arith("ne", a, b),
        "__lt__": lambda a, b: R.arith("lt", a, b), "__le__": lambda a, b: R.arith("le", a, b),
        "__gt__": lambda a, b: R.arith("gt", a, b), "__ge__": lambda a, b: R.arith("ge", a, b),
        "__neg__": lambda a: R.unary("neg", a), "__abs__": lambda a: R.unary("abs", a),
        "__getitem__": lambda a, idx: R.getitem(a, idx),
    }
    def at_user(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda a, *rest: a.rec.call(fn, a, *rest)

    for name, fn in ops.items():
        setattr(TracedTensor, name, at_user(fn))


_install_operators()
