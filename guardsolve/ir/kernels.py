"""Torch implementations of the trace's tensor ops (prims: no implicit broadcasting).

Both the concrete interpreter and the compiled replay call these, so a trace means one thing.
Each prim checks the shapes it relies on: the trace made every broadcast and every size
explicit, so a mismatch here is a bug in a trace, reported as such.

>>> import torch
>>> unary(torch.tensor([-1.0, 2.0]), fn="relu")
tensor([0., 2.])
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

UNARY: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
BINARY: Mapping[str, Callable[[Any, Any], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}
# Scalar operands go through Python operators so dtype promotion is eager PyTorch's.
SCALAR: Mapping[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "pow": operator.pow, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
    "maximum": lambda a, v: torch.clamp(a, min=v) if isinstance(a, torch.Tensor) else torch.clamp(v, min=a),
    "minimum": lambda a, v: torch.clamp(a, max=v) if isinstance(a, torch.Tensor) else torch.clamp(v, max=a),
}
REDUCE: Mapping[str, Callable[..., torch.Tensor]] = {
    "sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin,
}


class PrimShapeError(ValueError):
    """A prim got operands whose shapes the trace promised would match."""


def _same(*ts: torch.Tensor) -> None:
    if any(t.shape != ts[0].shape for t in ts[1:]):
        raise PrimShapeError("prim operands differ in shape: " + " vs ".join(str(tuple(t.shape)) for t in ts))


def binary(a: torch.Tensor, b: torch.Tensor, *, fn: str) -> torch.Tensor:
    _same(a, b)
    return BINARY[fn](a, b)


def unary(a: torch.Tensor, *, fn: str) -> torch.Tensor:
    return UNARY[fn](a)


def scalar(a: torch.Tensor, *, fn: str, value: Any, reverse: bool) -> torch.Tensor:
    op = SCALAR[fn]
    if fn in ("maximum", "minimum"):
        return op(a, value)
    return op(value, a) if reverse else op(a, value)


def where(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _same(c, a, b)
    return torch.where(c, a, b)


def reduce(a: torch.Tensor, *, fn: str, dims: Sequence[int], keepdim: bool) -> torch.Tensor:
    if not dims:  # NOTE: torch reads an empty dim list as "all dims"; ours means "none".
        return a.clone() if fn != "mean" else a.to(torch.promote_types(a.dtype, torch.float32)).clone()
    return REDUCE[fn](a, dim=tuple(dims), keepdim=keepdim)


def softmax(a: torch.Tensor, *, dim: int, log: bool) -> torch.Tensor:
    return torch.log_softmax(a, dim) if log else torch.softmax(a, dim)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != b.dim() or a.dim() < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise PrimShapeError(f"matmul prim got {tuple(a.shape)} @ {tuple(b.shape)}")
    return torch.matmul(a, b)


def reshape(a: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return a.reshape(tuple(size))


def permute(a: torch.Tensor, *, dims: Sequence[int]) -> torch.Tensor:
    return a.permute(tuple(dims))


def cat(*ts: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cat(ts, dim)


def slice_(a: torch.Tensor, start: int, end: int, *, dim: int, step: int) -> torch.Tensor:
    index = (slice(None),) * dim + (slice(start, end, step),)
    return a[index]


def select(a: torch.Tensor, index: int, *, dim: int) -> torch.Tensor:
    return a.select(dim, index)


def conv2d(x: torch.Tensor, w: torch.Tensor, size: Sequence[int], *, stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor:
    out = F.conv2d(x, w, None, tuple(stride), tuple(padding), tuple(dilation), groups)
    if tuple(out.shape) != tuple(size):
        raise PrimShapeError(f"conv2d prim produced {tuple(out.shape)}, the trace said {tuple(size)}")
    return out


def layer_norm(x: torch.Tensor, *, ndim: int, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[x.dim() - ndim:], eps=eps)


def embedding(idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.embedding(idx, w)


def expand(a: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return a.expand(tuple(size))


def to_bool(a: torch.Tensor) -> bool:
    return bool(a)
