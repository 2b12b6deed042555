"""Compile a tensor trace into straight-line Python over torch ops (no per-node interpretation).

Shape bailouts are left out: a cache entry runs only after its minimal GuardSet accepted the
inputs, which is exactly when every shape bailout holds. Value bailouts (tensor data) stay.
Int/size nodes are emitted only when a tensor op or the output needs them.

>>> import torch, guardsolve
>>> t = guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
>>> print(replay_source(t.graph, t.out_spec))
def replay(a, b):
    v0 = k_v0(a, b)
    return v0

A call whose op returns tensors as the trace recorded them runs as a direct call of the op's
C++ entry point (`k_v0` is `aten.add.Tensor`'s), its arguments written out as Python; any other
call goes through `compile_call`, which substitutes and flattens at run time.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping

import torch

from guardsolve.errors import GuardFailure, InputMismatchError
from guardsolve.guards.shape import guard_graph, signature_of, uses_pytorch_rules
from guardsolve.guards.shape import value_bailouts
from guardsolve.ir.aten import Ref, refs, resolve
from guardsolve.ir.concrete import TENSOR_RULES, compile_call, run_concrete
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op

INT_EXPR: Mapping[Op, str] = {
    Op.INT_ADD: "{0} + {1}", Op.INT_SUB: "{0} - {1}", Op.INT_MUL: "{0} * {1}", Op.INT_FLOORDIV: "{0} // {1}",
    Op.INT_MOD: "{0} % {1}", Op.INT_EQ: "{0} == {1}", Op.INT_NE: "{0} != {1}", Op.INT_LT: "{0} < {1}",
    Op.INT_LE: "{0} <= {1}", Op.INT_GT: "{0} > {1}", Op.INT_GE: "{0} >= {1}", Op.BOOL_NOT: "not {0}",
    Op.BOOL_AND: "{0} and {1}", Op.BOOL_OR: "{0} or {1}", Op.SIZE_INDEX: "{0}[{index}]",
    Op.VAR_SIZE: "{0}.shape", Op.VAR_STRIDE: "{0}.stride()", Op.VAR_STORAGE_OFFSET: "{0}.storage_offset()",
    Op.INT_CONST: "{val}", Op.BOOL_CONST: "{val}",
}


METADATA_OPS = frozenset({Op.VAR_SIZE, Op.VAR_STRIDE, Op.VAR_STORAGE_OFFSET})


def live_names(graph: Graph, roots: set[str], keep: set[int]) -> set[str]:
    """Names needed by tensor ops, kept bailouts and the output."""
    need = set(roots)
    for i in range(len(graph.nodes) - 1, -1, -1):
        n = graph.nodes[i]
        if i in keep or (n.outputs and n.outputs[0] in need):
            need.update(n.inputs)
    return need


def spec_refs(spec: Any) -> set[str]:
    from guardsolve.trace.record import OutRef

    if isinstance(spec, OutRef):
        return {spec.name}
    if isinstance(spec, (tuple, list)):
        return set().union(*(spec_refs(x) for x in spec)) if spec else set()
    if isinstance(spec, dict):
        return set().union(*(spec_refs(x) for x in spec.values())) if spec else set()
    return set()


def spec_source(spec: Any, consts: dict[str, Any]) -> str:
    from guardsolve.trace.record import OutRef

    if isinstance(spec, OutRef):
        return spec.name
    if isinstance(spec, tuple):
        items = "(" + "".join(spec_source(x, consts) + ", " for x in spec) + ")"
        if type(spec) is tuple:
            return items
        # NOTE: the output keeps its type: a namedtuple, or a torch.return_types structseq
        kind = _const(type(spec), consts)
        return f"{kind}(*{items})" if hasattr(type(spec), "_fields") else f"{kind}({items})"
    if isinstance(spec, list):
        return "[" + ", ".join(spec_source(x, consts) for x in spec) + "]"
    if isinstance(spec, dict):
        items = "{" + ", ".join(f"{k!r}: {spec_source(x, consts)}" for k, x in spec.items()) + "}"
        # NOTE: a dict subclass (transformers' ModelOutput) is rebuilt by keyword
        return items if type(spec) is dict else f"{_const(type(spec), consts)}(**{items})"
    return _const(spec, consts)


def _const(value: Any, consts: dict[str, Any]) -> str:
    name = f"out_const{len(consts)}"
    consts[name] = value
    return name


def replay_lines(graph: Graph, out_spec: Any) -> tuple[list[str], dict[str, Any]]:
    values = value_bailouts(graph)
    tensors = {i for i, n in enumerate(graph.nodes) if n.op in TENSOR_RULES and n.op not in METADATA_OPS}
    need = live_names(graph, spec_refs(out_spec), values | tensors)
    ns: dict[str, Any] = {}
    body: list[str] = []
    for i, n in enumerate(graph.nodes):
        if n.op in (Op.VAR_PLACEHOLDER, Op.INT_ARG, Op.VAR_PARAM, Op.INT_PLACEHOLDER):
            continue
        if n.op is Op.BOOL_BAILOUT:
            if i in values:
                ns[f"fail_{i}"] = partial(_fail, n)
                body.append(f"if bool({n.inputs[0]}) != {n.params['expect']}: fail_{i}()")
            continue
        if not n.outputs or (i not in tensors and n.outputs[0] not in need):
            continue
        out = n.outputs[0]
        if n.op in INT_EXPR:
            body.append(f"{out} = " + INT_EXPR[n.op].format(*n.inputs, **n.params))
        elif n.op is Op.SIZE_CTOR:
            body.append(f"{out} = (" + "".join(f"{x}, " for x in n.inputs) + ")")
        elif n.op is Op.ATEN:
            direct = direct_call(n, ns)
            if direct is not None:
                body.append(direct)
            else:
                ns[f"k_{out}"] = compile_call(**n.params, outputs=len(n.outputs))
                body.append(f"{', '.join(n.outputs)} = k_{out}({', '.join(n.inputs)})")
        else:
            ns[f"k_{out}"] = partial(TENSOR_RULES[n.op], **n.params) if n.params else TENSOR_RULES[n.op]
            body.append(f"{out} = k_{out}({', '.join(n.inputs)})")
    body.append(f"return {spec_source(out_spec, ns)}")
    return body, ns


def direct_call(n: Node, ns: dict[str, Any]) -> str | None:
    """`v3 = k_v3(v1, [i2, -1], dim=0)` calling the op's C++ entry point, when the op returns
    exactly the tensors the node names (one `Tensor`, or a tuple of `Tensor`s); else None."""
    func = resolve(str(n.params["fn"]))
    returns = func._schema.returns
    if not returns or len(returns) != len(n.outputs) or any(str(r.type) != "Tensor" for r in returns):
        return None
    out = n.outputs[0]
    parts = [_arg_source(a, ns, f"c_{out}_{j}") for j, a in enumerate(n.params["args"])]
    parts += [f"{k}={_arg_source(v, ns, f'c_{out}_{k}')}" for k, v in n.params["kwargs"].items()]
    ns[f"k_{out}"] = func._op
    return f"{', '.join(n.outputs)} = k_{out}({', '.join(parts)})"


def _arg_source(x: Any, ns: dict[str, Any], name: str) -> str:
    """Python for one argument: a value's name, a list or tuple holding names, or a constant
    bound in the namespace (never the printed text, which is not Python for dtypes and devices)."""
    if isinstance(x, Ref):
        return x.name
    if isinstance(x, (list, tuple)) and refs(x):
        items = [_arg_source(e, ns, f"{name}_{j}") for j, e in enumerate(x)]
        return f"[{', '.join(items)}]" if isinstance(x, list) else f"({''.join(i + ', ' for i in items)})"
    if x is None or type(x) in (bool, int):
        return repr(x)
    ns[name] = x
    return name


def _fail(node: Node) -> None:
    raise GuardFailure(node.params["expect"]).at(node)


def replay_source(graph: Graph, out_spec: Any) -> str:
    params = [n.params["name"] for n in graph.placeholders()]
    body, _ = replay_lines(graph, out_spec)
    return "\n".join([f"def replay({', '.join(params)}):"] + [f"    {b}" for b in body])


def compile_replay(graph: Graph, out_spec: Any, constants: Mapping[str, Any]) -> Callable[..., Any]:
    """A Python function running the trace on new inputs (its parameters: the trace's inputs)."""
    params = [n.params["name"] for n in graph.placeholders()]
    body, ns = replay_lines(graph, out_spec)
    src = "\n".join([f"def replay({', '.join(params)}):"] + [f"    {b}" for b in body])
    ns.update(constants)
    exec(compile(src, "<guardsolve replay>", "exec"), ns)
    fn = ns["replay"]
    fn.__source__ = src
    return fn


def run_trace(graph: Graph, *args: Any, constants: Mapping[str, Any] | None = None) -> Any:
    """Re-execute a tensor trace on new positional inputs; return its output (the traced
    function's output structure, or, for a parsed trace, the first value of its last node).

    A trace of PyTorch ops first checks its guard graph on the inputs' sizes, so inputs the
    trace does not fit raise `GuardFailure` naming the bailout and the user's line.
    """
    names = [n.params["name"] for n in graph.placeholders()]
    if len(args) != len(names):
        raise InputMismatchError(f"the trace takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
    if uses_pytorch_rules(graph):
        dims: dict[str, Any] = {}
        for p, a in zip(signature_of(graph), args):
            if p.kind == "int":
                dims[p.name] = a
                continue
            if not isinstance(a, torch.Tensor) or a.dim() != p.rank:
                got = f"rank {a.dim()}" if isinstance(a, torch.Tensor) else type(a).__name__
                raise InputMismatchError(f"input {p.name!r} must be a rank-{p.rank} tensor, got {got}")
            dims.update(zip(p.dims, a.shape))
        guards = guard_graph(graph)
        values = value_bailouts(guards)  # NOTE: data guards run with the trace itself, below
        run_concrete(Graph([n for i, n in enumerate(guards.nodes)
                            if i not in values and n.op is not Op.BOOL_OPAQUE]), dims)
    env = run_concrete(graph, {**(constants or {}), **dict(zip(names, args))})
    out_spec = graph.meta.get("out_spec")
    if out_spec is not None:
        return _build(out_spec, env)
    last = [n for n in graph.nodes if n.outputs]
    return env[last[-1].outputs[0]] if last else None


def _build(spec: Any, env: Mapping[str, Any]) -> Any:
    """The output structure of a trace, from `Ref`s into the values of a run."""
    from guardsolve.trace.record import OutRef

    if isinstance(spec, OutRef):
        return env[spec.name]
    if isinstance(spec, (tuple, list)):
        return type(spec)(_build(x, env) for x in spec)
    if isinstance(spec, dict):
        return {k: _build(x, env) for k, x in spec.items()}
    return spec
