"""`guarded(fn)`: a cache of traces keyed by their guards (why guards exist).

Two backends run an entry. `backend="replay"` (the default) replays the trace op by op
(`trace/replay.py`). `backend="inductor"` compiles it with Inductor (`jit/inductor/`): an
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
import threading
from collections import deque
from typing import Any, Callable
import torch
from guardsolve.jit.counter import Counter as _Counter
from guardsolve.trace.state import StateCheck
from guardsolve.trace.static import autocast_state, global_modes
from guardsolve.trace.tracer import is_traced, tracing
from guardsolve.jit.backends import BACKENDS, Backend
from guardsolve.jit.background import queue_call, wait_background
from guardsolve.jit.entry import CacheInfo, Entry, POSITIONAL
from guardsolve.jit.hit import first_call, try_entry
from guardsolve.jit.miss import miss_call
from guardsolve.jit.misses import Miss
from guardsolve.jit.served import DIVERGED, EAGER, K_EAGER, MISS, Served, last_call
from guardsolve.jit.warmup import warm_up


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
        self.engine: Backend = BACKENDS[backend]()
        if cache_dir is not None and not self.engine.keeps_entries:
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
        lead = list(itertools.takewhile(lambda p: p.kind in POSITIONAL, params))
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
        self._log: deque[Miss | str] = deque(maxlen=self.miss_history)
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
            self.engine.load(self)
        names, values = self._bind(args, kwargs)
        entries = self._entries
        diverged = False
        for e in entries:
            out = try_entry(self, e, names, values)
            if out is DIVERGED:
                diverged = True
            elif out is not MISS:
                if diverged:
                    first_call(self, e)
                return self.fn(*args, **kwargs) if out is EAGER else out
        return miss_call(self, args, kwargs, names, values, entries)


    def _try(self, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
        return try_entry(self, e, names, values)


    def _count_eager(self, why: str) -> None:
        with self._lock_eager:
            self._eager_why[why] = self._eager_why.get(why, 0) + 1

    def _ran_eagerly(self, why: str, entry: Any = None, variant: Any = None) -> None:
        """Count a call served eagerly, with its reason (kept for `last_call`)."""
        self._eager.inc()
        self._count_eager(why)
        self._tls.last = (K_EAGER, entry, variant, why)

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

    def _queue(self, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
               values: tuple[Any, ...]) -> None:
        return queue_call(self, args, kwargs, names, values)

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
              values: tuple[Any, ...], seen: tuple[Entry, ...], background: bool = False) -> Any:
        return miss_call(self, args, kwargs, names, values, seen, background)


    def _trains(self) -> bool:
        """Whether calls that need autograd are served compiled (training variants)."""
        return self.engine.trains and self.autograd == "compiled"


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
        return last_call(self)

    def warm_up(self, *calls: Any) -> tuple[Served, ...]:
        """Serve each example call now, so that the entries (and, with Inductor, the compiled
        variants) a server needs exist before its traffic, and are saved where `cache_dir` is
        set. A call is a tuple of positional arguments, a dict of keyword arguments, or one
        tensor; any argument may be an `Example` (a shape and dtype). Run it in the modes the
        calls will come in (`torch.no_grad()`, `torch.autocast`): they are part of every check.
        Returns how each was served; outputs are dropped.

        >>> import torch
        >>> from guardsolve.jit.warmup import Example
        >>> f = guarded(lambda x, y: x @ y)
        >>> for s in f.warm_up((Example((2, 3)), Example((3, 4))), (Example((8, 3)), Example((3, 1)))):
        ...     print(s.how, s.entry)
        traced 0
        replayed 0
        """
        return warm_up(self, *calls)

    def wait_background(self, timeout: float | None = None) -> bool:
        """Wait until the calls queued while another thread traced are traced (and compiled);
        True when none is left."""
        return wait_background(self, timeout)


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
    variants per trace (`jit/inductor/`). `cache_dir` (Inductor only) saves each compiled
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
    compiled segments cut where it reads data (`jit/segments/`).
    """
    def wrap(f: Callable[..., Any]) -> GuardedFunction:
        return GuardedFunction(f, max_entries, evict, value_guards, timeout_ms, miss_history, explore, backend,
                               cache_dir, max_compiles, autograd)
    return wrap(fn) if fn is not None else wrap
