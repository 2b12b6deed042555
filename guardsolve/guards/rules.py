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

from typing import Any, Callable

import torch
from torch._decomp import decomposition_table, meta_table
from torch._dispatch.python import enable_python_dispatcher
from torch.utils._python_dispatch import TorchDispatchMode

# NOTE: FakeTensor's list: view_copy ops and these have C++ meta kernels that accept SymInts.
_CPP_SYMINT = frozenset({
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
    torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_.default,
    torch.ops.aten.zeros.default, torch.ops.aten.detach.default,
    torch.ops.aten.view_as_real.default, torch.ops.aten.view_as_complex.default,
})


def _prefers_kernel(func: Any) -> bool:
    return func in meta_table or func in _CPP_SYMINT or torch.Tag.view_copy in func.tags


class ShapeRules(TorchDispatchMode):
    """A dispatch mode over meta tensors that picks each op's shape rule in FakeTensor's order."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        handler = _METADATA.get(func)
        if handler is not None:
            return handler(*args)
        meta = meta_table.get(func)
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


_aten = torch.ops.aten
# Metadata queries answer from the tensor itself (FakeTensor's `_DISPATCH_META_HANDLERS`).
_METADATA: dict[Any, Callable[..., Any]] = {
    _aten.size.default: lambda t: tuple(t.size()),
    _aten.stride.default: lambda t: tuple(t.stride()),
    _aten.storage_offset.default: lambda t: t.storage_offset(),
    _aten.sym_size.default: lambda t: tuple(t.size()),
    _aten.sym_stride.default: lambda t: tuple(t.stride()),
    _aten.sym_storage_offset.default: lambda t: t.storage_offset(),
    _aten.sym_numel.default: lambda t: t.numel(),
    _aten.is_contiguous.default: lambda t: t.is_contiguous(),
}


def shape_rule(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The meta result of `func(*args, **kwargs)`: PyTorch's rule decides its shape."""
    with enable_python_dispatcher(), ShapeRules():
        return func(*args, **kwargs)
