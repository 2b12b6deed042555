"""torch.compile's own guards, minimal, proven and explained: `explain_compile`.

`explain_compile(fn, *args)` compiles `fn` (a function or an `nn.Module`) with `torch.compile`,
calls it once, and reads every frame Dynamo compiled (a graph break makes several). Per frame:

* `dynamo_guards`: the shape guards exactly as Dynamo checks them on entry (the epilogue
  lambdas of its guard manager, with the ranges `produce_guards` adds) plus the static sizes its
  TENSOR_MATCH guards check, each with where it came from: a user line, or one of Dynamo's own
  assumptions (duck sizing, 0/1 specialization, static by default, stride, ...), named, with
  what the user can do about it;
* `guards`: a `GuardSet` over guardsolve's dim names (`x0` for `L['x'].size()[0]`), minimal
  and proven equivalent to the size guards (`guards.verify()`); Dynamo's stride guards and the
  dtype, device and requires_grad its TENSOR_MATCH checks become `guards.static`;
* `specializations`: each input dim Dynamo had a symbol for and then pinned (or a dim marked
  dynamic that it could not keep dynamic), with every guard that pins or narrows it.

Values Dynamo reads that are not arguments of the frame (a module's parameters, a global
tensor) are pinned at their current sizes by static guards; the size guards are proven
equivalent to Dynamo's with those values substituted.
"""

from __future__ import annotations

import inspect
import re
import time
import traceback
from typing import Any, Callable, Sequence
import torch
from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import short_path
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import dim_names
from guardsolve.pytorch import dynamo as dyn
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.pytorch.explain.attribution import attribute_from_trace, unattributed
from guardsolve.pytorch.explain.dynamo_hooks import callers_in_slocs, dynamic_marks, quiet_dynamo, weakened_marks
from guardsolve.pytorch.explain.failure import CompileExplainError
from guardsolve.pytorch.explain.frame import Frame
from guardsolve.pytorch.explain.frames import explain_frame
from guardsolve.pytorch.explain.report import CompileReport


def _signature_names(fn: Any, n: int) -> list[str]:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(n)]
    return [p.name for p in params[:n]]


def _name(fn: Any) -> str:
    return type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))


def explain_compile(fn: Callable[..., Any], *args: Any, dynamic: bool | None = None, backend: Any = "eager",
                    timeout_ms: int = 2000, **compile_kwargs: Any) -> CompileReport:
    """Compile `fn` with `torch.compile`, call it once on `args`, and explain every frame Dynamo
    compiled: its guards as Dynamo checks them, minimal and proven equivalent, with sources.

    The compile tracks its recompiles apart from other `torch.compile` calls of the same code
    (`isolate_recompiles`); `report.compiled` is the compiled callable, for checking more inputs.
    A `mark_dynamic` that Dynamo cannot keep is explained (`report.specializations`) from a
    second compile with the marks weakened to `maybe_mark_dynamic`.
    """
    dyn.require()
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    marked = dynamic_marks(args)
    error: str | None = None
    breaks = _graph_breaks()
    cap = dyn.Capture()
    compiled = torch.compile(fn, backend=cap.backend(backend), dynamic=dynamic, isolate_recompiles=True,
                             **compile_kwargs)
    t0 = time.perf_counter()
    failed: Exception | None = None
    try:
        with quiet_dynamo(), callers_in_slocs():
            result = compiled(*args)
    except ConstraintViolationError as e:
        error = str(e)
        cap = dyn.Capture()
        compiled = torch.compile(fn, backend=cap.backend(backend), dynamic=dynamic, isolate_recompiles=True,
                                 **compile_kwargs)
        with weakened_marks(args):
            try:
                result = compiled(*args)
            except Exception as e2:
                raise CompileExplainError(f"torch.compile failed on {_name(fn)}: {type(e2).__name__}: "
                                          f"{str(e2).splitlines()[0] if str(e2) else ''}") from e2
    except GuardsolveError:
        raise
    except Exception as e:
        failed = e
    if failed is not None:
        # NOTE: outside the handler: eager's error must not take Dynamo's as its context
        eager = _eager_failure(fn, args)
        if eager is not None:
            raise eager from failed  # NOTE: the program fails in eager too: eager's words and the user's line
        cause = _root_cause(failed)
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        raise CompileExplainError(f"torch.compile failed on {_name(fn)} where eager runs: "
                                  f"{type(cause).__name__}: {first}") from failed
    compile_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    frames = []
    for c in cap.installed():
        if error is not None:
            c.error = error
        frames.append(explain_frame(c, dynamic, marked, timeout_ms, args, _signature_names(fn, len(args))))
    eager = [why for why, n in _graph_breaks().items() if n > breaks.get(why, 0)]
    if not frames and eager:
        # NOTE: Dynamo skipped every frame (an nn.LSTM while allow_rnn is False): it runs the call
        # eagerly, so no input is rejected; a report without guards says why, and the setting
        why = eager[0]
        setting = re.search(r"torch\._dynamo\.config\.\w+\s*=\s*\w+", why)
        first = why.strip().splitlines()[0]
        explained = next((ln.strip().removeprefix("Explanation:").strip().rstrip(".") for ln in why.splitlines()
                          if ln.strip().startswith("Explanation:")), "")
        return CompileReport(_name(fn), [], compiled, result, compile_seconds, time.perf_counter() - t1, error,
                             torch.is_grad_enabled(), f"{first}" + (f" ({explained})" if explained else ""),
                             setting[0].replace("=", " = ").replace("  ", " ") if setting else None,
                             _unguarded(fn, args))
    if not frames:
        raise CompileExplainError(
            f"Dynamo compiled no frame of {_name(fn)} on this call: its code already has compiled entries from "
            "another torch.compile (call torch._dynamo.reset() first), or it has no tensor work to compile")
    frames[0].label = _called_as(fn, frames[0])
    if any(unattributed(g) for g in frames[0].dynamo_guards):
        attribute_from_trace(frames[0], fn, args)
    return CompileReport(_name(fn), frames, compiled, result, compile_seconds, time.perf_counter() - t1, error,
                         torch.is_grad_enabled())


def _called_as(fn: Any, frame: Frame) -> str | None:
    """The outermost frame as the user called it, where Dynamo compiled a wrapper's code (a
    decorator around `forward`) instead of the function's own; None where it is the same."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    code = getattr(inspect.unwrap(target), "__code__", None)
    if code is None or code is frame.code:
        return None
    name = f"{type(fn).__name__}.forward" if isinstance(fn, torch.nn.Module) else _name(fn)
    return (f"{name} ({short_path(code.co_filename)}:{code.co_firstlineno}), through its wrapper "
            f"{frame.name} ({frame.file}:{frame.line})")


def _graph_breaks() -> dict[str, int]:
    """The graph breaks Dynamo has counted in this process, each in its own words, with its
    count (its `counters`: read, never reset)."""
    from torch._dynamo.utils import counters

    return {**counters["unimplemented"], **counters["graph_break"]}


def _unguarded(fn: Any, args: Sequence[Any]) -> GuardSet:
    """No size guard over the call's inputs (named as `explain_frame` names them)."""
    names = _signature_names(fn, len(args))
    kinds = [(n, "tensor", a.dim()) if isinstance(a, torch.Tensor) else (n, "int", 0) for n, a in zip(names, args)
             if isinstance(a, torch.Tensor) or isinstance(a, int) and not isinstance(a, bool)]
    graph = Graph(meta={"signature": dim_names(kinds)})
    for p in graph.meta["signature"]:
        for d in p.dims:
            graph.emit(Op.INT_ARG if p.kind == "int" else Op.INT_PLACEHOLDER, (), out=d, name=d)
    return simplify(graph, explore=False)


def _eager_failure(fn: Callable[..., Any], args: Sequence[Any]) -> Exception | None:
    """Eager's own error for `fn(*args)` as a trace's (`errors.EagerError`: eager's type and
    message, the user's innermost line appended), or None when eager runs."""
    from guardsolve.errors import eager_error
    from guardsolve.guards.location import is_library_file

    try:
        fn(*args)
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if not is_library_file(f.filename)]
        where = f" — {short_path(frames[-1].filename)}:{frames[-1].lineno}  {frames[-1].line}" if frames else ""
        return eager_error(e.with_traceback(None), where)
    return None


def _root_cause(e: BaseException) -> BaseException:
    """The innermost cause (Dynamo wraps a fake-tensor error in `TorchRuntimeError`)."""
    seen = {id(e)}
    while e.__cause__ is not None and id(e.__cause__) not in seen:
        e = e.__cause__
        seen.add(id(e))
    return e
