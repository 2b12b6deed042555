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

from dataclasses import dataclass, field
from functools import partial
from typing import Any
from guardsolve.guards.shape import value_bailouts
from guardsolve.ir.concrete import TENSOR_RULES, compile_call
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.trace.replay import METADATA_OPS, direct_call, replay_lines, live_names, spec_refs, spec_source
from guardsolve.jit.segments.diverged import raise_diverged
from guardsolve.jit.segments.lines import READS, fast_call, int_line, renamed_node


_INPUTS = frozenset({Op.VAR_PLACEHOLDER, Op.INT_ARG, Op.VAR_PARAM, Op.INT_PLACEHOLDER})


# NOTE: a segment this small runs as its eager op calls: a compiled call costs more than a view
MIN_OPS = 2


def cut_at(n: Node) -> bool:
    """Is `n` an op whose result comes from tensor data (a value or a size)? The trace is cut there."""
    return n.op is Op.VAR_TO_BOOL or (n.op is Op.ATEN and (str(n.params["fn"]) in READS
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
            lines.append(int_line(n))
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
                    direct = direct_call(n, ns) or fast_call(n, ns)
                    if direct is None:
                        out = n.outputs[0]
                        ns[f"k_{out}"] = compile_call(**n.params, outputs=len(n.outputs))
                        direct = f"{', '.join(n.outputs)} = k_{out}({', '.join(n.inputs)})"
                    body.append(direct)
                case str(text):
                    body.append(text)
        for i in self.cuts:
            if nodes[i].op is Op.BOOL_BAILOUT:
                ns[f"fail_{i}"] = partial(raise_diverged, nodes[i], i, self)
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
        renamed = [renamed_node(n, names) for n in nodes]
        body, sub_ns = replay_lines(Graph(renamed), tuple(OutRef(names[o]) for o in self.outs[k]))
        ns.update(sub_ns)
        ns["__key__"] = "\n".join([*map(str, renamed), ", ".join(names[o] for o in self.outs[k])])
        params = [names[x] for x in self.ins[k] + self._consts(k)]
        return "\n".join([f"def segment({', '.join(params)}):"] + [f"    {b}" for b in body])
