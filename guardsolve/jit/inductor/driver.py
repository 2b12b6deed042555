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

import contextlib
import time
from typing import Any, Callable, Mapping, Sequence
import torch
from guardsolve.errors import first_line
from guardsolve.ir.ops import Op
from guardsolve.jit.decompose import retrace_scope
from guardsolve.jit.layout import channels_last, conv_formats, eager_format, eager_layouts
from guardsolve.patching import COMPILING
from guardsolve.jit.variant import Variant, runner
from guardsolve.pytorch.sympy_guards import TranslationError
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.replay import replay_lines
from guardsolve.trace.static import StaticGuard
from guardsolve.trace.record import OutRef, Trace
from guardsolve.jit.inductor.artifacts import aborts_on_bad_index, artifact_bytes, direct_call, direct_runner, plain_graph
from guardsolve.jit.inductor.backend_guards import exact_guards, exact_layout, fake_inputs, read_guards, size_oblivious, trace_part
from guardsolve.jit.inductor.crosscheck import differs_at
from guardsolve.jit.inductor.failure import CompileFailure, RouteFailed
from guardsolve.jit.inductor.internals import FakeTensorMode, ShapeEnv, make_fx
from guardsolve.jit.inductor.standalone import CPP_WRAPPER_MIN_OPS, scalars_as_tensors, standalone_compiled, tensor_outputs


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

    A trace that reads tensor data is compiled as segments (`jit/segments/`); `segments`
    holds the segments built for other traces of the same function, shared by their source.

    One compile runs at a time in the process (`patching.COMPILING`): make_fx and Inductor keep
    state of their own across threads (two at once failed inside torch: `CURRENT_PATCHER is None`)."""
    with COMPILING:
        return _compile_variant(t, trace_gs, values, static, params, timeout_ms, save, train, segments)


def _compile_variant(t: Trace, trace_gs: GuardSet, values: Sequence[Any], static: Sequence[StaticGuard],
                     params: Sequence[str], timeout_ms: int, save: bool, train: bool,
                     segments: dict[Any, Any] | None) -> Variant:
    from guardsolve.jit.segments.plan import has_data

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
            except RouteFailed as f:
                failures.append(str(f))
                if f.stage == "make_fx":
                    break  # NOTE: a re-trace that fails fails decomposed too
                continue
            se, fakes, dims, gm, artifact, sizes = built
            compile_s = time.perf_counter() - start
            data = artifact_bytes(artifact) if save else None
            plain = plain_graph(gm) and not train  # NOTE: autograd's wrapper is the call itself
            call = direct_call(artifact, len(outs)) if plain else None
            v = _variant(t, trace_gs, values, static, params, timeout_ms, se, fakes, dims, artifact, inputs,
                         live, outs, compile_s, data, plain, call, train, sizes)

            def served(cs: Sequence[torch.Tensor], call: Any = call, artifact: Any = artifact) -> Callable[..., Any]:
                return runner(call or artifact, inputs, cs, outs, t.out_spec, boxed=call is not None, extra=v.extra)

            differs = differs_at(t, v, values, params, gm, timeout_ms, served, consts, train)
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
    """A trace that reads tensor data, served as segments cut where it does (`jit/segments/`):
    each segment re-traced on its own and compiled, its check over its own inputs (sizes a
    `nonzero` counted among them); the trace's size guards are the variant's check, its value
    bailouts checked by the glue between segments."""
    from guardsolve.errors import SolverError
    from guardsolve.jit.segments.plan import Plan
    from guardsolve.jit.segments.build import build
    from guardsolve.jit.segments.writes import state_writes

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
    scope = size_oblivious() if oblivious else contextlib.nullcontext()
    try:
        fakes, dims = fake_inputs(mode, se, t, values, train)
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
        raise RouteFailed("make_fx", f"make_fx could not re-trace the trace: {type(e).__name__}: {first_line(e)}") from e
    tensor_outputs(gm)
    with mode:
        scalars_as_tensors(gm)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            # NOTE: standalone_compile("from_graph") reads `example_value`; without it, it falls
            # back to a fresh ShapeEnv and compiles static (which segfaults at size 0)
            n.meta["example_value"] = n.meta["val"]
    cpp = sum(n.op == "call_function" for n in gm.graph.nodes) >= CPP_WRAPPER_MIN_OPS and not train
    grad = torch.enable_grad() if train else torch.no_grad()
    try:
        with grad:
            artifact = standalone_compiled(gm, [*fakes, *const_fakes, *size_args], oblivious, None, cpp, train)
            if aborts_on_bad_index(artifact):
                # NOTE: an index out of range (eager's IndexError) would abort the process
                artifact = standalone_compiled(gm, [*fakes, *const_fakes, *size_args], oblivious, 1, cpp, train)
    except Exception as e:
        how = " (decomposed)" if decompose else ""
        raise RouteFailed("inductor", f"Inductor could not compile the trace{how}: {type(e).__name__}: {first_line(e)}") from e
    return se, fakes, dims, gm, artifact, sizes


def _eager_formats(t: Trace, program: Callable[..., Any], values: Sequence[Any],
                   consts: Sequence[torch.Tensor]) -> list[Any] | None:
    """The memory format of each of the program's outputs as eager lays it out at the example
    (`layout.eager_format`), from one eager run of the trace's ops; None for a trace that
    writes a tensor it did not make or draws random numbers (running it would change them)."""
    from guardsolve.jit.segments.writes import pure

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


def _variant(t: Trace, trace_gs: GuardSet, values: Sequence[Any], static: Sequence[StaticGuard],
             params: Sequence[str], timeout_ms: int, se: ShapeEnv, fakes: Sequence[Any], dims: Mapping[str, str],
             artifact: Any, inputs: Sequence[str], consts: Sequence[torch.Tensor], outs: Sequence[str],
             compile_s: float, data: bytes | None, plain: bool, call: Callable[..., Any] | None,
             train: bool, sizes: Sequence[tuple[int, int]] = ()) -> Variant:
    graph = trace_part(trace_gs)
    exact = False
    try:
        backend, layout = read_guards(se, fakes, t, dims, graph)
    except TranslationError:
        graph = trace_part(trace_gs)
        backend, layout, exact = exact_guards(t, values, graph), exact_layout(t, values), True
    gs = simplify(graph, explore=False, timeout_ms=timeout_ms, jobs=1).with_static([*static, *layout], params)
    cert = gs.verify(timeout_ms=max(timeout_ms, 10000), minimal=False)
    extra = tuple(f"{inputs[k]}.size({i})" for k, i in sizes)
    run = runner(call or artifact, inputs, consts, outs, t.out_spec, boxed=call is not None, extra=extra)
    return Variant(gs, run, tuple(backend), compile_s, cert, data, exact, plain=plain,
                   direct=None if data is None else direct_runner(call, train), train=train, extra=extra)


