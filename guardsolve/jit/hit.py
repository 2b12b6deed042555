"""The hit path: the first entry whose check accepts a call runs it."""

from __future__ import annotations

from typing import Any
from guardsolve.errors import GuardFailure, first_line
from guardsolve.jit.entry import Entry
from guardsolve.jit.served import DIVERGED, EAGER, K_EAGER, K_HIT, MISS
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


def first_call(gf: GuardedFunction, e: Entry) -> None:
    """`e` tried first from now on: the path this call's data took, after an earlier entry's
    segments diverged on it (a stream of like calls then runs one path, no divergence).
    Under the lock that publishes entries, and only when it is free (a hit never waits for
    a trace)."""
    if gf._lock.acquire(blocking=False):
        try:
            gf._entries = (e, *[x for x in gf._entries if x is not e])
        finally:
            gf._lock.release()


def try_entry(gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    if e.names is not names and e.names != names:
        return MISS
    state = e.state
    if e.autograd is not None:
        if not e.check(*values) or (state is not None and not state()):
            return MISS
        gf._eager.inc()
        gf._count_eager(e.autograd)
        gf._tls.last = (K_EAGER, e, None, e.autograd)
        return EAGER
    return gf.engine.hit(gf, e, names, values, state)


def resume_entry(gf: GuardedFunction, e: Entry, failure: GuardFailure, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """The call whose segmented run in `e` diverged (`segments.SegmentDiverged`), continued by another
    entry's segments where they share the prefix and its size check passes; else `MISS`."""
    from guardsolve.jit.segments.diverged import SegmentDiverged

    seen = {id(e)}
    while isinstance(failure, SegmentDiverged):
        for other in gf._entries:
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
            first_call(gf, other)
            v.count_hit()
            other.count_hit()
            gf._hits.inc()
            other.last_used = next(gf._clock)
            gf._tls.last = (K_HIT, other, v, None)
            return out
        else:
            return MISS
    return MISS


def serves(gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...]) -> bool:
    """Whether `e` serves these inputs (compiled, replayed or eagerly for a reason it knows),
    without running it."""
    if e.names != names:
        return False
    return gf.engine.accepts(e, values) and (e.state is None or e.state())


def serve_variants(gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...],
                   state: Any) -> Any:
    """An entry of compiled variants serves the call: the first variant whose check accepts runs it."""
    for v in e.variants:
        if v.check(*values):
            if state is not None and not state():
                return MISS  # NOTE: every variant reads the same state
            try:
                out = v.run(*(values if e.traced is None else [values[i] for i in e.traced]))
            except GuardFailure as failure:
                # NOTE: a segmented variant's value bailout: the data took another path,
                # which a trace of its own serves (nothing the trace did not make was
                # written before it: `segments.state_writes`), resumed from what this
                # run computed where its prefix is this one's
                out = resume_entry(gf, e, failure, names, values)
                if out is MISS:
                    gf._log.append(f"entry {gf._entries.index(e) if e in gf._entries else '?'}: {failure}")
                    return DIVERGED
                return out
            except Exception as err:
                if state is not None and state.failure() is not None:
                    # NOTE: state changed in place where the fast check does not look
                    # (`w.resize_(1)`): the artifact's input asserts raised; a new trace
                    state.distrust()
                    return MISS
                # NOTE: a kernel's own error (an index out of range in data): eager gives
                # the call's own error, or its value
                why = f"the compiled kernels raised {type(err).__name__}: {first_line(err)[:200]}"
                gf._ran_eagerly(why, e, v)
                return EAGER
            v.count_hit()
            e.count_hit()
            gf._hits.inc()
            e.last_used = next(gf._clock)
            gf._tls.last = (K_HIT, e, v, None)
            return out
    if e.uncompiled is None or not e.check(*values) or (state is not None and not state()):
        return MISS
    # NOTE: the trace fits, Inductor cannot serve it: eager, with the reason counted
    why = f"Inductor cannot compile this trace: {e.uncompiled}"
    gf._ran_eagerly(why, e)
    return EAGER


def serve_replay(gf: GuardedFunction, e: Entry, names: tuple[str, ...], values: tuple[Any, ...], state: Any) -> Any:
    """An entry served by its trace's replay runs the call where its check accepts."""
    if not e.check(*values) or (state is not None and not state()):
        return MISS
    try:
        out = e.run(*(values if e.traced is None else [values[i] for i in e.traced]))
    except GuardFailure as failure:  # a value bailout: data changed the path
        gf._log.append(f"entry {gf._entries.index(e) if e in gf._entries else '?'}: {failure}")
        return MISS
    except BaseException as err:  # NOTE: the replay raised (an index read from data): eager's error
        if isinstance(err, Exception) and state is not None and state.failure() is not None:
            state.distrust()
            return MISS  # NOTE: state changed in place (`w.resize_(1)`): a new trace
        gf._tls.last = (K_EAGER, e, None, f"the replay raised {type(err).__name__}: {first_line(err)[:200]}")
        raise
    e.count_hit()
    gf._hits.inc()
    e.last_used = next(gf._clock)
    gf._tls.last = (K_HIT, e, None, None)
    return out
