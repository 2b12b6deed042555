"""How a call was served (`Served`, `last_call()`), and the answers the hit path gives besides a result."""

from __future__ import annotations

from dataclasses import dataclass
from guardsolve.jit.misses import Miss
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


@dataclass(frozen=True)
class Served:
    """How one call was served (`GuardedFunction.last_call`): `how` is "compiled" (an Inductor
    variant ran), "replayed" (the trace's replay ran), "traced" (a miss: the call's own traced
    run gave the output, and the entry was made) or "eager" (fn ran eagerly); `entry` and
    `variant` index `entries` and its `variants` where one served; `why` says it in words.

    >>> print(Served("eager", None, None, "another thread is tracing this function"))
    eager: another thread is tracing this function
    """

    how: str
    entry: int | None
    variant: int | None
    why: str

    def __str__(self) -> str:
        return f"{self.how}: {self.why}"


MISS = object()


DIVERGED = object()  # NOTE: a miss where the entry's segments ran and the data took another path


# NOTE: how a call was served, as `_tls.last` records it (`last_call` words it)
K_HIT, K_EAGER, K_TRACED, K_VARIANT = "hit", "eager", "traced", "variant"


EAGER = object()  # NOTE: `_try`'s answer where the entry's trace fits but Inductor cannot serve it


def last_call(gf: GuardedFunction) -> Served | None:
    last = getattr(gf._tls, "last", None)
    if last is None:
        return None
    kind, e, v, extra = last
    entries = gf._entries
    i = entries.index(e) if e is not None and e in entries else None
    j = e.variants.index(v) if v is not None and e is not None and v in e.variants else None
    name = f"entry {i}" if i is not None else "an evicted entry"
    if kind is K_HIT:
        return (Served("compiled", i, j, f"{name}, variant {j}: its check holds") if v is not None
                else Served("replayed", i, None, f"{name}'s guards hold"))
    if kind is K_EAGER:
        return Served("eager", i, j, extra)
    first = "; ".join(extra.reasons()[:2]) if isinstance(extra, Miss) else str(extra)
    if kind is K_VARIANT:
        return Served("compiled", i, j, f"made variant {j} of {name} now: {first}")
    made = f"made {name}" + (f" and compiled its variant {j}" if j is not None else "") if e is not None else "no entry"
    if e is not None and e.uncompiled is not None:
        made += f" (Inductor cannot compile it: its calls run eagerly: {e.uncompiled[:200]})"
    return Served("traced", i, j, f"{made}; missed because: {first}" if isinstance(extra, Miss) else first)
