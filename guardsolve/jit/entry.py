"""An entry of `guarded()`'s cache: one trace, its minimal guards and how it runs (`Entry`), and
the counts `cache_info()` reports (`CacheInfo`).
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable
from guardsolve.jit.counter import Counter as _Counter
from guardsolve.solve.guardset import GuardSet
from guardsolve.trace.state import StateCheck
from guardsolve.trace.static import StaticGuard
from guardsolve.trace.record import Trace


POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(eq=False)
class Entry:
    """One cached trace: its guards (static, then sizes), its compiled replay, and which of the
    bound arguments it traced (`traced`: their positions, None for all)."""

    trace: Trace
    guards: GuardSet
    run: Callable[..., Any]
    names: tuple[str, ...]
    traced: tuple[int, ...] | None
    check: Callable[..., bool] = field(repr=False, default=None)  # type: ignore[assignment]
    last_used: int = 0
    _hits: _Counter = field(default_factory=_Counter, repr=False)
    # NOTE: the Inductor backend's compiled variants (a tuple replaced whole, as the entries
    # are); `uncompiled`: why Inductor cannot serve this trace (its calls then run eagerly);
    # `static`: the static guards every variant's check starts with
    variants: tuple[Any, ...] = ()
    uncompiled: str | None = None
    static: tuple[StaticGuard, ...] = ()
    key: str = ""  # the store's name for this entry (its trace's text, hashed)
    # NOTE: the state the trace read besides its inputs (module attributes, parameters, globals,
    # closure cells), checked after the sizes on every call; its tensors are passed to the
    # replay and the variants (`bind_state`). None: a loaded entry checks its module's tensors only
    state: StateCheck | None = None
    # NOTE: why this entry's calls run eagerly though its guards and state hold (a tensor it
    # reads requires grad under grad mode: a replay would record no autograd history)
    autograd: str | None = None
    const_leaves: tuple[int | None, ...] = ()  # each constant's leaf in `state` (`bind_state`)
    # NOTE: traced in grad mode with a tensor requiring grad: its variants are AOTAutograd's
    # (forward and backward), called with the live parameters
    train: bool = False

    @property
    def hits(self) -> int:
        return self._hits.value

    def count_hit(self) -> None:
        """One more call served by this one (a thread-safe counter)."""
        self._hits.inc()

    def explain(self) -> str:
        """The trace's guards with their lines, then each compiled variant's check: the trace's
        part and what Inductor assumed, named (the replay backend has no variants)."""
        out = []
        if self.trace is not None:
            out += ["the trace's guards:", textwrap.indent(self.guards.explain(), "    ")]
        for i, v in enumerate(self.variants):
            how = "loaded from cache_dir" if v.loaded else f"compiled in {v.compile_s:.2f} s"
            if v.train:
                how = f"a training variant: forward and backward, {how}"
            out += [f"variant {i} ({how}, {v.hits} hits): its check, proven equivalent to the trace's guards "
                    "and the backend's:", textwrap.indent(v.explain(), "    ")]
        if self.uncompiled is not None:
            out.append(f"Inductor cannot compile this trace (its calls run eagerly): {self.uncompiled}")
        if self.state is not None:
            out.append(f"the state it read ({len(self.state)} checks on every call, after the sizes):")
            out += [f"    {line}" for line in _summary(self.state.lines())]
            out += [f"    note: {n}" for n in self.state.notes]
        if self.autograd is not None:
            out.append(f"its calls run eagerly: {self.autograd}")
        return "\n".join(out)


@dataclass(frozen=True)
class CacheInfo:
    entries: int
    hits: int
    misses: int
    eager_calls: int
    evictions: int
    miss_reasons: tuple[str, ...]
    traces: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    variants: tuple[int, ...] = ()  # per entry, its compiled variants (Inductor)
    eager_reasons: tuple[tuple[str, int], ...] = ()  # why calls ran eagerly, with counts
    loaded: int = 0  # variants loaded from `cache_dir`
    load_seconds: float = 0.0  # spent loading them (reading, checking, Inductor's load)
    pending: int = 0  # calls that ran eagerly while another thread traced, queued for the background


def _summary(lines: list[str], most: int = 40) -> list[str]:
    return lines if len(lines) <= most else lines[:most] + [f"... and {len(lines) - most} more (Entry.state.lines())"]


def never(*args: Any, **kwargs: Any) -> bool:
    """A loaded entry has no trace: its trace guards never claim an input (a miss traces anew)."""
    return False


def no_replay(*args: Any) -> Any:
    raise AssertionError("the Inductor backend runs its variants, not a replay")
