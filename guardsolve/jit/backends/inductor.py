"""The Inductor backend: an entry's variants compiled by Inductor, saved to and loaded from `cache_dir`."""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable
from guardsolve.jit.progress import describe, step
from guardsolve.trace.state import reachable_tensors
from guardsolve.jit.aliasing import disjoint
from guardsolve.jit.entry import Entry, never, no_replay
from guardsolve.jit.hit import serve_variants
from guardsolve.jit.served import K_VARIANT
from guardsolve.jit.rebind import bind_state
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction
    from guardsolve.jit.misses import Miss
    from guardsolve.trace.record import Trace


# NOTE: after this many variants of one trace that each pin every size, no more are compiled
_PINNED_VARIANTS = 2


_PIN = re.compile(r"^(\w+) == -?\d+$")


def _pins_every_size(v: Any) -> bool:
    """Whether the variant's check fixes every dim of its sizes to one value (`x0 == 4`, ...)."""
    pinned = {m.group(1) for c in v.guards.constraints if (m := _PIN.match(c.text))}
    return bool(v.guards.dims) and set(v.guards.dims) <= pinned


def compile_entry(gf: GuardedFunction, entry: Entry, values: tuple[Any, ...]) -> Any:
    """A new Inductor variant of `entry`'s trace at these inputs, or None (with
    `entry.uncompiled` saying why)."""
    from guardsolve.jit.inductor import CompileFailure, compile_variant
    from guardsolve.errors import SolverError

    if gf._compiles.value >= gf.max_compiles:
        entry.uncompiled = limit_reason(gf, )  # NOTE: its calls in its guards run eagerly from now on
        return None
    if len(entry.variants) >= _PINNED_VARIANTS and all(_pins_every_size(v) for v in entry.variants):
        # NOTE: Inductor specializes this trace on every size (a GRU's kernels): one compile
        # per shape costs seconds where eager costs the call; the variants made still serve
        # their shapes, other calls run eagerly
        pins = ", ".join(c.text for c in entry.variants[-1].guards.constraints)
        entry.uncompiled = (f"its {len(entry.variants)} compiled variants each pin every size (the last: {pins}); "
                            "no more are compiled for it")
        return None
    traced = values if entry.traced is None else tuple(values[i] for i in entry.traced)
    start = time.perf_counter()
    which = (f"variant {len(entry.variants)} of entry {gf._entries.index(entry)}" if entry in gf._entries
             else "a new entry")
    try:
        with step(f"{gf._name()}: compiling {which} with Inductor at {describe(entry.names, values)}"):
            v = compile_variant(entry.trace, entry.guards, traced, entry.static, entry.names, gf.timeout_ms,
                                save=gf.cache_dir is not None, train=entry.train, segments=gf._segments)
    except (CompileFailure, SolverError) as e:
        entry.uncompiled = str(e)
        return None
    finally:
        gf._compile_s.append(time.perf_counter() - start)
    for _ in range(v.compiles):
        gf._compiles.inc()
    if not v.check(*values):
        # NOTE: never trusted: the example it was compiled at must pass its own check
        entry.uncompiled = "the compiled variant's check rejects the inputs it was compiled at"
        return None
    return v


def limit_reason(gf: GuardedFunction) -> str:
    """The reason a call runs eagerly past `max_compiles`; a warning, once."""
    why = f"the compile limit is reached ({gf.max_compiles} compiles: guarded(..., max_compiles=N) raises it)"
    if not gf._warned_limit:
        gf._warned_limit = True
        warnings.warn(f"{gf._name()}: {why}; calls no compiled variant serves run eagerly", stacklevel=5)
    return why


def save_variant(gf: GuardedFunction, entry: Entry, variant: Any) -> None:
    if gf.cache_dir is None:
        return
    try:
        why = open_store(gf, ).save(entry, variant)
    except OSError as e:  # NOTE: the call's result stands; the entry is not saved (a full disk, a file in its way)
        why = f"not saved: {type(e).__name__}: {e}"
    if why is not None:
        gf._log.append(f"cache_dir: entry {entry.key} {why}")
        if not gf._warned_save:
            warnings.warn(f"{getattr(gf.fn, '__name__', type(gf.fn).__name__)}: cache_dir: entry {entry.key} "
                          f"{why}", stacklevel=4)
            gf._warned_save = True


def open_store(gf: GuardedFunction) -> Any:
    if gf._store is None:
        from guardsolve.jit.store import Store

        gf._store = Store(gf.cache_dir, gf.fn, gf._modules)  # type: ignore[arg-type]
    return gf._store


def load_entries(gf: GuardedFunction) -> None:
    with gf._lock:
        if gf._loaded:
            return
        store = open_store(gf, )
        loaded = [Entry(None, e.variants[0].guards, never, e.names, e.traced, never,  # type: ignore[arg-type]
                        variants=tuple(e.variants), key=e.key, state=e.state, const_leaves=e.const_leaves)
                  for e in store.load(namespace(gf, ))]
        for e in loaded:
            bind_state(e)
        gf._log.extend(f"cache_dir: ignored {why}" for why in store.skipped)
        gf._log.extend(f"cache_dir: loaded through Inductor's compiler: {why}" for why in store.through_inductor)
        if loaded:
            gf._entries = gf._entries + tuple(loaded)
            gf._loaded_variants += sum(len(e.variants) for e in loaded)
        gf._loaded = True


def namespace(gf: GuardedFunction) -> dict[str, Any]:
    """What a loaded check binds that only this process has (a module's training flags)."""
    mods = gf._modules
    # NOTE: a loaded entry's `disjoint_guard` checks the arguments against every tensor the
    # function reaches that needs no grad (the buffers: those it writes among them)
    buffers = [t for t in reachable_tensors(gf.fn) if not t.requires_grad]
    out: dict[str, Any] = {"_s_disjoint": disjoint, "_s_written": lambda: buffers}
    if mods is not None:
        out["_training"] = lambda: [m.training for m in mods]
    return out


@dataclass(frozen=True)
class InductorBackend:
    """Entries run compiled variants, each behind one proven check; kept with `cache_dir`.

    >>> b = InductorBackend()
    >>> b.name, b.keeps_entries, b.trains
    ('inductor', True, True)
    """

    name: str = "inductor"
    keeps_entries: bool = True
    trains: bool = True

    def replay(self, t: Trace) -> Callable[..., Any]:
        return no_replay

    def hit(self, gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...], state: Any) -> Any:
        return serve_variants(gf, e, names, values, state)

    def accepts(self, e: Entry, values: tuple[Any, ...]) -> bool:
        if e.autograd is None and e.uncompiled is None:
            return any(v.check(*values) for v in e.variants)
        return bool(e.check(*values))

    def prepare(self, gf: GuardedFunction, entry: Entry, values: tuple[Any, ...]) -> bool:
        variant = compile_entry(gf, entry, values)
        if variant is not None:
            entry.variants = (variant,)
            save_variant(gf, entry, variant)
        return False

    def first_runner(self, entry: Entry) -> Callable[..., Any] | None:
        return None

    def another_variant(self, gf: GuardedFunction, record: Miss, names: tuple[str, ...],
                        values: tuple[Any, ...]) -> tuple[Any] | str | None:
        # NOTE: a trace that reads data fits by sizes, not necessarily by the data: a call
        # its segments refused takes a trace of its own
        fits = next((e for e in gf._entries if e.trace is not None and e.uncompiled is None
                     and e.autograd is None and e.names == names and e.check(*values)
                     and (e.state is None or e.state())
                     and not any(v.segments is not None for v in e.variants)), None)
        if fits is None:
            return None
        # NOTE: the trace serves these inputs, its variants' backend guards do not:
        # another variant of the same trace, no new trace
        variant = compile_entry(gf, fits, values)
        if variant is None:
            return f"Inductor cannot compile this trace: {fits.uncompiled}"
        record.note = f"compiled variant {len(fits.variants)} of entry {gf._entries.index(fits)}"
        gf._tls.last = (K_VARIANT, fits, variant, record)
        fits.variants = fits.variants + (variant,)
        save_variant(gf, fits, variant)
        return (variant.run(*(values if fits.traced is None else [values[i] for i in fits.traced])),)

    def over_limit(self, gf: GuardedFunction) -> str | None:
        return limit_reason(gf) if gf._compiles.value >= gf.max_compiles else None

    def refuses_grad(self, grad: str) -> str | None:
        return f"autograd: grad mode is on and {grad} requires grad (autograd='eager')"

    def load(self, gf: GuardedFunction) -> None:
        load_entries(gf)
