"""The Inductor backend: a trace compiled by Inductor behind one proven check.

A trace is already a straight line of aten calls (composites kept whole). `compile_variant`
replays it under `make_fx` over FakeTensors whose sizes are symbols (a size of 0 or 1 too:
`specialize_zero_one=False`, and `backed_size_oblivious` only while this compile runs), hands
the graph to `torch._inductor.standalone_compile`, then reads back everything the backend
assumed: the ShapeEnv's guards with `ignore_static=False` (its pins, the symbols' ranges, the
equalities and bounds added while lowering, e.g. `x0 <= 4096` for a float sum reduction) and
the layout it expects of each input (strides, storage offset). Sizes go through the sympy
bridge of `pytorch/` into guard-graph nodes beside the trace's own minimal guards; the two
are simplified together into one `GuardSet`, and `verify()` proves it equivalent to (trace
guards and backend guards), irredundant under sizes >= 0. A guard that cannot be translated
makes the variant exact to the example's sizes and strides: it is never trusted.

The check runs before the artifact on every call; an artifact is never called where its
check fails (a static artifact segfaults at size 0, a broken equality asserts). Every compile
runs Inductor's lowering (a cache key of its own: a cache hit would skip the guards lowering
adds), and a new artifact is compared with the trace's eager replay, values included, at its
compile point and at far points its check accepts; one that differs is never used.

>>> import torch
>>> from guardsolve.trace.tracer import trace
>>> from guardsolve.solve.simplify import simplify
>>> lin = torch.nn.Linear(16, 8).eval()
>>> t = trace(lin, torch.randn(4, 16))
>>> v = compile_variant(t, simplify(t), (torch.randn(4, 16),), [], ("input",))  # doctest: +SKIP
>>> print(v.guards)  # doctest: +SKIP
input1 == 16
"""

from __future__ import annotations

import ast
import contextlib
import operator
import os
import re
import tempfile
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

import sympy
import torch
import z3

from guardsolve.errors import GuardsolveError, first_line
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.jit.decompose import retrace_scope
from guardsolve.jit.backward import conv_backward_layouts, decompositions, two_pass_variances
from guardsolve.jit.layout import channels_last, conv_formats, eager_format, eager_layouts, squeeze_views
from guardsolve.jit.variant import BackendGuard, Variant, runner
from guardsolve.pytorch.sympy_guards import TranslationError, emit_bool, parse_guard
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.solve.smt import Vars, limit
from guardsolve.solve.tograph import emit_bailout
from guardsolve.trace.replay import replay_lines
from guardsolve.trace.static import StaticGuard
from guardsolve.trace.record import OutRef, Trace

try:  # NOTE: PyTorch internals this backend rests on (torch 2.13); named when they move
    import torch.fx.experimental._config as _fx_config
    from torch._dynamo.source import LocalSource
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
except ImportError as e:  # pragma: no cover - depends on the installed torch
    raise ImportError(f"guardsolve.jit.inductor needs torch 2.13's FakeTensor, make_fx and ShapeEnv: {e}") from e


class CompileFailure(GuardsolveError):
    """A trace Inductor cannot serve (a size returned as output, an op it rejects, a failed
    compile); the call runs eagerly and the reason is counted."""


# -- what Inductor assumed, named ---------------------------------------------------------------

# NOTE: (function that added the guard, file suffix) -> what it means, for `explain()`. A guard
# from elsewhere is named by its function and file. Rule table: add a row, not a branch.
_WHY: tuple[tuple[str, str], ...] = (
    ("need_use_acc_helper", "Inductor: float sum reduction over at most 4096 elements (its accumulator helper)"),
    ("_index_dtype", "guardsolve's max pooling: an image plane's flat indices fit int32"),
    ("meta_mm", "make_fx re-trace: mm's inner sizes agree"),
    ("meta_addmm", "make_fx re-trace: addmm's sizes agree"),
    ("meta_bmm", "make_fx re-trace: bmm's sizes agree"),
    ("infer_size", "make_fx re-trace: broadcasting"),
    ("broadcast_shapes", "make_fx re-trace: broadcasting"),
    ("_broadcast_shapes", "make_fx re-trace: broadcasting"),
    ("is_contiguous", "Inductor: the layout of a tensor"),
)


# -- the trace as one flat program ----------------------------------------------------------------


def _unique_refs(spec: Any, out: list[str]) -> list[str]:
    if isinstance(spec, OutRef):
        if spec.name not in out:
            out.append(spec.name)
    elif isinstance(spec, (tuple, list)):
        for x in spec:
            _unique_refs(x, out)
    elif isinstance(spec, dict):
        for x in spec.values():
            _unique_refs(x, out)
    return out


def flat_program(t: Trace) -> tuple[Callable[..., Any], list[str], list[str], list[str]]:
    """The trace as `f(*inputs, *constants) -> (out0, out1, ...)` (the distinct traced values
    of the output, in order), its input and constant names and its outputs' names."""
    inputs = [n.params["name"] for n in t.graph.placeholders()]
    consts = list(t.constants)
    outs = _unique_refs(t.out_spec, [])
    body, ns = replay_lines(t.graph, tuple(OutRef(n) for n in outs))
    src = "\n".join([f"def program({', '.join(inputs + consts)}):"] + [f"    {b}" for b in body])
    exec(compile(src, "<guardsolve inductor program>", "exec"), ns)
    return ns["program"], inputs, consts, outs


# -- compiling ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _oblivious() -> Any:
    """Size-oblivious reasoning for backed sizes, for this compile only (a global flag of
    PyTorch's: guardsolve's own tracing must not run under it)."""
    with _fx_config.patch(backed_size_oblivious=True):
        yield


def _fakes(mode: FakeTensorMode, se: ShapeEnv, t: Trace, values: Sequence[Any],
           train: bool = False) -> tuple[list[Any], dict[str, str]]:
    """A fake per traced input (every size a symbol with range [0, inf), even 0 and 1; a Python
    int a symbol too) and the symbols' names in the trace's dims. With `train`, a fake requires
    grad where its input does (AOTAutograd differentiates with respect to those)."""
    fakes: list[Any] = []
    dims: dict[str, str] = {}
    for p, v in zip(t.signature, values):
        src = LocalSource(p.name)
        if p.kind == "int":
            sym = se.create_symbol(int(v), src, dynamic_dim=DimDynamic.DYNAMIC, positive=None)  # NOTE: ints may be negative
            fakes.append(se.create_symintnode(sym, hint=int(v), source=src))
            dims[f"L[{p.name!r}]"] = p.dims[0]
            continue
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * v.dim())
        fake = mode.from_tensor(v.detach(), symbolic_context=ctx, source=src)
        fakes.append(fake.requires_grad_(True) if train and v.requires_grad else fake)
        for i, d in enumerate(p.dims):
            dims[f"L[{p.name!r}].size()[{i}]"] = d
    return fakes, dims


def _why(guard: Any) -> str:
    sloc = getattr(guard, "sloc", None)
    frame = getattr(sloc, "framework_loc", None)
    name, path = getattr(frame, "name", ""), getattr(frame, "filename", "")
    for fn, text in _WHY:
        if name == fn:
            return text
    if frame is not None:
        short = path.split(f"torch{os.sep}", 1)[-1]
        where = "Inductor" if "_inductor" in path else "make_fx re-trace"
        return f"{where}: {name} (torch/{short}:{getattr(frame, 'lineno', '?')})"
    return "Inductor's ShapeEnv"


def _attribution(se: ShapeEnv, symbols: Mapping[Any, str]) -> list[tuple[Any, str]]:
    """Each ShapeEnv guard as a sympy condition over the trace's dims, with what made it."""
    sub = {s: sympy.Symbol(d, integer=True) for s, d in symbols.items()}
    out = []
    for g in getattr(se, "guards", ()):
        try:
            out.append((g.expr.xreplace(sub), _why(g)))
        except Exception:  # NOTE: attribution only names a guard; it never decides one
            continue
    return out


def _read_guards(se: ShapeEnv, fakes: Sequence[Any], t: Trace, dims: Mapping[str, str],
                 graph: Graph) -> tuple[list[BackendGuard], list[StaticGuard]]:
    """What the backend assumed: size guards emitted as bailouts of `graph`; layout guards
    (strides, storage offset) as static guards over the inputs' names. Raises
    `TranslationError` for a guard with no exact translation."""
    sources = [LocalSource(p.name) for p in t.signature]
    leaves = se.produce_guards(list(fakes), sources, ignore_static=False)
    # NOTE: the symbols as created (a symbol a guard replaced by a constant still names it)
    symbols = {sym: dims[src] for src, sym in getattr(se, "source_to_var", {}).items() if src in dims}
    named = _attribution(se, symbols)
    dim_symbols: dict[str, sympy.Symbol] = {}
    names: dict[Any, str] = {}

    def symbol(source: str) -> Any:
        d = dims.get(source)
        if d is None:
            raise TranslationError(f"reads {source}, which is not a size of the trace's inputs")
        if d not in dim_symbols:
            dim_symbols[d] = sympy.Symbol(d, integer=True)
            names[dim_symbols[d]] = graph.emit(Op.INT_PLACEHOLDER if d in _sizes(t) else Op.INT_ARG, (), name=d) \
                if d not in _declared(graph) else d
        return dim_symbols[d]

    backend: list[BackendGuard] = []
    static: list[StaticGuard] = []
    for leaf in leaves:
        text = _rename(leaf, t)
        if ".stride()" in leaf or ".storage_offset()" in leaf:
            # NOTE: a miss reports the left side's value (`failed (found 1)`), not the comparison's
            sides = re.split(r" (?:==|<=|>=|<|>|!=) ", text)
            subject = next((x for x in sides if not x.strip().lstrip("-").isdigit()), text) if len(sides) == 2 else text
            static.append(StaticGuard(text, text, subject))
            backend.append(BackendGuard(text, "Inductor: the layout of a tensor input", "layout"))
            continue
        expr = parse_guard(leaf, symbol)
        why = next((w for e, w in named if e == expr), None)
        if why is None:
            why = _range_why(expr) or "Inductor's ShapeEnv"
        cond = emit_bool(graph, expr, names)
        graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"origin": why, "backend": text})
        backend.append(BackendGuard(text, why, "size"))
    return backend, static


def _range_why(expr: Any) -> str | None:
    if isinstance(expr, (sympy.LessThan, sympy.GreaterThan, sympy.StrictLessThan, sympy.StrictGreaterThan)):
        if any(a.is_Integer for a in expr.args) and len(expr.free_symbols) == 1:
            return "Inductor: the range its ShapeEnv gives this size"
    return None


def _sizes(t: Trace) -> set[str]:
    return {d for p in t.signature if p.kind == "tensor" for d in p.dims}


def _declared(g: Graph) -> set[str]:
    return {n.params["name"] for n in g.nodes if n.op in (Op.INT_PLACEHOLDER, Op.INT_ARG)}


def _rename(leaf: str, t: Trace) -> str:
    """Dynamo's `L['x']` as the parameter `x` (the check's own argument)."""
    for p in t.signature:
        leaf = leaf.replace(f"L[{p.name!r}]", p.name)
    return leaf


def _trace_part(trace_gs: GuardSet) -> Graph:
    """The trace's minimal guards as a guard graph, each bailout keeping its source line."""
    g = Graph(meta={"signature": trace_gs.signature})
    for d in trace_gs.dims:
        g.emit(Op.INT_PLACEHOLDER if d in trace_gs.sizes else Op.INT_ARG, (), name=d)
    for c in trace_gs.constraints:
        emit_bailout(g, c.formula)
        meta: dict[str, Any] = {}
        if c.prov:
            src = trace_gs.graph.nodes[min(c.prov)].meta
            meta = {k: src[k] for k in ("loc", "op", "origin") if k in src}
        meta.setdefault("origin", "the trace's guards")
        g.nodes[-1].meta = {**g.nodes[-1].meta, **meta}
    return g


def _exact(t: Trace, values: Sequence[Any], graph: Graph) -> list[BackendGuard]:
    """Pin every size (and int) to the example's: the fallback when a backend guard cannot be read."""
    out = []
    declared = _declared(graph)
    for p, v in zip(t.signature, values):
        vals = [int(v)] if p.kind == "int" else list(v.shape)
        for d, x in zip(p.dims, vals):
            if d not in declared:
                graph.emit(Op.INT_PLACEHOLDER if p.kind == "tensor" else Op.INT_ARG, (), name=d)
                declared.add(d)
            cond = graph.emit(Op.INT_EQ, (d, graph.emit(Op.INT_CONST, (), val=int(x))))
            graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"origin": "the example's sizes (a backend guard was not translated)"})
            out.append(BackendGuard(f"{d} == {x}", "the example's sizes (a backend guard was not translated)", "size"))
    return out


def _exact_layout(t: Trace, values: Sequence[Any]) -> list[StaticGuard]:
    out = []
    for p, v in zip(t.signature, values):
        if p.kind == "tensor":
            st, off = tuple(v.stride()), v.storage_offset()
            text = f"{p.name}.stride() == {st} and {p.name}.storage_offset() == {off}"
            out.append(StaticGuard(text, text, f"({p.name}.stride(), {p.name}.storage_offset())"))
    return out


def plain_graph(gm: Any) -> bool:
    """True when the re-traced graph mutates nothing and no output is an input or a view of one:
    then AOTAutograd's runtime wrapper around Inductor's call has nothing to fix up."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            if any(a.alias_info is not None and a.alias_info.is_write for a in n.target._schema.arguments):
                return False
    results = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]

    def aliases_input(n: Any) -> bool:
        while isinstance(n, torch.fx.Node):
            if n.op == "placeholder":
                return True
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                return False
            rets = n.target._schema.returns
            if not rets or rets[0].alias_info is None or not n.args:
                return False
            n = n.args[0]
        return False

    return not any(aliases_input(r) for r in (results if isinstance(results, (tuple, list)) else [results]))


def compiled_graphs(artifact: Any) -> list[Any]:
    """The `CompiledFxGraph`s (Inductor's generated modules) inside a `standalone_compile` artifact."""
    from torch._inductor.output_code import CompiledFxGraph

    return _inside(artifact, lambda f: isinstance(f, CompiledFxGraph))


def autograd_functions(artifact: Any) -> list[type]:
    """The `torch.autograd.Function` classes AOTAutograd made inside a training artifact (each
    holds its forward's and backward's compiled code and their metadata)."""
    return _inside(artifact, lambda f: isinstance(f, type) and issubclass(f, torch.autograd.Function)
                   and hasattr(f.__dict__.get("metadata"), "bw_donated_idxs"))


def keep_saved_tensors(artifact: Any) -> int:
    """Mark each backward of a training artifact compiled with `donated_buffer=False` as
    donating nothing (`bw_donated_idxs = []`); returns how many backwards it found.

    NOTE: PyTorch internals (torch 2.13): compiled so, a backward's metadata keeps
    `bw_donated_idxs = None`, and its runtime check (`None != []`, with the global flag on)
    raised on `backward(retain_graph=True)` though no buffer was donated."""
    n = 0
    for fn in autograd_functions(artifact):
        meta = getattr(fn, "metadata", None)
        if meta is not None and hasattr(meta, "bw_donated_idxs"):
            if meta.bw_donated_idxs is None:
                meta.bw_donated_idxs = []
            n += 1
    return n


def _inside(artifact: Any, want: Callable[[Any], bool]) -> list[Any]:
    """The objects `want` accepts among those reachable from `artifact` through closures and
    AOTAutograd's and Inductor's wrapper attributes (a found one is not looked into)."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [artifact]
    while stack and len(seen) < 10_000:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if want(f):
            found.append(f)
            continue
        if isinstance(f, type):
            continue
        for c in getattr(f, "__closure__", None) or ():
            try:
                stack.append(c.cell_contents)
            except ValueError:
                continue
        for a in ("_compiled_fn", "compiled_fn", "inner_fn", "fw_func", "__self__", "__func__"):
            v = getattr(f, a, None)
            if v is not None and (callable(v) or isinstance(v, type)):
                stack.append(v)
    return found


def direct_call(artifact: Any, outputs: int) -> Callable[[list[Any]], Any] | None:
    """Inductor's own `call(args)` inside a `standalone_compile` artifact (its generated module's
    entry point, without AOTAutograd's runtime wrapper), when exactly one is found and it returns
    `outputs` values; else None. Only for a `plain_graph`."""
    found = compiled_graphs(artifact)
    if len(found) != 1:
        return None
    g = found[0]
    if g.mutated_inputs or getattr(g, "inputs_to_check", None) or len(g.output_strides or ()) != outputs:
        return None
    return g.current_callable


def aborts_on_bad_index(artifact: Any) -> bool:
    """True when a generated kernel checks an index read from data inside an OpenMP parallel
    region: there the failed check (eager's IndexError) is a C++ exception that cannot leave the
    region, and the process aborts. Compiled with one kernel thread, it raises instead."""
    return any("index out of bounds" in (g.source_code or "") and "#pragma omp" in (g.source_code or "")
               for g in compiled_graphs(artifact))


def compile_variant(t: Trace, trace_gs: GuardSet, values: Sequence[Any], static: Sequence[StaticGuard],
                    params: Sequence[str], timeout_ms: int = 5000, save: bool = False, train: bool = False,
                    segments: dict[Any, Any] | None = None) -> Variant:
    """Compile `t` with Inductor at the example `values` (the trace's inputs) and build the
    variant's check: `trace_gs` and the backend's guards, minimal and proven (`verify()`).
    `static` and `params` are the entry's (see `GuardedFunction`). With `save`, the artifact's
    bytes are kept for the store. Raises `CompileFailure`.

    Sizes are symbols from 0 up. The re-trace first reasons size-obliviously (one artifact
    for sizes 0, 1 and more where the kernels allow it); where that fails (a broadcast of a
    size the example has at 1), it re-traces with the sizes' own values deciding, and the
    ShapeEnv records each decision as a guard. Where Inductor cannot compile the graph (its own
    decompositions compute a float from sizes no node reads: batch norm's unbiased running
    variance in train mode), the graph is decomposed here first and compiled again.

    With `train` (grad mode on, a tensor the trace reads requires grad), the artifact is
    AOTAutograd's: a forward and a backward compiled from one joint graph, both before the
    first call, so the backward's guards are read back with the forward's. Its constants are
    the live tensors (parameters, not detached copies), so gradients reach them. Such a
    variant is compared with eager in outputs, gradients and mutated buffers; it re-traces
    with the sizes deciding only (size-oblivious reasoning baked a saved activation's stride
    into one backward).

    A trace that reads tensor data is compiled as segments (`jit/segments.py`); `segments`
    holds the segments built for other traces of the same function, shared by their source."""
    from guardsolve.jit.segments import has_data

    if has_data(t.graph):
        return _segmented(t, trace_gs, values, timeout_ms, train, segments)
    start = time.perf_counter()
    program, inputs, const_names, outs = flat_program(t)
    consts = [t.constants[c] if train else t.constants[c].detach() for c in const_names]
    # NOTE: a variant runs on the live tensors, never on detached aliases: `w.data = new` (and
    # `model.double()`, which does it) keeps the object and replaces what an alias still holds;
    # the artifact's own input asserts then see a size or stride changed in place (`resize_`)
    live = [t.constants[c] for c in const_names]
    failures: list[str] = []
    called = [str(n.params["fn"]) for n in t.graph.nodes if n.op is Op.ATEN]
    formats = None if train else _eager_formats(t, program, values, consts)
    for oblivious in ((False,) if train else (True, False)):
        for decompose in (False, True):
            try:
                built = _build(program, t, values, consts, oblivious, decompose, called, train, formats)
            except _Failed as f:
                failures.append(str(f))
                if f.stage == "make_fx":
                    break  # NOTE: a re-trace that fails fails decomposed too
                continue
            se, fakes, dims, gm, artifact, sizes = built
            compile_s = time.perf_counter() - start
            data = _artifact_bytes(artifact) if save else None
            plain = plain_graph(gm) and not train  # NOTE: autograd's wrapper is the call itself
            call = direct_call(artifact, len(outs)) if plain else None
            v = _variant(t, trace_gs, values, static, params, timeout_ms, se, fakes, dims, artifact, inputs,
                         live, outs, compile_s, data, plain, call, train, sizes)

            def served(cs: Sequence[torch.Tensor], call: Any = call, artifact: Any = artifact) -> Callable[..., Any]:
                return runner(call or artifact, inputs, cs, outs, t.out_spec, boxed=call is not None, extra=v.extra)

            differs = _differs_at(t, v, values, params, gm, timeout_ms, served, consts, train)
            if differs is not None:
                # NOTE: never trusted: `(a * b)[:, :2]` compiled at `b` of 1 column gave 2 columns (the
                # slice's end not clamped to the size, in both re-traces) where eager gives 1; the
                # call runs eagerly, with this reason (`cache_info`)
                failures.append(f"the artifact {differs}")
                break
            return v
    raise CompileFailure("; ".join(dict.fromkeys(failures)) if len(failures) > 1 else failures[-1])


def _segmented(t: Trace, trace_gs: GuardSet, values: Sequence[Any], timeout_ms: int, train: bool,
               shared: dict[Any, Any] | None = None) -> Variant:
    """A trace that reads tensor data, served as segments cut where it does (`jit/segments.py`):
    each segment re-traced on its own and compiled, its check over its own inputs (sizes a
    `nonzero` counted among them); the trace's size guards are the variant's check, its value
    bailouts checked by the glue between segments."""
    from guardsolve.errors import SolverError
    from guardsolve.jit.segments import Plan, build, state_writes

    if train:
        raise CompileFailure("the trace decides on tensor data: in grad mode its segments are not compiled")
    plan = Plan.of(t)
    why = state_writes(plan)
    if why is not None:
        raise CompileFailure(f"the trace cannot be cut where it reads data: {why}")

    def compile_one(sub: Trace, example: Sequence[Any]) -> Variant | str:
        # NOTE: a segment's check holds its sizes (and the strides Inductor assumed), not the
        # static part of its inputs (dtype, device, layout, requires_grad, grad mode, autocast):
        # the glue runs it inside a call that passed the entry's static check, on values the
        # trace's ops made from those inputs, whose kinds the ops decide from the inputs' kinds
        # alone; a segment is shared only by traces whose example handed it inputs of the same
        # kinds (`segments.build`). It saves 3 of a segment call's 13 us (6 inputs).
        names = [p.name for p in sub.signature]
        try:
            gs = simplify(sub, timeout_ms=timeout_ms, explore=False)
            v = compile_variant(sub, gs, example, [], names, timeout_ms)
        except (CompileFailure, SolverError) as e:
            return f"Inductor cannot compile it: {first_line(e)[:300]}"
        if not v.check(*example):
            return "its compiled check rejects the inputs it was compiled at"
        return v

    from guardsolve.errors import GuardFailure

    try:
        seg = build(plan, values, compile_one, shared)
    except GuardFailure as e:
        raise CompileFailure(f"the inputs do not take the trace's path on their data: {e}") from e
    if not any(s.variants for s in seg.segments):
        reasons = "; ".join(f"segment {s.index}: {s.why_eager}" for s in seg.segments)
        raise CompileFailure(f"the trace reads tensor data and none of its segments compiles ({reasons})")
    return Variant(trace_gs, seg.run, seg.backend, seg.compile_s, None, segments=seg, compiles=seg.compiles)


class _Failed(Exception):
    """One route of `compile_variant` that failed, at `stage` ("make_fx" or "inductor")."""

    def __init__(self, stage: str, text: str) -> None:
        super().__init__(text)
        self.stage = stage


def _build(program: Callable[..., Any], t: Trace, values: Sequence[Any], consts: Sequence[torch.Tensor],
           oblivious: bool, decompose: bool, called: Sequence[str], train: bool,
           formats: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """One route: re-trace at symbolic sizes (size-obliviously or not, through Inductor's own
    decompositions or not) and compile. Returns (ShapeEnv, fakes, dims, graph, artifact, sizes):
    `sizes`, for a training graph, the (input, dim) pairs it takes as ints after the constants.

    NOTE: a training graph takes its inputs' sizes as int arguments too, as Dynamo's graphs do.
    AOTAutograd's partitioner hands the backward the sizes it needs only where a forward node
    holds them: a causal LM's loss saved its labels flattened (`b * s` elements), and the
    backward, needing `s + 1`, failed to compile ("expected [s38] to have been codegen-ed")."""
    se = ShapeEnv(duck_shape=False, specialize_zero_one=False)
    mode = FakeTensorMode(shape_env=se)
    scope = _oblivious() if oblivious else contextlib.nullcontext()
    try:
        fakes, dims = _fakes(mode, se, t, values, train)
        const_fakes = [mode.from_tensor(c, static_shapes=True) for c in consts]
        sizes = [(k, i) for k, f in enumerate(fakes) if train and isinstance(f, torch.Tensor)
                 for i, d in enumerate(f.shape) if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol]
        size_args = [fakes[k].size(i) for k, i in sizes]
        head = len(fakes) + len(const_fakes)
        table = _decompositions() if decompose else None
        if decompose and train:
            table = {**(table or {}), **_TRAIN_DECOMPOSED}
        # NOTE: a composite whose C++ kernel reads sizes as ints (upsample's `.vec`) would pin
        # every dim or fail; it runs its Python decomposition instead (`jit/decompose.py`)
        with scope, mode, torch.no_grad(), retrace_scope(called), conv_formats():
            gm = make_fx(lambda *a: program(*a[:head]), tracing_mode="fake",
                         decomposition_table=table)(*fakes, *const_fakes, *size_args)
            gm = channels_last(gm, mode, [*fakes, *const_fakes, *size_args])
            if formats is not None:
                gm = eager_layouts(gm, mode, formats)
    except Exception as e:
        raise _Failed("make_fx", f"make_fx could not re-trace the trace: {type(e).__name__}: {first_line(e)}") from e
    _tensor_outputs(gm)
    with mode:
        _scalars_as_tensors(gm)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            # NOTE: standalone_compile("from_graph") reads `example_value`; without it, it falls
            # back to a fresh ShapeEnv and compiles static (which segfaults at size 0)
            n.meta["example_value"] = n.meta["val"]
    cpp = sum(n.op == "call_function" for n in gm.graph.nodes) >= CPP_WRAPPER_MIN_OPS and not train
    grad = torch.enable_grad() if train else torch.no_grad()
    try:
        with grad:
            artifact = _standalone(gm, [*fakes, *const_fakes, *size_args], oblivious, None, cpp, train)
            if aborts_on_bad_index(artifact):
                # NOTE: an index out of range (eager's IndexError) would abort the process
                artifact = _standalone(gm, [*fakes, *const_fakes, *size_args], oblivious, 1, cpp, train)
    except Exception as e:
        how = " (decomposed)" if decompose else ""
        raise _Failed("inductor", f"Inductor could not compile the trace{how}: {type(e).__name__}: {first_line(e)}") from e
    return se, fakes, dims, gm, artifact, sizes


def _eager_formats(t: Trace, program: Callable[..., Any], values: Sequence[Any],
                   consts: Sequence[torch.Tensor]) -> list[Any] | None:
    """The memory format of each of the program's outputs as eager lays it out at the example
    (`layout.eager_format`), from one eager run of the trace's ops; None for a trace that
    writes a tensor it did not make or draws random numbers (running it would change them)."""
    from guardsolve.jit.segments import pure

    if not pure(t):
        return None
    try:
        with torch.no_grad():
            outs = program(*values, *consts)
    except Exception:  # NOTE: the layouts are then the graph's own (values are still eager's)
        return None
    return [eager_format(o) for o in (outs if isinstance(outs, (tuple, list)) else (outs,))]


def _sdpa_cpu_as_math() -> dict[Any, Any]:
    """PyTorch's decomposition of CPU flash attention into its math form, where it has one.

    NOTE: the flash kernel is not differentiable with respect to its mask, which AOTAutograd
    found training T5 (a relative position bias from an embedding): the decomposed training
    route computes attention as its math form, whose mask gets its gradient."""
    from torch._decomp import decomposition_table

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return {op.default: decomposition_table[op.default]} if op is not None and op.default in decomposition_table else {}


_TRAIN_DECOMPOSED = _sdpa_cpu_as_math()


def _decompositions() -> dict[Any, Any]:
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


# -- the artifact against eager -----------------------------------------------------------------

# NOTE: (rtol, atol) by dtype for an artifact's values against eager's: Inductor fuses, reorders
# reductions and computes half precision in float32, so floats agree to rounding, not bits;
# a dtype with no row (integers, bools) must be equal. Rule table: add a row, not a branch.
_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-5, 1e-7), torch.complex128: (1e-5, 1e-7),
    torch.float32: (1e-3, 1e-4), torch.complex64: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2), torch.complex32: (1e-2, 1e-2),
}
# NOTE: dtypes whose CPU kernels lack `equal`, `==` or `abs` ("equal_cpu" not implemented for
# 'ComplexHalf': `chalf()` under Inductor raised it from the compile instead of comparing):
# compared in a dtype that holds every value exactly
_COMPARED_AS: dict[torch.dtype, torch.dtype] = {torch.complex32: torch.complex64}
# NOTE: ops whose values no two runs share: random draws (Inductor has its own generator) and
# uninitialized memory; a graph with one is compared in sizes and dtypes only
_UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided",
                            "aten::new_empty_strided", "aten::empty_permuted"})
_POINT_TIMEOUT_MS = 500  # z3's work limit for one query of `_far_points` (`smt.limit`: a count, not a clock)
_GROWTH_BUDGET = 4  # a far point's inputs hold at most this many times the example's elements (or 4096)
_Outcome = tuple[list[torch.Tensor], list[torch.Tensor]]  # tensor outputs, tensor inputs after the call


def _ops(gm: Any) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def _draws_random(gm: Any) -> bool:
    return any(torch.Tag.nondeterministic_seeded in op.tags for op in _ops(gm))


def _differs_at(t: Trace, v: Variant, values: Sequence[Any], params: Sequence[str], gm: Any, timeout_ms: int,
                served: Callable[[Sequence[torch.Tensor]], Callable[..., Any]], consts: Sequence[torch.Tensor],
                train: bool = False) -> str | None:
    """Where and how the artifact differs from the trace's replay (eager's kernels): at the
    inputs it was compiled at, then at up to three points far from them that its check accepts
    (`_far_points`); outputs and, where the graph mutates, the inputs and constants after the
    call (both run on copies: a buffer the graph updates, batch norm's running statistics, is
    not changed by the comparison). With `train`, the gradients too, with respect to every
    input and constant that requires grad, for one seeded random cotangent. Sizes and dtypes
    always; values too (within `_TOLERANCE`) unless the re-traced graph `gm` draws random
    numbers or reads memory it never wrote. None when it agrees. `served(constants)` is the
    variant's runner over those constants (what a call runs).

    NOTE: defense in depth. The check is meant to hold every assumption the artifact was built
    under; an assumption it misses (an FX graph cache hit once dropped a pooling guard) shows as
    values that differ at some size the check accepts, and the artifact is then never used.
    """
    from guardsolve.trace.replay import compile_replay

    names = list(t.constants)

    def replay(cs: Sequence[torch.Tensor]) -> Callable[..., Any]:
        return compile_replay(t.graph, t.out_spec, dict(zip(names, cs)))

    copy, random = not v.plain, _draws_random(gm)
    compare_values = not random and not any(op._schema.name in _UNINITIALIZED for op in _ops(gm))
    floor = _autocast_floor()
    for where, args in _points(t, v, values, params, timeout_ms):
        want = _outcome(replay, args, consts, copy, random, train)
        if isinstance(want, BaseException):
            if args is values:
                raise want  # NOTE: eager's own error at the call's inputs: the call raises it
            continue  # NOTE: random data eager rejects (an index out of range): no comparison here
        got = _outcome(served, args, consts, copy, random, train)
        if isinstance(got, BaseException):
            return f"raises {type(got).__name__} ({first_line(got)[:120]}) at {where}, where eager gives a value"
        why = _mismatch(want, got, compare_values, floor)
        if why is not None:
            return f"gives {why} at {where}"
    return None


def _outcome(make: Callable[[Sequence[torch.Tensor]], Callable[..., Any]], args: Sequence[Any],
             consts: Sequence[torch.Tensor], copy: bool, random: bool, train: bool = False) -> _Outcome | BaseException:
    """The tensor outputs of `make(consts)(*args)` and (with `copy`, on copies of the arguments
    and the constants) the tensor arguments and constants after the call; or what it raised.
    With `train`, the outputs are followed by the gradients of (outputs . a seeded random
    cotangent) with respect to each argument and constant requiring grad (zeros where unused).
    With `random`, the CPU generator's state is put back after the call (the caller's random
    stream is eager's: only the call itself draws)."""
    from guardsolve.ir.flat import flatten as _flatten

    both = _copies([*args, *consts]) if copy else [*args, *consts]
    run_args, run_consts = both[:len(args)], both[len(args):]
    rng = torch.random.fork_rng(devices=[]) if random else contextlib.nullcontext()
    try:
        with (torch.enable_grad() if train else torch.no_grad()), rng:
            out = make(run_consts)(*run_args)
            outs = [x for x in _flatten(out)[0] if isinstance(x, torch.Tensor)]
            if train:
                outs = outs + _gradients(outs, both)
    except Exception as e:
        return e
    return [o.detach() for o in outs], ([x.detach() for x in both if isinstance(x, torch.Tensor)] if copy else [])


def _gradients(outs: Sequence[torch.Tensor], args: Sequence[Any]) -> list[torch.Tensor]:
    """d(sum of each differentiable output times a seeded random tensor of its shape) / d(each
    argument that requires grad)."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    diff = [o for o in outs if o.requires_grad and (o.dtype.is_floating_point or o.dtype.is_complex)]
    if not leaves or not diff:
        return []
    gen = torch.Generator().manual_seed(1)
    cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in diff]
    grads = torch.autograd.grad(diff, leaves, cot, allow_unused=True)
    return [torch.zeros_like(a) if g is None else g for a, g in zip(leaves, grads)]


def _copies(args: Sequence[Any]) -> list[Any]:
    """The arguments with each tensor's storage copied (once per storage, so aliases stay
    aliases) and viewed with the same sizes, strides and offset: a mutation changes no caller's
    tensor, and the layout guards still hold."""
    storages: dict[int, Any] = {}
    out: list[Any] = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        st = a.untyped_storage()
        key = st.data_ptr() or id(st)
        if key not in storages:
            storages[key] = st.clone()
        view = torch.empty(0, dtype=a.dtype, device=a.device)
        with torch.no_grad():
            view = view.set_(storages[key], a.storage_offset(), a.size(), a.stride())
        out.append(view.requires_grad_(True) if a.requires_grad else view)
    return out


def _mismatch(want: _Outcome, got: _Outcome, compare_values: bool,
              floor: tuple[float, float] | None = None) -> str | None:
    """The first output (then mutated input) whose sizes, dtype or values differ, described.
    `floor`: the least tolerance of a float comparison (autocast's dtype's)."""
    for what, ws, gs in (("output", want[0], got[0]), ("input after the call", want[1], got[1])):
        if len(ws) != len(gs):
            return f"{len(gs)} tensor {what}s where eager has {len(ws)}"
        for i, (w, g) in enumerate(zip(ws, gs)):
            if w.shape != g.shape or w.dtype != g.dtype:
                return f"{what} {i} of sizes {list(g.shape)} ({g.dtype}) where eager's has {list(w.shape)} ({w.dtype})"
            if compare_values and w.numel():
                why = _value_mismatch(w, g.to(w.device), floor)
                if why is not None:
                    return f"{what} {i} {why}"
    return None


def _within_scale(w: torch.Tensor, g: torch.Tensor, tol: tuple[float, float]) -> bool:
    """|g - w| <= atol + rtol * max |w| everywhere, NaN where eager has NaN."""
    if not torch.equal(torch.isnan(w), torch.isnan(g)):
        return False
    ok = ~torch.isnan(w)
    w64, g64 = w[ok].double(), g[ok].double()
    if not w64.numel():
        return True
    return bool(((g64 - w64).abs().max() <= tol[1] + tol[0] * w64.abs().max()).item())


def _autocast_floor() -> tuple[float, float] | None:
    """The tolerance of the dtypes autocast computes in here (a float32 gradient computed
    through bfloat16 matmuls agrees to bfloat16's rounding), or None where it is off."""
    from guardsolve.trace.static import autocast_state

    tols = [_TOLERANCE[d] for _, d in autocast_state() if d in _TOLERANCE]
    return (max(t[0] for t in tols), max(t[1] for t in tols)) if tols else None


def _value_mismatch(w: torch.Tensor, g: torch.Tensor, floor: tuple[float, float] | None = None) -> str | None:
    """None when `g` equals `w` within the dtype's tolerance (at least `floor` for a float;
    NaN equals NaN), else by how much."""
    tol = _TOLERANCE.get(w.dtype)
    if tol is not None and floor is not None:
        tol = (max(tol[0], floor[0]), max(tol[1], floor[1]))
    if w.dtype in _COMPARED_AS:
        w, g = w.to(_COMPARED_AS[w.dtype]), g.to(_COMPARED_AS[w.dtype])
    if tol is None:
        if torch.equal(w, g):
            return None
        w, g = w.to(torch.float64), g.to(torch.float64)
    elif torch.allclose(g, w, rtol=tol[0], atol=tol[1], equal_nan=True):
        return None
    elif floor is not None and _within_scale(w, g, tol):
        # NOTE: under autocast, a sum over many low-precision products (a layer norm weight's
        # gradient over 468 tokens) differs from eager's by its rounding, relative to the
        # tensor's largest magnitude, not each element's
        return None
    same = (w == g) | (torch.isnan(w) & torch.isnan(g))
    diff = torch.where(same, torch.zeros((), dtype=torch.float64), (g - w).abs().to(torch.float64))
    bound = "exactly" if tol is None else f"rtol {tol[0]:g}, atol {tol[1]:g}"
    return f"differing from eager's by {diff.max().item():.3g} at most (max abs difference; {bound})"


def _points(t: Trace, v: Variant, values: Sequence[Any], params: Sequence[str],
            timeout_ms: int) -> list[tuple[str, Sequence[Any]]]:
    """Where to compare: the inputs the artifact was compiled at, then random inputs at each far
    point (`_far_points`) that the variant's own check accepts, described by their dims."""
    base = _dims_at(t, values)
    here: list[tuple[str, Sequence[Any]]] = [(f"the sizes it was compiled at ({_show(base)})", values)]
    if v.exact_example:
        return here
    check = _traced_check(v, t, params)
    gen = torch.Generator().manual_seed(0)  # NOTE: its own generator: the caller's stream is not drawn from
    fixed = {p.dims[0] for p in t.signature if p.kind == "int"}
    budget = max(_GROWTH_BUDGET * _elements(t, base), 4096)
    for dims in _far_points(v.guards, base, fixed, lambda d: _elements(t, d) <= budget, timeout_ms):
        args = _inputs_at(t, values, dims, gen)
        try:
            accepted = args is not None and bool(check(*args))
        except Exception:  # NOTE: the check may raise on inputs it was not made for; never accepted
            accepted = False
        if accepted:
            here.append((f"{_show(dims)} (sizes its check accepts)", args))
    return here


def sizes_accepted(t: Trace, v: Variant, values: Sequence[Any], params: Sequence[str],
                   timeout_ms: int = 2000) -> list[tuple[dict[str, int], Sequence[Any]]]:
    """The far points other than `values`' own sizes whose random inputs `v`'s check accepts
    (those `_differs_at` compared with eager), as (dims, inputs): empty for a variant pinned to
    its example. `values` are the traced inputs it was compiled at; call it in the state it
    was compiled in (its check reads grad mode, autocast, the default dtype).

    >>> lin = torch.nn.Linear(16, 8).eval()  # doctest: +SKIP
    >>> t = trace(lin, torch.randn(4, 16)); v = compile_variant(t, simplify(t), (torch.randn(4, 16),), [], ("input",))  # doctest: +SKIP
    >>> [dims for dims, _ in sizes_accepted(t, v, (torch.randn(4, 16),), ("input",))]  # doctest: +SKIP
    [{'input0': 0, 'input1': 16}, {'input0': 1, 'input1': 16}, {'input0': 10, 'input1': 16}]
    """
    base = _dims_at(t, values)
    out: list[tuple[dict[str, int], Sequence[Any]]] = []
    for _, args in _points(t, v, values, params, timeout_ms)[1:]:
        dims = _dims_at(t, args)
        if dims != base:
            out.append((dims, args))
    return out


def _dims_at(t: Trace, values: Sequence[Any]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for p, x in zip(t.signature, values):
        dims.update(zip(p.dims, [int(x)] if p.kind == "int" else [int(n) for n in x.shape]))
    return dims


def _show(dims: Mapping[str, int]) -> str:
    return ", ".join(f"{d}={n}" for d, n in dims.items()) or "no sizes"


def _elements(t: Trace, dims: Mapping[str, int]) -> int:
    total = 0
    for p in t.signature:
        if p.kind == "tensor":
            n = 1
            for d in p.dims:
                n *= dims[d]
            total += n
    return total


def _far_points(gs: GuardSet, base: Mapping[str, int], fixed: set[str], cheap: Callable[[Mapping[str, int]], bool],
                timeout_ms: int) -> list[dict[str, int]]:
    """Points of `gs`'s constraints far from `base`: the sizes' smallest sum (sizes from 0), the
    smallest with every size at least 1, and the largest with each size at most about twice its
    own (halved toward `base` until `cheap`). The dims in `fixed` (int arguments: their values
    may index) keep their values. A query z3 cannot answer in time gives no point.

    >>> from guardsolve.trace.tracer import trace
    >>> gs = simplify(trace(lambda a, b: a + b, torch.ones(4, 3), torch.ones(3)))
    >>> _far_points(gs, {"a0": 4, "a1": 3, "b0": 3}, set(), lambda dims: True, 1000)
    [{'a0': 0, 'a1': 0, 'b0': 0}, {'a0': 1, 'a1': 1, 'b0': 1}, {'a0': 10, 'a1': 8, 'b0': 8}]
    """
    ctx = z3.Context()
    var = Vars(ctx)
    inside = gs.to_z3(ctx)
    moving = [d for d in base if d not in fixed]
    if not moving:
        return []
    found: list[dict[str, int]] = []
    for least, grow in ((0, 0), (1, 0), (0, 1)):
        for halving in range(4 if grow else 1):
            o = z3.Optimize(ctx=ctx)
            limit(o, min(timeout_ms, _POINT_TIMEOUT_MS))
            o.add(inside, *[var(d) == base[d] for d in fixed], *[var(d) >= least for d in moving])
            if grow:
                o.add(*[var(d) <= base[d] + (base[d] + 2) // 2 ** halving for d in moving])
            total = z3.Sum([var(d) for d in moving])
            o.maximize(total) if grow else o.minimize(total)
            if o.check() != z3.sat:
                break
            m = o.model()
            point = {d: m.eval(var(d), model_completion=True).as_long() for d in base}
            if not grow or cheap(point):
                if point != base and point not in found:
                    found.append(point)
                break
    return found


def _traced_check(v: Variant, t: Trace, params: Sequence[str]) -> Callable[..., bool]:
    """The variant's check over the traced inputs alone: where some parameters are not traced
    (pinned by value), their static guards are left out; they hold, as at the compile point."""
    traced = [p.name for p in t.signature]
    if list(params) == traced:
        return v.check
    untraced = set(params) - set(traced)
    keep = [g for g in v.guards.static if not _names(g.source) & untraced]
    return v.guards.with_static(keep, traced).check


def _names(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source, mode="eval")) if isinstance(n, ast.Name)}


def _inputs_at(t: Trace, values: Sequence[Any], dims: Mapping[str, int],
               gen: torch.Generator) -> tuple[Any, ...] | None:
    """Random inputs at `dims`, each tensor like the example's (dtype, device, the order of its
    strides); ints as they were. None where a dtype has no random values here."""
    out: list[Any] = []
    for p, x in zip(t.signature, values):
        if p.kind == "int":
            out.append(x)
            continue
        y = _random_like(x, [dims[d] for d in p.dims], gen)
        if y is None:
            return None
        out.append(y)
    return tuple(out)


def _random_like(x: torch.Tensor, sizes: Sequence[int], gen: torch.Generator) -> torch.Tensor | None:
    """A tensor of `sizes` with x's dtype and device, its dims laid out in the order of x's
    strides (so a transposed example gives a transposed point); floats normal, bools fair
    coins, integers drawn from x's own values (an index stays one where the indexed size is kept)."""
    order = sorted(range(x.dim()), key=lambda i: (-x.stride(i), i))
    shape = [sizes[i] for i in order]
    try:
        if x.dtype.is_floating_point or x.dtype.is_complex:
            base = torch.randn(shape, generator=gen, dtype=x.dtype)
        elif x.dtype == torch.bool:
            base = torch.rand(shape, generator=gen) < 0.5
        elif x.numel():
            flat = x.detach().reshape(-1).cpu()
            base = flat[torch.randint(flat.numel(), shape, generator=gen)]
        else:
            base = torch.zeros(shape, dtype=x.dtype)
    except (RuntimeError, TypeError):  # NOTE: a dtype with no random kernel (float8): no point
        return None
    inverse = [order.index(i) for i in range(x.dim())]
    return base.permute(inverse).to(x.device)


# NOTE: from this many ops on, the kernels are called from a C++ wrapper (`cpp_wrapper`):
# Python's cost per kernel call (~1-2 us) dominates a small input's hit (GPT-2 tiny: 278 ->
# 168 us), while the wrapper's C++ build costs seconds, which a graph of a few ops never
# earns back (an MLP's hit is 16 us either way).
CPP_WRAPPER_MIN_OPS = 40


class _FreshKey(CustomGraphPass):
    """A post-grad pass that changes nothing and whose uuid, part of Inductor's and
    AOTAutograd's cache keys, no other compile has: its compile misses both caches."""

    def __init__(self) -> None:
        self._uuid = uuid.uuid4().hex

    def __call__(self, graph: torch.fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return self._uuid


@contextlib.contextmanager
def _inputs_checked() -> Any:
    """While it holds, Inductor's generated code asserts no size or stride of an input whose
    size is symbolic: such an input is one of the trace's, and the variant's own check, which
    runs before every call, holds its sizes (the guards) and its strides (the layout guards).
    A constant (a weight, a buffer: static sizes) keeps its assert: a `resize_` in place keeps
    the object and its storage, which is all the state check compares, and the assert turns
    the call into a miss. A backward graph asserts none of its inputs: they are the tensors
    its forward saved, laid out as that forward's compiled code wrote them (Inductor compiles
    the backward against the strides the forward's compile reports), and autograd's version
    counters reject one changed in place before the backward runs; and the output gradients,
    which AOTAutograd copies into the memory format the backward was compiled for. Extern
    kernels' outputs (a convolution's) keep their asserts: ATen lays those out at run time.

    NOTE: measured on issue 48's MoE routing (4 tokens, 3 compiled segments): 24 asserts a
    call, 0.46 us each under cProfile."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.virtualized import V

    original = PythonWrapperCodegen.__dict__["codegen_input_size_asserts"]

    def codegen(self: Any) -> None:
        original(self)
        for name, buf in V.graph.graph_inputs.items():
            if name in self._pending_input_asserts and (V.graph.is_backward or any(
                    isinstance(d, sympy.Expr) and d.free_symbols for d in buf.get_size())):
                del self._pending_input_asserts[name]

    PythonWrapperCodegen.codegen_input_size_asserts = codegen
    try:
        yield
    finally:
        PythonWrapperCodegen.codegen_input_size_asserts = original


def _standalone(gm: Any, inputs: list[Any], oblivious: bool, threads: int | None, cpp: bool,
                train: bool = False) -> Any:
    """`standalone_compile` of the re-traced graph, its lowering run in this call (never a cache hit)."""
    from torch._inductor import config

    scope = _oblivious() if oblivious else contextlib.nullcontext()
    # NOTE: a cache hit would not run lowering, so the guards lowering adds would not reach this
    # ShapeEnv, which `_read_guards` reads. Inductor's FX graph cache (and AOTAutograd's, which
    # serves it) keys an entry by the graph and its inputs' symbolic sizes, and the guards an
    # entry keeps (`guards_expr`) cover only inputs that are SymInts: make_fx's graph has none
    # (its sizes live in tensors), so an entry compiled at one size is served at any other. An
    # audio encoder's `AdaptiveAvgPool1d` compiled at length 400 (guard `(s2 - 1) // 8 == 49`)
    # was served at 800 without the guard, with 400's pooling windows: 3 of 6 calls wrong. A key
    # no other compile has gives the same answer cold or warm, in any process. Disabling the
    # caches (`fx_graph_cache=False`) would do the same but loses `CompiledArtifact.save`, which
    # saves what the caches record. Cost, warm cache directory, one thread: an MLP or `x.sin() + y`
    # 0.01 s (a hit) -> 0.09-0.12 s; the encoder's variants 0.27 s -> 2.2-4.0 s (lowering's sympy
    # work; C++ builds stay cached, keyed by their source). `cache_dir` keeps variants across
    # processes without Inductor's cache.
    passes = (*get_custom_graph_passes(config.post_grad_custom_post_pass), _FreshKey())
    patch: dict[str, Any] = {"post_grad_custom_post_pass": passes}
    if cpp:
        patch["cpp_wrapper"] = True
    if threads is not None:
        patch["cpp.threads"] = threads
    if train:
        # NOTE: layout optimization (channels-last convolutions) restrides the backward's saved
        # activations to the strides the forward's kernels chose at the example's sizes, which
        # pinned a conv net's height and width (`8 * W == 64`); AOTAutograd assumes it off for
        # dynamic shapes, which its detection does not see in a graph whose sizes live in tensors
        patch["layout_optimization"] = False
    # NOTE: a donated buffer (a saved activation the backward frees as it goes) makes
    # `backward(retain_graph=True)` and a second backward raise, which eager allows
    donate = torch._functorch.config.patch(donated_buffer=False) if train else contextlib.nullcontext()
    # NOTE: a training graph's lowerings at symbolic sizes (`jit/backward.py`): a conv net's
    # backward pinned its image sizes, and its pooling and batch norm ran slower than Inductor's
    # static kernels
    lowered = contextlib.ExitStack()
    if train:
        lowered.enter_context(conv_backward_layouts())
        lowered.enter_context(two_pass_variances())
    with scope, config.patch(patch), donate, conv_formats(), squeeze_views(), _inputs_checked(), lowered:
        options = {"decompositions": decompositions(train)}
        artifact = torch._inductor.standalone_compile(gm, inputs, dynamic_shapes="from_graph", options=options)
    if train and not keep_saved_tensors(artifact):
        raise CompileFailure("no AOTAutograd backward found in the compiled artifact (PyTorch internals moved?)")
    return artifact


_SYMFLOAT_OPS = {operator.truediv: torch.ops.aten.div.Tensor, operator.mul: torch.ops.aten.mul.Tensor,
                 operator.add: torch.ops.aten.add.Tensor, operator.sub: torch.ops.aten.sub.Tensor}


def _scalars_as_tensors(gm: Any) -> None:
    """A float computed from sizes in Python (a decomposition's `scale = in_size / out_size`,
    a `SymFloat`) used as an op's scalar, computed instead as a 0-d float64 tensor from the sizes.

    Inductor's pass that turns such floats into tensors (`_tensorify_python_scalars`) finds a
    size symbol only where a graph node reads it: a size computed from another op's output
    (`interpolate(pos, size=avg_pool2d(x, 4).shape[-2:])`) names the input's symbol, which no
    node reads, and the pass raised `KeyError: s0`. A 0-d float64 tensor in place of a
    Python float keeps each op's result dtype (a 0-d tensor does not promote a float tensor) and
    its double-precision value."""
    def as_tensor(arg: Any, before: Any) -> Any:
        if isinstance(arg, torch.fx.Node) and "tensor" in arg.meta:
            return arg.meta["tensor"]  # NOTE: a float this pass already made a tensor
        with gm.graph.inserting_before(before):
            v = arg.meta["val"] if isinstance(arg, torch.fx.Node) else arg
            t = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (arg,), {"dtype": torch.float64})
            t.meta["val"] = torch.ops.aten.scalar_tensor.default(v, dtype=torch.float64)
        return t

    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _SYMFLOAT_OPS or not isinstance(n.meta.get("val"), torch.SymFloat):
            continue
        if not all(isinstance(a, (torch.fx.Node, int, float)) for a in n.args):
            continue
        a, b = (as_tensor(x, n) for x in n.args)
        with gm.graph.inserting_before(n):
            t = gm.graph.call_function(_SYMFLOAT_OPS[n.target], (a, b))
            t.meta["val"] = _SYMFLOAT_OPS[n.target](a.meta["val"], b.meta["val"])
        n.meta["tensor"] = t
        changed = True
    if not changed:
        return
    for n in list(gm.graph.nodes):
        # NOTE: an op's scalar takes the tensor; a size rounded from the float (`int(h * 1.5)`,
        # `math.trunc`) keeps computing on the SymFloat
        if n.op == "call_function" and "tensor" not in n.meta and isinstance(n.target, torch._ops.OpOverload):
            n.args = tuple(_tensor_of(a) for a in n.args)
            n.kwargs = {k: _tensor_of(v) for k, v in n.kwargs.items()}
    for n in reversed(list(gm.graph.nodes)):
        if "tensor" in n.meta and not n.users:
            del n.meta["tensor"]
            gm.graph.erase_node(n)
    gm.graph.lint()
    gm.recompile()


def _tensor_of(a: Any) -> Any:
    return a.meta["tensor"] if isinstance(a, torch.fx.Node) and "tensor" in a.meta else a


def _tensor_outputs(gm: Any) -> None:
    results = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    for r in results if isinstance(results, (tuple, list)) else [results]:
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else r
        if not isinstance(val, torch.Tensor):
            raise CompileFailure(f"the output holds a {type(val).__name__}, not only tensors (Inductor returns tensors)")


def _variant(t: Trace, trace_gs: GuardSet, values: Sequence[Any], static: Sequence[StaticGuard],
             params: Sequence[str], timeout_ms: int, se: ShapeEnv, fakes: Sequence[Any], dims: Mapping[str, str],
             artifact: Any, inputs: Sequence[str], consts: Sequence[torch.Tensor], outs: Sequence[str],
             compile_s: float, data: bytes | None, plain: bool, call: Callable[..., Any] | None,
             train: bool, sizes: Sequence[tuple[int, int]] = ()) -> Variant:
    graph = _trace_part(trace_gs)
    exact = False
    try:
        backend, layout = _read_guards(se, fakes, t, dims, graph)
    except TranslationError:
        graph = _trace_part(trace_gs)
        backend, layout, exact = _exact(t, values, graph), _exact_layout(t, values), True
    gs = simplify(graph, explore=False, timeout_ms=timeout_ms, jobs=1).with_static([*static, *layout], params)
    cert = gs.verify(timeout_ms=max(timeout_ms, 10000), minimal=False)
    extra = tuple(f"{inputs[k]}.size({i})" for k, i in sizes)
    run = runner(call or artifact, inputs, consts, outs, t.out_spec, boxed=call is not None, extra=extra)
    return Variant(gs, run, tuple(backend), compile_s, cert, data, exact, plain=plain,
                   direct=None if data is None else _direct(call, train), train=train, extra=extra)


def _direct(call: Callable[..., Any] | None, train: bool = False) -> dict[str, Any] | str:
    """What a later process needs to run `call` without importing Inductor (`jit/kernels.py`), or
    why it cannot (it then loads the artifact through Inductor)."""
    from guardsolve.jit.kernels import NotDirect, capture

    if train:
        return "a training variant: AOTAutograd's wrapper runs its forward and its backward"
    if call is None:
        return "Inductor's runtime wrapper runs it (its graph mutates an input or returns an alias of one)"
    try:
        return capture(call)
    except NotDirect as e:
        return str(e)


def _artifact_bytes(artifact: Any) -> bytes | None:
    """The artifact as bytes for `cache_dir`, or None where writing them fails (a full disk): the
    variant serves the call, unsaved."""
    try:
        with tempfile.TemporaryDirectory(prefix="guardsolve-") as d:
            path = os.path.join(d, "artifact.bin")
            artifact.save(path=path, format="binary")
            with open(path, "rb") as f:
                return f.read()
    except OSError:
        return None


def load_artifact(data: bytes) -> Callable[..., Any]:
    """An artifact saved by `compile_variant(save=True)`, loaded (Inductor's cache rebuilds its
    C++ when cold; a warm cache makes this milliseconds)."""
    from torch._inductor import CompiledArtifact

    with tempfile.TemporaryDirectory(prefix="guardsolve-") as d:
        path = os.path.join(d, "artifact.bin")
        with open(path, "wb") as f:
            f.write(data)
        return CompiledArtifact.load(path=path, format="binary")


__all__ = ["BackendGuard", "CompileFailure", "Variant", "compile_variant", "flat_program", "load_artifact", "runner"]

