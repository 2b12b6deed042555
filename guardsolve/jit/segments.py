"""A trace that decides on tensor data, served as compiled segments split where the data decides.

A trace recorded with value guards holds ops that read data (`.item()`, `bool(tensor)`) or
whose output sizes come from data (`nonzero`, a boolean mask), and value bailouts: decisions
user code made on such values. Its size guards are checked once at entry; a value bailout
can only be checked once the data it reads is computed. So the trace is cut at each such op
(the seed's third way of using guards): the tensor ops between two cuts are one *segment*,
re-traced on its own and compiled by Inductor at symbolic sizes (a size a `nonzero` counted
is an input size of the segment after it, so one compile serves every count); the ops at a
cut run eagerly, and the value bailouts after them are checked in Python before the next
segment runs. A failing one raises `GuardFailure` (the cache then traces the call: the
value took another path, a trace of its own).

>>> import torch, guardsolve
>>> def f(x):
...     if x.sum().item() > 0:
...         return x * 2
...     return -x
>>> t = guardsolve.trace(f, torch.ones(3), value_guards=True)
>>> plan = Plan.of(t)
>>> [len(r) for r in plan.runs], [t.graph.nodes[i].op.value for i in plan.cuts]
([1, 1], ['aten', 'bool_bailout'])
>>> print(plan.glue_source())
def glue(x):
    v0,  = seg0(x)
    v1 = v0.item()
    i0 = 0.0
    i1 = v1 > i0
    if bool(i1) != True: fail_5(locals())
    v2,  = seg1(x)
    return v2
>>> print(plan.segment_source(1, {}))
def segment(a0):
    t1 = k_t1(a0, 2)
    return (t1, )
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import torch

from guardsolve.errors import GuardFailure, TraceError
from guardsolve.guards.shape import value_bailouts
from guardsolve.ir.aten import Ref as ArgRef
from guardsolve.ir.concrete import TENSOR_RULES, compile_call
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.jit.counter import Counter
from guardsolve.trace.replay import INT_EXPR, METADATA_OPS, direct_call, replay_lines, live_names, spec_refs, spec_source

_READS = frozenset({"aten._local_scalar_dense.default", "aten.item.default"})
_INPUTS = frozenset({Op.VAR_PLACEHOLDER, Op.INT_ARG, Op.VAR_PARAM, Op.INT_PLACEHOLDER})
# NOTE: a segment this small runs as its eager op calls: a compiled call costs more than a view
_MIN_OPS = 2
_NONE = object()  # no compiled variant served the call
_TRIALS = 3  # calls timed each way (compiled, eager) before a segment keeps the faster


def cut_at(n: Node) -> bool:
    """Is `n` an op whose result comes from tensor data (a value or a size)? The trace is cut there."""
    return n.op is Op.VAR_TO_BOOL or (n.op is Op.ATEN and (str(n.params["fn"]) in _READS
                                                           or bool(n.meta.get("data_sized"))))


def has_data(graph: Graph) -> bool:
    """Does the trace read tensor data (so that it is served as segments)?"""
    return any(cut_at(n) for n in graph.nodes)


def _tensor_op(n: Node) -> bool:
    return n.op is Op.ATEN or (n.op in TENSOR_RULES and n.op not in METADATA_OPS)


@dataclass
class Plan:
    """Where a trace is cut: `runs` (node indices of each segment, in order) and the `steps` of
    the glue that calls them (`("seg", k)` or `("node", i)`: a cut op or a value bailout)."""

    trace: Any
    runs: list[list[int]]
    steps: list[tuple[str, int]]
    cuts: list[int]
    ins: list[list[str]] = field(default_factory=list)
    outs: list[list[str]] = field(default_factory=list)
    glue: list[str] = field(default_factory=list)
    _keys: dict[int, int] = field(default_factory=dict, repr=False)

    @staticmethod
    def of(t: Any) -> "Plan":
        runs, steps, cuts = Plan.cut(t.graph)
        plan = Plan(t, runs, steps, cuts)
        plan._wire()
        return plan

    @staticmethod
    def cut(graph: Graph) -> tuple[list[list[int]], list[tuple[str, int]], list[int]]:
        """The runs, steps and cuts of a tensor trace (see the class)."""
        nodes = graph.nodes
        values = value_bailouts(graph)
        runs: list[list[int]] = []
        steps: list[tuple[str, int]] = []
        cuts: list[int] = []
        cur: list[int] | None = None
        for i, n in enumerate(nodes):
            if n.op in _INPUTS:
                continue
            if n.op is Op.BOOL_BAILOUT:
                if i in values:
                    cur = None
                    steps.append(("node", i))
                    cuts.append(i)
                continue  # NOTE: a shape bailout: the entry's check holds it
            if cut_at(n):
                cur = None
                steps.append(("node", i))
                cuts.append(i)
                continue
            if cur is None:
                if not _tensor_op(n):
                    continue  # NOTE: an int between segments: computed where it is needed
                cur = []
                runs.append(cur)
                steps.append(("seg", len(runs) - 1))
            cur.append(i)
        return runs, steps, cuts

    def _wire(self) -> None:
        """Each segment's inputs and outputs, and the glue's lines."""
        nodes = self.trace.graph.nodes
        where: dict[str, int] = {}  # name -> node index defining it
        run_of: dict[int, int] = {}
        for k, run in enumerate(self.runs):
            for i in run:
                run_of[i] = k
        for i, n in enumerate(nodes):
            for o in n.outputs:
                where[o] = i
        consts = set(self.trace.constants)
        inputs = [n.params["name"] for n in self.trace.graph.placeholders()]
        outs: list[list[str]] = [[] for _ in self.runs]
        ins: list[list[str]] = []
        for run in self.runs:
            defined = {o for i in run for o in nodes[i].outputs}
            sub = Graph([nodes[i] for i in run])
            # NOTE: what its tensor ops read (its int nodes only where a tensor op uses them)
            need = live_names(sub, set(), {j for j, n in enumerate(sub.nodes) if _tensor_op(n)})
            ins.append(list(dict.fromkeys(x for i in run for x in nodes[i].inputs
                                          if x not in defined and x not in consts and x in need)))
        have = set(inputs) | consts
        lines: list[Any] = []

        def define(name: str) -> None:
            if name in have:
                return
            i = where[name]
            k = run_of.get(i)
            if k is not None and _tensor_op(nodes[i]):
                if name not in outs[k]:
                    outs[k].append(name)  # NOTE: the segment hands it out (it ran already)
                return
            n = nodes[i]
            for x in n.inputs:
                define(x)
            lines.append(_int_line(n))
            have.update(n.outputs)

        for kind, idx in self.steps:
            if kind == "seg":
                for x in ins[idx]:
                    define(x)
                lines.append(("seg", idx))
                continue
            n = nodes[idx]
            for x in n.inputs:
                define(x)
            if n.op is Op.BOOL_BAILOUT:
                lines.append(f"if bool({n.inputs[0]}) != {n.params['expect']}: fail_{idx}(locals())")
            else:
                lines.append(("op", idx))
                have.update(n.outputs)
        for name in sorted(spec_refs(self.trace.out_spec)):
            define(name)
        self.ins, self.outs, self.glue = ins, outs, lines

    def glue_source(self, ns: dict[str, Any] | None = None) -> str:
        """The glue as Python: segments are `seg0`, `seg1`, ... in `ns`; a cut op is `k_<name>`."""
        ns = {} if ns is None else ns
        nodes = self.trace.graph.nodes
        params = [n.params["name"] for n in self.trace.graph.placeholders()]
        body: list[str] = []
        for line in self.glue:
            match line:
                case ("seg", k):
                    got = "".join(f"{o}, " for o in self.outs[k])
                    call = f"seg{k}({', '.join(self.ins[k] + self._consts(k))})"
                    body.append(f"{got} = {call}" if got else call)
                case ("op", i):
                    n = nodes[i]
                    if n.op is Op.VAR_TO_BOOL:
                        body.append(f"{n.outputs[0]} = {n.inputs[0]}")  # NOTE: `bool()` of it is checked
                        continue
                    direct = direct_call(n, ns) or _fast_call(n, ns)
                    if direct is None:
                        out = n.outputs[0]
                        ns[f"k_{out}"] = compile_call(**n.params, outputs=len(n.outputs))
                        direct = f"{', '.join(n.outputs)} = k_{out}({', '.join(n.inputs)})"
                    body.append(direct)
                case str(text):
                    body.append(text)
        for i in self.cuts:
            if nodes[i].op is Op.BOOL_BAILOUT:
                ns[f"fail_{i}"] = partial(_diverged, nodes[i], i, self)
        body.append(f"return {spec_source(self.trace.out_spec, ns)}")
        return "\n".join([f"def glue({', '.join(params)}):"] + [f"    {b}" for b in body])

    def resume_source(self, at: int, ns: dict[str, Any]) -> str | None:
        """The glue after the value bailout at node `at`, as `resume(_env)` over the names a
        glue defined before it (another trace's, whose prefix is this one's); None if `at` is
        not one of this plan's cuts."""
        if at not in self.cuts:
            return None
        full = self.glue_source(ns).splitlines()
        mark = next((j for j, line in enumerate(full) if f"fail_{at}(" in line), None)
        if mark is None:
            return None
        before = set(n.params["name"] for n in self.trace.graph.placeholders())
        for line in full[1:mark]:
            lhs = line.strip().split(" = ", 1)[0] if " = " in line else ""
            before.update(x.strip() for x in lhs.split(",") if x.strip().isidentifier())
        head = [f"    {b} = _env[{b!r}]" for b in sorted(before)]
        return "\n".join(["def resume(_env):"] + head + full[mark + 1:])

    def prefix_key(self, at: int) -> int:
        """What a run up to the value bailout at node `at` computed (its decision aside): two
        traces with equal keys computed the same values there."""
        key = self._keys.get(at)
        if key is None:
            nodes = self.trace.graph.nodes
            # NOTE: an input's example sizes (`shape=`, `val=`) are no part of what was computed
            parts = [(n.op.value, n.inputs, n.outputs,
                      repr(sorted((k, v) for k, v in n.params.items()
                                  if not (n.op in (Op.VAR_PLACEHOLDER, Op.INT_ARG) and k in ("shape", "val")))))
                     for n in nodes[:at]]
            parts.append((nodes[at].op.value, nodes[at].inputs))
            key = self._keys[at] = hash((tuple(parts), tuple(self.trace.constants)))
        return key

    def _consts(self, k: int) -> list[str]:
        """The constants segment `k` reads (passed to its eager ops; a compiled one captures them)."""
        consts = self.trace.constants
        nodes = self.trace.graph.nodes
        return list(dict.fromkeys(x for i in self.runs[k] for x in nodes[i].inputs if x in consts))

    def segment_source(self, k: int, ns: dict[str, Any]) -> str:
        """Segment `k` as an eager Python function `segment` of its inputs and constants, its
        names canonical (inputs `a0, a1, ...`, constants `c0, ...`, values `t...`): the same
        ops on the same constants give the same text in every trace (a segment shared by two
        paths is compiled once)."""
        from guardsolve.trace.record import OutRef

        nodes = [self.trace.graph.nodes[i] for i in self.runs[k]]
        names = {x: f"a{j}" for j, x in enumerate(self.ins[k])}
        names.update({c: f"c{j}" for j, c in enumerate(self._consts(k))})
        for n in nodes:
            for o in n.outputs:
                names.setdefault(o, f"t{len(names)}")
        renamed = [_renamed(n, names) for n in nodes]
        body, sub_ns = replay_lines(Graph(renamed), tuple(OutRef(names[o]) for o in self.outs[k]))
        ns.update(sub_ns)
        ns["__key__"] = "\n".join([*map(str, renamed), ", ".join(names[o] for o in self.outs[k])])
        params = [names[x] for x in self.ins[k] + self._consts(k)]
        return "\n".join([f"def segment({', '.join(params)}):"] + [f"    {b}" for b in body])


class Diverged(GuardFailure):
    """A value bailout of a segmented run failed: the data took another path. `env` holds what
    the run computed so far, `at` the bailout's node, `key` what the prefix computed
    (`Plan.prefix_key`): a trace of that other path with the same prefix resumes from `env`."""

    def __init__(self, node: Node, at: int, key: int, env: dict[str, Any]) -> None:
        # NOTE: raised on the serving path (a call whose data takes another path): the message
        # is built only when read
        Exception.__init__(self)
        self.expected, self.node, self.loc, self.values = node.params["expect"], node, node.meta.get("loc"), {}
        self.at, self.key, self.env = at, key, env

    def __str__(self) -> str:
        return self._message()


def _diverged(node: Node, at: int, plan: "Plan", env: dict[str, Any]) -> None:
    raise Diverged(node, at, plan.prefix_key(at), env)


def _fast_call(n: Node, ns: dict[str, Any]) -> str | None:
    """A cut op the replay's generic call would run through pytree: `.item()` as a method call,
    an op returning a list of tensors (`unbind` of a `nonzero`) unpacked directly."""
    from guardsolve.ir.aten import resolve

    fn = str(n.params["fn"])
    args, kwargs = n.params["args"], n.params["kwargs"]
    if fn in _READS and len(args) == 1 and isinstance(args[0], ArgRef) and not kwargs:
        return f"{n.outputs[0]} = {args[0].name}.item()"
    returns = resolve(fn)._schema.returns
    if len(returns) == 1 and str(returns[0].type) == "List[Tensor]" and not kwargs and all(
            isinstance(a, ArgRef) or type(a) in (int, bool) for a in args):
        ns[f"k_{n.outputs[0]}"] = resolve(fn)._op
        parts = ", ".join(a.name if isinstance(a, ArgRef) else repr(a) for a in args)
        return f"{''.join(o + ', ' for o in n.outputs)}= k_{n.outputs[0]}({parts})"
    return None


def _renamed(n: Node, names: dict[str, str]) -> Node:
    from guardsolve.ir.aten import substitute
    from guardsolve.ir.ops import Args, Kwargs

    params = dict(n.params)
    if n.op is Op.ATEN:
        def ref(x: str) -> ArgRef:
            return ArgRef(names.get(x, x))
        params["args"] = Args(substitute(tuple(n.params["args"]), ref))
        params["kwargs"] = Kwargs(substitute(dict(n.params["kwargs"]), ref))
    return Node(n.op, tuple(names.get(x, x) for x in n.inputs), tuple(names.get(o, o) for o in n.outputs),
                params, n.meta)


def _int_line(n: Node) -> str:
    if n.op in INT_EXPR:
        return f"{n.outputs[0]} = " + INT_EXPR[n.op].format(*n.inputs, **n.params)
    if n.op is Op.SIZE_CTOR:
        return f"{n.outputs[0]} = (" + "".join(f"{x}, " for x in n.inputs) + ")"
    raise TraceError(f"a segment's glue cannot compute {n.op.value} ({', '.join(n.outputs)}) in Python")


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

    def resume(self, d: Diverged) -> Any:
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
            cut = _cut(self.plan.trace.graph, idx)
            if cut is not None:
                decision, text, loc = cut
                at = f"  — {loc}" if loc is not None else ""
                out.append(f"    then, checked on the data: {text}{at}" if decision else f"    then, eagerly: {text}{at}")
        return "\n".join(out)


def outline(graph: Graph) -> list[str]:
    """How a compiled entry (`backend="inductor"`) runs this trace, one line per step: the
    segments (ops and user lines), the ops run eagerly at the cuts, the decisions on data.
    Empty for a trace that reads no data.

    >>> import torch, guardsolve
    >>> t = guardsolve.trace(lambda x: x * 2 if x.sum().item() > 0 else -x, torch.ones(3), value_guards=True)
    >>> for line in outline(t.graph): print(line)  # doctest: +ELLIPSIS
    segment 0: 1 op (aten.sum.default), run as its eager call
    then eagerly: aten.item.default  at ...
    then, on the data: v0.item() > 0.0  at ...
    segment 1: 1 op (aten.mul.Tensor), run as its eager call
    """
    if not has_data(graph):
        return []
    runs, steps, _ = Plan.cut(graph)
    nodes = graph.nodes
    out: list[str] = []
    for kind, idx in steps:
        if kind == "seg":
            ops = [str(nodes[i].params["fn"]) for i in runs[idx] if nodes[i].op is Op.ATEN]
            shown = ", ".join(dict.fromkeys(ops[:4])) + (", ..." if len(set(ops)) > 4 else "")
            how = "compiled at symbolic sizes" if len(ops) >= _MIN_OPS else "run as its eager call"
            out.append(f"segment {idx}: {len(ops)} op{'s' if len(ops) != 1 else ''} ({shown}), {how}")
            continue
        cut = _cut(graph, idx)
        if cut is not None:
            decision, text, loc = cut
            at = f"  at {loc}" if loc is not None else ""
            out.append(f"then, on the data: {text}{at}" if decision else f"then eagerly: {text.split(' -> ')[0]}{at}")
    return out


def _cut(graph: Graph, i: int) -> tuple[bool, str, Any] | None:
    """A cut step as (a decision?, its text, its user line); None for `var_to_bool` (its
    decision follows it)."""
    n = graph.nodes[i]
    if n.op is Op.BOOL_BAILOUT:
        return True, _decision(graph, i), n.meta.get("loc")
    if n.op is Op.VAR_TO_BOOL:
        return None
    return False, f"{n.params['fn']} -> {', '.join(n.outputs)}", n.meta.get("loc")


def _decision(graph: Graph, i: int) -> str:
    """A value bailout as an expression over the trace's tensors (`v0.item() > 0.0`)."""
    where = {o: n for n in graph.nodes for o in n.outputs}
    n = graph.nodes[i]
    text = _expr(where, n.inputs[0], 0)
    return text if n.params["expect"] else f"not ({text})"


def _expr(where: dict[str, Node], name: str, depth: int) -> str:
    n = where.get(name)
    if n is None or depth > 8:
        return name
    if n.op is Op.INT_CONST or n.op is Op.BOOL_CONST:
        return repr(n.params["val"])
    if n.op is Op.ATEN and str(n.params["fn"]) in _READS:
        return f"{n.inputs[0]}.item()"
    if n.op is Op.VAR_TO_BOOL:
        return f"bool({n.inputs[0]})"
    if n.op is Op.SIZE_INDEX:
        src = where.get(n.inputs[0])
        if src is not None and src.op is Op.VAR_SIZE:
            return f"{src.inputs[0]}.shape[{n.params['index']}]"
    if n.op in INT_EXPR and n.op not in METADATA_OPS:
        parts = [_expr(where, x, depth + 1) for x in n.inputs]
        parts = [f"({p})" if " " in p else p for p in parts]
        return INT_EXPR[n.op].format(*parts, **n.params)
    return name


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
        elif ops < _MIN_OPS:
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


# NOTE: an argument of a random op at which it draws nothing (no dropout at probability 0 or
# outside training: attention's `dropout_p=0.0`, `dropout(x, p, train=False)`). Rule table.
_DRAWS_NOTHING_AT: dict[str, Any] = {"dropout_p": 0.0, "p": 0.0, "train": False}


def draws_random(func: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether the call draws from the random stream: an op PyTorch tags as seeded, unless an
    argument says it draws nothing (`_DRAWS_NOTHING_AT`).

    >>> aten = torch.ops.aten
    >>> draws_random(aten.scaled_dot_product_attention.default, [None, None, None, None, 0.0], {})
    False
    >>> draws_random(aten.native_dropout.default, [None, 0.5, True], {})
    True
    """
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return False
    for k, a in enumerate(func._schema.arguments):
        value = args[k] if k < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value() else None)
        if a.name in _DRAWS_NOTHING_AT and type(value) is type(_DRAWS_NOTHING_AT[a.name]) \
                and value == _DRAWS_NOTHING_AT[a.name]:
            return False
    return True


def state_writes(plan: Plan) -> str | None:
    """Why the trace cannot be cut: an op writes a tensor it did not make (an input, a buffer),
    or draws random numbers, before a decision on data, which a call that fails that decision
    would have done too (and the trace of the other path again). None when every write before
    the last cut is to a tensor the trace made itself."""
    nodes = plan.trace.graph.nodes
    if not plan.cuts:
        return None
    last = max(i for i in plan.cuts if nodes[i].op is Op.BOOL_BAILOUT) if any(
        nodes[i].op is Op.BOOL_BAILOUT for i in plan.cuts) else -1
    for n, what in _writes(nodes[:last]):
        loc = n.meta.get("loc")
        at = f" ({loc})" if loc is not None else ""
        if what is None:
            return f"{n.params['fn']} draws from the random stream before a decision on data{at}"
        return f"{n.params['fn']} writes {what}, a tensor the program did not make, before a decision on data{at}"
    return None


def writes_unmade(t: Any) -> tuple[str, ...]:
    """The tensors the trace writes that it did not make (inputs, buffers), by name, once each.

    >>> from guardsolve.trace.tracer import trace
    >>> writes_unmade(trace(lambda x: x.add_(1), torch.ones(2))), writes_unmade(trace(lambda x: x + 1, torch.ones(2)))
    (('x',), ())
    """
    return tuple(dict.fromkeys(what for _, what in _writes(t.graph.nodes, random=False) if what is not None))


def pure(t: Any) -> bool:
    """Whether the trace writes no tensor it did not make and draws no random numbers: running
    it again changes nothing the program sees.

    >>> from guardsolve.trace.tracer import trace
    >>> pure(trace(lambda x: x * 2, torch.ones(2))), pure(trace(lambda x: x.add_(1), torch.ones(2)))
    (True, False)
    """
    return next(_writes(t.graph.nodes), None) is None


def _writes(nodes: Sequence[Any], random: bool = True) -> Iterator[tuple[Any, str | None]]:
    """Each ATen node of `nodes` that draws random numbers (with None; where `random`) or writes
    a tensor the nodes did not make (with that tensor's name), in order."""
    from guardsolve.ir.aten import resolve

    root: dict[str, str] = {}
    fresh: set[str] = set()
    for n in nodes:
        if n.op is not Op.ATEN:
            continue
        func = resolve(str(n.params["fn"]))
        schema = func._schema
        args = list(n.params["args"])
        if random and draws_random(func, args, dict(n.params.get("kwargs") or {})):
            yield n, None
        for a, arg in zip(schema.arguments, args):
            info = a.alias_info
            if info is not None and info.is_write and isinstance(arg, ArgRef):
                base = root.get(arg.name, arg.name)
                if base not in fresh:
                    yield n, arg.name
        first = next((a.name for a in args if isinstance(a, ArgRef)), None)
        for r, o in zip(schema.returns, n.outputs):
            if r.alias_info is not None and first is not None:
                root[o] = root.get(first, first)
            else:
                fresh.add(o)


__all__ = ["Diverged", "Plan", "outline", "pure", "Segment", "Segmented", "build", "cut_at", "has_data", "state_writes",
           "writes_unmade"]
