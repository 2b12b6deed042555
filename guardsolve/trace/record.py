"""The recording context of a trace: the graph being built and where user code called from.

A `Recorder` replaces the notebook's global `CURRENT_GRAPH` and fresh-name counters: every
guarded value carries the recorder it was made by, so interleaved, nested and threaded traces
never share state.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
from typing import Any

from guardsolve.errors import TraceError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import SourceLoc
from guardsolve.ir.ops import Op

# NOTE: the whole guardsolve package (this file lies in guardsolve/trace/), not just this folder.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_PREFIXES = (_PACKAGE_DIR + os.sep,)


@functools.lru_cache(maxsize=4096)
def _is_library_file(filename: str) -> bool:
    """Is this a frame of guardsolve or torch (not user code)? A pure function, memoized."""
    # NOTE: torch's own Python frames (e.g. torch/overrides.py) sit between user code and us.
    if filename.startswith("<frozen"):
        return True
    if not filename.startswith("<"):
        filename = os.path.abspath(filename)
    return filename.startswith(_SKIP_PREFIXES) or f"{os.sep}torch{os.sep}" in filename


def user_location() -> SourceLoc | None:
    """The innermost stack frame outside guardsolve and torch."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library_file(filename):
            line = frame.f_lineno
            code = linecache.getline(filename, line).strip()
            return SourceLoc(filename, line, frame.f_code.co_name, code)
        frame = frame.f_back  # type: ignore[assignment]
    return None


class Recorder:
    """Owns the graph of one trace; guarded values call `record` on their own recorder.

    `constants` holds the tensors the trace uses that are not inputs (module parameters and
    buffers, captured tensors, scalars lifted for `where`); `names` pre-names some of them.
    `value_guards` opts in to recording bailouts on tensor data.
    """

    def __init__(self, names: dict[int, str] | None = None, value_guards: bool = False) -> None:
        self.graph = Graph()
        self.constants: dict[str, Any] = {}
        self.names = dict(names or {})
        self.value_guards = value_guards
        self._lifted: dict[int, Any] = {}
        self._loc: SourceLoc | None = None  # the user's line for the torch call in progress

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one torch-level call (a rule) with the user's source line found once for all
        the nodes it records, instead of walking the stack per node."""
        if self._loc is not None:  # NOTE: nested: the outer call fixed the line
            return fn(*args, **kwargs)
        self._loc = user_location()
        try:
            return fn(*args, **kwargs)
        finally:
            self._loc = None

    def constant_name(self, t: Any) -> str:
        """A fresh identifier for a constant tensor (its module path when known)."""
        base = self.names.get(id(t), "const")
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
        if not base.isidentifier():
            base = "p_" + base
        name = base if base != "const" and base not in self.graph._used else self.graph.fresh(base + ("" if base == "const" else "_"))
        return name

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
        loc = self._loc if self._loc is not None else user_location()
        return self.graph.emit(op, names, meta={"loc": loc}, **params)
