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

import inspect
import dis
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from guardsolve.errors import EagerError, GuardsolveError, TraceError, UnsupportedOpError, eager_error
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import Param, dim_names
from guardsolve.trace.gcpause import paused_gc
from guardsolve.guards.pytorch import meta_input
from guardsolve.guards.rules import RuleCache
from guardsolve.guards.symbolic import Recorder, SymGuard, call_user
from guardsolve.trace.local import Recorded
from guardsolve.trace.state.active import paused
from guardsolve.trace.why import Why, node_loc, node_op
from guardsolve.trace.plain import PLAIN
from guardsolve.trace.static import StaticGuard, layout_guard, tensor_guards
from guardsolve.trace.tensor import TracedTensor, TracingMode, PresentsAsTracing, dtype_name, symint


@dataclass
class Trace:
    """A recorded trace: the tensor-trace `graph`, the guard graph recorded alongside it, and the
    concrete `output` of the run.

    `constants` are the tensors the trace uses that are not inputs (module parameters,
    captured tensors), by their `var_param` name; `out_spec` is the output structure with
    `Ref(name)` in place of each traced value; `static` what the trace assumed besides sizes
    (each tensor input's dtype, device, layout, requires_grad, its strides where the trace
    observed them), checked before the size guards.
    """

    graph: Graph
    output: Any
    signature: tuple[Param, ...]
    fn: Callable[..., Any] | None = None
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    out_spec: Any = None
    guards: Graph | None = None
    static: tuple[StaticGuard, ...] = ()
    notes: tuple[str, ...] = ()
    opaque: bool = False  # the output holds traced values inside objects a replay cannot rebuild
    # NOTE: the example inputs themselves, so that `simplify` can trace again at other sizes
    # (`solve.paths`); `guarded` drops them once its entry is made
    inputs: tuple[Any, ...] | None = field(default=None, repr=False)
    value_guards: bool = False
    # NOTE: the calls and guard graph as recorded, for probes that replay single calls
    # (`trace.local`); dropped with `inputs`
    recorded: Any = field(default=None, repr=False)
    seconds: float = 0.0  # NOTE: how long `trace` took (exploring other routes is budgeted against it)
    # NOTE: why a replay cannot give eager's values (a random op after a reseed inside the
    # function); `guarded` serves such a call from the trace's own run and keeps no entry
    unreplayable: str | None = None
    # NOTE: an op that ran in the other grad mode than the call's (`torch.no_grad()` inside), in
    # words: a training variant, one joint graph, would differentiate through it
    grad_switch: str | None = None
    # NOTE: an eager output was copied into its shape rule's strides while tracing: the trace's
    # own outputs hold eager's values, maybe not its layout (`guarded` replays such a call)
    relaid: bool = False

    def __repr__(self) -> str:
        """Short: what was traced and at which shapes, not the output tensor.

        >>> import torch
        >>> trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
        <Trace of <lambda> at a=[4], b=[4]: 3 nodes, 4 bailouts>
        """
        name = getattr(self.fn, "__name__", None) or type(self.fn).__name__ if self.fn is not None else "a graph"
        shapes = ", ".join(f"{p.name}={list(v.shape)}" if isinstance(v, torch.Tensor) else f"{p.name}={v}"
                           for p, v in zip(self.signature, self.inputs or ())) if self.inputs else \
            ", ".join(f"{p.name}" for p in self.signature)
        bailouts = len(self.guards.bailouts()) if self.guards is not None else 0
        return f"<Trace of {name} at {shapes}: {len(self.graph)} nodes, {bailouts} bailouts>"

    def guard_graph(self) -> Graph:
        """The guard graph: the one recorded while tracing (equal to `guard_graph(self.graph)`)."""
        if self.guards is not None:
            return self.guards
        from guardsolve.guards.shape import guard_graph

        return guard_graph(self.graph)


def parameter_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names of fn's first `n` positional parameters (`*args` become `args_0`, ...; a
    builtin without a signature, `torch.cov`, takes `*args`).

    >>> parameter_names(torch.cov, 1), parameter_names(lambda x, *ys: x, 3)
    (['args_0'], ['x', 'ys_0', 'ys_1'])
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # NOTE: no signature to read: whatever it takes, by position
        return [f"args_{i}" for i in range(n)]
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names.extend(f"{p.name}_{i}" for i in range(n - len(names)))
    if len(names) < n:
        raise TraceError(f"{getattr(fn, '__name__', fn)} takes {len(names)} positional arguments, "
                         f"but {n} example inputs were given")
    return names[:n]


@dataclass(frozen=True)
class Ref:
    """A traced value's name inside `Trace.out_spec`."""

    name: str


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


class Diverged(Exception):
    """A trace run against an expected one (`trace_once(..., expect=)`) recorded another node:
    said by the user's line and op first, the trace's own nodes after (`why`)."""

    def __init__(self, index: int, found: Any, expected: Any, loc: Any = None) -> None:
        self.index, self.found, self.expected = index, found, expected
        self.loc = loc if loc is not None else (found.meta.get("loc") if found.meta else None)
        op = node_op(found)
        at = f"{self.loc}: " if self.loc is not None else ""
        tail = f" where the trace has `{expected}`" if expected is not None else " past the trace's end"
        self.why = Why(f"records another trace from {at}{op} records `{found}`{tail} (trace line {index + 1})",
                       self.loc, op)
        super().__init__(self.why.text)


def same_node(a: Any, b: Any) -> bool:
    """Are two trace nodes the same, the example values of inputs aside (a placeholder's
    `shape`, an int argument's `val`)?"""
    if a.op is not b.op or a.inputs != b.inputs or a.outputs != b.outputs:
        return False
    if a.op is Op.VAR_PLACEHOLDER or a.op is Op.INT_ARG:
        return {k: v for k, v in a.params.items() if k not in ("shape", "val")} == \
            {k: v for k, v in b.params.items() if k not in ("shape", "val")}
    return a.params == b.params


def difference(t: Trace, u: Trace) -> Why | None:
    """Why `u` is not the same trace as `t` (None when it is): its nodes (example values of
    inputs aside, `same_node`), its output structure, its static guards; the first node that
    differs is named by its user line and op.

    >>> import torch
    >>> f = lambda x: x.sin()
    >>> difference(trace(f, torch.ones(3, 4)), trace(f, torch.ones(1, 4))) is None
    True
    >>> g = lambda x: x.sin() if x.shape[0] > 2 else x
    >>> why = difference(trace(g, torch.ones(3, 4)), trace(g, torch.ones(1, 4)))
    >>> print(why)  # the user's line, the op, then the trace's own nodes
    records another trace from <doctest ...>:1  g = lambda x: x.sin() if x.shape[0] > 2 else x: the program's own \
test of a size records `bool_bailout(i2, expect=False)` where the trace has `bool_bailout(i2, expect=True)` (trace line 6)
    """
    nodes = u.graph.nodes
    for i, (a, b) in enumerate(zip(nodes, t.graph.nodes)):
        if not same_node(a, b):
            return Diverged(i, a, b, node_loc(nodes, i)).why
    if len(nodes) != len(t.graph.nodes):
        short, more = (u, t) if len(nodes) < len(t.graph.nodes) else (t, u)
        i = len(short.graph.nodes)
        extra = more.graph.nodes[i]
        loc = node_loc(more.graph.nodes, i)
        which = "the trace's" if more is t else "its"
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace: {len(nodes)} nodes where the trace has {len(t.graph.nodes)}; "
                   f"{which} first extra node is {node_op(extra)}{at}: `{extra}`", loc, node_op(extra))
    if not _same_spec(u.out_spec, t.out_spec):
        return Why("records another trace: another output structure")
    if [g.text for g in u.static] != [g.text for g in t.static]:
        return Why("records another trace: another memory layout")
    if u.opaque != t.opaque:
        return Why("records another trace: output objects a replay cannot rebuild")
    if (u.unreplayable is None) != (t.unreplayable is None):
        return Why(f"records another trace: {u.unreplayable or t.unreplayable}")
    return None


def _same_spec(a: Any, b: Any) -> bool:
    """Equal output structures (`Ref`s and constants; constant tensors compared by value)."""
    from torch.utils._pytree import tree_flatten

    (la, sa), (lb, sb) = tree_flatten(a), tree_flatten(b)
    if sa != sb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


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
    mode = TracingMode(rec, _module_names(fn))
    # NOTE: below autograd, a CompositeImplicit op (`lstm`, `batch_norm`, `linear`) reaches the
    # mode whole instead of as its decomposition: its eager value comes from the kernel eager
    # dispatches to, and its decomposition runs on meta tensors only, for shapes and guards
    try:
        with PresentsAsTracing(), torch._C._AutoDispatchBelowAutograd(), mode:
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
    opaque = _concrete_objects(result, notes)
    out_spec = spec(result, rec)
    graph.meta["out_spec"] = out_spec
    observed = rec.layout_observed or rec.strides_read
    pinned = _strides_decided_on(rec.guards, strided)
    static += [layout_guard(p.name, v, rec.strides_read) for p, v in zip(signature, example_inputs)
               if p.kind == "tensor" and (observed or p.name in pinned)]
    recorded = Recorded.of(rec) if rec.calls is not None else None
    rec.calls = None
    guards = rec.guards.pruned(in_place=recorded is None)  # NOTE: `recorded` keeps the nodes' names
    guards.meta["static"] = graph.meta["static"] = tuple(static)
    return Trace(graph, unwrap(result), signature, fn, mode.constants, out_spec, guards, tuple(static),
                 tuple(notes), opaque, tuple(example_inputs), value_guards, recorded, unreplayable=mode.reseeded,
                 grad_switch=mode.grad_switch, relaid=rec.relaid)


def placeholder(rec: Recorder, p: Param, value: Any, strided: dict[str, str] | None = None) -> Any:
    """The traced stand-in for one input: a TracedTensor over symbolic sizes, or a SymInt.
    `strided` collects the guard-graph names of a non-contiguous input's strides (see
    `_own_layout`)."""
    if p.kind == "int":
        assert rec.trace is not None
        rec.trace.emit(Op.INT_ARG, (), out=p.name, name=p.name, val=int(value))
        return symint(rec.input_dim(p.name, int(value), Op.INT_ARG, None, 0))
    if rec.trace is not None:
        rec.trace.emit(Op.VAR_PLACEHOLDER, (), out=p.name, name=p.name, rank=p.rank, shape=tuple(value.shape),
                       dtype=dtype_name(value.dtype))
    meta = meta_input(rec, p, value.shape, value.dtype)
    if not value.is_contiguous() or value.storage_offset() != 0:
        meta = _own_layout(rec, p.name, meta, value, strided)
    if rec.trace is None:
        return meta
    real = value.detach() if value.requires_grad else value
    # NOTE: user code may ask (`if x.requires_grad`); the eager tensor itself stays detached
    return TracedTensor(real, meta, p.name, rec, requires_grad=value.requires_grad)


def _own_layout(rec: Recorder, name: str, meta: torch.Tensor, value: torch.Tensor,
                strided: dict[str, str] | None) -> torch.Tensor:
    """`meta` with the input's own storage offset and, when it is not contiguous, its own strides.

    NOTE: a transposed or sliced input is not traced as if it were contiguous: its strides are
    constants of the trace. Each is a guard-graph node of its own (not the shared constant), so
    a decision that reads one (PyTorch's contiguity rule, an output's layout) is a bailout over
    it, and `_strides_decided_on` finds the inputs whose strides the trace must pin. Folded
    into a shared constant, `i.contiguous()` on a strided `i` left only size guards behind, and
    a contiguous input (which `contiguous()` does not copy) passed them. The storage offset is
    the input's own, so that `x.storage_offset()` reads what eager reads.
    """
    strides: Any = meta.stride()
    if not value.is_contiguous():
        strides = []
        for i, st in enumerate(value.stride()):
            g = rec.guards.emit(Op.INT_CONST, (), val=st)
            if strided is not None:
                strided[g] = name
            strides.append(torch.SymInt(SymGuard(rec, st, int, g, origin=(name, Op.VAR_STRIDE, i))))
    rec.muted = True
    try:
        laid = torch.empty_strided(meta.shape, strides, dtype=value.dtype, device="meta")
        return laid.as_strided(meta.shape, strides, value.storage_offset())
    finally:
        rec.muted = False


def _strides_decided_on(guards: Graph, strided: dict[str, str]) -> set[str]:
    """The inputs whose own strides (`strided`: guard-graph name -> input) some bailout reads."""
    if not strided:
        return set()
    reads: dict[str, frozenset[str]] = {g: frozenset({name}) for g, name in strided.items()}
    found: set[str] = set()
    for n in guards.nodes:
        got = frozenset().union(*(reads.get(a, frozenset()) for a in n.inputs))
        if not got:
            continue
        if n.op is Op.BOOL_BAILOUT:
            found |= got
        for o in n.outputs:
            reads[o] = got
    return found


def tracing() -> bool:
    """Is some trace running (in any thread)? Cheap: one read of a shared count."""
    return PresentsAsTracing._active[0] > 0


def is_traced(v: Any) -> bool:
    """Is `v` a value of a running trace (a traced tensor or a symbolic int)?"""
    return isinstance(v, TracedTensor) or (isinstance(v, (torch.SymInt, torch.SymBool)) and v.node.is_symbolic())


def _owners(fn: Any) -> list[tuple[str, torch.nn.Module]]:
    """The modules a traced call may write to: `fn`'s module tree (or its bound `self`'s)."""
    root = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(root, torch.nn.Module):
        return []
    with paused():  # NOTE: guardsolve's walk, not the program's reads
        return list(root.named_modules(remove_duplicate=True))


def scrub(fn: Any) -> list[str]:
    """Concrete values in place of traced ones in the module attributes a traced call set.

    `forward` may keep a size or a tensor it computed (transformers' Swin sets
    `self.window_size = min(input_resolution)`); left traced, every later eager call of the
    module fails. Each such attribute (in a list, tuple, dict or `torch.Size` too), and each
    buffer replaced by a traced tensor, gets the value eager would have left there: the
    example's. Returns one note per attribute changed.

    >>> import torch
    >>> class Keeps(torch.nn.Module):
    ...     def forward(self, x):
    ...         self.width = x.shape[-1]
    ...         return x * 2
    >>> m = Keeps()
    >>> t = trace(m, torch.ones(2, 3))
    >>> type(m.width), m.width
    (<class 'int'>, 3)
    >>> print(t.notes[0])
    width: set during the trace to a traced value; holds its value at the example inputs (3)
    """
    notes: list[str] = []
    for path, m in _owners(fn):
        where = f"{path}." if path else ""
        for key, value in list(m.__dict__.items()):
            if key in ("_parameters", "_modules"):
                continue
            if key == "_buffers":
                for b, t in list(value.items()):
                    if isinstance(t, TracedTensor):
                        value[b] = t.eager
                        notes.append(f"{where}{b}: a buffer set during the trace to a traced tensor; holds its "
                                     "value at the example inputs")
                continue
            if _holds_traced(value):
                concrete = unwrap(value)
                m.__dict__[key] = concrete
                shown = " ".join((repr(concrete) if not isinstance(concrete, torch.Tensor)
                                  else f"a {list(concrete.shape)} tensor").split())
                notes.append(f"{where}{key}: set during the trace to a traced value; holds its value at the "
                             f"example inputs ({shown if len(shown) <= 60 else shown[:57] + '...'})")
    return notes


def _concrete_objects(result: Any, notes: list[str]) -> bool:
    """Concrete values in place of traced ones inside the output's objects that are not
    containers (transformers' `DynamicCache`: its key and value tensors); True when there was
    one. Such an output is the example's: a replay could not rebuild it, so `guarded` keeps no
    entry for it."""
    from torch.utils._pytree import tree_flatten

    found = False
    for leaf in tree_flatten(result)[0]:
        if isinstance(leaf, (torch.Tensor, torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool, str,
                             type(None))) or not hasattr(leaf, "__dict__"):
            continue
        if _concrete_in(leaf, 0):
            found = True
            notes.append(f"the output's {type(leaf).__name__} held traced values; it holds their values at the "
                         "example inputs (a replay cannot rebuild it)")
    return found


def _concrete_in(obj: Any, depth: int) -> bool:
    """Replace traced values in `obj`'s attributes (and in their lists, dicts and objects)."""
    changed = False
    for key, value in list(vars(obj).items()):
        if _holds_traced(value):
            setattr(obj, key, unwrap(value))
            changed = True
        elif depth < 3 and isinstance(value, (list, tuple)):
            changed |= any([_concrete_in(v, depth + 1) for v in value if hasattr(v, "__dict__")
                            and not isinstance(v, torch.Tensor)])
        elif depth < 3 and hasattr(value, "__dict__") and not isinstance(value, (torch.Tensor, type)) \
                and not callable(value):
            changed |= _concrete_in(value, depth + 1)
    return changed


def _holds_traced(v: Any, depth: int = 0) -> bool:
    if isinstance(v, TracedTensor):
        return True
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return isinstance(v.node, SymGuard)
    if depth < 4 and isinstance(v, (list, tuple)):
        return any(_holds_traced(x, depth + 1) for x in v)
    if depth < 4 and isinstance(v, dict):
        return any(_holds_traced(x, depth + 1) for x in v.values())
    return False


def _module_names(fn: Any) -> dict[int, str]:
    if not isinstance(fn, torch.nn.Module):
        return {}
    with paused():  # NOTE: guardsolve's walk, not the program's reads
        named = list(fn.named_parameters(remove_duplicate=True)) + list(fn.named_buffers(remove_duplicate=True))
    return {id(t): name for name, t in named}


def spec(v: Any, rec: Recorder) -> Any:
    """The output structure with `Ref`s in place of traced tensors and symbolic ints."""

    def ref(x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return Ref(x.tname)
        if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)) and x.node.is_symbolic():
            return Ref(rec.t_name(x.node))
        return x

    return tree_map(ref, v)


def unwrap(v: Any) -> Any:
    """Replace traced values in an output structure by their concrete values."""

    def concrete(x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return x.eager
        if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return x.node.hint
        if isinstance(x, torch.Size):
            return torch.Size(concrete(s) for s in x)
        return x

    out = tree_map(concrete, v)
    return torch.Size(out) if isinstance(v, torch.Size) else out
