"""The recording context of a trace: the graph being built and where user code called from.

A `Recorder` replaces the notebook's global `CURRENT_GRAPH` and fresh-name counters: every
guarded value carries the recorder it was made by, so interleaved, nested and threaded traces
never share state.
"""

from __future__ import annotations

import linecache
import os
import sys
from typing import Any

from guardsolve.errors import TraceError
from guardsolve.ir import Graph, SourceLoc
from guardsolve.ops import Op

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_PREFIXES = (_PACKAGE_DIR + os.sep,)


def _is_library_file(filename: str) -> bool:
    # NOTE: torch's own Python frames (e.g. torch/overrides.py) sit between user code and us.
    return filename.startswith(_SKIP_PREFIXES) or f"{os.sep}torch{os.sep}" in filename or filename.startswith("<frozen")


def user_location() -> SourceLoc | None:
    """The innermost stack frame outside guardsolve and torch."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library_file(os.path.abspath(filename) if not filename.startswith("<") else filename):
            line = frame.f_lineno
            code = linecache.getline(filename, line).strip()
            return SourceLoc(filename, line, frame.f_code.co_name, code)
        frame = frame.f_back  # type: ignore[assignment]
    return None


class Recorder:
    """Owns the graph of one trace; guarded values call `record` on their own recorder."""

    def __init__(self) -> None:
        self.graph = Graph()

    def record(self, op: Op, inputs: tuple[Any, ...] = (), **params: Any) -> Any:
        """Append a node whose inputs are guarded values of this recorder; return its name
        (None for a bailout)."""
        names = []
        for v in inputs:
            rec = getattr(v, "rec", None)
            if rec is not self:
                raise TraceError(
                    f"{op}: input {v!r} belongs to a different trace; values cannot cross traces")
            names.append(v.name)
        return self.graph.emit(op, names, meta={"loc": user_location()}, **params)
