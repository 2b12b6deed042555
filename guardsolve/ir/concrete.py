"""The concrete interpretation: re-run a trace (or a guard graph) on real values.

A bailout whose value differs from the one recorded raises `GuardFailure`, naming the
bailout and the user source line:

>>> g = Graph.parse("a0 = int_placeholder(name=a0)\\nb0 = int_placeholder(name=b0)\\n"
...                 "i0 = int_eq(a0, b0)\\nbool_bailout(i0, expect=True)")
>>> run_concrete(g, {"a0": 4, "b0": 8})
Traceback (most recent call last):
...
guardsolve.errors.GuardFailure: guard failed: `bool_bailout(i0, expect=True)` expected True, got False
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping

import torch
from torch.utils._pytree import tree_flatten

from guardsolve.errors import GuardFailure, InputMismatchError
from guardsolve.ir.aten import refs, resolve, substitute
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op

INT_RULES: Mapping[Op, Callable[..., Any]] = {
    Op.INT_CONST: lambda *, val: val,
    Op.BOOL_CONST: lambda *, val: val,
    Op.INT_ADD: operator.add,
    Op.INT_SUB: operator.sub,
    Op.INT_MUL: operator.mul,
    Op.INT_FLOORDIV: operator.floordiv,  # NOTE: Python semantics; see guardsolve.guards.semantics.
    Op.INT_MOD: operator.mod,
    Op.INT_EQ: operator.eq,
    Op.INT_NE: operator.ne,
    Op.INT_LT: operator.lt,
    Op.INT_LE: operator.le,
    Op.INT_GT: operator.gt,
    Op.INT_GE: operator.ge,
    Op.BOOL_NOT: operator.not_,
    Op.BOOL_AND: lambda a, b: a and b,
    Op.BOOL_OR: lambda a, b: a or b,
    Op.SIZE_INDEX: lambda s, *, index: s[index],
    Op.SIZE_CTOR: lambda *dims: tuple(dims),
}


def _bailout(b: bool, *, expect: bool) -> None:
    if b != expect:
        raise GuardFailure(expect)


def _prim(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A seed prim: both operands already have one shape (the trace expanded them)."""

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.shape != b.shape:
            raise ValueError(f"prim operands differ in shape: {list(a.shape)} and {list(b.shape)}")
        return fn(a, b)

    return run


def compile_call(fn: str, args: Any, kwargs: Any, outputs: int | None = None) -> Callable[..., Any]:
    """A function of the call's input values (in `refs` order) running the op on them; several
    tensor outputs (`outputs` of them, when known) come back as a list."""
    func = resolve(fn)
    names = refs((args, kwargs))
    template = (tuple(args), dict(kwargs))

    def run(*values: Any) -> Any:
        env = dict(zip(names, values))
        a, k = substitute(template, env.__getitem__)
        leaves = tree_flatten(func(*a, **k))[0]
        if len(leaves) == 1 and type(leaves[0]) in (int, float, bool):
            return leaves[0]  # NOTE: a value read from tensor data (`_local_scalar_dense`)
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if outputs is not None and len(tensors) != outputs:
            # NOTE: eager left an output undefined (None) where the shape rule has a tensor
            tensors = [x for x in leaves if x is None or isinstance(x, torch.Tensor)]
        return tensors[0] if len(tensors) == 1 else tensors

    return run


def call(*values: Any, fn: str, args: Any, kwargs: Any) -> Any:
    """Run a recorded call on real values."""
    return compile_call(fn, args, kwargs)(*values)


TENSOR_RULES: Mapping[Op, Callable[..., Any]] = {
    Op.VAR_ADD: _prim(torch.add),
    Op.VAR_MUL: _prim(torch.mul),
    Op.VAR_EXPAND: lambda a, size: a.expand(tuple(size)),
    Op.VAR_SIZE: lambda a: tuple(a.shape),
    Op.VAR_STRIDE: lambda a: tuple(a.stride()),
    Op.VAR_STORAGE_OFFSET: lambda a: a.storage_offset(),
    Op.VAR_TO_BOOL: lambda a: bool(a),
    Op.ATEN: call,
}


def concrete_rules(inputs: Mapping[str, Any]) -> RuleTable:
    """Rules over real values; `inputs` maps placeholder names to tensors and ints."""

    def lookup(name: str) -> Any:
        if name not in inputs:
            raise InputMismatchError(f"no value given for input {name!r}")
        return inputs[name]

    def var_placeholder(*, name: str, rank: int, **example: Any) -> torch.Tensor:
        t = lookup(name)
        if not isinstance(t, torch.Tensor) or t.dim() != rank:
            got = f"rank {t.dim()}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise InputMismatchError(f"input {name!r} must be a rank-{rank} tensor, got {got}")
        return t

    def var_param(*, name: str, shape: tuple[int, ...], dtype: str | None = None, crc: int | None = None) -> torch.Tensor:
        t = lookup(name)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            raise InputMismatchError(f"constant {name!r} must be a tensor of shape {list(shape)}")
        return t

    return RuleTable("concrete", {
        **INT_RULES,
        **TENSOR_RULES,
        Op.BOOL_BAILOUT: _bailout,
        Op.INT_PLACEHOLDER: lambda *, name: lookup(name),
        Op.INT_ARG: lambda *, name, val=None: lookup(name),
        Op.VAR_PLACEHOLDER: var_placeholder,
        Op.VAR_PARAM: var_param,
        Op.BOOL_OPAQUE: lambda *, name: lookup(name),
    })


def run_concrete(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Interpret `graph` on `inputs`; raises `GuardFailure` at the first failing bailout."""
    return interpret(graph, concrete_rules(inputs))
