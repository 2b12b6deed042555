"""The recorder active in this thread (a context variable), and what asks it: `is_state`, `paused`."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator
import torch


ACTIVE_RECORDER: contextvars.ContextVar["StateRecorder | None"] = contextvars.ContextVar("guardsolve_state_recorder",
                                                                             default=None)


def is_state(t: torch.Tensor) -> bool:
    """Was `t` read as state by the recording active in this thread?"""
    rec = ACTIVE_RECORDER.get()
    return rec is not None and id(t) in rec.tensors


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No recording in this block (guardsolve's own walks over a module: not the program's reads)."""
    token = ACTIVE_RECORDER.set(None)
    try:
        yield
    finally:
        ACTIVE_RECORDER.reset(token)
