"""The traced tensor: a tensor-like object that takes part in `__torch_function__`.

`TracedTensor` is not a `torch.Tensor` subclass: torch functions called with one (`torch.add`,
`F.conv2d`, `a @ b`) dispatch to `__torch_function__`, which looks the function up in
`guardsolve.trace.torch_rules.TORCH_RULES`; tensor methods (`x.view(...)`) resolve through
`__getattr__` to the same table. Anything not in the table raises `UnsupportedOpError`.
That dispatch (and `.T`, `.item()`, the Python operators) is installed by `torch_rules`, whose
rules build TracedTensors: this module does not import it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from guardsolve.errors import TraceError
from guardsolve.ir.ops import Op
from guardsolve.trace.guarded import GuardedSize
from guardsolve.trace.record import Recorder, user_location


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
