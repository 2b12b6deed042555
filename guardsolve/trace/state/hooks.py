"""The patch of `nn.Module.__getattribute__` / `__getattr__` and of `torch.Tensor.numpy`, installed while a
recorder is active."""

from __future__ import annotations

import sys
import threading
from typing import Any
import torch
from guardsolve.trace.state.active import ACTIVE_RECORDER


class ModuleHooks:
    """`nn.Module.__getattribute__` / `__getattr__` that record, and a `torch.Tensor.numpy` that
    refuses while this thread records, installed while any recorder is active in any thread (a
    count under a lock; the last one out restores PyTorch's)."""

    _lock = threading.Lock()
    _active = [0]  # NOTE: mirrors whether torch's class is patched; mutated only under the lock
    _saved: list[Any] = []
    _numpy: list[Any] = []  # NOTE: `torch.Tensor.numpy` as PyTorch defines it, while it is replaced

    def __enter__(self) -> None:
        with self._lock:
            if self._active[0] == 0:
                cls = torch.nn.Module
                type(self)._saved = [cls.__dict__.get("__getattribute__"), cls.__dict__["__getattr__"]]
                orig_getattr = cls.__dict__["__getattr__"]

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

                def __getattr__(m: Any, name: str) -> Any:
                    v = orig_getattr(m, name)
                    rec = ACTIVE_RECORDER.get()
                    if rec is not None:
                        rec.module_attr(m, name, v)
                    return v

                cls.__getattribute__ = __getattribute__  # type: ignore[method-assign]
                cls.__getattr__ = __getattr__  # type: ignore[method-assign]
                orig_numpy = torch.Tensor.numpy
                type(self)._numpy = [orig_numpy]

                def numpy(t: Any, *args: Any, **kwargs: Any) -> Any:
                    # NOTE: a read of the tensor's values no aten op records and no guard checks
                    # (a weight made an array and back a tensor was a constant of the trace, and
                    # its memory freed: garbage): the call runs eagerly
                    if ACTIVE_RECORDER.get() is not None:
                        from guardsolve.errors import DataDependentError

                        raise DataDependentError("numpy() of a tensor reads its values, which no guard checks")
                    return orig_numpy(t, *args, **kwargs)

                torch.Tensor.numpy = numpy  # type: ignore[method-assign]
            self._active[0] += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active[0] -= 1
            if self._active[0] == 0:
                cls = torch.nn.Module
                getattribute, getattr_ = self._saved
                if getattribute is None:
                    del cls.__getattribute__
                else:
                    cls.__getattribute__ = getattribute  # type: ignore[method-assign]
                cls.__getattr__ = getattr_  # type: ignore[method-assign]
                torch.Tensor.numpy = self._numpy[0]  # type: ignore[method-assign]
