"""Pause Python's cyclic garbage collector while a stage allocates many short-lived objects.

Tracing and simplifying build millions of small acyclic objects; the collector's full passes
over them cost more than the work itself on large inputs. The previous state is restored.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
