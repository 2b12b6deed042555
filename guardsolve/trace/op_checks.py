"""One recorded torch call (`Call`), and an eager result checked against its meta: layout,
disagreement, a small constant's checksum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import zlib
import torch
from torch.utils._python_dispatch import _disable_current_modes
from guardsolve.ir.aten import qualified_name


@dataclass(eq=False)
class Call:
    """One torch call of a trace: the op nodes it recorded (`nodes` of them, the first at index
    `first` of the trace), the user line, the decisions its shape rule made (`asked`: guard-graph
    name, answer), and, when it recorded one node through one rule, that rule's meta inputs
    (`flat`, unflattened by `spec`; `names`: the trace's name of each traced one) and outputs,
    and which outputs eager's kernel handed back as an input (else None: a composite decomposed
    over traced tensors, whose parts are calls of their own)."""

    func: Any
    first: int
    nodes: int
    loc: Any
    asked: list[tuple[str, bool]]
    flat: list[Any] | None = None
    spec: Any = None
    names: list[str | None] | None = None
    out: Any = None
    aliased: list[bool] | None = None  # each tensor output: eager handed an input back as it


def dtype_name(dtype: torch.dtype) -> str:
    """`float32` for `torch.float32`."""
    return str(dtype).removeprefix("torch.")


def _hints(sizes: Any) -> tuple[int, ...]:
    return tuple(s.node.hint if isinstance(s, torch.SymInt) else s for s in sizes)


def laid_out_as(real: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """`real`, copied into the strides the traced tensor claims where they differ.

    NOTE: PyTorch's C++ composites decide from the wrapper's strides (`indices.contiguous()`
    is a no-op on a tensor that says it is contiguous) and then run kernels on the eager
    tensor; `_embedding_bag_forward_only` on strided indices computes garbage. A traced input is
    contiguous (its meta tensor is), and an output has the strides PyTorch's shape rule gives,
    so the eager tensor is made to agree. A copy no longer aliases the original: an in-place
    update of a non-contiguous input changes only the trace's copy.
    """
    if real.dim() != meta.dim() or tuple(real.shape) != _hints(meta.shape) or real.numel() <= 1:
        return real
    strides = _hints(meta.stride())
    if all(st == rs or sz == 1 for st, rs, sz in zip(strides, real.stride(), real.shape)):
        return real
    with _disable_current_modes():
        return torch.empty_strided(real.shape, strides, dtype=real.dtype, device=real.device).copy_(real)


def disagreement(func: Any, real: torch.Tensor, meta: Any) -> str | None:
    """How PyTorch's shape rule and eager disagree on an output's sizes and dtype, or None."""
    if not isinstance(meta, torch.Tensor):
        return f"PyTorch's shape rule returns {type(meta).__name__} where eager returns a tensor"
    hints = _hints(meta.shape)
    if hints != tuple(real.shape) or meta.dtype != real.dtype:
        return (f"{qualified_name(func)}'s shape rule gives {list(hints)} {meta.dtype}, "
                f"eager {list(real.shape)} {real.dtype}")
    return None


SMALL_CONSTANT = 64  # elements: a captured tensor up to this size is compared by value across traces


def value_checksum(t: torch.Tensor) -> int | None:
    """A checksum of a small dense CPU tensor's values (None for a larger or other one).

    >>> value_checksum(torch.tensor(2)) == value_checksum(torch.tensor(2)), value_checksum(torch.tensor(2)) == value_checksum(torch.tensor(3))
    (True, False)
    """
    if t.numel() > SMALL_CONSTANT or t.device.type != "cpu" or t.layout is not torch.strided or t.is_quantized:
        return None
    try:
        data = t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
    except (RuntimeError, TypeError):  # NOTE: a dtype numpy lacks, a tensor subclass
        return None
    return zlib.crc32(data + repr((tuple(t.shape), t.dtype)).encode())
