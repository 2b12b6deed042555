"""The values of index tensors made from sizes (`arange`, shifts): the range each one holds,
checked where an embedding or an index reads through it.
"""

from __future__ import annotations

from typing import Any, Callable
import torch
from guardsolve.guards.rule_base import aten


_RANGE = "_guardsolve_values"  # NOTE: an attribute of the meta tensor: (lowest, highest) of its values


def _range_of(t: Any) -> tuple[Any, Any] | None:
    return getattr(t, _RANGE, None) if isinstance(t, torch.Tensor) else None


def _arange(out: Any, *args: Any, **kwargs: Any) -> None:
    """`arange(end)`, `arange(start, end)`, `arange(start, end, step)` of ints, step > 0:
    values from `start` up to at most `end - 1`."""
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if (isinstance(out, torch.Tensor) and not out.dtype.is_floating_point and out.dtype is not torch.bool
            and all(isinstance(v, (int, torch.SymInt)) for v in (start, end)) and isinstance(step, int) and step > 0):
        setattr(out, _RANGE, (start, end - 1))


def _keeps(out: Any, x: Any, *args: Any, **kwargs: Any) -> None:
    """An op whose output holds values of its first input only (a view, a copy, a repeat)."""
    r = _range_of(x)
    if r is not None and isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
        setattr(out, _RANGE, r)


def _shifts(sign: int) -> Callable[..., None]:
    def shift(out: Any, x: Any, other: Any, *args: Any, **kwargs: Any) -> None:
        r = _range_of(x)
        if r is not None and isinstance(other, (int, torch.SymInt)) and not isinstance(other, bool) and kwargs.get(
                "alpha", 1) == 1 and isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
            setattr(out, _RANGE, (r[0] + sign * other, r[1] + sign * other))
    return shift


def _in_bounds(r: tuple[Any, Any], size: Any, lowest: Any, what: str) -> None:
    """Eager's bounds check of index values `r` into a dim of `size` (from `lowest` up)."""
    lo, hi = r
    torch._check(hi < size, lambda: f"{what}: index {hi} is out of bounds for size {size}")
    if not (isinstance(lo, int) and isinstance(lowest, int) and lo >= lowest):
        torch._check(lo >= lowest, lambda: f"{what}: index {lo} is out of bounds for size {size}")


def _embedding(out: Any, weight: Any, indices: Any, *args: Any, **kwargs: Any) -> None:
    r = _range_of(indices)
    if r is not None:
        _in_bounds(r, weight.size(0), 0, "embedding")


def _along(what: str) -> Callable[..., None]:
    """`index_select` / `gather`: `index`'s values read `x` along `dim`."""

    def check(out: Any, x: Any, dim: int, index: Any, *args: Any, **kwargs: Any) -> None:
        r = _range_of(index)
        if r is not None:
            _in_bounds(r, x.size(dim) if x.dim() else 1, 0, what)

    return check


def _index(out: Any, x: Any, indices: Any, *args: Any, **kwargs: Any) -> None:
    d = 0
    for i in indices:
        r = _range_of(i)
        if r is not None and d < x.dim():
            _in_bounds(r, x.size(d), -x.size(d), "index")
        d += 1 if i is None or i.dtype not in (torch.bool, torch.uint8) else max(i.dim(), 1)


INDEX_VALUES: dict[Any, Callable[..., None]] = {
    aten.arange.default: _arange, aten.arange.start: _arange, aten.arange.start_step: _arange,
    **{op: _keeps for op in (
        aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.view.default,
        aten._unsafe_view.default, aten.reshape.default, aten.expand.default, aten.slice.Tensor,
        aten.select.int, aten.clone.default, aten.alias.default, aten.detach.default, aten.t.default,
        aten.transpose.int, aten.permute.default, aten._to_copy.default, aten.repeat.default,
        aten.flatten.using_ints, aten.lift_fresh.default, aten.lift_fresh_copy.default,
        aten.contiguous.default, aten.to.dtype, aten.narrow.default)},
    aten.add.Tensor: _shifts(1), aten.add.Scalar: _shifts(1), aten.sub.Tensor: _shifts(-1),
    aten.sub.Scalar: _shifts(-1),
    aten.embedding.default: _embedding,
    aten.index_select.default: _along("index_select"),
    aten.gather.default: _along("gather"),
    aten.index.Tensor: _index,
}
