"""`guarded(fn)`: a cache of traces keyed by their guards (why guards exist).

Two backends run an entry. `backend="replay"` (the default) replays the trace op by op
(`trace/replay.py`). `backend="inductor"` compiles it with Inductor (`jit/inductor.py`): an
entry then holds one or more compiled variants, each behind one check, the trace's guards and
Inductor's own, simplified together and proven (`Variant.guards`). A call that the trace's
guards accept but no variant's check does compiles another variant without tracing again. A
call that cannot be traced or compiled runs eagerly, its reason counted
(`cache_info().eager_reasons`). With `cache_dir`, entries are saved and a later process loads
them (`jit/store.py`).

A call binds its arguments through fn's signature (keywords and defaults included). Tensors
and ints are traced; other arguments (flags, floats, strings, tuples) are pinned by value.
Each entry's compiled check tests, in order: the inputs' kinds and ranks; the static guards
(every tensor's dtype, device, layout and requires_grad, the strides where the trace observed
them, grad mode, default dtype, pinned arguments, a module's train/eval flags); then the
minimal size guards. The first entry that accepts runs its compiled trace (a hit). A miss
traces, simplifies and publishes a new entry.

Entries are a tuple replaced whole (copy on write), so hits take no lock. One thread at a
time traces (a lock per function): a thread that misses while another traces runs fn eagerly
instead of waiting (`eager_calls`), and finds the new entry on its next call. A trace that
raises (also `KeyboardInterrupt`) publishes nothing. Inside another trace, a guarded function
runs fn directly, so the outer trace records through it.

`cache_info().miss_reasons` keeps the reasons of the last `miss_history` misses; each reason
is built only when asked for, from a small description of the inputs (shapes, dtypes, ...).

>>> import torch
>>> @guarded
... def add(a, b):
...     return a + b
>>> _ = add(torch.ones(4), torch.ones(4)); _ = add(torch.ones(5), torch.ones(5)); _ = add(torch.ones(4), torch.ones(1))
>>> info = add.cache_info(); (info.entries, info.hits, info.misses)  # [4] + [1] broadcasts: the same trace
(1, 2, 1)
>>> print(add.entries[0].guards)
(a0 == 1) or (a0 == b0) or (b0 == 1)
>>> _ = add(torch.ones(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
>>> print(add.cache_info().miss_reasons[-1])
entry 0: a.dtype == torch.float32 failed (found torch.float64)
"""

from __future__ import annotations

import functools
import inspect
import itertools
import textwrap
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from guardsolve.errors import EagerError, GuardFailure, GuardsolveError
from guardsolve.jit.counter import Counter as _Counter
from guardsolve.ir.ops import Op
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.replay import compile_replay
from guardsolve.trace.state import StateCheck, reachable_grad, recording
from guardsolve.trace.static import StaticGuard, autocast_state, is_static_value, state_guards, value_guard
from guardsolve.trace.tracer import Trace, is_traced, trace, tracing

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


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

    @property
    def hits(self) -> int:
        return self._hits.value

    def explain(self) -> str:
        """The trace's guards with their lines, then each compiled variant's check: the trace's
        part and what Inductor assumed, named (the replay backend has no variants)."""
        out = []
        if self.trace is not None:
            out += ["the trace's guards:", textwrap.indent(self.guards.explain(), "    ")]
        for i, v in enumerate(self.variants):
            how = "loaded from cache_dir" if v.loaded else f"compiled in {v.compile_s:.2f} s"
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


class _TensorDesc:
    """What a miss remembers of a tensor argument: enough to explain it, never its data."""

    __slots__ = ("shape", "dtype", "device", "layout", "requires_grad", "_stride", "_offset", "_contiguous")

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype, self.device, self.layout = tuple(t.shape), t.dtype, t.device, t.layout
        self.requires_grad = t.requires_grad
        strided = t.layout is torch.strided
        self._stride = tuple(t.stride()) if strided else ()
        self._offset = t.storage_offset() if strided else 0
        self._contiguous = t.is_contiguous() if strided else False

    def dim(self) -> int:
        return len(self.shape)

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def __repr__(self) -> str:
        return f"tensor(shape={list(self.shape)}, dtype={self.dtype})"

    def stride(self) -> tuple[int, ...]:
        return self._stride

    def size(self, dim: int | None = None) -> Any:
        """As `Tensor.size`: a layout guard reads `x.size()[2]` (Inductor's stride guards)."""
        return torch.Size(self.shape) if dim is None else self.shape[dim]

    def storage_offset(self) -> int:
        return self._offset

    def is_contiguous(self) -> bool:
        return self._contiguous


def _describe(v: Any) -> Any:
    return _TensorDesc(v) if isinstance(v, torch.Tensor) else v


class _Miss:
    """One miss: the entries it was checked against and a description of its inputs; the
    reasons are built on first read."""

    __slots__ = ("entries", "names", "desc", "state", "note", "_text", "_stale")

    def __init__(self, entries: tuple[Entry, ...], names: tuple[str, ...], values: Sequence[Any],
                 state: dict[str, Any]):
        self.entries, self.names, self.state = entries, names, state
        self.desc = tuple(_describe(v) for v in values)
        # NOTE: whether each entry's state check failed at the miss (cheap: the fast check first);
        # what failed is named when the reasons are read
        self._stale = tuple(e.state is not None and not e.state() for e in entries)
        self.note: str | None = None
        self._text: tuple[str, ...] | None = None

    def reasons(self) -> tuple[str, ...]:
        if self._text is None:
            out = [f"entry {i}: {self._why(e, stale)}" for i, (e, stale) in enumerate(zip(self.entries, self._stale))] \
                or ["no entries yet"]
            if self.note:
                out.append(self.note)
            self._text = tuple(out)
        return self._text

    def _why(self, e: Entry, stale: bool) -> str:
        if e.names != self.names:
            return f"arguments ({', '.join(self.names)}) differ from the traced ({', '.join(e.names)})"
        why = e.guards.explain_failure(*self.desc, state=self.state)
        if why == "all guards hold" and stale:
            now = e.state.failure() if e.state is not None else None
            return f"the state it read changed: {now or 'since changed back'}"
        return why


class GuardedFunction:
    """A function whose traces are reused exactly when their guards accept the inputs."""

    def __init__(self, fn: Callable[..., Any], max_entries: int = 8, evict: bool = False,
                 value_guards: bool = False, timeout_ms: int = 5000, miss_history: int = 32,
                 explore: bool | int = True, backend: str = "replay", cache_dir: str | None = None):
        functools.update_wrapper(self, fn)
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: choose one of {', '.join(map(repr, BACKENDS))}")
        if cache_dir is not None and backend != "inductor":
            raise ValueError("cache_dir keeps compiled entries: it needs backend='inductor'")
        self.fn = fn
        self.backend = backend
        self.cache_dir = cache_dir
        self.explore = explore
        self.max_entries = max_entries
        self.evict = evict
        self.value_guards = value_guards
        self.timeout_ms = timeout_ms
        self.miss_history = miss_history
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        try:
            self._sig: inspect.Signature | None = inspect.signature(target)
        except (TypeError, ValueError):
            self._sig = None
        params = list(self._sig.parameters.values()) if self._sig is not None else []
        # NOTE: the common call (the first k parameters passed positionally) binds without
        # inspect; `_leading[k]` is one tuple per k, so entries compare names by identity
        lead = list(itertools.takewhile(lambda p: p.kind in _POSITIONAL, params))
        self._leading = [tuple(p.name for p in lead[:k]) for k in range(len(lead) + 1)]
        self._modules = list(fn.modules()) if isinstance(fn, torch.nn.Module) else None
        self._lock = threading.RLock()  # NOTE: held while tracing; reentrant for recursion
        self._lock_eager = threading.Lock()  # NOTE: only for counting eager calls' reasons
        self._clock = itertools.count(1)
        self._store: Any = None
        self._reset()

    def _reset(self) -> None:
        self._entries: tuple[Entry, ...] = ()
        self._hits, self._misses, self._eager, self._evictions, self._traces = (
            _Counter(), _Counter(), _Counter(), _Counter(), _Counter())
        self._compiles = _Counter()
        self._compile_s: list[float] = []
        self._eager_why: dict[str, int] = {}
        self._log: deque[_Miss | str] = deque(maxlen=self.miss_history)
        self._warned = False
        self._warned_grad = False
        self._warned_save = False
        self._writes = 0  # NOTE: traces in a row whose call changed the state it read
        self._always_eager: str | None = None
        self._loaded = False
        self._loaded_variants = 0

    @property
    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    # -- calls -----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tracing() and any(is_traced(v) for v in itertools.chain(args, kwargs.values())):
            return self.fn(*args, **kwargs)  # NOTE: inside an outer trace: let it record fn
        if not self._loaded and self.cache_dir is not None:
            self._load()
        names, values = self._bind(args, kwargs)
        entries = self._entries
        for e in entries:
            out = self._try(e, names, values)
            if out is not _MISS:
                return self.fn(*args, **kwargs) if out is _EAGER else out
        return self._miss(args, kwargs, names, values, entries)

    def _try(self, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
        if e.names is not names and e.names != names:
            return _MISS
        state = e.state
        if e.autograd is not None:
            if not e.check(*values) or (state is not None and not state()):
                return _MISS
            self._eager.inc()
            self._count_eager(e.autograd)
            return _EAGER
        if self.backend == "inductor":
            for v in e.variants:
                if v.check(*values):
                    if state is not None and not state():
                        return _MISS  # NOTE: every variant reads the same state
                    try:
                        out = v.run(*(values if e.traced is None else [values[i] for i in e.traced]))
                    except Exception as err:
                        # NOTE: a kernel's own error (an index out of range in data): eager gives
                        # the call's own error, or its value
                        self._eager.inc()
                        self._count_eager(f"the compiled kernels raised {type(err).__name__}: {_first_line(err)[:200]}")
                        return _EAGER
                    v._hits.inc()
                    e._hits.inc()
                    self._hits.inc()
                    e.last_used = next(self._clock)
                    return out
            if e.uncompiled is None or not e.check(*values) or (state is not None and not state()):
                return _MISS
            # NOTE: the trace fits, Inductor cannot serve it: eager, with the reason counted
            self._eager.inc()
            self._count_eager(f"Inductor cannot compile this trace: {e.uncompiled}")
            return _EAGER
        if not e.check(*values) or (state is not None and not state()):
            return _MISS
        try:
            out = e.run(*(values if e.traced is None else [values[i] for i in e.traced]))
        except GuardFailure as failure:  # a value bailout: data changed the path
            self._log.append(f"entry {self._entries.index(e) if e in self._entries else '?'}: {failure}")
            return _MISS
        e._hits.inc()
        self._hits.inc()
        e.last_used = next(self._clock)
        return out

    def _count_eager(self, why: str) -> None:
        with self._lock_eager:
            self._eager_why[why] = self._eager_why.get(why, 0) + 1

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """The arguments passed, by parameter name, in signature order (defaults are not filled
        in: fn is later called with exactly what was passed); `*args` become `args_0, ...`,
        `**kwargs` keep their keys."""
        if not kwargs and len(args) < len(self._leading):
            return self._leading[len(args)], args
        if self._sig is None:
            if kwargs:
                raise TypeError(f"{getattr(self.fn, '__name__', 'function')} has no signature to bind keywords by")
            return tuple(f"args_{i}" for i in range(len(args))), args
        ba = self._sig.bind(*args, **kwargs)  # NOTE: a TypeError here is eager's TypeError
        names: list[str] = []
        values: list[Any] = []
        for name, v in ba.arguments.items():
            kind = self._sig.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                names += [f"{name}_{i}" for i in range(len(v))]
                values += v
            elif kind is inspect.Parameter.VAR_KEYWORD:
                names += list(v)
                values += v.values()
            else:
                names.append(name)
                values.append(v)
        return tuple(names), tuple(values)

    # -- misses ----------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        grad, dtype, cast = torch.is_grad_enabled(), torch.get_default_dtype(), autocast_state()
        state: dict[str, Any] = {"_is_grad_enabled": lambda: grad, "_get_default_dtype": lambda: dtype,
                                 "_autocast": lambda: cast}
        if self._modules is not None:
            flags = [m.training for m in self._modules]
            state["_training"] = lambda: flags
        return state

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
              values: tuple[Any, ...], seen: tuple[Entry, ...]) -> Any:
        why_eager = self._always_eager or self._untraceable(names, values)
        locked = why_eager is None and self._lock.acquire(blocking=False)
        try:
            if locked:
                for e in self._entries:  # NOTE: published since this call looked
                    if e not in seen:
                        out = self._try(e, names, values)
                        if out is not _MISS:
                            return self.fn(*args, **kwargs) if out is _EAGER else out
            self._misses.inc()
            record = _Miss(self._entries if locked else seen, names, values, self._state())
            self._log.append(record)
            if locked and self.backend == "inductor":
                fits = next((e for e in self._entries if e.trace is not None and e.uncompiled is None
                             and e.autograd is None and e.names == names and e.check(*values)
                             and (e.state is None or e.state())), None)
                if fits is not None:
                    # NOTE: the trace serves these inputs, its variants' backend guards do not:
                    # another variant of the same trace, no new trace
                    variant = self._compile(fits, values)
                    if variant is not None:
                        record.note = f"compiled variant {len(fits.variants)} of entry {self._entries.index(fits)}"
                        fits.variants = fits.variants + (variant,)
                        self._save(fits, variant)
                        return variant.run(*(values if fits.traced is None else [values[i] for i in fits.traced]))
                    why_eager = f"Inductor cannot compile this trace: {fits.uncompiled}"
            if why_eager is None and (not locked or len(self._entries) >= self.max_entries and not self.evict):
                if not locked:
                    why_eager = "another thread is tracing this function"
                else:
                    why_eager = f"the cache is full ({self.max_entries} entries)"
                    if not self._warned:
                        warnings.warn(f"{getattr(self.fn, '__name__', 'function')}: guarded cache is full "
                                      f"({self.max_entries} entries); running eagerly", stacklevel=3)
                        self._warned = True
            if why_eager is not None:
                return self._run_eagerly(record, why_eager, args, kwargs)
            try:
                entry = self._trace(names, values)
            except _StateWritten as w:
                # NOTE: the call changed state it read (a counter, a cache it fills): a replay
                # would not make the change, and the next call reads another state. This call's
                # output is the traced run's own; no entry is kept, and a function that does so
                # twice in a row runs eagerly from then on
                self._traces.inc()
                self._writes += 1
                why = f"the call changes state it reads: {w.why}"
                if self._writes >= 2:
                    self._always_eager = why
                self._log.append(f"{why}; no entry kept")
                return w.output
            except EagerError:
                raise  # NOTE: eager raises it too: the call's own error
            except GuardsolveError as e:
                # NOTE: a data-dependent branch, an op the tracer does not know: eager serves it
                return self._run_eagerly(record, f"cannot be traced: {type(e).__name__}: {_first_line(e)}", args, kwargs)
            self._traces.inc()
            self._writes = 0
            if entry.trace.opaque or entry.trace.unreplayable is not None:
                # NOTE: its output holds traced values inside objects a replay cannot rebuild
                # (a model's cache object), or its random ops drew from a state set outside the
                # trace (a reseed): the call is served by the trace's own run, no entry is kept
                self._log.append(f"{entry.trace.unreplayable}; no entry kept" if entry.trace.unreplayable else
                                 "the trace's output holds objects a replay cannot rebuild; no entry kept")
                return entry.trace.output
            grads = entry.state.requires_grad() if entry.state is not None and torch.is_grad_enabled() else []
            if grads:
                # NOTE: the trace recorded no autograd history: its output is not eager's. The
                # entry is kept, so later calls in this state run eagerly without tracing
                entry.autograd = (f"autograd: grad mode is on and {grads[0]} requires grad"
                                  + (f" (and {len(grads) - 1} more tensors the function reads)" if len(grads) > 1 else ""))
            elif self.backend == "inductor":
                variant = self._compile(entry, values)
                if variant is not None:
                    entry.variants = (variant,)
                    self._save(entry, variant)
            # NOTE: published in one assignment, after the trace succeeded: a trace that raises
            # (KeyboardInterrupt too) leaves the entries as they were
            kept = self._entries
            if len(kept) >= self.max_entries:
                lru = min(kept, key=lambda e: e.last_used)
                kept = tuple(e for e in kept if e is not lru)
                self._evictions.inc()
            self._entries = (entry,) + kept if self.evict else kept + (entry,)
            out, entry.trace.output = entry.trace.output, None  # NOTE: the entry keeps no output alive
            if entry.autograd is not None:
                return self._run_eagerly(record, entry.autograd, args, kwargs)
            return out
        finally:
            if locked:
                self._lock.release()

    def _run_eagerly(self, record: "_Miss", why: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        record.note = f"ran eagerly: {why}"
        self._eager.inc()
        self._count_eager(why)
        return self.fn(*args, **kwargs)

    def _compile(self, entry: Entry, values: tuple[Any, ...]) -> Any:
        """A new Inductor variant of `entry`'s trace at these inputs, or None (with
        `entry.uncompiled` saying why)."""
        from guardsolve.jit.inductor import CompileFailure, compile_variant
        from guardsolve.errors import SolverError

        traced = values if entry.traced is None else tuple(values[i] for i in entry.traced)
        start = time.perf_counter()
        try:
            v = compile_variant(entry.trace, entry.guards, traced, entry.static, entry.names, self.timeout_ms,
                                save=self.cache_dir is not None)
        except (CompileFailure, SolverError) as e:
            entry.uncompiled = str(e)
            return None
        finally:
            self._compile_s.append(time.perf_counter() - start)
        self._compiles.inc()
        if not v.check(*values):
            # NOTE: never trusted: the example it was compiled at must pass its own check
            entry.uncompiled = "the compiled variant's check rejects the inputs it was compiled at"
            return None
        return v

    def _save(self, entry: Entry, variant: Any) -> None:
        if self.cache_dir is None:
            return
        why = self._open_store().save(entry, variant)
        if why is not None:
            self._log.append(f"cache_dir: entry {entry.key} {why}")
            if not self._warned_save:
                warnings.warn(f"{getattr(self.fn, '__name__', type(self.fn).__name__)}: cache_dir: entry {entry.key} "
                              f"{why}", stacklevel=4)
                self._warned_save = True

    def _open_store(self) -> Any:
        if self._store is None:
            from guardsolve.jit.store import Store

            self._store = Store(self.cache_dir, self.fn, self._modules)  # type: ignore[arg-type]
        return self._store

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            store = self._open_store()
            loaded = [Entry(None, e.variants[0].guards, _never, e.names, e.traced, _never,  # type: ignore[arg-type]
                            variants=tuple(e.variants), key=e.key, state=e.state, const_leaves=e.const_leaves)
                      for e in store.load(self._namespace())]
            for e in loaded:
                bind_state(e)
            self._log.extend(f"cache_dir: ignored {why}" for why in store.skipped)
            if loaded:
                self._entries = self._entries + tuple(loaded)
                self._loaded_variants += sum(len(e.variants) for e in loaded)
            self._loaded = True

    def _namespace(self) -> dict[str, Any]:
        """What a loaded check binds that only this process has (a module's training flags)."""
        mods = self._modules
        return {"_training": (lambda: [m.training for m in mods])} if mods is not None else {}

    def _untraceable(self, names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
        """Why these arguments cannot be traced (so the call runs eagerly), or None."""
        for n, v in zip(names, values):
            if isinstance(v, torch.Tensor):
                if (type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter)) or (
                        v.layout is not torch.strided or v.is_quantized):
                    return f"argument {n!r} is a {type(v).__name__} with layout {v.layout}: only dense tensors trace"
            elif not is_static_value(v):
                return f"argument {n!r} ({type(v).__name__}) is neither traced nor comparable by value"
        if torch.is_grad_enabled():
            grad = next((f"input {n!r}" for n, v in zip(names, values)
                         if isinstance(v, torch.Tensor) and v.requires_grad), None) or reachable_grad(self.fn)
            if grad is not None:
                # NOTE: a trace records no autograd graph, so its first output would not be eager's
                if not self._warned_grad:
                    warnings.warn(f"{getattr(self.fn, '__name__', type(self.fn).__name__)}: grad mode is on and {grad} "
                                  "requires grad: guarded runs such calls eagerly (wrap inference in "
                                  "torch.no_grad() or torch.inference_mode() to use its entries)", stacklevel=4)
                    self._warned_grad = True
                return f"autograd: grad mode is on and {grad} requires grad"
        return None

    def _trace(self, names: tuple[str, ...], values: tuple[Any, ...]) -> Entry:
        traced = tuple(i for i, v in enumerate(values)
                       if isinstance(v, torch.Tensor) or (isinstance(v, int) and not isinstance(v, bool)))
        plain = len(traced) == len(values) and names == self._leading[min(len(names), len(self._leading) - 1)]
        fn = self.fn if plain else self._partial(names, values, traced)
        with recording(self.fn) as rec:
            t = trace(fn, *[values[i] for i in traced], value_guards=self.value_guards)
            wrote = StateCheck.of(rec).failure()  # NOTE: what the call itself changed
            if wrote is not None:
                # NOTE: before exploring other sizes, which would run the program (and its
                # writes) again
                raise _StateWritten(t.output, wrote)
            static, gs = self._guards(t, names, values, traced)
        state = StateCheck.of(rec)
        t.inputs = t.recorded = None  # NOTE: the entry keeps its trace, not the call's tensors (nor its recorder)
        run = compile_replay(t.graph, t.out_spec, t.constants) if self.backend == "replay" else _no_replay
        assert gs._check is not None
        entry = Entry(t, gs, run, names, None if plain or len(traced) == len(values) else traced, gs._check,
                      next(self._clock), static=tuple(static), state=state)
        bind_state(entry)
        return entry

    def _guards(self, t: Trace, names: tuple[str, ...], values: tuple[Any, ...],
                traced: tuple[int, ...]) -> tuple[list[StaticGuard], GuardSet]:
        # NOTE: the trace's own static guards speak of its inputs; the ambient state a call
        # runs in (grad mode, default dtype, a module's modes) is the cache's to check
        static = list(t.static) + state_guards()
        static += [value_guard(names[i], values[i]) for i in range(len(values)) if i not in traced]
        if self._modules is not None:
            static.append(self._training_guard())
        gs = simplify(t, timeout_ms=self.timeout_ms, explore=self.explore).with_static(static, names)
        return static, gs

    def _partial(self, names: tuple[str, ...], values: tuple[Any, ...], traced: tuple[int, ...]) -> Callable[..., Any]:
        """fn as a function of the traced arguments only (the others fixed), named like fn's."""
        sig, fn = self._sig, self.fn
        assert sig is not None
        # NOTE: `names` follow the signature (see `_bind`): positional parameters go positionally
        # while none is missing before them, the rest by keyword, as Python would bind them.
        where = {n: i for i, n in enumerate(names)}
        positional: list[int] = []
        keyword: list[int] = []
        gap = False
        for p in sig.parameters.values():
            if p.kind in _POSITIONAL:
                if p.name not in where:
                    gap = True
                else:
                    (keyword if gap else positional).append(where[p.name])
            elif p.kind is p.VAR_POSITIONAL:
                j = 0
                while f"{p.name}_{j}" in where:
                    positional.append(where[f"{p.name}_{j}"])
                    j += 1
            elif p.kind is p.KEYWORD_ONLY:
                if p.name in where:
                    keyword.append(where[p.name])
            else:
                claimed = set(positional) | set(keyword)
                keyword += [i for i in range(len(names)) if i not in claimed]
        fixed = list(values)

        def call(*traced_values: Any) -> Any:
            full = list(fixed)
            for i, v in zip(traced, traced_values):
                full[i] = v
            return fn(*[full[i] for i in positional], **{names[i]: full[i] for i in keyword})

        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(names[i], inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in traced])
        call.__name__ = getattr(fn, "__name__", type(fn).__name__)
        return call

    def _training_guard(self) -> StaticGuard:
        mods = self._modules
        assert mods is not None
        flags = [m.training for m in mods]
        name = type(self.fn).__name__
        text = (f"{name}: every module in {'training' if flags[0] else 'eval'} mode" if len(set(flags)) == 1
                else f"{name}: modules' training flags == {flags}")
        return StaticGuard(text, "_training() == _s_training", "_training()",
                           (("_training", lambda: [m.training for m in mods]), ("_s_training", flags)))

    # -- bookkeeping -----------------------------------------------------------------------

    def __repr__(self) -> str:
        info = self.cache_info()
        name = getattr(self.fn, "__qualname__", None) or type(self.fn).__name__
        return (f"<GuardedFunction {name}: {info.entries}/{self.max_entries} entries, {info.hits} hits, "
                f"{info.misses} misses, {info.traces} traces>")

    def cache_info(self) -> CacheInfo:
        log = list(self._log)  # NOTE: one C call, atomic under the GIL
        reasons = tuple(r for m in log for r in ((m,) if isinstance(m, str) else m.reasons()))
        with self._lock_eager:
            eager = tuple(sorted(self._eager_why.items(), key=lambda kv: -kv[1]))
        entries = self._entries
        return CacheInfo(len(entries), self._hits.value, self._misses.value, self._eager.value,
                         self._evictions.value, reasons, self._traces.value, self._compiles.value,
                         round(sum(self._compile_s), 3), tuple(len(e.variants) for e in entries), eager,
                         self._loaded_variants,
                         round(sum(self._store.load_seconds), 3) if self._store is not None else 0.0)

    def cache_clear(self) -> None:
        with self._lock:
            self._reset()


def bind_state(entry: Entry) -> None:
    """Make the entry read its state's tensors where they live now: when the state check finds a
    tensor rebound (a replaced weight of the same kind), the replay, the trace's constants (which
    later variants compile with) and every compiled variant take the new one. Sets
    `entry.const_leaves` (each constant's leaf in the state check, None for one the trace made)."""
    state, t = entry.state, entry.trace
    if state is None:
        return
    if t is not None:
        made = {n.params["name"] for n in t.graph.nodes if n.op is Op.VAR_PARAM and "crc" in n.params}
        leaves = []
        for name, c in t.constants.items():
            i = state.tensors.get(id(c))
            leaves.append(i)
            if i is None and name not in made:
                state.notes.append(f"{name}: a tensor the function reached by no recorded read: the entry keeps "
                                   "using this very tensor (in-place writes are seen, a rebinding elsewhere is not)")
        entry.const_leaves = tuple(leaves)
    slots = {i: j for j, i in enumerate(entry.const_leaves) if i is not None}
    names = list(t.constants) if t is not None else []

    def rebind(changed: dict[int, Any]) -> None:
        for i, new in changed.items():
            j = slots.get(i)
            if j is None:
                continue
            if t is not None:
                t.constants[names[j]] = new
                if entry.run is not _no_replay and entry.run is not _never:
                    entry.run.__globals__[names[j]] = new
            for v in entry.variants:
                v.run.__globals__[f"_c{j}"] = new.detach()

    state.on_rebind.append(rebind)


def _summary(lines: list[str], most: int = 40) -> list[str]:
    return lines if len(lines) <= most else lines[:most] + [f"... and {len(lines) - most} more (Entry.state.lines())"]


class _StateWritten(Exception):
    """The traced call changed state it read: its output, and what changed."""

    def __init__(self, output: Any, why: str) -> None:
        super().__init__(why)
        self.output, self.why = output, why


_MISS = object()
_EAGER = object()  # NOTE: `_try`'s answer where the entry's trace fits but Inductor cannot serve it
BACKENDS = ("replay", "inductor")


def _never(*args: Any, **kwargs: Any) -> bool:
    """A loaded entry has no trace: its trace guards never claim an input (a miss traces anew)."""
    return False


def _no_replay(*args: Any) -> Any:
    raise AssertionError("the Inductor backend runs its variants, not a replay")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def guarded(fn: Callable[..., Any] | None = None, *, max_entries: int = 8, evict: bool = False,
            value_guards: bool = False, timeout_ms: int = 5000, miss_history: int = 32,
            explore: bool | int = True, backend: str = "replay", cache_dir: str | None = None) -> Any:
    """Decorator: cache traces of `fn` and reuse one whenever its guards accept the inputs.

    Each entry's guards are exact to its trace (`simplify`'s `explore`): a miss traces `fn`
    again at sizes 0 and 1 and merges the routes that record the same trace, so a batch-1
    call of an MLP hits the entry its batch-2 call made. `explore=False` keeps each trace's own
    route (fewer calls of `fn` per miss; more misses).

    Past `max_entries` a miss runs `fn` eagerly with a warning, or, with `evict=True`, drops the
    least recently used entry. `miss_history` bounds `cache_info().miss_reasons` (the last
    misses'). A solver timeout (`timeout_ms`) keeps the constraint it could not decide.

    `backend="replay"` (the default) replays a trace op by op; `backend="inductor"` compiles
    it with Inductor behind one proven check (the trace's guards and Inductor's), one or more
    variants per trace (`jit/inductor.py`). `cache_dir` (Inductor only) saves each compiled
    entry there and loads the matching ones in a later process (`jit/store.py`); the directory
    is trusted as Inductor's own cache directory is (it holds pickles and generated code).
    """
    def wrap(f: Callable[..., Any]) -> GuardedFunction:
        return GuardedFunction(f, max_entries, evict, value_guards, timeout_ms, miss_history, explore, backend,
                               cache_dir)
    return wrap(fn) if fn is not None else wrap
