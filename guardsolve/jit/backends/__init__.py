"""The backends an entry runs on, by the name `guarded(fn, backend=NAME)` takes."""

from __future__ import annotations

from guardsolve.jit.backends.inductor import InductorBackend
from guardsolve.jit.backends.protocol import Backend
from guardsolve.jit.backends.replay import ReplayBackend

BACKENDS: dict[str, type[Backend]] = {"replay": ReplayBackend, "inductor": InductorBackend}

__all__ = ["BACKENDS", "Backend", "InductorBackend", "ReplayBackend"]
