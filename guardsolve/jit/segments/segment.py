"""One compiled segment between two reads of data (`Segment`), and the chain of them a call runs (`Segmented`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
import torch
from guardsolve.jit.counter import Counter
from guardsolve.jit.segments.diverged import SegmentDiverged
from guardsolve.jit.segments.outline import cut_point
from guardsolve.jit.segments.plan import Plan


_NONE = object()  # no compiled variant served the call


_TRIALS = 3  # calls timed each way (compiled, eager) before a segment keeps the faster


@dataclass(eq=False)
class Segment:
    """One segment: its eager ops, and the compiled variants that serve its inputs' sizes."""

    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    ops: int
    eager: Callable[..., Any]  # its ops as eager calls (inputs, then constants)
    consts: tuple[torch.Tensor, ...]
    variants: list[Any] = field(default_factory=list)
    why_eager: str | None = None  # why no (further) variant is compiled
    calls: Counter = field(default_factory=Counter)
    eager_calls: Counter = field(default_factory=Counter)
    # NOTE: per size class (the bit length of its largest input's element count), the first calls
    # alternate the compiled variant and the eager ops, timed: the faster serves that class from
    # then on (both compute the trace's values; at a few rows, eager ops beat a compiled call)
    timed: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict, repr=False)
    largest: int = 0  # NOTE: the input with the most elements at the example: its count is the size class
    eager_at: dict[int, bool] = field(default_factory=dict, repr=False)

    def __call__(self, *args: Any) -> Any:
        self.calls.inc()
        ins = args[:len(self.inputs)]
        if self.variants:
            size = ins[self.largest].numel().bit_length()
            eager = self.eager_at.get(size)
            if eager is None:
                return self._timed(args, size)
            if not eager:
                out = self._compiled(ins)
                if out is not _NONE:
                    return out
        self.eager_calls.inc()
        return self.eager(*args)

    def _compiled(self, ins: tuple[Any, ...]) -> Any:
        for v in self.variants:
            if v.check(*ins):
                try:
                    out = v.run(*ins)
                except AssertionError as e:
                    # NOTE: Inductor's own input check (`assert_size_stride`, before any kernel
                    # runs) refused sizes the variant's check accepted: never trusted again
                    self.variants = [w for w in self.variants if w is not v]
                    self.why_eager = f"a compiled variant's own input check failed ({str(e)[:120]})"
                    return _NONE
                v.count_hit()
                return out
        return _NONE

    def _timed(self, args: tuple[Any, ...], size: int) -> Any:
        compiled, eager = self.timed.setdefault(size, ([], []))
        start = time.perf_counter()
        out = _NONE
        if len(compiled) <= len(eager):
            out = self._compiled(args[:len(self.inputs)])
            if out is not _NONE:
                compiled.append(time.perf_counter() - start)
        if out is _NONE:
            self.eager_calls.inc()
            if len(eager) >= _TRIALS:  # NOTE: no variant took these inputs yet: nothing to time against
                return self.eager(*args)
            start = time.perf_counter()
            out = self.eager(*args)
            eager.append(time.perf_counter() - start)
        if len(eager) >= _TRIALS and len(compiled) >= _TRIALS:
            self.eager_at[size] = min(eager) <= min(compiled)
        return out

    def describe(self, index: int | None = None, inputs: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None) -> str:
        served = (f"{len(self.variants)} compiled variant{'s' if len(self.variants) != 1 else ''}" if self.variants
                  else f"eager ({self.why_eager})")
        slower = sorted(k for k, e in self.eager_at.items() if e)
        if self.variants and slower:
            served += (f"; eager where its ops were faster, timed (inputs of up to "
                       f"{', '.join(str(2 ** k - 1) for k in slower)} elements)")
        index = self.index if index is None else index
        inputs = self.inputs if inputs is None else inputs
        outputs = self.outputs if outputs is None else outputs
        return (f"segment {index}: {self.ops} op{'s' if self.ops != 1 else ''} over "
                f"({', '.join(inputs)}) -> ({', '.join(outputs)}): {served}")


@dataclass(eq=False)
class Segmented:
    """A trace served as segments: `run(*inputs)` is the glue (`Plan.glue_source`)."""

    plan: Plan
    segments: tuple[Segment, ...]
    run: Callable[..., Any]
    compile_s: float
    compiles: int
    backend: tuple[Any, ...]

    _resumes: dict[int, Callable[..., Any] | None] = field(default_factory=dict, repr=False)
    _ns: dict[str, Any] = field(default_factory=dict, repr=False)

    def resume(self, d: SegmentDiverged) -> Any:
        """Continue another trace's run that diverged at `d` (its prefix this trace's, its
        decision this trace's) from what it computed; `NotImplemented` where this trace cannot."""
        plan = self.plan
        if d.at not in plan.cuts or plan.prefix_key(d.at) != d.key:
            return NotImplemented
        fn = self._resumes.get(d.at, NotImplemented)
        if fn is NotImplemented:
            ns = dict(self._ns)
            src = plan.resume_source(d.at, ns)
            fn = None
            if src is not None:
                exec(compile(src, "<guardsolve resume>", "exec"), ns)
                fn = ns["resume"]
            self._resumes[d.at] = fn
        if fn is None:
            return NotImplemented
        node = plan.trace.graph.nodes[d.at]
        if bool(d.env[node.inputs[0]]) != node.params["expect"]:
            return NotImplemented  # NOTE: not this trace's decision either
        try:
            return fn(d.env)
        except KeyError:  # NOTE: the prefix's segments did not hand out a value this path reads
            self._resumes[d.at] = None
            return NotImplemented

    def explain(self) -> str:
        nodes = self.plan.trace.graph.nodes
        out = [f"served as {len(self.segments)} segments, cut where the program reads tensor data:"]
        for kind, idx in self.plan.steps:
            if kind == "seg":
                out.append("    " + self.segments[idx].describe(idx, self.plan.ins[idx], self.plan.outs[idx]))
                continue
            cut = cut_point(self.plan.trace.graph, idx)
            if cut is not None:
                decision, text, loc = cut
                at = f"  — {loc}" if loc is not None else ""
                out.append(f"    then, checked on the data: {text}{at}" if decision else f"    then, eagerly: {text}{at}")
        return "\n".join(out)
