"""Whether a call's tensors share memory, as the trace assumed they do not."""

from __future__ import annotations

from typing import Any, Callable, Sequence
import torch
from guardsolve.trace.static import StaticGuard
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


def disjoint(*values: Any) -> bool:
    """Whether no two of the tensor arguments share storage (`f(x, x)`, `f(x[1:], x[:-1])`).

    >>> x = torch.ones(4)
    >>> disjoint(x, torch.ones(4), 2), disjoint(x, x), disjoint(x[1:], x[:-1])
    (True, False, False)
    """
    ptrs = [v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)]
    return len(set(ptrs)) == len(ptrs)


def disjoint_guard(names: Sequence[str], written: Callable[[], list[torch.Tensor]]) -> StaticGuard:
    """The tensor arguments `names` share no storage, with each other nor with the state the
    trace writes (`written()`: a buffer updated in place): a trace that writes one of them
    computed what the others hold from values the write does not change (a compiled entry reads
    each as its own buffer)."""
    args = ", ".join(names)
    return StaticGuard(f"tensor arguments {args} share no memory (with each other, nor with the state the function "
                       "writes)", f"_s_disjoint({args}, *_s_written())", f"_s_disjoint({args}, *_s_written())",
                       (("_s_disjoint", disjoint), ("_s_written", written)))


def aliased(gf: GuardedFunction, values: tuple[Any, ...]) -> str | None:
    """Why a call whose tensor arguments share memory runs eagerly (the function writes its
    arguments: a trace, and what is compiled from it, reads each as a buffer of its own), or None."""
    if not gf._writes_args or disjoint(*values, *gf._written_state):
        return None
    return "tensor arguments share memory and the function writes its arguments"
