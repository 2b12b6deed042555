"""The replay backend (`backend="replay"`, the default): an entry runs its trace's compiled replay,
straight-line Python over torch ops (`trace/replay.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from guardsolve.jit.hit import serve_replay
from guardsolve.jit.make_entry import writes_before_data
from guardsolve.trace.replay import compile_replay

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction
    from guardsolve.jit.entry import Entry
    from guardsolve.jit.misses import Miss
    from guardsolve.trace.record import Trace


@dataclass(frozen=True)
class ReplayBackend:
    """Entries run their traces' replays; nothing is compiled, kept or trained.

    >>> b = ReplayBackend()
    >>> b.name, b.keeps_entries, b.trains, b.refuses_grad("input 'x'")
    ('replay', False, False, None)
    """

    name: str = "replay"
    keeps_entries: bool = False
    trains: bool = False

    def replay(self, t: Trace) -> Callable[..., Any]:
        return compile_replay(t.graph, t.out_spec, t.constants)

    def hit(self, gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...], state: Any) -> Any:
        return serve_replay(gf, e, names, values, state)

    def accepts(self, e: Entry, values: tuple[Any, ...]) -> bool:
        return bool(e.check(*values))

    def prepare(self, gf: GuardedFunction, entry: Entry, values: tuple[Any, ...]) -> bool:
        # NOTE: a replay that fails a decision on data after writing state would make the
        # writes twice (its own, then the trace of the other path): later calls run
        # eagerly; this call's output is its trace's own run, its writes made once
        entry.autograd = writes_before_data(entry.trace)
        return entry.autograd is not None

    def first_runner(self, entry: Entry) -> Callable[..., Any] | None:
        return entry.run

    def another_variant(self, gf: GuardedFunction, record: Miss, names: tuple[str, ...],
                        values: tuple[Any, ...]) -> tuple[Any] | str | None:
        return None

    def over_limit(self, gf: GuardedFunction) -> str | None:
        return None

    def refuses_grad(self, grad: str) -> str | None:
        return None

    def load(self, gf: GuardedFunction) -> None:
        return None
