"""Progress of the slow steps of a miss (a trace and its exploration, an Inductor compile), said
where a user looks: an INFO record on the `guardsolve` logger when a step starts and when it
ends, and, where stderr is a terminal, one line on stderr for a step still running after a
second (rewritten in place with its time when it ends). `GUARDSOLVE_PROGRESS=0` silences the
terminal line; the logger is configured as any logger is.

>>> import logging, io
>>> stream = io.StringIO()
>>> handler = logging.StreamHandler(stream)
>>> logging.getLogger("guardsolve").addHandler(handler); logging.getLogger("guardsolve").setLevel(logging.INFO)
>>> with step("add: tracing at a=[4]"):
...     pass
>>> print(stream.getvalue().splitlines()[0])
add: tracing at a=[4] ...
>>> logging.getLogger("guardsolve").removeHandler(handler)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any, Iterator

import torch

LOG = logging.getLogger("guardsolve")
SHOW_AFTER_S = 1.0  # NOTE: a step shorter than this prints nothing on the terminal


def _interactive() -> bool:
    if os.environ.get("GUARDSOLVE_PROGRESS", "") == "0":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Log `what` at INFO as it starts and ends (with its seconds, or the error that ended it);
    on a terminal, show it once it has run for `SHOW_AFTER_S`."""
    LOG.info("%s ...", what)
    start = time.perf_counter()
    shown = threading.Event()
    timer: threading.Timer | None = None
    if _interactive():
        def show() -> None:
            shown.set()
            _write(f"guardsolve: {what} ...")

        timer = threading.Timer(SHOW_AFTER_S, show)
        timer.daemon = True
        timer.start()
    outcome = "done"
    try:
        yield
    except BaseException as e:
        outcome = f"stopped by {type(e).__name__}"
        raise
    finally:
        seconds = time.perf_counter() - start
        if timer is not None:
            timer.cancel()
        LOG.info("%s: %s in %.2f s", what, outcome, seconds)
        if shown.is_set():
            _write(f"\rguardsolve: {what}: {outcome} in {seconds:.1f} s\033[K\n")


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass  # NOTE: a closed or missing stderr: the logger still has the record


def describe(names: tuple[str, ...], values: tuple[Any, ...], most: int = 4) -> str:
    """The inputs of a call in a few words, for a progress line.

    >>> import torch
    >>> describe(("x", "ids", "n"), (torch.zeros(2, 3), torch.zeros(2, 5, dtype=torch.int64), 4))
    'x=[2, 3], ids=[2, 5] int64, n=4'
    """
    parts = []
    for n, v in zip(names[:most], values[:most]):
        shape = getattr(v, "shape", None)
        dtype = getattr(v, "dtype", None)
        kind = "" if dtype is None or dtype == torch.get_default_dtype() else f" {str(dtype).removeprefix('torch.')}"
        parts.append(f"{n}={list(shape)}{kind}" if shape is not None else f"{n}={v!r}"[:40])
    if len(names) > most:
        parts.append(f"... {len(names) - most} more")
    return ", ".join(parts)


__all__ = ["LOG", "describe", "step"]
