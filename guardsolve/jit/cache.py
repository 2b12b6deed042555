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
import contextlib
import itertools
import re
import textwrap
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from guardsolve.errors import DataDependentError, EagerError, GuardFailure, GuardsolveError, UnsupportedOpError, first_line
from guardsolve.jit.counter import Counter as _Counter
from guardsolve.jit.progress import describe, step
from guardsolve.jit.segments import writes_unmade
from guardsolve.ir.ops import Op
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.replay import compile_replay
from guardsolve.trace.state import StateCheck, reachable_generators, reachable_grad, reachable_tensors, recording
from guardsolve.trace.static import (StaticGuard, autocast_guard, autocast_state, global_modes, is_static_value, state_guards,
                                     value_guard, value_key)
from guardsolve.trace.record import Trace
from guardsolve.trace.tracer import is_traced, trace, tracing

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


@dataclass(frozen=True)
class Example:
    """A tensor argument of `GuardedFunction.warm_up` given by its shape: filled with zeros for
    an integer or bool dtype (valid indices), else with normal values from a fixed seed.

    >>> Example((2, 3)).make().shape, Example((4,), torch.int64).make().tolist()
    (torch.Size([2, 3]), [0, 0, 0, 0])
    """

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None
    device: str = "cpu"

    def make(self) -> torch.Tensor:
        dtype = self.dtype or torch.get_default_dtype()
        if dtype.is_floating_point or dtype.is_complex:
            g = torch.Generator(device=self.device).manual_seed(0)
            return torch.randn(tuple(self.shape), dtype=dtype, device=self.device, generator=g)
        return torch.zeros(tuple(self.shape), dtype=dtype, device=self.device)


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

    __slots__ = ("entries", "names", "desc", "state", "note", "variants", "_text", "_stale")

    def __init__(self, entries: tuple[Entry, ...], names: tuple[str, ...], values: Sequence[Any],
                 state: dict[str, Any]):
        self.entries, self.names, self.state = entries, names, state
        self.variants = tuple(e.variants for e in entries)  # NOTE: as they were: a miss may add one
        self.desc = tuple(_describe(v) for v in values)
        # NOTE: whether each entry's state check failed at the miss (cheap: the fast check first);
        # what failed is named when the reasons are read
        self._stale = tuple(e.state is not None and not e.state() for e in entries)
        self.note: str | None = None
        self._text: tuple[str, ...] | None = None

    def reasons(self) -> tuple[str, ...]:
        if self._text is None:
            out = [f"entry {i}: {self._why(e, stale, vs)}"
                   for i, (e, stale, vs) in enumerate(zip(self.entries, self._stale, self.variants))] \
                or ["no entries yet"]
            if self.note:
                out.append(self.note)
            self._text = tuple(out)
        return self._text

    def _why(self, e: Entry, stale: bool, variants: tuple[Any, ...]) -> str:
        if e.names != self.names:
            return f"arguments ({', '.join(self.names)}) differ from the traced ({', '.join(e.names)})"
        if e.trace is None and len(variants) > 1:  # NOTE: loaded: its guards are variant 0's
            return "no loaded variant's check holds: " + "; ".join(
                f"variant {j}: {v.guards.explain_failure(*self.desc, state=self.state)}" for j, v in enumerate(variants))
        why = e.guards.explain_failure(*self.desc, state=self.state)
        if why == "all guards hold" and stale:
            now = e.state.failure() if e.state is not None else None
            return f"the state it read changed: {now or 'since changed back'}"
        if why == "all guards hold" and variants and e.autograd is None:
            # NOTE: the trace fits; what the backend assumed does not (a stride, a 0/1 size)
            fails = [f"variant {j}: {_variant_failure(v, self.desc, self.state)}" for j, v in enumerate(variants)]
            lead = "its trace's guards hold; " if e.trace is not None else ""
            return f"{lead}no compiled variant's check holds: " + "; ".join(fails)
        if why == "all guards hold":
            return "all guards hold (it was published or changed after this call looked)"
        return why


def _variant_failure(v: Any, desc: tuple[Any, ...], state: dict[str, Any]) -> str:
    """Why a compiled variant did not serve a call whose trace's guards held: the guard its check
    failed; or, where every guard holds, that its segments' data took another path (named in the
    reason before, where the run stopped) or that it was added after the call looked."""
    why = v.guards.explain_failure(*desc, state=state)
    if why != "all guards hold":
        return why
    if getattr(v, "segments", None) is not None:
        return "its sizes hold; the call's data took a path its segments do not run (see where it stopped)"
    return "all guards hold (it was compiled after this call looked)"


class GuardedFunction:
    """A function whose traces are reused exactly when their guards accept the inputs."""

    def __init__(self, fn: Callable[..., Any], max_entries: int = 8, evict: bool = False,
                 value_guards: bool | None = None, timeout_ms: int = 5000, miss_history: int = 32,
                 explore: bool | int = True, backend: str = "replay", cache_dir: str | None = None,
                 max_compiles: int = 16, autograd: str = "compiled"):
        functools.update_wrapper(self, fn)
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: choose one of {', '.join(map(repr, BACKENDS))}")
        if autograd not in ("compiled", "eager"):
            raise ValueError(f"autograd={autograd!r}: choose 'compiled' or 'eager'")
        # NOTE: "compiled": calls that need autograd are served by training variants (Inductor);
        # "eager": they run eagerly (a second-order gradient needs eager's graph)
        self.autograd = autograd
        if cache_dir is not None and backend != "inductor":
            raise ValueError("cache_dir keeps compiled entries: it needs backend='inductor'")
        self.fn = fn
        self.backend = backend
        self.cache_dir = cache_dir
        self.explore = explore
        self.max_entries = max_entries
        self.max_compiles = max_compiles
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
        self._tls = threading.local()  # NOTE: `last`: how this thread's last call was served (`last_call`)
        self._lock_pending = threading.Lock()  # NOTE: guards `_pending` and `_worker`
        self._worker: threading.Thread | None = None
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
        self._writes_args = False  # NOTE: a trace wrote a tensor it did not make (`_aliased`)
        self._written_state: list[torch.Tensor] = []  # NOTE: the state tensors traces wrote (buffers)
        # NOTE: signatures whose trace no entry can serve (an output a replay cannot rebuild), with
        # the state the trace read: while it holds, such a call runs eagerly without a trace
        self._unservable: dict[Any, tuple[str, StateCheck]] = {}
        self._always_eager: str | None = None
        self._loaded = False
        self._loaded_variants = 0
        # NOTE: calls that ran eagerly while another thread traced: their inputs (copied) and the
        # thread-local modes they ran in, keyed by what the guards read; traced in the background
        self._pending: dict[Any, tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...]]] = {}
        # NOTE: signatures (`_signature`) whose trace failed, with why: their calls run eagerly
        # without tracing again (a trace that compiles not is remembered by its entry's guards)
        self._failed: dict[Any, str] = {}
        # NOTE: the compiled segments of traces that read data, by canonical source and constants:
        # two paths' traces share the segments they have in common (`jit/segments.build`)
        self._segments: dict[Any, Any] = {}
        self._warned_limit = False

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
        diverged = False
        for e in entries:
            out = self._try(e, names, values)
            if out is _DIVERGED:
                diverged = True
            elif out is not _MISS:
                if diverged:
                    self._first(e)
                return self.fn(*args, **kwargs) if out is _EAGER else out
        return self._miss(args, kwargs, names, values, entries)

    def _first(self, e: Entry) -> None:
        """`e` tried first from now on: the path this call's data took, after an earlier entry's
        segments diverged on it (a stream of like calls then runs one path, no divergence).
        Under the lock that publishes entries, and only when it is free (a hit never waits for
        a trace)."""
        if self._lock.acquire(blocking=False):
            try:
                self._entries = (e, *[x for x in self._entries if x is not e])
            finally:
                self._lock.release()

    def _try(self, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
        if e.names is not names and e.names != names:
            return _MISS
        state = e.state
        if e.autograd is not None:
            if not e.check(*values) or (state is not None and not state()):
                return _MISS
            self._eager.inc()
            self._count_eager(e.autograd)
            self._tls.last = (_K_EAGER, e, None, e.autograd)
            return _EAGER
        if self.backend == "inductor":
            for v in e.variants:
                if v.check(*values):
                    if state is not None and not state():
                        return _MISS  # NOTE: every variant reads the same state
                    try:
                        out = v.run(*(values if e.traced is None else [values[i] for i in e.traced]))
                    except GuardFailure as failure:
                        # NOTE: a segmented variant's value bailout: the data took another path,
                        # which a trace of its own serves (nothing the trace did not make was
                        # written before it: `segments.state_writes`), resumed from what this
                        # run computed where its prefix is this one's
                        out = self._resume(e, failure, names, values)
                        if out is _MISS:
                            self._log.append(f"entry {self._entries.index(e) if e in self._entries else '?'}: {failure}")
                            return _DIVERGED
                        return out
                    except Exception as err:
                        if state is not None and state.failure() is not None:
                            # NOTE: state changed in place where the fast check does not look
                            # (`w.resize_(1)`): the artifact's input asserts raised; a new trace
                            state.distrust()
                            return _MISS
                        # NOTE: a kernel's own error (an index out of range in data): eager gives
                        # the call's own error, or its value
                        why = f"the compiled kernels raised {type(err).__name__}: {first_line(err)[:200]}"
                        self._eager.inc()
                        self._count_eager(why)
                        self._tls.last = (_K_EAGER, e, v, why)
                        return _EAGER
                    v.count_hit()
                    e.count_hit()
                    self._hits.inc()
                    e.last_used = next(self._clock)
                    self._tls.last = (_K_HIT, e, v, None)
                    return out
            if e.uncompiled is None or not e.check(*values) or (state is not None and not state()):
                return _MISS
            # NOTE: the trace fits, Inductor cannot serve it: eager, with the reason counted
            why = f"Inductor cannot compile this trace: {e.uncompiled}"
            self._eager.inc()
            self._count_eager(why)
            self._tls.last = (_K_EAGER, e, None, why)
            return _EAGER
        if not e.check(*values) or (state is not None and not state()):
            return _MISS
        try:
            out = e.run(*(values if e.traced is None else [values[i] for i in e.traced]))
        except GuardFailure as failure:  # a value bailout: data changed the path
            self._log.append(f"entry {self._entries.index(e) if e in self._entries else '?'}: {failure}")
            return _MISS
        except BaseException as err:  # NOTE: the replay raised (an index read from data): eager's error
            if isinstance(err, Exception) and state is not None and state.failure() is not None:
                state.distrust()
                return _MISS  # NOTE: state changed in place (`w.resize_(1)`): a new trace
            self._tls.last = (_K_EAGER, e, None, f"the replay raised {type(err).__name__}: {first_line(err)[:200]}")
            raise
        e.count_hit()
        self._hits.inc()
        e.last_used = next(self._clock)
        self._tls.last = (_K_HIT, e, None, None)
        return out

    def _resume(self, e: Entry, failure: GuardFailure, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
        """The call whose segmented run in `e` diverged (`segments.Diverged`), continued by another
        entry's segments where they share the prefix and its size check passes; else `_MISS`."""
        from guardsolve.jit.segments import Diverged

        seen = {id(e)}
        while isinstance(failure, Diverged):
            for other in self._entries:
                if id(other) in seen or other.names != names:
                    continue
                # NOTE: sizes first: its state check (every attribute the trace read) costs more
                v = next((v for v in other.variants if v.segments is not None and v.check(*values)), None)
                if v is None or (other.state is not None and not other.state()):
                    continue
                try:
                    out = v.segments.resume(failure)
                except GuardFailure as again:
                    seen.add(id(other))
                    failure = again
                    break
                if out is NotImplemented:
                    continue
                self._first(other)
                v.count_hit()
                other.count_hit()
                self._hits.inc()
                other.last_used = next(self._clock)
                self._tls.last = (_K_HIT, other, v, None)
                return out
            else:
                return _MISS
        return _MISS

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
        grad, dtype, cast, modes = torch.is_grad_enabled(), torch.get_default_dtype(), autocast_state(), global_modes()
        state: dict[str, Any] = {"_is_grad_enabled": lambda: grad, "_get_default_dtype": lambda: dtype,
                                 "_autocast": lambda: cast, "_global_modes": lambda: modes}
        if self._modules is not None:
            flags = [m.training for m in self._modules]
            state["_training"] = lambda: flags
        return state

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
              values: tuple[Any, ...], seen: tuple[Entry, ...], background: bool = False) -> Any:
        sig = self._signature(names, values) if self._failed or self._unservable else None
        known = self._unservable.get(sig) if sig is not None and not background else None
        if known is not None and known[1]():
            self._misses.inc()
            self._eager.inc()
            self._count_eager(known[0])
            self._tls.last = (_K_EAGER, None, None, known[0])
            return self.fn(*args, **kwargs)
        if sig is not None and not background:
            # NOTE: a signature remembered as untraceable: eager's cost plus the lookup (no record:
            # `eager_reasons` counts it)
            why = self._failed.get(sig)
            if why is not None and not why.startswith(_RAISED):
                self._misses.inc()
                self._eager.inc()
                self._count_eager(why)
                self._tls.last = (_K_EAGER, None, None, why)
                return self.fn(*args, **kwargs)
        why_eager = self._always_eager or self._untraceable(names, values) or self._aliased(values)
        locked = why_eager is None and self._lock.acquire(blocking=False)
        try:
            if locked:
                for e in self._entries:  # NOTE: published since this call looked
                    if e not in seen:
                        out = self._try(e, names, values)
                        if out is not _MISS and out is not _DIVERGED:
                            return self.fn(*args, **kwargs) if out is _EAGER else out
            if not background:  # NOTE: the background's work is no call: hits + misses count calls
                self._misses.inc()
            record = _Miss(self._entries if locked else seen, names, values, self._state())
            self._log.append(record)
            if locked and self.backend == "inductor":
                # NOTE: a trace that reads data fits by sizes, not necessarily by the data: a call
                # its segments refused takes a trace of its own
                fits = next((e for e in self._entries if e.trace is not None and e.uncompiled is None
                             and e.autograd is None and e.names == names and e.check(*values)
                             and (e.state is None or e.state())
                             and not any(v.segments is not None for v in e.variants)), None)
                if fits is not None:
                    # NOTE: the trace serves these inputs, its variants' backend guards do not:
                    # another variant of the same trace, no new trace
                    variant = self._compile(fits, values)
                    if variant is not None:
                        record.note = f"compiled variant {len(fits.variants)} of entry {self._entries.index(fits)}"
                        self._tls.last = (_K_VARIANT, fits, variant, record)
                        fits.variants = fits.variants + (variant,)
                        self._save(fits, variant)
                        return variant.run(*(values if fits.traced is None else [values[i] for i in fits.traced]))
                    why_eager = f"Inductor cannot compile this trace: {fits.uncompiled}"
            if why_eager is None and (not locked or len(self._entries) >= self.max_entries and not self.evict):
                if not locked:
                    why_eager = "another thread is tracing this function"
                    self._queue(args, kwargs, names, values)
                else:
                    why_eager = f"the cache is full ({self.max_entries} entries)"
                    if not self._warned:
                        warnings.warn(f"{getattr(self.fn, '__name__', 'function')}: guarded cache is full "
                                      f"({self.max_entries} entries); running eagerly", stacklevel=3)
                        self._warned = True
            if sig is None and why_eager is None:
                sig = self._signature(names, values)
            if why_eager is None and sig is not None and sig in self._failed:
                why_eager = self._failed[sig]
                if why_eager.startswith(_RAISED):
                    # NOTE: eager raised at this signature (a bad request): run eagerly; where it
                    # runs now (other data), the signature is traced again at its next call
                    self._tls.last = (_K_EAGER, None, None, why_eager)
                    out = self._run_eagerly(record, why_eager, args, kwargs, background)
                    self._failed.pop(sig, None)
                    return out
            if why_eager is None and self.backend == "inductor" and self._compiles.value >= self.max_compiles:
                why_eager = self._limit()  # NOTE: a trace it could not compile: not even traced
            if why_eager is not None:
                return self._run_eagerly(record, why_eager, args, kwargs, background)
            # NOTE: the trace runs the program, and so makes its writes (batch norm's running
            # statistics in train mode, the random stream). Where the call is then run again
            # (eagerly, or by a training variant) or already ran (a background trace of a call
            # served eagerly), they are undone first, so each call makes them once, as eager does
            snapshot = _Snapshot.take(self.fn, values)
            training = self._trains() and self._grad(names, values) is not None
            try:
                try:
                    # NOTE: where the traced run fails, its writes are undone before eager runs it again
                    undo = functools.partial(snapshot.restore, rng=not background)
                    entry = self._trace(names, values, self.value_guards is True, undo)
                except DataDependentError:
                    if self.value_guards is not None:
                        raise
                    # NOTE: a decision on data: traced again recording it as a value bailout,
                    # what the first attempt ran undone
                    snapshot.restore(rng=not background)
                    entry = self._trace(names, values, True, undo)
            except _StateWritten as w:
                # NOTE: the call changed state it read (a counter, a cache it fills): a replay
                # would not make the change, and the next call reads another state. This call's
                # output is the traced run's own; no entry is kept, and a function that does so
                # twice in a row runs eagerly from then on
                self._traces.inc()
                self._writes += w.repeat
                why = f"the call changes state it reads: {w.why}" if w.repeat else w.why
                if self._writes >= 2:
                    self._always_eager = why
                self._log.append(f"{why}; no entry kept")
                if background:
                    snapshot.restore(rng=False)
                if training:
                    # NOTE: the traced run's output has no autograd history: eager runs the call
                    # again, its tensors put back first (state outside tensors, written twice)
                    snapshot.restore()
                    return self._run_eagerly(record, f"{why}; no entry kept (grad mode: run again eagerly)",
                                             args, kwargs, background)
                self._tls.last = (_K_TRACED, None, None, f"{why}; no entry kept")
                return w.output
            except EagerError as e:
                # NOTE: eager raises it too: the call's own error; the signature is remembered,
                # so a flood of such calls costs eager's time, not a trace each
                why = f"{_RAISED}{type(e).__name__}: {first_line(e)}"
                self._tls.last = (_K_EAGER, None, None, why)
                if sig is not None:
                    self._remember(sig, why)
                raise
            except GuardsolveError as e:
                # NOTE: a data-dependent branch, an op the tracer does not know: eager serves it,
                # and every later call of the same signature, without a trace
                why = f"cannot be traced: {type(e).__name__}: {first_line(e)}"
                if sig is not None:
                    self._remember(sig, why)
                snapshot.restore(rng=not background)  # NOTE: the trace ran part of the program
                return self._run_eagerly(record, why, args, kwargs, background)
            self._traces.inc()
            self._writes = 0
            if entry.trace.opaque or entry.trace.unreplayable is not None:
                # NOTE: its output holds traced values inside objects a replay cannot rebuild
                # (a model's cache object), or its random ops drew from a state set outside the
                # trace (a reseed): the call is served by the trace's own run, no entry is kept
                why = (f"{entry.trace.unreplayable}; no entry kept" if entry.trace.unreplayable else
                       "the trace's output holds objects a replay cannot rebuild; no entry kept")
                self._log.append(why)
                if sig is not None and entry.state is not None:
                    # NOTE: later calls at this signature, while the state holds (a model's
                    # `use_cache`), run eagerly: a trace each cost 555x eager (GPT-2 with its cache)
                    self._unservable[sig] = (why.replace("; no entry kept", ""), entry.state)
                if background:
                    snapshot.restore(rng=False)
                if training:
                    # NOTE: the traced run's output has no autograd history: eager runs the call
                    snapshot.restore()
                    return self._run_eagerly(record, why, args, kwargs, background)
                self._tls.last = (_K_TRACED, None, None, why)
                return entry.trace.output
            own_run = False
            grads = entry.state.requires_grad() if entry.state is not None and torch.is_grad_enabled() else []
            if torch.is_grad_enabled():
                grads += [f"input {n!r}" for n, v in zip(names, values) if isinstance(v, torch.Tensor) and v.requires_grad]
            if background or grads:
                snapshot.restore(rng=not background)
            if grads and entry.trace.grad_switch is not None:
                # NOTE: the joint graph would differentiate what ran without grad (an average kept
                # under `torch.no_grad()`): wrong gradients, and a buffer given autograd history
                entry.autograd = f"autograd: {entry.trace.grad_switch}"
            elif grads and training:
                # NOTE: autograd through Inductor: a joint forward and backward (see `compile_variant`)
                entry.train = True
                variant = self._compile(entry, values)
                if variant is not None:
                    entry.variants = (variant,)
                    self._save(entry, variant)
            elif grads:
                # NOTE: the trace recorded no autograd history: its output is not eager's. The
                # entry is kept, so later calls in this state run eagerly without tracing
                entry.autograd = (f"autograd: grad mode is on and {grads[0]} requires grad"
                                  + (f" (and {len(grads) - 1} more tensors the function reads)" if len(grads) > 1 else ""))
            elif self.backend == "inductor":
                variant = self._compile(entry, values)
                if variant is not None:
                    entry.variants = (variant,)
                    self._save(entry, variant)
            else:
                # NOTE: a replay that fails a decision on data after writing state would make the
                # writes twice (its own, then the trace of the other path): later calls run
                # eagerly; this call's output is its trace's own run, its writes made once
                entry.autograd = _writes_before_data(entry.trace)
                own_run = entry.autograd is not None
            # NOTE: published in one assignment, after the trace succeeded: a trace that raises
            # (KeyboardInterrupt too) leaves the entries as they were
            kept = self._entries
            if len(kept) >= self.max_entries:
                lru = min(kept, key=lambda e: e.last_used)
                kept = tuple(e for e in kept if e is not lru)
                self._evictions.inc()
            self._entries = (entry,) + kept if self.evict else kept + (entry,)
            out, entry.trace.output = entry.trace.output, None  # NOTE: the entry keeps no output alive
            if entry.autograd is not None and not own_run:
                return self._run_eagerly(record, entry.autograd, args, kwargs, background)
            if entry.train:
                # NOTE: the trace's own output has no autograd history: the compiled forward (or
                # eager) computes this call's
                if not entry.variants:
                    return self._run_eagerly(record, f"Inductor cannot compile this trace: {entry.uncompiled}",
                                             args, kwargs, background)
                self._tls.last = (_K_TRACED, entry, entry.variants[0], record)
                return entry.variants[0].run(*(values if entry.traced is None else [values[i] for i in entry.traced]))
            self._tls.last = (_K_TRACED, entry, entry.variants[0] if entry.variants else None, record)
            serve = entry.variants[0].run if entry.variants else entry.run if self.backend != "inductor" else None
            from guardsolve.jit.segments import pure

            if entry.trace.relaid and serve is not None and not background and pure(entry.trace):
                # NOTE: the trace copied an eager output into the strides its shape rule gives (a
                # convolution of a channels-last input comes out channels-last in eager,
                # contiguous by its shape rule): its output has eager's values, not its layout.
                # This call is served as every later call of the entry is (the replay: eager's
                # kernels on the call's own tensors); a trace that writes or draws keeps its run
                try:
                    return serve(*(values if entry.traced is None else [values[i] for i in entry.traced]))
                except Exception:  # NOTE: never an error eager does not have: the trace's own values
                    return out
            return out
        finally:
            if locked:
                self._lock.release()

    def _run_eagerly(self, record: "_Miss", why: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                     background: bool = False) -> Any:
        if background:  # NOTE: no caller waits for an output: fn is not run, nor counted
            record.note = f"background: not traced: {why}"
            self._tls.last = (_K_EAGER, None, None, why)
            return None
        record.note = f"ran eagerly: {why}"
        self._eager.inc()
        self._count_eager(why)
        self._tls.last = (_K_EAGER, None, None, why)
        return self.fn(*args, **kwargs)

    def _compile(self, entry: Entry, values: tuple[Any, ...]) -> Any:
        """A new Inductor variant of `entry`'s trace at these inputs, or None (with
        `entry.uncompiled` saying why)."""
        from guardsolve.jit.inductor import CompileFailure, compile_variant
        from guardsolve.errors import SolverError

        if self._compiles.value >= self.max_compiles:
            entry.uncompiled = self._limit()  # NOTE: its calls in its guards run eagerly from now on
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
        which = (f"variant {len(entry.variants)} of entry {self._entries.index(entry)}" if entry in self._entries
                 else "a new entry")
        try:
            with step(f"{self._name()}: compiling {which} with Inductor at {describe(entry.names, values)}"):
                v = compile_variant(entry.trace, entry.guards, traced, entry.static, entry.names, self.timeout_ms,
                                    save=self.cache_dir is not None, train=entry.train, segments=self._segments)
        except (CompileFailure, SolverError) as e:
            entry.uncompiled = str(e)
            return None
        finally:
            self._compile_s.append(time.perf_counter() - start)
        for _ in range(v.compiles):
            self._compiles.inc()
        if not v.check(*values):
            # NOTE: never trusted: the example it was compiled at must pass its own check
            entry.uncompiled = "the compiled variant's check rejects the inputs it was compiled at"
            return None
        return v

    def _remember(self, sig: Any, why: str) -> None:
        if len(self._failed) >= _MAX_FAILED:
            del self._failed[next(iter(self._failed))]
        self._failed[sig] = why

    def _limit(self) -> str:
        """The reason a call runs eagerly past `max_compiles`; a warning, once."""
        why = f"the compile limit is reached ({self.max_compiles} compiles: guarded(..., max_compiles=N) raises it)"
        if not self._warned_limit:
            self._warned_limit = True
            warnings.warn(f"{self._name()}: {why}; calls no compiled variant serves run eagerly", stacklevel=5)
        return why

    def _save(self, entry: Entry, variant: Any) -> None:
        if self.cache_dir is None:
            return
        try:
            why = self._open_store().save(entry, variant)
        except OSError as e:  # NOTE: the call's result stands; the entry is not saved (a full disk, a file in its way)
            why = f"not saved: {type(e).__name__}: {e}"
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
            self._log.extend(f"cache_dir: loaded through Inductor's compiler: {why}" for why in store.through_inductor)
            if loaded:
                self._entries = self._entries + tuple(loaded)
                self._loaded_variants += sum(len(e.variants) for e in loaded)
            self._loaded = True

    def _namespace(self) -> dict[str, Any]:
        """What a loaded check binds that only this process has (a module's training flags)."""
        mods = self._modules
        # NOTE: a loaded entry's `_disjoint_guard` checks the arguments against every tensor the
        # function reaches that needs no grad (the buffers: those it writes among them)
        buffers = [t for t in reachable_tensors(self.fn) if not t.requires_grad]
        out: dict[str, Any] = {"_s_disjoint": _disjoint, "_s_written": lambda: buffers}
        if mods is not None:
            out["_training"] = lambda: [m.training for m in mods]
        return out

    def _aliased(self, values: tuple[Any, ...]) -> str | None:
        """Why a call whose tensor arguments share memory runs eagerly (the function writes its
        arguments: a trace, and what is compiled from it, reads each as a buffer of its own), or None."""
        if not self._writes_args or _disjoint(*values, *self._written_state):
            return None
        return "tensor arguments share memory and the function writes its arguments"

    def _untraceable(self, names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
        """Why these arguments cannot be traced (so the call runs eagerly), or None."""
        for n, v in zip(names, values):
            if isinstance(v, torch.Tensor):
                if (type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter)) or (
                        v.layout is not torch.strided or v.is_quantized):
                    return f"argument {n!r} is a {type(v).__name__} with layout {v.layout}: only dense tensors trace"
            elif not is_static_value(v):
                return f"argument {n!r} ({type(v).__name__}) is neither traced nor comparable by value"
        if torch.is_grad_enabled() and not self._trains():
            grad = self._grad(names, values)
            if grad is not None:
                # NOTE: a trace records no autograd graph, so its first output would not be eager's
                if self.backend == "inductor":
                    return f"autograd: grad mode is on and {grad} requires grad (autograd='eager')"
                if not self._warned_grad:
                    warnings.warn(f"{getattr(self.fn, '__name__', type(self.fn).__name__)}: grad mode is on and {grad} "
                                  "requires grad: guarded runs such calls eagerly (wrap inference in "
                                  "torch.no_grad() or torch.inference_mode() to use its entries)", stacklevel=4)
                    self._warned_grad = True
                return f"autograd: grad mode is on and {grad} requires grad"
        return None

    def _trains(self) -> bool:
        """Whether calls that need autograd are served compiled (training variants)."""
        return self.backend == "inductor" and self.autograd == "compiled"

    def _grad(self, names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
        """An input or a tensor fn reaches that requires grad (in grad mode), by name, or None."""
        if not torch.is_grad_enabled():
            return None
        return next((f"input {n!r}" for n, v in zip(names, values)
                     if isinstance(v, torch.Tensor) and v.requires_grad), None) or reachable_grad(self.fn)

    def _trace(self, names: tuple[str, ...], values: tuple[Any, ...], value_guards: bool,
               undo: Callable[[], None] | None = None) -> Entry:
        traced = tuple(i for i, v in enumerate(values)
                       if isinstance(v, torch.Tensor) or (isinstance(v, int) and not isinstance(v, bool)))
        plain = len(traced) == len(values) and names == self._leading[min(len(names), len(self._leading) - 1)]
        fn = self.fn if plain else self._partial(names, values, traced)
        with step(f"{self._name()}: tracing at {describe(names, values)}"), recording(self.fn) as rec:
            t = trace(fn, *[values[i] for i in traced], value_guards=value_guards, undo=undo)
            if rec.type_check is not None:
                # NOTE: eager's plain tensor and the trace's subclass take the two sides of it
                raise UnsupportedOpError("type(x)", f"the program compares type(x) with torch.Tensor "
                                                    f"({rec.type_check}), which a traced tensor fails")
            wrote = StateCheck.of(rec).failure()  # NOTE: what the call itself changed
            if wrote is not None:
                # NOTE: before exploring other sizes, which would run the program (and its
                # writes) again
                raise _StateWritten(t.output, wrote)
            written = writes_unmade(t)
            if written:
                self._writes_args = True
                state = [t.constants[n] for n in written if n in t.constants]
                self._written_state.extend(x for x in state if not any(x is y for y in self._written_state))
                if not _disjoint(*values, *state):
                    raise _StateWritten(t.output, self._aliased(values) or "", repeat=False)
            static, gs = self._guards(t, names, values, traced)
        state = StateCheck.of(rec)
        t.inputs = t.recorded = None  # NOTE: the entry keeps its trace, not the call's tensors (nor its recorder)
        run = compile_replay(t.graph, t.out_spec, t.constants) if self.backend == "replay" else _no_replay
        assert gs.entry_check is not None
        entry = Entry(t, gs, run, names, None if plain or len(traced) == len(values) else traced, gs.entry_check,
                      next(self._clock), static=tuple(static), state=state)
        bind_state(entry)
        return entry

    def _guards(self, t: Trace, names: tuple[str, ...], values: tuple[Any, ...],
                traced: tuple[int, ...]) -> tuple[list[StaticGuard], GuardSet]:
        # NOTE: the trace's own static guards speak of its inputs; the ambient state a call
        # runs in (grad mode, default dtype, a module's modes) is the cache's to check
        static = list(t.static) + state_guards() + [autocast_guard()]
        static += [value_guard(names[i], values[i]) for i in range(len(values)) if i not in traced]
        tensors = [n for n, v in zip(names, values) if isinstance(v, torch.Tensor)]
        written = writes_unmade(t)
        state = tuple(n for n in written if n in t.constants)
        if written and (len(tensors) > 1 or tensors and state):
            consts = t.constants  # NOTE: the live tensors (`bind_state` rebinds them here)
            static.append(_disjoint_guard(tensors, lambda: [consts[n] for n in state]))
        if self._modules is not None:
            static.append(self._training_guard())
        # NOTE: a trace no entry keeps is not explored (that would run the program again: a user
        # generator's draws)
        explore = self.explore and t.unreplayable is None and not t.opaque
        gs = simplify(t, timeout_ms=self.timeout_ms, explore=explore).with_static(static, names)
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

    # -- serving: warm-up, the background, the last call -------------------------------------

    @property
    def last_call(self) -> Served | None:
        """How this thread's last call was served (None before its first call); cheap: a hit
        stores a reference, the words are made when read.

        >>> import torch
        >>> f = guarded(lambda x: x * 2)
        >>> _ = f(torch.ones(3)); print(f.last_call.how)
        traced
        >>> _ = f(torch.ones(5)); print(f.last_call)
        replayed: entry 0's guards hold
        """
        last = getattr(self._tls, "last", None)
        if last is None:
            return None
        kind, e, v, extra = last
        entries = self._entries
        i = entries.index(e) if e is not None and e in entries else None
        j = e.variants.index(v) if v is not None and e is not None and v in e.variants else None
        name = f"entry {i}" if i is not None else "an evicted entry"
        if kind is _K_HIT:
            return (Served("compiled", i, j, f"{name}, variant {j}: its check holds") if v is not None
                    else Served("replayed", i, None, f"{name}'s guards hold"))
        if kind is _K_EAGER:
            return Served("eager", i, j, extra)
        first = "; ".join(extra.reasons()[:2]) if isinstance(extra, _Miss) else str(extra)
        if kind is _K_VARIANT:
            return Served("compiled", i, j, f"made variant {j} of {name} now: {first}")
        made = f"made {name}" + (f" and compiled its variant {j}" if j is not None else "") if e is not None else "no entry"
        if e is not None and e.uncompiled is not None:
            made += f" (Inductor cannot compile it: its calls run eagerly: {e.uncompiled[:200]})"
        return Served("traced", i, j, f"{made}; missed because: {first}" if isinstance(extra, _Miss) else first)

    def warm_up(self, *calls: Any) -> tuple[Served, ...]:
        """Serve each example call now, so that the entries (and, with Inductor, the compiled
        variants) a server needs exist before its traffic, and are saved where `cache_dir` is
        set. A call is a tuple of positional arguments, a dict of keyword arguments, or one
        tensor; any argument may be an `Example` (a shape and dtype). Run it in the modes the
        calls will come in (`torch.no_grad()`, `torch.autocast`): they are part of every check.
        Returns how each was served; outputs are dropped.

        >>> import torch
        >>> f = guarded(lambda x, y: x @ y)
        >>> for s in f.warm_up((Example((2, 3)), Example((3, 4))), (Example((8, 3)), Example((3, 1)))):
        ...     print(s.how, s.entry)
        traced 0
        replayed 0
        """
        out = []
        for call in calls:
            args, kwargs = _example_call(call)
            with self._lock:  # NOTE: waits for a trace of another thread: never eager for that
                self(*args, **kwargs)
            last = self.last_call
            assert last is not None
            out.append(last)
        return tuple(out)

    def wait_background(self, timeout: float | None = None) -> bool:
        """Wait until the calls queued while another thread traced are traced (and compiled);
        True when none is left."""
        with self._lock_pending:
            worker = self._worker
        if worker is not None:
            worker.join(timeout)
        with self._lock_pending:
            return not self._pending and self._worker is None

    def _queue(self, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
               values: tuple[Any, ...]) -> None:
        """Keep a copy of a call that ran eagerly while another thread traced, and have the
        background trace it once the lock is free (at most `_MAX_PENDING` at a time, one per
        signature: the guards read only shapes, strides, dtypes, flags and pinned values)."""
        key = self._signature(names, values)
        if key is None:
            return
        modes = key[1]
        with self._lock_pending:
            if key in self._pending or len(self._pending) >= _MAX_PENDING:
                return
        copy = _copied(args), {k: _copied(v) for k, v in kwargs.items()}
        if copy[0] is None or None in copy[1].values():
            return  # NOTE: a copy would not have the same strides: left to the next call
        with self._lock_pending:
            if key in self._pending or len(self._pending) >= _MAX_PENDING:
                return
            self._pending[key] = (copy[0], copy[1], modes)  # type: ignore[assignment]
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=f"guardsolve:{self._name()}", daemon=True)
                self._worker.start()

    def _signature(self, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
        """What every guard of a call reads, as a key: names, each tensor's shape, strides,
        dtype, device and requires_grad, each other argument's value, the thread's modes and
        the module's training flags; None where an argument cannot be keyed by value."""
        parts: list[Any] = [names]
        for v in values:
            if isinstance(v, torch.Tensor):
                parts.append((tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, v.device, v.requires_grad))
            elif is_static_value(v):
                parts.append(value_key(v))
            else:
                return None
        if self._modules is not None:
            parts.append(tuple(m.training for m in self._modules))
        modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), autocast_state())
        return (tuple(parts), modes, torch.get_default_dtype(), global_modes())

    def _work(self) -> None:
        """The background: trace each queued call that no entry serves yet, one at a time,
        holding the tracing lock (hits go on; other misses run eagerly and queue)."""
        while True:
            with self._lock_pending:
                if not self._pending:
                    self._worker = None
                    return
                key = next(iter(self._pending))
                args, kwargs, modes = self._pending[key]
            try:
                with self._lock, _modes(*modes):
                    names, values = self._bind(args, kwargs)
                    full = len(self._entries) >= self.max_entries and not self.evict
                    if not (full or self._always_eager or any(self._serves(e, names, values) for e in self._entries)):
                        self._miss(args, kwargs, names, values, (), background=True)
                        self._log.append(f"background: traced a call that ran eagerly while another thread "
                                         f"traced ({describe(names, values)}): {self.last_call}")
            except BaseException as e:  # NOTE: fn's own error, eager's: logged, nothing published
                self._log.append(f"background: {type(e).__name__}: {first_line(e)}")
            finally:
                with self._lock_pending:
                    self._pending.pop(key, None)

    def _serves(self, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> bool:
        """Whether `e` serves these inputs (compiled, replayed or eagerly for a reason it knows),
        without running it."""
        if e.names != names:
            return False
        if self.backend == "inductor" and e.autograd is None and e.uncompiled is None:
            ok = any(v.check(*values) for v in e.variants)
        else:
            ok = bool(e.check(*values))
        return ok and (e.state is None or e.state())

    def _name(self) -> str:
        return getattr(self.fn, "__name__", None) or type(self.fn).__name__

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
                         round(sum(self._store.load_seconds), 3) if self._store is not None else 0.0,
                         len(self._pending))

    def cache_clear(self) -> None:
        with self._lock:
            self._reset()


def _writes_before_data(t: Trace) -> str | None:
    """Why a replay of `t` cannot serve calls: it writes state it did not make before a decision
    on data (`segments.state_writes`); None otherwise."""
    from guardsolve.jit.segments import Plan, has_data, state_writes

    if not has_data(t.graph):
        return None
    why = state_writes(Plan.of(t))
    return None if why is None else f"the trace cannot be cut where it reads data: {why}"


@dataclass
class _Snapshot:
    """What a trace may write, copied before it runs: the tensors fn reaches that do not
    require grad (buffers), the tensor arguments that do not, and the CPU random generator's
    state. `restore()` puts them back."""

    tensors: list[tuple[torch.Tensor, torch.Tensor]]
    rng: torch.Tensor
    # NOTE: the program's own generators (an argument, a global, a closure cell) and their
    # states: a failed trace's draw from one is undone as the default generator's is
    generators: list[tuple[torch.Generator, torch.Tensor]] = field(default_factory=list)

    @staticmethod
    def take(fn: Any, values: tuple[Any, ...]) -> "_Snapshot":
        seen: set[int] = set()
        kept = []
        for t in [*reachable_tensors(fn), *(v for v in values if isinstance(v, torch.Tensor))]:
            if id(t) not in seen and not t.requires_grad:
                seen.add(id(t))
                kept.append((t, t.detach().clone()))
        gens = {id(g): g for g in [*reachable_generators(fn), *(v for v in values if isinstance(v, torch.Generator))]}
        return _Snapshot(kept, torch.random.get_rng_state(), [(g, g.get_state()) for g in gens.values()])

    def restore(self, rng: bool = True) -> None:
        """Put the tensors back (and, with `rng`, the random generator's state: not from a
        background thread, whose callers draw from it meanwhile)."""
        with torch.no_grad():
            for t, saved in self.tensors:
                if t.shape == saved.shape and not torch.equal(t, saved):
                    t.copy_(saved)
        if rng:
            torch.random.set_rng_state(self.rng)
            for g, state in self.generators:
                g.set_state(state)


# NOTE: after this many variants of one trace that each pin every size, no more are compiled
_PINNED_VARIANTS = 2
_PIN = re.compile(r"^(\w+) == -?\d+$")


def _pins_every_size(v: Any) -> bool:
    """Whether the variant's check fixes every dim of its sizes to one value (`x0 == 4`, ...)."""
    pinned = {m.group(1) for c in v.guards.constraints if (m := _PIN.match(c.text))}
    return bool(v.guards.dims) and set(v.guards.dims) <= pinned


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
                v.run.__globals__[f"_c{j}"] = new

    state.on_rebind.append(rebind)


def _summary(lines: list[str], most: int = 40) -> list[str]:
    return lines if len(lines) <= most else lines[:most] + [f"... and {len(lines) - most} more (Entry.state.lines())"]


class _StateWritten(Exception):
    """The traced call changed state it read: its output, and what changed. `repeat`: a reason
    that, twice in a row, makes the function run eagerly from then on."""

    def __init__(self, output: Any, why: str, repeat: bool = True) -> None:
        super().__init__(why)
        self.output, self.why, self.repeat = output, why, repeat


def _disjoint(*values: Any) -> bool:
    """Whether no two of the tensor arguments share storage (`f(x, x)`, `f(x[1:], x[:-1])`).

    >>> x = torch.ones(4)
    >>> _disjoint(x, torch.ones(4), 2), _disjoint(x, x), _disjoint(x[1:], x[:-1])
    (True, False, False)
    """
    ptrs = [v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)]
    return len(set(ptrs)) == len(ptrs)


def _disjoint_guard(names: Sequence[str], written: Callable[[], list[torch.Tensor]]) -> StaticGuard:
    """The tensor arguments `names` share no storage, with each other nor with the state the
    trace writes (`written()`: a buffer updated in place): a trace that writes one of them
    computed what the others hold from values the write does not change (a compiled entry reads
    each as its own buffer)."""
    args = ", ".join(names)
    return StaticGuard(f"tensor arguments {args} share no memory (with each other, nor with the state the function "
                       "writes)", f"_s_disjoint({args}, *_s_written())", f"_s_disjoint({args}, *_s_written())",
                       (("_s_disjoint", _disjoint), ("_s_written", written)))


_MISS = object()
_DIVERGED = object()  # NOTE: a miss where the entry's segments ran and the data took another path
# NOTE: how a call was served, as `_tls.last` records it (`last_call` words it)
_K_HIT, _K_EAGER, _K_TRACED, _K_VARIANT = "hit", "eager", "traced", "variant"
_MAX_PENDING = 8
_MAX_FAILED = 1024  # NOTE: signatures remembered as untraceable (the oldest dropped first)
_RAISED = "eager raised at these inputs' signature: "


def _copied(v: Any) -> Any:
    """A copy of a call's argument for the background (tensors cloned with their strides,
    detached with their requires_grad; containers copied), or None where a tensor's copy would
    not have its strides."""
    if isinstance(v, torch.Tensor):
        if v.storage_offset() != 0:
            return None  # NOTE: a view's offset is not kept by clone; the guards may read it
        c = v.detach().clone()
        if c.stride() != v.stride():
            return None
        return c.requires_grad_(v.requires_grad) if v.requires_grad else c
    if isinstance(v, (tuple, list)):
        items = [_copied(x) for x in v]
        return None if any(x is None and y is not None for x, y in zip(items, v)) else type(v)(items)
    return v


@contextlib.contextmanager
def _modes(grad: bool, inference: bool, cast: tuple[tuple[str, torch.dtype], ...]) -> Iterator[None]:
    """The thread-local modes a queued call ran in, in the background's thread."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode() if inference else torch.set_grad_enabled(grad))
        for device, dtype in cast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        yield


def _example_call(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`warm_up`'s call as (args, kwargs), each `Example` made into a tensor."""
    def made(v: Any) -> Any:
        return v.make() if isinstance(v, Example) else v

    if isinstance(call, dict):
        return (), {k: made(v) for k, v in call.items()}
    if isinstance(call, (tuple, list)):
        return tuple(made(v) for v in call), {}
    return (made(call),), {}
_EAGER = object()  # NOTE: `_try`'s answer where the entry's trace fits but Inductor cannot serve it
BACKENDS = ("replay", "inductor")


def _never(*args: Any, **kwargs: Any) -> bool:
    """A loaded entry has no trace: its trace guards never claim an input (a miss traces anew)."""
    return False


def _no_replay(*args: Any) -> Any:
    raise AssertionError("the Inductor backend runs its variants, not a replay")


def guarded(fn: Callable[..., Any] | None = None, *, max_entries: int = 8, evict: bool = False,
            value_guards: bool | None = None, timeout_ms: int = 5000, miss_history: int = 32,
            explore: bool | int = True, backend: str = "replay", cache_dir: str | None = None,
            max_compiles: int = 16, autograd: str = "compiled") -> Any:
    """Decorator: cache traces of `fn` and reuse one whenever its guards accept the inputs.

    Each entry's guards are exact to its trace (`simplify`'s `explore`): a miss traces `fn`
    again at sizes 0 and 1 and merges the routes that record the same trace, so a batch-1
    call of an MLP hits the entry its batch-2 call made. `explore=False` keeps each trace's own
    route (fewer calls of `fn` per miss; more misses).

    Past `max_entries` a miss runs `fn` eagerly with a warning, or, with `evict=True`, drops the
    least recently used entry. Past `max_compiles` Inductor compiles (variants of all entries,
    this process's), calls no variant serves run eagerly, with a warning once. A call that
    cannot be traced is remembered by its signature (shapes, strides, dtypes, values, modes):
    later calls of that signature run eagerly without a trace. `miss_history` bounds `cache_info().miss_reasons` (the last
    misses'). A solver timeout (`timeout_ms`) keeps the constraint it could not decide.

    `backend="replay"` (the default) replays a trace op by op; `backend="inductor"` compiles
    it with Inductor behind one proven check (the trace's guards and Inductor's), one or more
    variants per trace (`jit/inductor.py`). `cache_dir` (Inductor only) saves each compiled
    entry there and loads the matching ones in a later process (`jit/store.py`); the directory
    is trusted as Inductor's own cache directory is (it holds pickles and generated code).

    Calls in grad mode where an input or a tensor `fn` reads requires grad (training): with
    Inductor and `autograd="compiled"` (the default), a training variant serves them, a
    forward and a backward compiled from one joint graph; `autograd="eager"` runs them eagerly
    (a second-order gradient, `create_graph=True` then a backward of the gradient, needs it:
    a compiled backward is not differentiable). The replay backend runs them eagerly.

    A program that decides on tensor data (`if x.mean().item() > 0:`, `if tok.numel() == 0:`
    after a `nonzero`): with `value_guards=None` (the default) a call whose trace raises
    `DataDependentError` is traced again with value guards (`trace(..., value_guards=True)`),
    the program's writes undone in between; `True` always records them, `False` never (such
    calls run eagerly, remembered by signature). With Inductor such a trace is served as
    compiled segments cut where it reads data (`jit/segments.py`).
    """
    def wrap(f: Callable[..., Any]) -> GuardedFunction:
        return GuardedFunction(f, max_entries, evict, value_guards, timeout_ms, miss_history, explore, backend,
                               cache_dir, max_compiles, autograd)
    return wrap(fn) if fn is not None else wrap
