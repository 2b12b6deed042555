"""The sizes a variant is checked at besides its example: far points its check accepts, and inputs made there."""

from __future__ import annotations

import ast
from typing import Any, Callable, Mapping, Sequence
import torch
import z3
from guardsolve.jit.variant import Variant
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.smt import Vars, limit
from guardsolve.trace.record import Trace


_POINT_TIMEOUT_MS = 500  # z3's work limit for one query of `_far_points` (`smt.limit`: a count, not a clock)


_GROWTH_BUDGET = 4  # a far point's inputs hold at most this many times the example's elements (or 4096)


def check_points(t: Trace, v: Variant, values: Sequence[Any], params: Sequence[str],
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
    (those `differs_at` compared with eager), as (dims, inputs): empty for a variant pinned to
    its example. `values` are the traced inputs it was compiled at; call it in the state it
    was compiled in (its check reads grad mode, autocast, the default dtype).

    >>> lin = torch.nn.Linear(16, 8).eval()  # doctest: +SKIP
    >>> t = trace(lin, torch.randn(4, 16)); v = compile_variant(t, simplify(t), (torch.randn(4, 16),), [], ("input",))  # doctest: +SKIP
    >>> [dims for dims, _ in sizes_accepted(t, v, (torch.randn(4, 16),), ("input",))]  # doctest: +SKIP
    [{'input0': 0, 'input1': 16}, {'input0': 1, 'input1': 16}, {'input0': 10, 'input1': 16}]
    """
    base = _dims_at(t, values)
    out: list[tuple[dict[str, int], Sequence[Any]]] = []
    for _, args in check_points(t, v, values, params, timeout_ms)[1:]:
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
    >>> from guardsolve.solve.simplify import simplify
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
