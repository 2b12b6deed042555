"""One probe's parts: the inputs at a point (`resized`), why a probe fails (`why_not`), and the
regions of recorded decisions a point falls in (`inside_region`, `decided_otherwise`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from guardsolve.errors import GuardFailure, GuardsolveError, UnsupportedOpError
from guardsolve.ir.concrete import concrete_rules
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import interpret
from guardsolve.ir.ops import Op
from guardsolve.trace.divergence import Diverged
from guardsolve.trace.why import Why


def resized(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """`x` at another shape, its values taken (wrapping round) from `x`'s own, so that
    indices stay in range; contiguous, with x's dtype, device and requires_grad; always a tensor
    of its own.

    NOTE: at a point that leaves x's sizes as they are, this was `x` itself (detached: the
    caller's memory), and a probe of `x.add_(y)` added to the caller's tensor again: the first
    call of `guarded` left x with 4 y added."""
    y = x.detach()
    for d, n in enumerate(shape):
        if y.shape[d] == n:
            continue
        if y.shape[d] == 0:
            size = list(y.shape)
            size[d] = n
            y = torch.zeros(size, dtype=y.dtype, device=y.device)
        else:
            y = y.index_select(d, torch.arange(n, device=y.device) % y.shape[d])
    y = y.clone(memory_format=torch.contiguous_format) if y.untyped_storage().data_ptr() == \
        x.untyped_storage().data_ptr() else y.contiguous()
    if x.requires_grad:
        y.requires_grad_(True)
    return y


def inputs_at(t: Any, point: Mapping[str, int]) -> tuple[Any, ...]:
    out: list[Any] = []
    for p, v in zip(t.signature, t.inputs):
        if p.kind == "tensor":
            out.append(resized(v, [point[d] for d in p.dims]))
        else:
            out.append(point[p.name])
    return tuple(out)


def why_not(e: BaseException) -> Any:
    """A probe's failure, said as its reason for not merging (a `tracer.Why`: the user's line
    and the op where it stops or records another node, where known)."""
    if isinstance(e, Diverged):
        return e.why
    for lead in ("its shape rule rejects these sizes (", "PyTorch's shape rule fails while replaying "):
        if isinstance(e, UnsupportedOpError) and e.reason.startswith(lead):
            inner = e.reason[len(lead):]
            inner = inner[:-1] if inner.endswith(")") else inner  # NOTE: the wrapping one only
            inner = inner.split("` (", 1)[1] if inner.startswith("`") and "` (" in inner else inner
            where = getattr(e, "where", "")
            at = f" at {where}" if where else ""
            return Why(f"stops{at}: {e.op}'s shape rule rejects these sizes: {inner[:200]}", where or None, e.op)
    first = (str(e).strip().splitlines() or [""])[0]
    return Why(f"raises {type(e).__name__}: {first[:200]}", None, getattr(e, "op", None))


def user_decisions(g: Graph) -> Graph | None:
    """The example's decisions made outside any op (the user's code, library Python): a trace
    records each as a node of its own (`bool_bailout(i4, expect=True)`), so a point where one
    is answered otherwise records another trace, whatever route it takes. None if there is none."""
    if on_data(g) or not any(n.op is Op.BOOL_BAILOUT and n.meta.get("user") for n in g.nodes):
        return None
    return Graph([n for n in g.nodes if n.op is not Op.BOOL_BAILOUT or n.meta.get("user")], meta=g.meta)


def on_data(g: Graph) -> bool:
    """Does guard graph `g` hold a decision on tensor data (not a region of sizes)?"""
    return any(n.op is Op.BOOL_OPAQUE for n in g.nodes)


def run_at(g: Graph, point: Mapping[str, int]) -> None:
    """Interpret guard graph `g` at `point` (raises `GuardFailure` where a decision fails).

    NOTE: not validated again: these graphs are the tracer's own (a trace's decisions, a
    probe's prefix), asked at many points each.
    """
    interpret(g, concrete_rules(dict(point)), validate=False)


def decided_otherwise(user: Graph | None, point: Mapping[str, int]) -> Any:
    """Where the program (outside any op) decides otherwise at `point` (a `Why`), or None."""
    if user is None:
        return None
    try:
        run_at(user, point)
    except GuardFailure as e:
        loc = getattr(e, "loc", None)
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace{at}: the program's own test of a size answers otherwise (known without "
                   "tracing again)", loc, "the program's own test of a size")
    except (GuardsolveError, ArithmeticError, KeyError):
        return None
    return None


def inside_region(g: Graph, point: Mapping[str, int]) -> bool:
    """Does `point` make every decision recorded in guard graph `g` as it was made?"""
    try:
        run_at(g, point)
    except (GuardsolveError, ArithmeticError, KeyError):  # NOTE: a failed guard, a zero divisor
        return False
    return True


# A probe at a point: ("same", its guard graph) or ("other", why, the region it decides, or None)
Outcome = tuple
