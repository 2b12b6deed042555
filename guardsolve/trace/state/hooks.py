"""The patches a recorder holds while it records: `nn.Module.__getattribute__` / `__getattr__`
that record each attribute read, and a `torch.Tensor.numpy` that refuses while this thread
records. Held through `guardsolve.patching` (one count for every recorder in every thread;
the last one out restores PyTorch's: `nn.Module` inherits `__getattribute__` again)."""

from __future__ import annotations

import sys
from typing import Any, Callable, ContextManager

import torch

from guardsolve.patching import Patch, patched
from guardsolve.trace.state.active import ACTIVE_RECORDER


def _recording_getattribute(original: Any) -> Callable[[Any, str], Any]:
    """`nn.Module.__getattribute__` that tells the active recorder of each attribute read."""
    def __getattribute__(m: Any, name: str) -> Any:
        v = object.__getattribute__(m, name)
        if name[:2] != "__":
            rec = ACTIVE_RECORDER.get()
            if rec is not None:
                rec.module_attr(m, name, v)
        elif name == "__dict__":
            rec = ACTIVE_RECORDER.get()
            if rec is not None:
                rec.module_dict(m, sys._getframe(1).f_code)
        return v

    return __getattribute__


def _recording_getattr(original: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """`nn.Module.__getattr__` (parameters, buffers, submodules) that tells the active recorder."""
    def __getattr__(m: Any, name: str) -> Any:
        v = original(m, name)
        rec = ACTIVE_RECORDER.get()
        if rec is not None:
            rec.module_attr(m, name, v)
        return v

    return __getattr__


def _refusing_numpy(original: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.Tensor.numpy`, refused while this thread records."""
    def numpy(t: Any, *args: Any, **kwargs: Any) -> Any:
        # NOTE: a read of the tensor's values no aten op records and no guard checks (a weight
        # made an array and back a tensor was a constant of the trace, and its memory freed:
        # garbage): the call runs eagerly
        if ACTIVE_RECORDER.get() is not None:
            from guardsolve.errors import DataDependentError

            raise DataDependentError("numpy() of a tensor reads its values, which no guard checks")
        return original(t, *args, **kwargs)

    return numpy


def module_hooks() -> ContextManager[None]:
    """Hold the recording patches for a block (installed by the first holder, undone by the last).

        >>> from guardsolve.patching import active
        >>> with module_hooks():
        ...     inside = active(torch.nn.Module, "__getattribute__")
        >>> inside, "__getattribute__" in torch.nn.Module.__dict__
        (1, False)
    """
    return patched(Patch(torch.nn.Module, "__getattribute__", _recording_getattribute),
                   Patch(torch.nn.Module, "__getattr__", _recording_getattr),
                   Patch(torch.Tensor, "numpy", _refusing_numpy))
