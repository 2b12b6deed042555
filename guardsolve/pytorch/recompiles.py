"""Recompiles explained as they happen: `watch_recompiles()`.

    with guardsolve.watch_recompiles() as log:
        for batch in batches:
            compiled_model(batch)
    print(log)

Inside the block every `torch.compile`d frame Dynamo compiles is recorded: the first compile of
a code object and each recompile, with the inputs it got. A recompile names the guard that
failed in its minimal form (the old entry's guards read and reduced as `explain_compile` does),
the input's values, and that guard's source lines or Dynamo's named assumption. `log.suggestion`
is the `mark_dynamic` (or `dynamic=True`) change that would have avoided them, checked by
compiling again and replaying the same calls under `torch.compiler.set_stance("fail_on_recompile")`;
`log.trace_accepts` says which recompiled inputs guardsolve's own trace-exact guards accept.

Both cost seconds (compiles, a trace), so they run lazily: when first read, or all at once by
`log.check()`, with a progress line on stderr; PyTorch's own log output of those compiles (a
refused option's ERROR traceback) is kept off stderr meanwhile. `print(log)` never runs them: it
prints what is known (a check not run yet is one line saying how to run it). Not in the
background: the replay sets `fail_on_recompile`, a process-wide stance that would fail the
user's own compiled calls meanwhile.

It hooks Dynamo's `convert_frame._compile` (a PyTorch internal, torch 2.13) for the block only.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import sys
import warnings
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from guardsolve.pytorch import dynamo as dyn
from guardsolve.pytorch.explain.failure import CompileExplainError
from guardsolve.pytorch.explain.frame import Frame
from guardsolve.pytorch.explain.provenance import GuardSource
from guardsolve.pytorch.explain.naming import frame_inputs
from guardsolve.pytorch.explain.frames import explain_frame
from guardsolve.errors import GuardsolveError
from guardsolve.patching import Patch, patched


@dataclass
class RecompiledCall:
    """One compile Dynamo did inside the block: the frame, its inputs, its new entry."""

    code: Any
    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    compile_id: str
    old: list[Any]  # the cache entries that missed (newest first); empty on a first compile

    @property
    def name(self) -> str:
        return self.code.co_name

    def values(self) -> dict[str, Any]:
        """The frame's inputs as a user reads them: a tensor as its shape."""
        return {name: tuple(v.shape) if isinstance(v, torch.Tensor) else v
                for name, _, v in frame_inputs(self.code, self.f_locals)}


@dataclass
class Recompile:
    """One recompile: the frame, the input's values, the minimal guard of the newest old entry
    that failed (None when a non-size guard failed: `static` says which), and its sources."""

    call: RecompiledCall
    previous: Frame | None  # the newest old entry's guards, read and reduced
    failed: str | None
    static: str | None
    sources: tuple[GuardSource, ...]
    dynamo_reason: str

    def __str__(self) -> str:
        vals = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.call.values().items())
        what = (f"failed {self.failed}" if self.failed else f"failed {self.static}" if self.static
                else f"failed (Dynamo: {self.dynamo_reason})")
        where = "; ".join(map(str, self.sources))
        return f"recompile {self.call.compile_id} of {self.call.name} at {vals}: {what}" + (f"  <- {where}" if where else "")


@dataclass
class Suggestion:
    """A change to the compile that avoids recompiles, with the counts measured by replaying
    the recorded calls under `fail_on_recompile` (None: not checked, `why`)."""

    text: str
    dims: tuple[tuple[str, int], ...]  # (input, dim) to mark dynamic; empty for dynamic=True
    dynamic: bool
    recompiles_before: int
    recompiles_after: int | None
    why: str = ""

    def __str__(self) -> str:
        checked = (f" (replayed under fail_on_recompile: {self.recompiles_before} -> {self.recompiles_after} recompiles)"
                   if self.recompiles_after is not None else f" (not checked: {self.why})")
        return self.text + checked


@dataclass
class RecompileLog:
    """What `watch_recompiles` saw: every compile, the recompiles explained, a suggestion."""

    calls: list[RecompiledCall] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    announce: bool = True  # say on stderr when the check runs (it compiles again and traces: seconds)
    suggestion_seconds: float | None = None  # how long checking the suggestion took (None: not yet)
    _suggestion: Any = field(default=None, repr=False)
    _trace: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.recompiles)

    def __iter__(self) -> Iterator[Recompile]:
        return iter(self.recompiles)

    def causes(self) -> dict[str, int]:
        """How many recompiles each failing guard caused."""
        out: dict[str, int] = {}
        for r in self.recompiles:
            key = r.failed or r.static or r.dynamo_reason
            out[key] = out.get(key, 0) + 1
        return out

    @property
    def checked(self) -> bool:
        """Have the suggestion and the trace comparison run (`check()`)?"""
        return not self.recompiles or (self._suggestion is not None and self._trace is not None)

    def check(self) -> "RecompileLog":
        """Check the suggestion and compare guardsolve's own trace now (seconds: compiles and a
        trace), each once; returns the log, so `print(log.check())` prints it all."""
        _ = self.suggestion, self.trace_accepts
        return self

    @property
    def suggestion(self) -> Suggestion | None:
        """The mark_dynamic / dynamic=True change that avoids the recompiles, checked by a replay.

        The check compiles again (each option, replaying the recorded calls): it runs once, when
        first read, and says so on stderr (`announce`), with how long it took."""
        if self._suggestion is None and self.recompiles:
            t0 = time.perf_counter()
            try:
                with self._progress("checking the suggestion by compiling again"), quiet_torch_logs():
                    self._suggestion = suggest(self) or False
            finally:
                self.suggestion_seconds = time.perf_counter() - t0
        return self._suggestion or None

    @property
    def trace_accepts(self) -> list[str]:
        """The recompiled inputs that guardsolve's own trace of the first call accepts (its
        guards are exact to the trace, so that one trace serves them)."""
        if self._trace is None:
            with self._progress("tracing the first call with guardsolve") if self.recompiles else \
                    contextlib.nullcontext(), quiet_torch_logs():
                self._trace = _trace_accepts(self)
        return self._trace

    @contextlib.contextmanager
    def _progress(self, label: str) -> Iterator[None]:
        """`guardsolve: LABEL... 1.2 s` on stderr around a step (`announce`), on a line of its own."""
        if self.announce:
            print(f"guardsolve: {label}...", end="", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.announce:
                print(f" {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    def __str__(self) -> str:
        n = len(self.recompiles)
        lines = [f"{len(self.calls)} compile{'s' if len(self.calls) != 1 else ''}, {n} recompile{'s' if n != 1 else ''}"]
        lines += [f"  {r}" for r in self.recompiles]
        if self.recompiles:
            lines.append("caused by:")
            lines += [f"  {k}: {v}" for k, v in sorted(self.causes().items(), key=lambda kv: -kv[1])]
            # NOTE: printing never compiles or traces (seconds): what is not checked yet says how
            if self._suggestion is None:
                lines.append(f"suggestion: not checked yet (print(log.check()) checks it: it compiles again and "
                             f"replays the {_replayed(self)} compiling calls under fail_on_recompile, seconds)")
            else:
                s = self._suggestion
                lines.append(f"suggestion: {s}" if s else
                             "suggestion: none found (no mark_dynamic or dynamic=True avoids them)")
            if self._trace:
                lines.append("guardsolve's trace-exact guards of the first call accept:")
                lines += [f"  {t}" for t in self._trace]
        return "\n".join(lines)


def _replayed(log: RecompileLog) -> int:
    """How many calls the suggestion's check replays: those of the most compiled frame."""
    by_code: dict[Any, int] = {}
    for c in log.calls:
        by_code[c.code] = by_code.get(c.code, 0) + 1
    return max(by_code.values(), default=0)


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """PyTorch's own log output and warnings kept off stderr while guardsolve compiles for
    itself: an option Dynamo refuses logs an ERROR traceback on top of raising (we report the
    error), and its lines would cut into our progress line. Every `torch.*` logger's level is
    raised for the block and restored after (a logger made meanwhile inherits it)."""
    loggers = [logging.getLogger("torch")] + [
        lg for name, lg in logging.Logger.manager.loggerDict.items()
        if name.startswith("torch.") and isinstance(lg, logging.Logger)]
    levels = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in levels:
            lg.setLevel(level)


def _explain_old(call: RecompiledCall, first: RecompiledCall | None) -> Frame | None:
    """The newest old cache entry's guards, reduced (from the compile that made it, if seen)."""
    if not call.old:
        return None
    entry = call.old[0]
    made = first if first is not None and str(entry.compile_id) == first.compile_id else None
    c = dyn.Compiled(call.code, str(entry.compile_id), (made or call).f_locals, (made or call).f_globals, None, entry)
    try:
        return explain_frame(c, None, example=made is not None)
    except GuardsolveError:
        return None


def _explain(call: RecompiledCall, made: dict[str, RecompiledCall]) -> Recompile:
    entry_id = str(call.old[0].compile_id) if call.old else ""
    frame = _explain_old(call, made.get(entry_id))
    failed = static = None
    sources: tuple[GuardSource, ...] = ()
    if frame is not None:
        args = frame.arguments(call.f_locals) if frame.inputs else []
        dims = frame.guards.input_dims(*args)
        c = frame.guards.first_failure(dims) if dims is not None else None
        # NOTE: a size first: a contiguous input's strides follow its sizes, so a failed stride
        # guard says less than the size guard that failed with it
        static = frame.guards.static_failure(*args) if c is None else None
        if c is not None:
            failed = c.text
            seen: dict[str, GuardSource] = {}
            for i in sorted(c.prov):
                for s in frame.sources_of(i):
                    seen.setdefault(str(s), s)
            sources = tuple(seen.values())
    return Recompile(call, frame, failed, static, sources, _dynamo_reason(call))


def _dynamo_reason(call: RecompiledCall) -> str:
    """Dynamo's own first failing guard for the newest old entry, as `TORCH_LOGS=recompiles` prints it."""
    if not call.old:
        return ""
    try:
        ok = call.old[0].guard_manager.check_verbose(call.f_locals)
        parts = list(getattr(ok, "verbose_code_parts", []) or [])
        return dyn.split_comment(parts[0])[0] if parts else ""
    except Exception as e:  # NOTE: a reason is an explanation only; the recompile is recorded either way
        return f"(no reason: {type(e).__name__})"


@contextlib.contextmanager
def watch_recompiles() -> Iterator[RecompileLog]:
    """Record and explain every compile and recompile Dynamo does inside the block."""
    dyn.require()
    from torch._dynamo import convert_frame

    log = RecompileLog()
    token = _WATCHING.set(_WATCHING.get() + ((log, {}),))
    try:
        with patched(Patch(convert_frame, "_compile", _recording_compiles)):
            yield log
    finally:
        _WATCHING.reset(token)


# NOTE: the watchers open in this context, innermost last, each with the calls it made by compile
# id; the patched `_compile` is shared by every holder, so each one's log is found here.
_WATCHING: contextvars.ContextVar[tuple[tuple[RecompileLog, dict[str, RecompiledCall]], ...]] = \
    contextvars.ContextVar("guardsolve_recompile_watchers", default=())


def _recording_compiles(original: Callable[..., Any]) -> Callable[..., Any]:
    """Dynamo's `convert_frame._compile`, recording each compile in every open watcher's log."""
    from torch._dynamo import convert_frame

    params = inspect.signature(original)

    def _compile(*args: Any, **kwargs: Any) -> Any:
        watchers = _WATCHING.get()
        if not watchers:
            return original(*args, **kwargs)
        bound = params.bind_partial(*args, **kwargs).arguments
        entries = list(bound.get("cache_entries_for_reasons") or bound.get("cache_entries") or [])
        recompile = convert_frame.is_recompilation(bound["cache_size"]) if "cache_size" in bound else bool(entries)
        call = RecompiledCall(bound["code"], dyn.snapshot(bound["locals"]), bound["globals"],
                              str(bound.get("compile_id", "")), entries if recompile else [])
        result = original(*args, **kwargs)
        for log, made in watchers:
            made[call.compile_id] = call
            log.calls.append(call)
            if recompile:
                try:
                    log.recompiles.append(_explain(call, made))
                except Exception as e:  # NOTE: never break the user's run: the recompile is recorded unexplained
                    log.recompiles.append(Recompile(call, None, None, None, (), f"not explained: {type(e).__name__}: {e}"))
        return result

    return _compile


# -- the suggestion -------------------------------------------------------------------------


def _target(call: RecompiledCall) -> tuple[Callable[..., Any], list[Any], dict[str, Any]] | None:
    """What the user called, with its arguments: a module (`self` of its forward or of a
    wrapper around it, or `fn` of torch.compile's `inner(*args)`), or a plain function rebuilt
    from the code, its globals and closure."""
    loc, code = call.f_locals, call.code
    n = code.co_argcount + code.co_kwonlyargcount
    star = code.co_varnames[n] if code.co_flags & inspect.CO_VARARGS else None
    stars = code.co_varnames[n + (star is not None)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    owner = loc.get("self") if code.co_varnames[:1] == ("self",) else loc.get("fn")
    if isinstance(owner, torch.nn.Module):
        if star is not None:
            return owner, list(loc.get(star) or ()), dict(loc.get(stars) or {}) if stars else {}
        if code.co_name == "forward":
            return owner, [v for _, _, v in frame_inputs(code, loc)], {}
        return None
    if star is not None or stars is not None:
        return None
    try:
        cells = tuple(types.CellType(loc[v]) for v in code.co_freevars)
    except KeyError:
        return None
    fn = types.FunctionType(code, call.f_globals, code.co_name, None, cells or None)
    return fn, [loc[p] for p in code.co_varnames[:code.co_argcount]], {}


def _changed_dims(calls: Sequence[RecompiledCall]) -> list[tuple[int, int]]:
    """(argument, dim) whose size differs between the calls of one frame."""
    sizes: dict[tuple[int, int], set[int]] = {}
    for c in calls:
        t = _target(c)
        if t is None:
            continue
        for i, a in enumerate(t[1]):
            if isinstance(a, torch.Tensor):
                for d, n in enumerate(a.shape):
                    sizes.setdefault((i, d), set()).add(int(n))
    return sorted(k for k, v in sizes.items() if len(v) > 1)


def replay(target: Callable[..., Any], calls: Sequence[tuple[Sequence[Any], dict[str, Any]]],
           dims: Sequence[tuple[int, int]], dynamic: bool | None, mark: str = "mark_dynamic") -> int:
    """Compile `target` afresh, mark `dims` (`mark_dynamic` or `mark_unbacked`) on the first
    call's (copied) arguments, and replay the calls under `fail_on_recompile`: the number of
    calls that would recompile."""
    compiled = torch.compile(target, backend="eager", dynamic=dynamic, isolate_recompiles=True)
    args0, kwargs0 = calls[0]
    first = [a.clone() if isinstance(a, torch.Tensor) else a for a in args0]
    for i, d in dims:
        if isinstance(first[i], torch.Tensor):
            getattr(torch._dynamo.decorators, mark)(first[i], d)
    with torch.no_grad():
        compiled(*first, **kwargs0)
        refused = 0
        for args, kwargs in calls[1:]:
            try:
                with torch.compiler.set_stance("fail_on_recompile"):
                    compiled(*args, **kwargs)
            except RuntimeError as e:
                if "fail_on_recompile" not in str(e):
                    raise
                refused += 1
                compiled(*args, **kwargs)  # NOTE: compile it, as the original run did, and go on
    return refused


def suggest(log: RecompileLog) -> Suggestion | None:
    """The change that avoids the most recompiles of the most recompiled frame: mark the dims
    that changed dynamic (or compile with dynamic=True), each checked by a replay."""
    by_code: dict[Any, list[RecompiledCall]] = {}
    for c in log.calls:
        by_code.setdefault(c.code, []).append(c)
    code, calls = max(by_code.items(), key=lambda kv: len(kv[1]))
    before = len(calls) - 1
    if before == 0:
        return None
    t = _target(calls[0])
    changed = _changed_dims(calls)
    if t is None:
        return Suggestion(_mark_text(calls[0], changed), tuple(), False, before, None,
                          "the compiled callable could not be rebuilt from its frame")
    target = t[0]
    arg_calls = [(list(tc[1]), dict(tc[2])) for c in calls if (tc := _target(c)) is not None]
    options: list[Suggestion] = []
    failures: list[str] = []
    tries = [(_mark_text(calls[0], changed, m), _named(calls[0], changed), changed, None, m)
             for m in ("mark_dynamic", "mark_unbacked") if changed]
    tries.append(("torch.compile(..., dynamic=True)", (), [], True, "mark_dynamic"))
    for text, named, dims, dynamic, mark in tries:
        try:
            after = replay(target, arg_calls, dims, dynamic, mark)
        except Exception as e:  # NOTE: an option Dynamo cannot compile (an unbacked size it must branch on) is no option
            failures.append(f"{text}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        options.append(Suggestion(text, named, bool(dynamic), before, after))
    if not options:
        return Suggestion(tries[0][0], tries[0][1], False, before, None, "the replay failed: " + "; ".join(failures))
    best = min(options, key=lambda s: s.recompiles_after if s.recompiles_after is not None else before)
    return best if best.recompiles_after is not None and best.recompiles_after < before else None


def _arg_names(call: RecompiledCall) -> list[str]:
    t = _target(call)
    n = len(t[1]) if t else 0
    if t is not None and isinstance(t[0], torch.nn.Module):
        try:
            return [p for p in inspect.signature(t[0].forward).parameters][:n]
        except (TypeError, ValueError):
            pass
    return [name for name, _, _ in frame_inputs(call.code, call.f_locals)][:n] or [f"arg{i}" for i in range(n)]


def _named(call: RecompiledCall, dims: Sequence[tuple[int, int]]) -> tuple[tuple[str, int], ...]:
    names = _arg_names(call)
    return tuple((names[i] if i < len(names) else f"arg{i}", d) for i, d in dims)


def _mark_text(call: RecompiledCall, dims: Sequence[tuple[int, int]], mark: str = "mark_dynamic") -> str:
    if not dims:
        return "torch.compile(..., dynamic=True)"
    where = "torch._dynamo" if mark == "mark_dynamic" else "torch._dynamo.decorators"
    return "; ".join(f"{where}.{mark}({n}, {d})" for n, d in _named(call, dims)) + " before the first call"


def _trace_accepts(log: RecompileLog) -> list[str]:
    """Recompiled inputs that guardsolve's trace-exact guards of the frame's first call accept."""
    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.tracer import trace

    out: list[str] = []
    firsts: dict[Any, Any] = {}
    for r in log.recompiles:
        code = r.call.code
        if code not in firsts:
            first = next((c for c in log.calls if c.code is code), None)
            t = _target(first) if first is not None else None
            try:
                with torch.no_grad():
                    firsts[code] = simplify(trace(t[0], *t[1])) if t is not None and not t[2] else None
            except Exception:  # NOTE: a comparison only: a program guardsolve cannot trace is not compared
                firsts[code] = None
        gs, t = firsts[code], _target(r.call)
        if gs is not None and t is not None and gs.check(*t[1]):
            vals = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in r.call.values().items())
            out.append(f"{r.call.name} at {vals} (Dynamo recompiled for it: {r.failed or r.static or r.dynamo_reason})")
    return out


__all__ = ["RecompiledCall", "Recompile", "RecompileLog", "Suggestion", "replay", "watch_recompiles", "CompileExplainError"]
