"""What the cache asks of a backend (`Backend`): how an entry runs, is compiled, kept and loaded.

`guarded(fn, backend=NAME)` holds one backend object (`GuardedFunction.engine`); the hit and
miss paths ask it, never its name, what to do. Two implement it: `ReplayBackend` (an entry
runs its trace's replay, op by op) and `InductorBackend` (an entry runs compiled variants,
each behind its own proven check, kept across processes with `cache_dir`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction
    from guardsolve.jit.entry import Entry
    from guardsolve.jit.misses import Miss
    from guardsolve.trace.record import Trace


class Backend(Protocol):
    """One way of running a guarded function's entries."""

    name: str
    keeps_entries: bool  # entries can be saved to and loaded from a `cache_dir`
    trains: bool  # calls that need autograd can be served compiled (training variants)

    def replay(self, t: Trace) -> Callable[..., Any]:
        """The runner an entry of trace `t` keeps for its own calls."""

    def hit(self, gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...], state: Any) -> Any:
        """Serve the call by entry `e` where it accepts; else the hit path's MISS, EAGER or DIVERGED."""

    def accepts(self, e: Entry, values: tuple[Any, ...]) -> bool:
        """Whether `e` serves these inputs by its checks (state aside), without running it."""

    def prepare(self, gf: GuardedFunction, entry: Entry, values: tuple[Any, ...]) -> bool:
        """Make a new entry servable (compile it); True where this call's output is the trace's own run."""

    def first_runner(self, entry: Entry) -> Callable[..., Any] | None:
        """What serves a new entry's first call where it has no variant (None: its trace's output)."""

    def another_variant(self, gf: GuardedFunction, record: Miss, names: tuple[str, ...],
                        values: tuple[Any, ...]) -> tuple[Any] | str | None:
        """A miss that an existing trace fits: `(output,)` served by a new variant of it, a reason
        to run eagerly, or None (no trace fits: trace anew)."""

    def over_limit(self, gf: GuardedFunction) -> str | None:
        """Why no more traces are made for compiling (a limit reached), or None."""

    def refuses_grad(self, grad: str) -> str | None:
        """The reason a call in grad mode whose `grad` requires grad runs eagerly without a warning, or None."""

    def load(self, gf: GuardedFunction) -> None:
        """Load the entries kept in `gf.cache_dir`."""
