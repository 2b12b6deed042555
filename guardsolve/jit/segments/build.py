"""The segments of a plan compiled, each behind its own check, faster of compiled and eager kept."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence
import torch
from guardsolve.ir.ops import Op
from guardsolve.jit.segments.plan import MIN_OPS, Plan
from guardsolve.jit.segments.segment import Segment, Segmented


def build(plan: Plan, values: Sequence[Any], compile_one: Callable[[Any, Sequence[Any]], Any],
          shared: dict[Any, "Segment"] | None = None) -> Segmented:
    """The segments of `plan`'s trace, each compiled by `compile_one(sub_trace, example_inputs)`
    (a Variant, or a string saying why not) at the inputs it receives when the glue runs on
    copies of the example `values` (the trace's inputs). `shared` holds the segments already
    built (for other traces of the same function), by their canonical source and constants."""
    from guardsolve.trace.tracer import trace

    start = time.perf_counter()
    t = plan.trace
    consts = t.constants
    # NOTE: the example's own segment inputs, from a run over copies (inputs, constants and the
    # random state restored: compiling changes nothing the program reads)
    seen: dict[int, tuple[Any, ...]] = {}
    copies = {c: v.detach().clone() for c, v in consts.items()}
    # NOTE: each segment's eager function takes its constants as arguments: the example run
    # passes copies, the served glue the live tensors
    keys: list[str] = []
    eager: list[Callable[..., Any]] = []
    for k in range(len(plan.runs)):
        ns: dict[str, Any] = {}
        exec(compile(plan.segment_source(k, ns), f"<guardsolve segment {k}>", "exec"), ns)
        keys.append(ns["__key__"])
        eager.append(ns["segment"])

    def recording(k: int) -> Callable[..., Any]:
        def seg(*a: Any) -> Any:
            if k not in seen:
                seen[k] = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in a[:len(plan.ins[k])])
            return eager[k](*a)
        return seg

    glue_ns: dict[str, Any] = dict(copies)
    glue_ns.update({f"seg{k}": recording(k) for k in range(len(plan.runs))})
    src = plan.glue_source(glue_ns)
    exec(compile(src, "<guardsolve glue>", "exec"), glue_ns)
    rng = torch.random.get_rng_state()
    try:
        with torch.no_grad():
            glue_ns["glue"](*[v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values])
    finally:
        torch.random.set_rng_state(rng)
    # NOTE: the served segments read the live constants
    run_ns: dict[str, Any] = dict(consts)  # NOTE: the tensors themselves (`inductor.compile_variant`)
    segments: list[Segment] = []
    compiles = 0
    backend: list[Any] = []
    for k, run in enumerate(plan.runs):
        used = tuple(run_ns[c] for c in plan._consts(k))
        # NOTE: the ops (canonical names), where each constant's values live (a view made again
        # by another trace, `w[e]`, is the same constant), and the kinds of the inputs the
        # example handed it, which its check does not hold (`inductor._segmented`): within one
        # trace they follow from the entry's check
        key = (keys[k], tuple((c.untyped_storage().data_ptr(), c.storage_offset(), tuple(c.shape),
                               c.stride(), c.dtype) for c in used), _kinds(seen.get(k)))
        if shared is not None and key in shared:
            segments.append(shared[key])  # NOTE: the same ops on the same constants: compiled once
            continue
        core = eager[k]
        ops = sum(1 for i in run if t.graph.nodes[i].op is Op.ATEN)
        seg = Segment(k, tuple(plan.ins[k]), tuple(plan.outs[k]), ops, core, used)
        if shared is not None:
            shared[key] = seg
        example = seen.get(k)
        if example is None:
            seg.why_eager = "the example never reached it"
        elif not any(isinstance(a, torch.Tensor) for a in example):
            seg.why_eager = "it reads only state (buffers, parameters): eager reads their values now"
        elif ops < MIN_OPS:
            seg.why_eager = f"{ops} op: its eager call costs less than a compiled one"
        elif any(not isinstance(a, torch.Tensor) and not (isinstance(a, int) and not isinstance(a, bool))
                 for a in example):
            seg.why_eager = "it takes a float read from data, which a compiled segment would pin"
        else:
            seg.largest = max(range(len(example)), key=lambda i: example[i].numel()
                              if isinstance(example[i], torch.Tensor) else -1)
            made = _compile_segment(seg, core, used, example, trace, compile_one)
            if isinstance(made, str):
                seg.why_eager = made
            else:
                compiles += 1
                seg.variants.append(made)
                backend.extend(made.backend)
        segments.append(seg)
    run_ns.update({f"seg{k}": s for k, s in enumerate(segments)})
    src = plan.glue_source(run_ns)
    exec(compile(src, "<guardsolve glue>", "exec"), run_ns)
    glue = run_ns["glue"]
    glue.__source__ = src
    return Segmented(plan, tuple(segments), glue, time.perf_counter() - start, compiles, tuple(backend), _ns=run_ns)


def _kinds(example: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """What a segment's check leaves out of its inputs: each tensor's dtype, device, layout,
    rank and requires_grad, each other value's type.

    >>> _kinds((torch.zeros(2, 3, dtype=torch.int64), 4))
    ((torch.int64, device(type='cpu'), torch.strided, 2, False), <class 'int'>)
    """
    if example is None:
        return None
    return tuple((a.dtype, a.device, a.layout, a.dim(), a.requires_grad) if isinstance(a, torch.Tensor) else type(a)
                 for a in example)


def _compile_segment(seg: Segment, core: Callable[..., Any], used: tuple[torch.Tensor, ...], example: tuple[Any, ...],
                     trace: Callable[..., Any], compile_one: Callable[[Any, Sequence[Any]], Any]) -> Any:
    """One segment re-traced on its own (its inputs the trace's inputs; the constants it reads
    captured) and compiled; a string says why not."""
    from guardsolve.errors import GuardsolveError

    names = list(seg.inputs)
    src = f"def segment({', '.join(names)}):\n    return core({', '.join(names + ['*used'])})"
    ns: dict[str, Any] = {"core": core, "used": used}
    exec(compile(src, f"<guardsolve segment {seg.index}>", "exec"), ns)
    fn = ns["segment"]
    fn.__name__ = f"segment{seg.index}"
    try:
        sub = trace(fn, *example)
    except GuardsolveError as e:
        return f"its re-trace failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return compile_one(sub, example)
