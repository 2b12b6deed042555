"""A traced input: its placeholder (sizes as guarded ints) and the layout the trace records of it."""

from __future__ import annotations

from typing import Any
import torch
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import Param
from guardsolve.guards.pytorch import meta_input
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.trace.traced_tensor import TracedTensor, symint
from guardsolve.trace.op_checks import dtype_name


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
    it, and `strides_decided_on` finds the inputs whose strides the trace must pin. Folded
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


def strides_decided_on(guards: Graph, strided: dict[str, str]) -> set[str]:
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
