"""A missed call made into an entry: traced, its guards simplified, its replay compiled."""

from __future__ import annotations

import inspect
from typing import Any, Callable
import torch
from guardsolve.errors import UnsupportedOpError
from guardsolve.jit.progress import describe, step
from guardsolve.jit.segments.writes import writes_unmade
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.state import StateCheck, recording
from guardsolve.trace.static import StaticGuard, autocast_guard, state_guards, value_guard
from guardsolve.trace.record import Trace
from guardsolve.trace.tracer import trace
from guardsolve.jit.aliasing import aliased, disjoint, disjoint_guard
from guardsolve.jit.entry import Entry, POSITIONAL
from guardsolve.jit.rebind import bind_state
from guardsolve.jit.snapshots import StateWritten
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.jit.cache import GuardedFunction


def writes_before_data(t: Trace) -> str | None:
    """Why a replay of `t` cannot serve calls: it writes state it did not make before a decision
    on data (`segments.state_writes`); None otherwise."""
    from guardsolve.jit.segments.plan import Plan, has_data
    from guardsolve.jit.segments.writes import state_writes

    if not has_data(t.graph):
        return None
    why = state_writes(Plan.of(t))
    return None if why is None else f"the trace cannot be cut where it reads data: {why}"


def trace_entry(gf: GuardedFunction, names: tuple[str, ...], values: tuple[Any, ...], value_guards: bool,
           undo: Callable[[], None] | None = None) -> Entry:
    traced = tuple(i for i, v in enumerate(values)
                   if isinstance(v, torch.Tensor) or (isinstance(v, int) and not isinstance(v, bool)))
    plain = len(traced) == len(values) and names == gf._leading[min(len(names), len(gf._leading) - 1)]
    fn = gf.fn if plain else partial_call(gf, names, values, traced)
    with step(f"{gf._name()}: tracing at {describe(names, values)}"), recording(gf.fn) as rec:
        t = trace(fn, *[values[i] for i in traced], value_guards=value_guards, undo=undo)
        if rec.type_check is not None:
            # NOTE: eager's plain tensor and the trace's subclass take the two sides of it
            raise UnsupportedOpError("type(x)", f"the program compares type(x) with torch.Tensor "
                                                f"({rec.type_check}), which a traced tensor fails")
        wrote = StateCheck.of(rec).failure()  # NOTE: what the call itself changed
        if wrote is not None:
            # NOTE: before exploring other sizes, which would run the program (and its
            # writes) again
            raise StateWritten(t.output, wrote)
        written = writes_unmade(t)
        if written:
            gf._writes_args = True
            state = [t.constants[n] for n in written if n in t.constants]
            gf._written_state.extend(x for x in state if not any(x is y for y in gf._written_state))
            if not disjoint(*values, *state):
                raise StateWritten(t.output, aliased(gf, values) or "", repeat=False)
        static, gs = entry_guards(gf, t, names, values, traced)
    state = StateCheck.of(rec)
    t.inputs = t.recorded = None  # NOTE: the entry keeps its trace, not the call's tensors (nor its recorder)
    run = gf.engine.replay(t)
    assert gs.entry_check is not None
    entry = Entry(t, gs, run, names, None if plain or len(traced) == len(values) else traced, gs.entry_check,
                  next(gf._clock), static=tuple(static), state=state)
    bind_state(entry)
    return entry


def entry_guards(gf: GuardedFunction, t: Trace, names: tuple[str, ...], values: tuple[Any, ...],
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
        static.append(disjoint_guard(tensors, lambda: [consts[n] for n in state]))
    if gf._modules is not None:
        static.append(training_guard(gf, ))
    # NOTE: a trace no entry keeps is not explored (that would run the program again: a user
    # generator's draws)
    explore = gf.explore and t.unreplayable is None and not t.opaque
    gs = simplify(t, timeout_ms=gf.timeout_ms, explore=explore).with_static(static, names)
    return static, gs


def partial_call(gf: GuardedFunction, names: tuple[str, ...], values: tuple[Any, ...], traced: tuple[int, ...]) -> Callable[..., Any]:
    """fn as a function of the traced arguments only (the others fixed), named like fn's."""
    sig, fn = gf._sig, gf.fn
    assert sig is not None
    # NOTE: `names` follow the signature (see `_bind`): positional parameters go positionally
    # while none is missing before them, the rest by keyword, as Python would bind them.
    where = {n: i for i, n in enumerate(names)}
    positional: list[int] = []
    keyword: list[int] = []
    gap = False
    for p in sig.parameters.values():
        if p.kind in POSITIONAL:
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


def training_guard(gf: GuardedFunction) -> StaticGuard:
    mods = gf._modules
    assert mods is not None
    flags = [m.training for m in mods]
    name = type(gf.fn).__name__
    text = (f"{name}: every module in {'training' if flags[0] else 'eval'} mode" if len(set(flags)) == 1
            else f"{name}: modules' training flags == {flags}")
    return StaticGuard(text, "_training() == _s_training", "_training()",
                       (("_training", lambda: [m.training for m in mods]), ("_s_training", flags)))
