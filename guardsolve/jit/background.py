"""Calls that missed while another thread traced, traced and compiled in the background."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator
import torch
from guardsolve.errors import first_line
from guardsolve.jit.progress import describe
from guardsolve.jit.hit import serves
from guardsolve.jit.miss import miss_call, signature_of
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


_MAX_PENDING = 8


def _copied(v: Any) -> Any:
    """A copy of a call's argument for the background (tensors cloned with their strides,
    detached with their requires_grad; containers copied), or None where a tensor's copy would
    not have its strides."""
    if isinstance(v, torch.Tensor):
        if v.storage_offset() != 0:
            return None  # NOTE: a view's offset is not kept by clone; the guards may read it
        c = v.detach().clone()
        if c.stride() != v.stride():
            return None
        return c.requires_grad_(v.requires_grad) if v.requires_grad else c
    if isinstance(v, (tuple, list)):
        items = [_copied(x) for x in v]
        return None if any(x is None and y is not None for x, y in zip(items, v)) else type(v)(items)
    return v


@contextlib.contextmanager
def _modes(grad: bool, inference: bool, cast: tuple[tuple[str, torch.dtype], ...]) -> Iterator[None]:
    """The thread-local modes a queued call ran in, in the background's thread."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode() if inference else torch.set_grad_enabled(grad))
        for device, dtype in cast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        yield


def wait_background(gf: GuardedFunction, timeout: float | None = None) -> bool:
    with gf._lock_pending:
        worker = gf._worker
    if worker is not None:
        worker.join(timeout)
    with gf._lock_pending:
        return not gf._pending and gf._worker is None


def queue_call(gf: GuardedFunction, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
           values: tuple[Any, ...]) -> None:
    """Keep a copy of a call that ran eagerly while another thread traced, and have the
    background trace it once the lock is free (at most `_MAX_PENDING` at a time, one per
    signature: the guards read only shapes, strides, dtypes, flags and pinned values)."""
    key = signature_of(gf, names, values)
    if key is None:
        return
    modes = key[1]
    with gf._lock_pending:
        if key in gf._pending or len(gf._pending) >= _MAX_PENDING:
            return
    copy = _copied(args), {k: _copied(v) for k, v in kwargs.items()}
    if copy[0] is None or None in copy[1].values():
        return  # NOTE: a copy would not have the same strides: left to the next call
    with gf._lock_pending:
        if key in gf._pending or len(gf._pending) >= _MAX_PENDING:
            return
        gf._pending[key] = (copy[0], copy[1], modes)  # type: ignore[assignment]
        if gf._worker is None:
            gf._worker = threading.Thread(target=work, args=(gf,), name=f"guardsolve:{gf._name()}", daemon=True)
            gf._worker.start()


def work(gf: GuardedFunction) -> None:
    """The background: trace each queued call that no entry serves yet, one at a time,
    holding the tracing lock (hits go on; other misses run eagerly and queue)."""
    while True:
        with gf._lock_pending:
            if not gf._pending:
                gf._worker = None
                return
            key = next(iter(gf._pending))
            args, kwargs, modes = gf._pending[key]
        try:
            with gf._lock, _modes(*modes):
                names, values = gf._bind(args, kwargs)
                full = len(gf._entries) >= gf.max_entries and not gf.evict
                if not (full or gf._always_eager or any(serves(gf, e, names, values) for e in gf._entries)):
                    miss_call(gf, args, kwargs, names, values, (), background=True)
                    gf._log.append(f"background: traced a call that ran eagerly while another thread "
                                     f"traced ({describe(names, values)}): {gf.last_call}")
        except BaseException as e:  # NOTE: fn's own error, eager's: logged, nothing published
            gf._log.append(f"background: {type(e).__name__}: {first_line(e)}")
        finally:
            with gf._lock_pending:
                gf._pending.pop(key, None)
