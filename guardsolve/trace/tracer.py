"""`trace(fn, *example_inputs)`: run a PyTorch function on traced tensors and record its trace.

>>> import torch
>>> t = trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
>>> print(t.graph)
a = var_placeholder(name=a, rank=1, shape=[4], dtype=float32)
b = var_placeholder(name=b, rank=1, shape=[4], dtype=float32)
v0 = aten.add.Tensor(a, b)
>>> print(t.guard_graph().bailouts()[0])
bool_bailout(i3, expect=False)
>>> print(t.guard_graph().nodes[5])
i3 = int_eq(a0, i2)
"""

from __future__ import annotations

import dis
import os
import re
import time
from typing import Any, Callable
import torch
from guardsolve.errors import EagerError, GuardsolveError, TraceError, UnsupportedOpError, eager_error
from guardsolve.ir.graph import Graph
from guardsolve.ir.signature import dim_names
from guardsolve.trace.gcpause import paused_gc
from guardsolve.guards.rule_cache import RuleCache
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.location import call_user
from guardsolve.trace.local import Recorded
from guardsolve.trace.why import node_loc
from guardsolve.trace.plain import PLAIN
from guardsolve.trace.static import layout_guard, tensor_guards
from guardsolve.trace.traced_tensor import TracedTensor
from guardsolve.trace.tensor import TracingMode
from guardsolve.trace.presents import presents_as_tracing, tracing_now
from guardsolve.trace.divergence import Diverged, same_node
from guardsolve.trace.inputs import placeholder, strides_decided_on
from guardsolve.trace.outputs import concrete_objects, module_names_of, scrub, spec, unwrap
from guardsolve.trace.record import Trace, parameter_names


def trace(fn: Callable[..., Any], *example_inputs: Any, value_guards: bool = False,
          undo: Callable[[], None] | None = None) -> Trace:
    """Run `fn` on traced versions of `example_inputs`, recording a tensor trace and its guards.

    Tensors become `var_placeholder`s and Python ints `int_arg`s, named after fn's
    parameters (an `nn.Module` is traced through its `forward`; its parameters and buffers
    become constants named after their module path). PyTorch's own shape rules (meta kernels
    and decompositions) decide every op's sizes; every decision they or the user's code make
    about a size is a `bool_bailout`. A decision on tensor data (`if x.sum() > 0`, `if t.item()`)
    raises `DataDependentError` unless `value_guards=True`, which records a value bailout
    instead; `.item()` alone is an unbacked value the trace records and a replay recomputes.

    An exception the user's own code raises passes as it is. A trace that guardsolve stops, whose
    eager kernel fails (`EagerError`), that PyTorch's own Python code fails (it may take its
    compiled route while traced), or where a tensor method does not take a traced tensor
    (`x.numpy()`), runs `fn` eagerly once more on the same inputs:
    where eager raises, the trace raises eager's own error (the user's program is wrong, whatever
    guardsolve could trace; the trace's error is its cause); where eager runs, a guardsolve error
    (`UnsupportedOpError`, `DataDependentError`; "the traced run fails where eager runs" when
    library code took another route under tracing). `undo`, where given, first puts back what
    the failed traced run wrote (a batch norm's step count), so that the program's writes are
    made once, as eager makes them.
    """
    start = time.perf_counter()
    try:
        while True:
            try:
                with paused_gc():  # NOTE: placeholders and the trace are many small acyclic objects
                    t = trace_once(fn, example_inputs, value_guards)
                break
            except TypeError as e:
                # NOTE: PyTorch's parser rejected a traced value where it takes a plain one: a
                # function learned once (`trace/plain.py`) takes its value decided; run again
                if not PLAIN.learn(str(e)):
                    raise
        t.seconds = time.perf_counter() - start
        return t
    except GuardsolveError as e:
        error = e
    except Exception as e:
        if isinstance(e, TypeError) and _SYMBOLIC_ARGUMENT.search(str(e)):
            # NOTE: PyTorch's argument parser met a traced size where it takes a plain value
            # (transformers passes `is_causal` as a SymBool at some sizes): the trace's limit
            error = UnsupportedOpError("a PyTorch call",
                                       f"takes a plain value where the trace has a symbolic one ({e})")
            error.__cause__ = e
        elif _raised_by_user(e):
            raise  # NOTE: the user's own exceptions pass as they are
        else:
            # NOTE: PyTorch's Python code, which may take its compiled route while traced; or a
            # tensor method a traced tensor cannot run (`x.numpy()`: "not supported for tensor
            # subclasses", raised in C++ from the user's line)
            error = e
    # NOTE: outside the handler, so that eager's error does not take the trace's as its context
    if undo is not None:
        undo()
    failed = _eager_failure(fn, example_inputs)
    if failed is None or isinstance(failed, GuardsolveError):  # NOTE: eager met a leaked traced value
        if isinstance(error, GuardsolveError) and not isinstance(error, EagerError):
            raise error
        # NOTE: e.g. library code that takes another route while it is traced (a compiled or
        # exported run, as `is_compiling()` says) and fails where eager runs
        first = (str(error).strip().splitlines() or [""])[0]
        raise UnsupportedOpError("the traced run", f"fails where eager runs ({type(error).__name__}: {first})") \
            from error
    if isinstance(error, type(failed)) and str(error).startswith(str(failed)):
        raise error  # NOTE: eager's own error, already with the user's line
    raise eager_error(failed) from error


def _raised_by_user(e: BaseException) -> bool:
    """Was `e` raised by a `raise` statement of the program's own code (its innermost frame outside
    PyTorch)? Not an error a C function raised from the user's line (`x.numpy()` of a traced tensor).

    >>> def f():
    ...     raise ValueError("boom")
    >>> try:
    ...     f()
    ... except ValueError as e:
    ...     _raised_by_user(e)
    True
    """
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if f"{os.sep}torch{os.sep}" in code.co_filename:
        return False
    op = code.co_code[tb.tb_lasti] if 0 <= tb.tb_lasti < len(code.co_code) else None
    return op is not None and dis.opname[op] in ("RAISE_VARARGS", "RERAISE")


_SYMBOLIC_ARGUMENT = re.compile(r"\bnot Sym(Bool|Int|Float)\b")


def _eager_failure(fn: Callable[..., Any], example_inputs: tuple[Any, ...]) -> Exception | None:
    """The exception eager `fn(*example_inputs)` raises, or None."""
    try:
        fn(*example_inputs)
    except Exception as e:
        # NOTE: only its type and message are used; its frames would keep this call's
        # tensors (and through them the failed trace) alive
        return e.with_traceback(None)
    return None


class _Expecting(Graph):
    """A trace graph that stops the trace (`Diverged`) at its first node that differs from
    `expect`'s: a trace at other sizes that takes another route is known for another as soon
    as it records one node of its own."""

    def __init__(self, expect: list[Any], meta: dict[str, Any]) -> None:
        super().__init__(meta=meta)
        self.expect = expect
        self._checked = 0

    def _check(self) -> None:
        for i in range(self._checked, len(self.nodes)):
            if i >= len(self.expect) or not same_node(self.nodes[i], self.expect[i]):
                raise Diverged(i, self.nodes[i], self.expect[i] if i < len(self.expect) else None,
                               node_loc(self.nodes, i))
        self._checked = len(self.nodes)

    def append(self, node: Any) -> Any:
        super().append(node)
        self._check()
        return node

    def emit(self, *args: Any, **kwargs: Any) -> Any:
        out = super().emit(*args, **kwargs)
        self._check()
        return out


def trace_once(fn: Callable[..., Any], example_inputs: tuple[Any, ...], value_guards: bool,
           expect: list[Any] | None = None) -> Trace:
    # NOTE: autocast keeps a cast copy of each weight for the rest of its region: a traced copy
    # must not outlive the trace (eager code after it in the same region would read it)
    cached = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        with PLAIN.installed():
            return _record(fn, example_inputs, value_guards, expect)
    finally:
        torch.set_autocast_cache_enabled(cached)


def _record(fn: Callable[..., Any], example_inputs: tuple[Any, ...], value_guards: bool,
            expect: list[Any] | None) -> Trace:
    names = parameter_names(fn.forward if isinstance(fn, torch.nn.Module) else fn, len(example_inputs))
    kinds: list[tuple[str, str, int]] = []
    for name, value in zip(names, example_inputs):
        if isinstance(value, torch.Tensor):
            if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
                raise TraceError(f"cannot trace argument {name!r}: a {type(value).__name__}, "
                                 "only plain dense tensors are supported")
            if value.layout is not torch.strided or value.is_quantized:
                raise TraceError(f"cannot trace argument {name!r}: layout {value.layout} is not supported")
            kinds.append((name, "tensor", value.dim()))
        elif isinstance(value, int) and not isinstance(value, bool):
            kinds.append((name, "int", 0))
        else:
            raise TraceError(f"cannot trace argument {name!r} of type {type(value).__name__}: "
                             "only torch.Tensor and int inputs are supported")
    signature = dim_names(kinds)
    static = [g for p, v in zip(signature, example_inputs) if p.kind == "tensor" for g in tensor_guards(p.name, v)]
    graph = Graph(meta={"signature": signature}) if expect is None else _Expecting(expect, {"signature": signature})
    rec = Recorder(graph, value_guards)
    rec.meta_first = expect is not None  # NOTE: sizes the user never called: no eager kernel its rule rejects
    if expect is None:
        rec.calls = []  # NOTE: for probes that replay single calls (`trace.local`)
    rec.rules = RuleCache(rec)
    rec.guards.meta["signature"] = signature
    rec.guards.reserve(d for p in signature for d in p.dims)
    rec.depth += 1  # NOTE: making the inputs is guardsolve's business, not a user observation
    strided: dict[str, str] = {}
    args = [placeholder(rec, p, v, strided) for p, v in zip(signature, example_inputs)]
    rec.depth -= 1
    mode = TracingMode(rec, module_names_of(fn))
    # NOTE: below autograd, a CompositeImplicit op (`lstm`, `batch_norm`, `linear`) reaches the
    # mode whole instead of as its decomposition: its eager value comes from the kernel eager
    # dispatches to, and its decomposition runs on meta tensors only, for shapes and guards
    try:
        with presents_as_tracing(), torch._C._AutoDispatchBelowAutograd(), mode:
            result = call_user(fn, *args)
    except Exception as e:
        if expect is not None:
            # NOTE: a probe's caller reads where it stopped: the decisions made up to here
            # decide the node it diverged at, or the shape rule that rejected its sizes
            e.prefix_guards = rec.guards  # type: ignore[attr-defined]
        # NOTE: the calls' meta tensors hold the recorder through their C++ sizes: a cycle the
        # collector cannot see (see `RuleCache.close`)
        rec.calls = rec.pending = None
        raise
    finally:
        notes = scrub(fn)  # NOTE: also when the trace raises: the user's objects stay usable
        rec.rules.close()
    opaque = concrete_objects(result, notes)
    out_spec = spec(result, rec)
    graph.meta["out_spec"] = out_spec
    observed = rec.layout_observed or rec.strides_read
    pinned = strides_decided_on(rec.guards, strided)
    static += [layout_guard(p.name, v, rec.strides_read) for p, v in zip(signature, example_inputs)
               if p.kind == "tensor" and (observed or p.name in pinned)]
    recorded = Recorded.of(rec) if rec.calls is not None else None
    rec.calls = None
    guards = rec.guards.pruned(in_place=recorded is None)  # NOTE: `recorded` keeps the nodes' names
    guards.meta["static"] = graph.meta["static"] = tuple(static)
    return Trace(graph, unwrap(result), signature, fn, mode.constants, out_spec, guards, tuple(static),
                 tuple(notes), opaque, tuple(example_inputs), value_guards, recorded, unreplayable=mode.reseeded,
                 grad_switch=mode.grad_switch, relaid=rec.relaid)


def tracing() -> bool:
    """Is some trace running (in any thread)? Cheap: one read of a shared count."""
    return tracing_now()


def is_traced(v: Any) -> bool:
    """Is `v` a value of a running trace (a traced tensor or a symbolic int)?"""
    return isinstance(v, TracedTensor) or (isinstance(v, (torch.SymInt, torch.SymBool)) and v.node.is_symbolic())
