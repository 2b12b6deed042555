"""Warm-up: example calls (`Example`) served before traffic arrives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import torch
from guardsolve.jit.served import Served
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


@dataclass(frozen=True)
class Example:
    """A tensor argument of `GuardedFunction.warm_up` given by its shape: filled with zeros for
    an integer or bool dtype (valid indices), else with normal values from a fixed seed.

    >>> Example((2, 3)).make().shape, Example((4,), torch.int64).make().tolist()
    (torch.Size([2, 3]), [0, 0, 0, 0])
    """

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None
    device: str = "cpu"

    def make(self) -> torch.Tensor:
        dtype = self.dtype or torch.get_default_dtype()
        if dtype.is_floating_point or dtype.is_complex:
            g = torch.Generator(device=self.device).manual_seed(0)
            return torch.randn(tuple(self.shape), dtype=dtype, device=self.device, generator=g)
        return torch.zeros(tuple(self.shape), dtype=dtype, device=self.device)


def _example_call(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`warm_up`'s call as (args, kwargs), each `Example` made into a tensor."""
    def made(v: Any) -> Any:
        return v.make() if isinstance(v, Example) else v

    if isinstance(call, dict):
        return (), {k: made(v) for k, v in call.items()}
    if isinstance(call, (tuple, list)):
        return tuple(made(v) for v in call), {}
    return (made(call),), {}


def warm_up(gf: GuardedFunction, *calls: Any) -> tuple[Served, ...]:
    out = []
    for call in calls:
        args, kwargs = _example_call(call)
        with gf._lock:  # NOTE: waits for a trace of another thread: never eager for that
            gf(*args, **kwargs)
        last = gf.last_call
        assert last is not None
        out.append(last)
    return tuple(out)
