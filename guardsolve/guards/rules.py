"""PyTorch's shape rules: run an aten op on meta tensors whose sizes are our SymInts.

The order is FakeTensorMode's (`torch/_subclasses/fake_tensor.py`): metadata queries answer
from the tensor; an op with a Python meta registration (`torch._meta_registrations`) runs it;
an op without a SymInt-aware C++ meta kernel runs its Python decomposition (`torch._decomp`,
`torch._refs`), else its CompositeImplicit decomposition; last, the C++ meta kernel itself. Nested calls dispatch back here (`with self:`), so every op a decomposition
calls follows the same order, and every decision any of them makes is a recorded guard.

>>> import torch
>>> shape_rule(torch.ops.aten.mm.default, (torch.empty(2, 3, device="meta"), torch.empty(3, 4, device="meta")), {}).shape
torch.Size([2, 4])
"""

from __future__ import annotations

import functools
from typing import Any, Callable
import torch
from torch._decomp import decomposition_table, meta_table
from torch._dispatch.python import enable_python_dispatcher
from torch.utils._python_dispatch import TorchDispatchMode
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.data_shaped import DATA_SHAPED, DataMode, TRACED_ONLY, UNBACKED_ARGS, item_rule, reads_data, unbacked_size
from guardsolve.guards.eager_checks import EAGER_CHECKS
from guardsolve.guards.fast_rules import FAST_BINARY, FAST_UNARY, fast_rule
from guardsolve.guards.own_meta import OWN_META
from guardsolve.guards.rule_base import META_DEVICE, aten


# NOTE: FakeTensor's list: view_copy ops and these have C++ meta kernels that accept SymInts.
_CPP_SYMINT = frozenset({
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
    torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_.default,
    torch.ops.aten.zeros.default, torch.ops.aten.detach.default,
    torch.ops.aten.view_as_real.default, torch.ops.aten.view_as_complex.default,
})


@functools.lru_cache(maxsize=None)
def takes_device(func: Any) -> bool:
    """Does the op take a `device` argument (a factory)? Its shape rule then runs on meta."""
    return any(a.name == "device" and a.kwarg_only for a in func._schema.arguments)


def _prefers_kernel(func: Any) -> bool:
    return func in meta_table or func in _CPP_SYMINT or torch.Tag.view_copy in func.tags


class ShapeRules(TorchDispatchMode):
    """A dispatch mode over meta tensors that picks each op's shape rule in FakeTensor's order.

    `rec` supplies the fresh sizes of ops whose output shape depends on tensor data."""

    def __init__(self, rec: Recorder | None = None, tried: Any = None) -> None:
        super().__init__()
        self.rec = rec
        self.tried = tried  # NOTE: the op whose fast path `shape_rule` already tried (once)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        handler = _METADATA.get(func)
        if handler is not None:
            return handler(*args)
        if func is aten._local_scalar_dense.default and self.rec is not None:
            return item_rule(self.rec, *args)
        if func in UNBACKED_ARGS and self.rec is not None and reads_data(args, kwargs):
            with self:
                return UNBACKED_ARGS[func](DataMode(self.rec, func), func, *args, **kwargs)
        data_shaped = DATA_SHAPED.get(func)
        if data_shaped is not None and self.rec is not None:
            rec = self.rec
            with self:
                return data_shaped(lambda numel, pick: unbacked_size(rec, func, numel, pick), *args, **kwargs)
        if func is self.tried:
            self.tried = None
        else:
            out = fast_rule(func, args, kwargs)
            if out is not None:
                return out
        if takes_device(func) and kwargs.get("device") != META_DEVICE:
            # NOTE: a factory inside a decomposition (`nll_loss`'s `arange`) makes a stand-in too
            kwargs = {**kwargs, "device": META_DEVICE}
        check = EAGER_CHECKS.get(func)
        if check is not None:
            check(*args, **kwargs)
        own = OWN_META.get(func)
        meta = own(self.rec) if own is not None else meta_table.get(func)
        if meta is not None:
            with self:
                return meta(*args, **kwargs)
        if not _prefers_kernel(func):
            decomp = decomposition_table.get(func)
            if decomp is not None:
                with self:
                    return decomp(*args, **kwargs)
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


# Metadata queries answer from the tensor itself (FakeTensor's `_DISPATCH_META_HANDLERS`).
_METADATA: dict[Any, Callable[..., Any]] = {
    aten.size.default: lambda t: tuple(t.size()),
    aten.stride.default: lambda t: tuple(t.stride()),
    aten.storage_offset.default: lambda t: t.storage_offset(),
    aten.sym_size.default: lambda t: tuple(t.size()),
    aten.sym_stride.default: lambda t: tuple(t.stride()),
    aten.sym_storage_offset.default: lambda t: t.storage_offset(),
    aten.sym_numel.default: lambda t: t.numel(),
    aten.is_contiguous.default: lambda t: t.is_contiguous(),
}


def shape_rule(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], rec: Recorder | None = None) -> Any:
    """The meta result of `func(*args, **kwargs)`: PyTorch's rule decides its shape."""
    traced_only = TRACED_ONLY.get(func)
    if traced_only is not None:
        return traced_only(*args, **kwargs)
    out = fast_rule(func, args, kwargs)  # NOTE: the fast paths need no mode: no dispatch round trip
    if out is not None:
        return out
    tried = func if func in FAST_BINARY or func in FAST_UNARY else None
    with enable_python_dispatcher(), ShapeRules(rec, tried):
        return func(*args, **kwargs)
