"""Ops whose output size is read from tensor data: unbacked sizes, `item()`, unique, masked_select."""

from __future__ import annotations

import math
from typing import Any, Callable
import torch
from guardsolve.errors import UnsupportedOpError
from guardsolve.guards.symbolic import ITEM_DATA, SymGuard
from guardsolve.guards.recorder import Recorder
from guardsolve.ir.aten import qualified_name
from guardsolve.guards.rule_base import aten


def _resize_in_place(x: torch.Tensor, sizes: Any, memory_format: Any = None) -> torch.Tensor:
    """`resize_` / `resize_as_` to the tensor's own sizes, a no-op: a guard that the sizes are
    equal. A traced tensor's sizes are fixed when it is made (a wrapper's cannot be changed in
    place), so a resize to other sizes does not trace."""
    sizes = tuple(sizes)
    if len(sizes) != x.dim() or any(a != b for a, b in zip(sizes, x.shape)) or memory_format not in (
            None, torch.preserve_format):
        raise UnsupportedOpError("aten.resize_", "guardsolve traces an in-place resize only to the tensor's "
                                 "own sizes (a traced tensor's sizes cannot change in place)")
    return x


def item_checked(rec: Recorder | None, x: torch.Tensor) -> Any:
    """`item`: eager's check (one element), then `_local_scalar_dense` (`torch._refs.item`
    runs `prims.item`, which has no rule on meta)."""
    torch._check(x.numel() == 1, lambda: f"a Tensor with {x.numel()} elements cannot be converted to Scalar")
    return item_rule(rec, x) if rec is not None else aten._local_scalar_dense.default(x)


# Rules for an op user code calls on a traced tensor (`shape_rule`'s own op), not for the same op
# inside another's rule (meta kernels resize their own meta outputs: `_fft_r2c`'s).
TRACED_ONLY: dict[Any, Callable[..., Any]] = {
    aten.resize_.default: lambda x, size, memory_format=None: _resize_in_place(x, size, memory_format),
    aten.resize_as_.default: lambda x, other, memory_format=None: _resize_in_place(x, other.shape, memory_format),
}


def unbacked_size(rec: Recorder, func: Any, numel: Any, pick: Callable[[Any], int]) -> Any:
    """A fresh size for `func`'s data-dependent output, `pick(eager's output)` while tracing;
    0 when `numel` (the most it can be) is a static 0, as FakeTensor does."""
    if isinstance(numel, int) and numel == 0:
        return 0
    # NOTE: eager's output is that of the op traced now; a data-shaped op nested in its rule
    # (`index` with a bool mask runs `nonzero`) reads it once, as the first such op. A wrong
    # value there shows as a disagreement with eager, which the tracer reports.
    real, rec.real = rec.real, None
    # NOTE: replaying a saved trace has no eager output: PyTorch's own stand-in for an unbacked
    # size's hint (`unbacked_symint_fallback`), which only arithmetic on it ever sees
    return torch.SymInt(rec.unbacked(qualified_name(func), pick(real) if real is not None else 8192))


def reads_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Is a scalar argument (not nested: `slice`'s start and end) a value read from data?"""
    return any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) and isinstance(a.node, SymGuard)
               and a.node.data is not None for a in (*args, *kwargs.values()))


class DataMode:
    """What FakeTensor's own rules for ops over data-dependent arguments (`fake_impls`) ask of
    the fake mode: a ShapeEnv that makes a fresh unbacked size where no bound decides one."""

    def __init__(self, rec: Recorder, func: Any) -> None:
        self.shape_env = self
        self.rec, self.func = rec, func

    def create_unbacked_symint(self) -> torch.SymInt:
        return torch.SymInt(self.rec.unbacked(qualified_name(self.func), 8192))


def _fake_impl(name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        from torch._subclasses import fake_impls

        return getattr(fake_impls, name)(*args, **kwargs)

    return run


# Ops whose arguments may be values read from tensor data (`x[:n]` with `n = t.item()`):
# FakeTensor's rules, which decide with `guard_or_false` and fall back to a fresh unbacked size.
# Over sizes alone they take PyTorch's ordinary rule.
UNBACKED_ARGS: dict[Any, Callable[..., Any]] = {
    aten.slice.Tensor: _fake_impl("slice_forward"),
}


def item_rule(rec: Recorder, x: torch.Tensor) -> Any:
    """`.item()`: an unbacked value of the tensor's Python type, eager's value while tracing
    (FakeTensor's `local_scalar_dense`; PyTorch's stand-in when a saved trace is replayed)."""
    if x.is_complex():
        raise UnsupportedOpError("aten._local_scalar_dense.default", "a complex .item() does not trace")
    real, rec.real = rec.real, None
    if real is not None and not isinstance(real, (int, float, bool)):
        # NOTE: a decomposition reading its argument's data: the traced op's eager output is not
        # this value (the tracer decomposes such an op over the traced tensors instead)
        raise RuntimeError("a decomposition reads tensor data on meta tensors")
    kind = bool if x.dtype is torch.bool else float if x.is_floating_point() else int
    node = rec.unbacked("", 8192, ITEM_DATA)
    node.pytype, node.hint = kind, kind(real) if real is not None else kind(8192)
    return {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[kind](node)


def _unique(new: Callable[[Any], Any], x: torch.Tensor, dim: int | None, inverse: bool, counts: bool) -> Any:
    """FakeTensor's `_unique`: unique values along `dim` (all of `x` when None), and the
    inverse indices and counts (empty unless asked for; eager CPU fills them when `dim` is given)."""
    if dim is not None:
        dim = dim % max(x.dim(), 1)
    n = new(x.numel() if dim is None else x.size(dim), lambda real: real[0].shape[0 if dim is None else dim])
    out = x.new_empty((n,)) if dim is None else x.new_empty((*x.shape[:dim], n, *x.shape[dim + 1:]))
    filled = dim is not None
    inv = x.new_empty(tuple(x.shape) if dim is None else (x.shape[dim],), dtype=torch.int64) if inverse or filled \
        else x.new_empty((0,), dtype=torch.int64)
    cnt = x.new_empty((n,), dtype=torch.int64) if counts or filled else x.new_empty((0,), dtype=torch.int64)
    return out, inv, cnt


def _masked_select(new: Callable[[Any], Any], x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(x.shape, mask.shape)  # NOTE: eager's check, as guards
    return x.new_empty((new(math.prod(shape), lambda real: real.shape[0]),))


# Ops whose output shape depends on tensor data (FakeTensor's `fake_impls`): the shape rule
# takes `new(numel, pick)`, a fresh unbacked size (at most `numel`; `pick` reads its value
# from eager's output), and builds the outputs around it.
# Ops whose result is read from tensor data (a value, not a shape): on meta tensors they cannot run
READS_DATA = frozenset({aten._local_scalar_dense.default, aten.item.default})


DATA_SHAPED: dict[Any, Callable[..., Any]] = {
    aten.nonzero.default: lambda new, x: x.new_empty_strided((n := new(x.numel(), lambda real: real.shape[0]), x.dim()),
                                                              (1, n), dtype=torch.int64),
    aten.masked_select.default: _masked_select,
    aten._unique2.default: lambda new, x, sorted=True, return_inverse=False, return_counts=False:
        _unique(new, x, None, return_inverse, return_counts),
    aten._unique.default: lambda new, x, sorted=True, return_inverse=False:
        _unique(new, x, None, return_inverse, False)[:2],
    aten.unique_dim.default: lambda new, x, dim, sorted=True, return_inverse=False, return_counts=False:
        _unique(new, x, dim, return_inverse, return_counts),
    aten.unique_consecutive.default: lambda new, x, return_inverse=False, return_counts=False, dim=None:
        _unique(new, x, dim, return_inverse, return_counts),
}
