"""The miss path: a call no entry serves is traced into a new entry, or run eagerly with its reason."""

from __future__ import annotations

import functools
import warnings
from typing import Any
import torch
from guardsolve.errors import DataDependentError, EagerError, GuardsolveError, first_line
from guardsolve.trace.state import reachable_grad
from guardsolve.trace.static import autocast_state, global_modes, is_static_value, value_key
from guardsolve.jit.aliasing import aliased
from guardsolve.jit.entry import Entry
from guardsolve.jit.hit import try_entry
from guardsolve.jit.make_entry import trace_entry
from guardsolve.jit.misses import Miss
from guardsolve.jit.served import DIVERGED, EAGER, K_EAGER, K_TRACED, MISS
from guardsolve.jit.snapshots import Snapshot, StateWritten
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


_MAX_FAILED = 1024  # NOTE: signatures remembered as untraceable (the oldest dropped first)


_RAISED = "eager raised at these inputs' signature: "


def miss_call(gf: GuardedFunction, args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
              values: tuple[Any, ...], seen: tuple[Entry, ...], background: bool = False) -> Any:
    """A call no entry in `seen` served, in named stages: a signature remembered as eager's,
    an entry published since, another variant of an entry, why not to trace now, the trace,
    what its entry needs for autograd, publishing it, and this call's output."""
    sig = signature_of(gf, names, values) if gf._failed or gf._unservable else None
    if sig is not None and not background:
        # NOTE: a signature remembered as untraceable: eager's cost plus the lookup (no record:
        # `eager_reasons` counts it)
        why = remembered_eager(gf, sig)
        if why is not None:
            gf._misses.inc()
            gf._ran_eagerly(why)
            return gf.fn(*args, **kwargs)
    why_eager = gf._always_eager or untraceable(gf, names, values) or aliased(gf, values)
    locked = why_eager is None and gf._lock.acquire(blocking=False)
    try:
        if locked:
            out = published_since(gf, seen, names, values, args, kwargs)
            if out is not MISS:
                return out
        if not background:  # NOTE: the background's work is no call: hits + misses count calls
            gf._misses.inc()
        record = Miss(gf._entries if locked else seen, names, values, gf._state())
        gf._log.append(record)
        if locked:
            served = gf.engine.another_variant(gf, record, names, values)
            if served is not None:
                if not isinstance(served, str):
                    return served[0]
                why_eager = served
        if why_eager is None:
            why_eager = not_now(gf, locked, args, kwargs, names, values)
        if sig is None and why_eager is None:
            sig = signature_of(gf, names, values)
        if why_eager is None and sig is not None and sig in gf._failed:
            why_eager = gf._failed[sig]
            if why_eager.startswith(_RAISED):
                # NOTE: eager raised at this signature (a bad request): run eagerly; where it
                # runs now (other data), the signature is traced again at its next call
                gf._tls.last = (K_EAGER, None, None, why_eager)
                out = run_eagerly(gf, record, why_eager, args, kwargs, background)
                gf._failed.pop(sig, None)
                return out
        if why_eager is None:
            why_eager = gf.engine.over_limit(gf)  # NOTE: a trace it could not compile: not even traced
        if why_eager is not None:
            return run_eagerly(gf, record, why_eager, args, kwargs, background)
        return trace_and_keep(gf, record, sig, args, kwargs, names, values, background)
    finally:
        if locked:
            gf._lock.release()


def remembered_eager(gf: GuardedFunction, sig: Any) -> str | None:
    """Why a call of this signature runs eagerly without a trace, where that is remembered: its
    trace's output could not be replayed while the state it read still holds, or it could not be
    traced (not where eager itself raised: that signature is traced again)."""
    known = gf._unservable.get(sig)
    if known is not None and known[1]():
        return known[0]
    why = gf._failed.get(sig)
    return why if why is not None and not why.startswith(_RAISED) else None


def published_since(gf: GuardedFunction, seen: tuple[Entry, ...], names: tuple[str, ...], values: tuple[Any, ...],
                    args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of an entry another thread published after this call looked, or MISS."""
    for e in gf._entries:
        if e not in seen:
            out = try_entry(gf, e, names, values)
            if out is not MISS and out is not DIVERGED:
                return gf.fn(*args, **kwargs) if out is EAGER else out
    return MISS


def not_now(gf: GuardedFunction, locked: bool, args: tuple[Any, ...], kwargs: dict[str, Any],
            names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
    """Why this call is not traced now though it could be: another thread holds the lock (the
    call is queued for the background), or the cache is full and does not evict; else None."""
    if not locked:
        gf._queue(args, kwargs, names, values)
        return "another thread is tracing this function"
    if len(gf._entries) >= gf.max_entries and not gf.evict:
        if not gf._warned:
            warnings.warn(f"{getattr(gf.fn, '__name__', 'function')}: guarded cache is full "
                          f"({gf.max_entries} entries); running eagerly", stacklevel=4)
            gf._warned = True
        return f"the cache is full ({gf.max_entries} entries)"
    return None


def trace_and_keep(gf: GuardedFunction, record: Miss, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                   names: tuple[str, ...], values: tuple[Any, ...], background: bool) -> Any:
    """Trace the call, keep its entry where a replay can serve it, and give this call's output."""
    # NOTE: the trace runs the program, and so makes its writes (batch norm's running
    # statistics in train mode, the random stream). Where the call is then run again
    # (eagerly, or by a training variant) or already ran (a background trace of a call
    # served eagerly), they are undone first, so each call makes them once, as eager does
    snapshot = Snapshot.take(gf.fn, values)
    training = gf._trains() and grad_reason(gf, names, values) is not None
    match traced(gf, record, sig, snapshot, training, args, kwargs, names, values, background):
        case ("served", out):
            return out
        case ("entry", entry):
            pass
    gf._traces.inc()
    gf._writes = 0
    if entry.trace.opaque or entry.trace.unreplayable is not None:
        return unkept(gf, entry, record, sig, snapshot, training, args, kwargs, background)
    own_run = plan_autograd(gf, entry, names, values, snapshot, training, background)
    publish(gf, entry)
    return first_output(gf, entry, record, own_run, args, kwargs, values, background)


def traced(gf: GuardedFunction, record: Miss, sig: Any, snapshot: Snapshot, training: bool,
           args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...], values: tuple[Any, ...],
           background: bool) -> tuple[str, Any]:
    """("entry", the call's new entry), or ("served", the call's output) where the trace kept none:
    the call wrote state it reads, or could not be traced and ran eagerly. Eager's own error is
    raised, its signature remembered."""
    try:
        try:
            # NOTE: where the traced run fails, its writes are undone before eager runs it again
            undo = functools.partial(snapshot.restore, rng=not background)
            return ("entry", trace_entry(gf, names, values, gf.value_guards is True, undo))
        except DataDependentError:
            if gf.value_guards is not None:
                raise
            # NOTE: a decision on data: traced again recording it as a value bailout,
            # what the first attempt ran undone
            snapshot.restore(rng=not background)
            return ("entry", trace_entry(gf, names, values, True, undo))
    except StateWritten as w:
        # NOTE: the call changed state it read (a counter, a cache it fills): a replay
        # would not make the change, and the next call reads another state. This call's
        # output is the traced run's own; no entry is kept, and a function that does so
        # twice in a row runs eagerly from then on
        gf._traces.inc()
        gf._writes += w.repeat
        why = f"the call changes state it reads: {w.why}" if w.repeat else w.why
        if gf._writes >= 2:
            gf._always_eager = why
        gf._log.append(f"{why}; no entry kept")
        if background:
            snapshot.restore(rng=False)
        if training:
            # NOTE: the traced run's output has no autograd history: eager runs the call
            # again, its tensors put back first (state outside tensors, written twice)
            snapshot.restore()
            return ("served", run_eagerly(gf, record, f"{why}; no entry kept (grad mode: run again eagerly)",
                                          args, kwargs, background))
        gf._tls.last = (K_TRACED, None, None, f"{why}; no entry kept")
        return ("served", w.output)
    except EagerError as e:
        # NOTE: eager raises it too: the call's own error; the signature is remembered,
        # so a flood of such calls costs eager's time, not a trace each
        why = f"{_RAISED}{type(e).__name__}: {first_line(e)}"
        gf._tls.last = (K_EAGER, None, None, why)
        if sig is not None:
            remember(gf, sig, why)
        raise
    except GuardsolveError as e:
        # NOTE: a data-dependent branch, an op the tracer does not know: eager serves it,
        # and every later call of the same signature, without a trace
        why = f"cannot be traced: {type(e).__name__}: {first_line(e)}"
        if sig is not None:
            remember(gf, sig, why)
        snapshot.restore(rng=not background)  # NOTE: the trace ran part of the program
        return ("served", run_eagerly(gf, record, why, args, kwargs, background))


def unkept(gf: GuardedFunction, entry: Entry, record: Miss, sig: Any, snapshot: Snapshot, training: bool,
           args: tuple[Any, ...], kwargs: dict[str, Any], background: bool) -> Any:
    """The output of a trace no replay can serve, so no entry is kept: its output holds traced
    values inside objects a replay cannot rebuild (a model's cache object), or its random ops
    drew from a state set outside the trace (a reseed). The call is served by the trace's own run."""
    why = (f"{entry.trace.unreplayable}; no entry kept" if entry.trace.unreplayable else
           "the trace's output holds objects a replay cannot rebuild; no entry kept")
    gf._log.append(why)
    if sig is not None and entry.state is not None:
        # NOTE: later calls at this signature, while the state holds (a model's
        # `use_cache`), run eagerly: a trace each cost 555x eager (GPT-2 with its cache)
        gf._unservable[sig] = (why.replace("; no entry kept", ""), entry.state)
    if background:
        snapshot.restore(rng=False)
    if training:
        # NOTE: the traced run's output has no autograd history: eager runs the call
        snapshot.restore()
        return run_eagerly(gf, record, why, args, kwargs, background)
    gf._tls.last = (K_TRACED, None, None, why)
    return entry.trace.output


def plan_autograd(gf: GuardedFunction, entry: Entry, names: tuple[str, ...], values: tuple[Any, ...],
                  snapshot: Snapshot, training: bool, background: bool) -> bool:
    """Settle what a new entry does in grad mode (train through Inductor, or run eagerly with
    the reason) and prepare it for its backend; True where preparing ran this call already."""
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
        gf.engine.prepare(gf, entry, values)
    elif grads:
        # NOTE: the trace recorded no autograd history: its output is not eager's. The
        # entry is kept, so later calls in this state run eagerly without tracing
        entry.autograd = (f"autograd: grad mode is on and {grads[0]} requires grad"
                          + (f" (and {len(grads) - 1} more tensors the function reads)" if len(grads) > 1 else ""))
    else:
        return bool(gf.engine.prepare(gf, entry, values))
    return False


def publish(gf: GuardedFunction, entry: Entry) -> None:
    """Add the entry to the cache, the least recently used one evicted where it is full."""
    # NOTE: published in one assignment, after the trace succeeded: a trace that raises
    # (KeyboardInterrupt too) leaves the entries as they were
    kept = gf._entries
    if len(kept) >= gf.max_entries:
        lru = min(kept, key=lambda e: e.last_used)
        kept = tuple(e for e in kept if e is not lru)
        gf._evictions.inc()
    gf._entries = (entry,) + kept if gf.evict else kept + (entry,)


def first_output(gf: GuardedFunction, entry: Entry, record: Miss, own_run: bool, args: tuple[Any, ...],
                 kwargs: dict[str, Any], values: tuple[Any, ...], background: bool) -> Any:
    """The output of the call that made a published entry: the trace's own run's, eager's where
    the entry refuses autograd, or the entry's first variant's where the trace's would not be eager's."""
    out, entry.trace.output = entry.trace.output, None  # NOTE: the entry keeps no output alive
    if entry.autograd is not None and not own_run:
        return run_eagerly(gf, record, entry.autograd, args, kwargs, background)
    inputs = values if entry.traced is None else [values[i] for i in entry.traced]
    if entry.train:
        # NOTE: the trace's own output has no autograd history: the compiled forward (or
        # eager) computes this call's
        if not entry.variants:
            return run_eagerly(gf, record, f"Inductor cannot compile this trace: {entry.uncompiled}",
                               args, kwargs, background)
        gf._tls.last = (K_TRACED, entry, entry.variants[0], record)
        return entry.variants[0].run(*inputs)
    gf._tls.last = (K_TRACED, entry, entry.variants[0] if entry.variants else None, record)
    serve = entry.variants[0].run if entry.variants else gf.engine.first_runner(entry)
    from guardsolve.jit.segments.writes import pure

    if entry.trace.relaid and serve is not None and not background and pure(entry.trace):
        # NOTE: the trace copied an eager output into the strides its shape rule gives (a
        # convolution of a channels-last input comes out channels-last in eager,
        # contiguous by its shape rule): its output has eager's values, not its layout.
        # This call is served as every later call of the entry is (the replay: eager's
        # kernels on the call's own tensors); a trace that writes or draws keeps its run
        try:
            return serve(*inputs)
        except Exception:  # NOTE: never an error eager does not have: the trace's own values
            return out
    return out


def run_eagerly(gf: GuardedFunction, record: "Miss", why: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                 background: bool = False) -> Any:
    if background:  # NOTE: no caller waits for an output: fn is not run, nor counted
        record.note = f"background: not traced: {why}"
        gf._tls.last = (K_EAGER, None, None, why)
        return None
    record.note = f"ran eagerly: {why}"
    gf._ran_eagerly(why)
    return gf.fn(*args, **kwargs)


def remember(gf: GuardedFunction, sig: Any, why: str) -> None:
    if len(gf._failed) >= _MAX_FAILED:
        del gf._failed[next(iter(gf._failed))]
    gf._failed[sig] = why


def untraceable(gf: GuardedFunction, names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
    """Why these arguments cannot be traced (so the call runs eagerly), or None."""
    for n, v in zip(names, values):
        if isinstance(v, torch.Tensor):
            if (type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter)) or (
                    v.layout is not torch.strided or v.is_quantized):
                return f"argument {n!r} is a {type(v).__name__} with layout {v.layout}: only dense tensors trace"
        elif not is_static_value(v):
            return f"argument {n!r} ({type(v).__name__}) is neither traced nor comparable by value"
    if torch.is_grad_enabled() and not gf._trains():
        grad = grad_reason(gf, names, values)
        if grad is not None:
            # NOTE: a trace records no autograd graph, so its first output would not be eager's
            refused = gf.engine.refuses_grad(grad)
            if refused is not None:
                return refused
            if not gf._warned_grad:
                warnings.warn(f"{getattr(gf.fn, '__name__', type(gf.fn).__name__)}: grad mode is on and {grad} "
                              "requires grad: guarded runs such calls eagerly (wrap inference in "
                              "torch.no_grad() or torch.inference_mode() to use its entries)", stacklevel=4)
                gf._warned_grad = True
            return f"autograd: grad mode is on and {grad} requires grad"
    return None


def grad_reason(gf: GuardedFunction, names: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
    """An input or a tensor fn reaches that requires grad (in grad mode), by name, or None."""
    if not torch.is_grad_enabled():
        return None
    return next((f"input {n!r}" for n, v in zip(names, values)
                 if isinstance(v, torch.Tensor) and v.requires_grad), None) or reachable_grad(gf.fn)


def signature_of(gf: GuardedFunction, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
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
    if gf._modules is not None:
        parts.append(tuple(m.training for m in gf._modules))
    modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), autocast_state())
    return (tuple(parts), modes, torch.get_default_dtype(), global_modes())
