"""`guarded(fn)`: a cache of traces keyed by their minimal guards (why guards exist).

On a call, each entry's compiled check runs in order; the first that accepts the inputs runs
its compiled trace. A miss traces again, simplifies, and adds an entry; `cache_info()` says
why each miss missed: which guard of which entry failed, with the values and the source line.

>>> import torch
>>> @guarded
... def add(a, b):
...     return a + b
>>> _ = add(torch.ones(4), torch.ones(4)); _ = add(torch.ones(5), torch.ones(5)); _ = add(torch.ones(4), torch.ones(1))
>>> info = add.cache_info(); (info.entries, info.hits, info.misses)
(2, 1, 2)
>>> print(info.miss_reasons[-1].split(" — ")[0])
entry 0: a0 == b0 failed (a0=4, b0=1)
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from guardsolve.errors import GuardFailure
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.replay import compile_replay
from guardsolve.trace.tracer import Trace, trace


@dataclass
class Entry:
    """One cached trace, its minimal guards and its compiled replay."""

    trace: Trace
    guards: GuardSet
    run: Callable[..., Any]
    hits: int = 0


@dataclass(frozen=True)
class CacheInfo:
    entries: int
    hits: int
    misses: int
    eager_calls: int
    evictions: int
    miss_reasons: tuple[str, ...]


@dataclass
class _Stats:
    hits: int = 0
    misses: int = 0
    eager_calls: int = 0
    evictions: int = 0
    reasons: list[str] = field(default_factory=list)


class GuardedFunction:
    """A function whose traces are reused exactly when their minimal guards accept the inputs."""

    def __init__(self, fn: Callable[..., Any], max_entries: int = 8, evict: bool = False,
                 value_guards: bool = False, timeout_ms: int = 5000):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_entries = max_entries
        self.evict = evict
        self.value_guards = value_guards
        self.timeout_ms = timeout_ms
        self.entries: list[Entry] = []
        self._stats = _Stats()
        self._warned = False

    def __call__(self, *args: Any) -> Any:
        for i, e in enumerate(self.entries):
            if e.guards.check(*args):
                try:
                    out = e.run(*args)
                except GuardFailure as failure:  # a value bailout: data changed the path
                    self._stats.reasons.append(f"entry {i}: {failure}")
                    continue
                e.hits += 1
                self._stats.hits += 1
                if self.evict and i:
                    self.entries.insert(0, self.entries.pop(i))  # most recently used first
                return out
        self._stats.misses += 1
        self._stats.reasons += [self._why(i, e, args) for i, e in enumerate(self.entries)] or ["no entries yet"]
        if len(self.entries) >= self.max_entries:
            if not self.evict:
                if not self._warned:
                    warnings.warn(f"{getattr(self.fn, '__name__', 'function')}: guarded cache is full "
                                  f"({self.max_entries} entries); running eagerly", stacklevel=2)
                    self._warned = True
                self._stats.eager_calls += 1
                return self.fn(*args)
            self.entries.pop()
            self._stats.evictions += 1
        t = trace(self.fn, *args, value_guards=self.value_guards)
        gs = simplify(t, timeout_ms=self.timeout_ms)
        entry = Entry(t, gs, compile_replay(t.graph, t.out_spec, t.constants))
        if self.evict:
            self.entries.insert(0, entry)  # most recently used first
        else:
            self.entries.append(entry)
        return t.output

    @staticmethod
    def _why(i: int, e: Entry, args: tuple[Any, ...]) -> str:
        reason = e.guards.explain_failure(*args)
        return f"entry {i}: {reason}"

    def cache_info(self) -> CacheInfo:
        s = self._stats
        return CacheInfo(len(self.entries), s.hits, s.misses, s.eager_calls, s.evictions, tuple(s.reasons))

    def cache_clear(self) -> None:
        self.entries.clear()
        self._stats = _Stats()


def guarded(fn: Callable[..., Any] | None = None, *, max_entries: int = 8, evict: bool = False,
            value_guards: bool = False, timeout_ms: int = 5000) -> Any:
    """Decorator: cache traces of `fn` and reuse one whenever its minimal guards accept the inputs.

    Past `max_entries` a miss runs `fn` eagerly with a warning, or, with `evict=True`, drops the
    least recently used entry.
    """
    def wrap(f: Callable[..., Any]) -> GuardedFunction:
        return GuardedFunction(f, max_entries, evict, value_guards, timeout_ms)
    return wrap(fn) if fn is not None else wrap

