"""A new artifact against eager: outputs, gradients and inputs written, compared within each dtype's tolerance."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence
import torch
from guardsolve.errors import first_line
from guardsolve.jit.variant import Variant
from guardsolve.trace.record import Trace
from guardsolve.jit.inductor.points import check_points


# NOTE: (rtol, atol) by dtype for an artifact's values against eager's: Inductor fuses, reorders
# reductions and computes half precision in float32, so floats agree to rounding, not bits;
# a dtype with no row (integers, bools) must be equal. Rule table: add a row, not a branch.
_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-5, 1e-7), torch.complex128: (1e-5, 1e-7),
    torch.float32: (1e-3, 1e-4), torch.complex64: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2), torch.complex32: (1e-2, 1e-2),
}


# NOTE: dtypes whose CPU kernels lack `equal`, `==` or `abs` ("equal_cpu" not implemented for
# 'ComplexHalf': `chalf()` under Inductor raised it from the compile instead of comparing):
# compared in a dtype that holds every value exactly
_COMPARED_AS: dict[torch.dtype, torch.dtype] = {torch.complex32: torch.complex64}


# NOTE: ops whose values no two runs share: random draws (Inductor has its own generator) and
# uninitialized memory; a graph with one is compared in sizes and dtypes only
_UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided",
                            "aten::new_empty_strided", "aten::empty_permuted"})


_Outcome = tuple[list[torch.Tensor], list[torch.Tensor]]  # tensor outputs, tensor inputs after the call


def _ops(gm: Any) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def _draws_random(gm: Any) -> bool:
    return any(torch.Tag.nondeterministic_seeded in op.tags for op in _ops(gm))


def differs_at(t: Trace, v: Variant, values: Sequence[Any], params: Sequence[str], gm: Any, timeout_ms: int,
                served: Callable[[Sequence[torch.Tensor]], Callable[..., Any]], consts: Sequence[torch.Tensor],
                train: bool = False) -> str | None:
    """Where and how the artifact differs from the trace's replay (eager's kernels): at the
    inputs it was compiled at, then at up to three points far from them that its check accepts
    (`_far_points`); outputs and, where the graph mutates, the inputs and constants after the
    call (both run on copies: a buffer the graph updates, batch norm's running statistics, is
    not changed by the comparison). With `train`, the gradients too, with respect to every
    input and constant that requires grad, for one seeded random cotangent. Sizes and dtypes
    always; values too (within `_TOLERANCE`) unless the re-traced graph `gm` draws random
    numbers or reads memory it never wrote. None when it agrees. `served(constants)` is the
    variant's runner over those constants (what a call runs).

    NOTE: defense in depth. The check is meant to hold every assumption the artifact was built
    under; an assumption it misses (an FX graph cache hit once dropped a pooling guard) shows as
    values that differ at some size the check accepts, and the artifact is then never used.
    """
    from guardsolve.trace.replay import compile_replay

    names = list(t.constants)

    def replay(cs: Sequence[torch.Tensor]) -> Callable[..., Any]:
        return compile_replay(t.graph, t.out_spec, dict(zip(names, cs)))

    copy, random = not v.plain, _draws_random(gm)
    compare_values = not random and not any(op._schema.name in _UNINITIALIZED for op in _ops(gm))
    floor = _autocast_floor()
    for where, args in check_points(t, v, values, params, timeout_ms):
        want = _outcome(replay, args, consts, copy, random, train)
        if isinstance(want, BaseException):
            if args is values:
                raise want  # NOTE: eager's own error at the call's inputs: the call raises it
            continue  # NOTE: random data eager rejects (an index out of range): no comparison here
        got = _outcome(served, args, consts, copy, random, train)
        if isinstance(got, BaseException):
            return f"raises {type(got).__name__} ({first_line(got)[:120]}) at {where}, where eager gives a value"
        why = _mismatch(want, got, compare_values, floor)
        if why is not None:
            return f"gives {why} at {where}"
    return None


def _outcome(make: Callable[[Sequence[torch.Tensor]], Callable[..., Any]], args: Sequence[Any],
             consts: Sequence[torch.Tensor], copy: bool, random: bool, train: bool = False) -> _Outcome | BaseException:
    """The tensor outputs of `make(consts)(*args)` and (with `copy`, on copies of the arguments
    and the constants) the tensor arguments and constants after the call; or what it raised.
    With `train`, the outputs are followed by the gradients of (outputs . a seeded random
    cotangent) with respect to each argument and constant requiring grad (zeros where unused).
    With `random`, the CPU generator's state is put back after the call (the caller's random
    stream is eager's: only the call itself draws)."""
    from guardsolve.ir.flat import flatten as _flatten

    both = _copies([*args, *consts]) if copy else [*args, *consts]
    run_args, run_consts = both[:len(args)], both[len(args):]
    rng = torch.random.fork_rng(devices=[]) if random else contextlib.nullcontext()
    try:
        with (torch.enable_grad() if train else torch.no_grad()), rng:
            out = make(run_consts)(*run_args)
            outs = [x for x in _flatten(out)[0] if isinstance(x, torch.Tensor)]
            if train:
                outs = outs + _gradients(outs, both)
    except Exception as e:
        return e
    return [o.detach() for o in outs], ([x.detach() for x in both if isinstance(x, torch.Tensor)] if copy else [])


def _gradients(outs: Sequence[torch.Tensor], args: Sequence[Any]) -> list[torch.Tensor]:
    """d(sum of each differentiable output times a seeded random tensor of its shape) / d(each
    argument that requires grad)."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    diff = [o for o in outs if o.requires_grad and (o.dtype.is_floating_point or o.dtype.is_complex)]
    if not leaves or not diff:
        return []
    gen = torch.Generator().manual_seed(1)
    cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in diff]
    grads = torch.autograd.grad(diff, leaves, cot, allow_unused=True)
    return [torch.zeros_like(a) if g is None else g for a, g in zip(leaves, grads)]


def _copies(args: Sequence[Any]) -> list[Any]:
    """The arguments with each tensor's storage copied (once per storage, so aliases stay
    aliases) and viewed with the same sizes, strides and offset: a mutation changes no caller's
    tensor, and the layout guards still hold."""
    storages: dict[int, Any] = {}
    out: list[Any] = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        st = a.untyped_storage()
        key = st.data_ptr() or id(st)
        if key not in storages:
            storages[key] = st.clone()
        view = torch.empty(0, dtype=a.dtype, device=a.device)
        with torch.no_grad():
            view = view.set_(storages[key], a.storage_offset(), a.size(), a.stride())
        out.append(view.requires_grad_(True) if a.requires_grad else view)
    return out


def _mismatch(want: _Outcome, got: _Outcome, compare_values: bool,
              floor: tuple[float, float] | None = None) -> str | None:
    """The first output (then mutated input) whose sizes, dtype or values differ, described.
    `floor`: the least tolerance of a float comparison (autocast's dtype's)."""
    for what, ws, gs in (("output", want[0], got[0]), ("input after the call", want[1], got[1])):
        if len(ws) != len(gs):
            return f"{len(gs)} tensor {what}s where eager has {len(ws)}"
        for i, (w, g) in enumerate(zip(ws, gs)):
            if w.shape != g.shape or w.dtype != g.dtype:
                return f"{what} {i} of sizes {list(g.shape)} ({g.dtype}) where eager's has {list(w.shape)} ({w.dtype})"
            if compare_values and w.numel():
                why = _value_mismatch(w, g.to(w.device), floor)
                if why is not None:
                    return f"{what} {i} {why}"
    return None


def _within_scale(w: torch.Tensor, g: torch.Tensor, tol: tuple[float, float]) -> bool:
    """|g - w| <= atol + rtol * max |w| everywhere, NaN where eager has NaN."""
    if not torch.equal(torch.isnan(w), torch.isnan(g)):
        return False
    ok = ~torch.isnan(w)
    w64, g64 = w[ok].double(), g[ok].double()
    if not w64.numel():
        return True
    return bool(((g64 - w64).abs().max() <= tol[1] + tol[0] * w64.abs().max()).item())


def _autocast_floor() -> tuple[float, float] | None:
    """The tolerance of the dtypes autocast computes in here (a float32 gradient computed
    through bfloat16 matmuls agrees to bfloat16's rounding), or None where it is off."""
    from guardsolve.trace.static import autocast_state

    tols = [_TOLERANCE[d] for _, d in autocast_state() if d in _TOLERANCE]
    return (max(t[0] for t in tols), max(t[1] for t in tols)) if tols else None


def _value_mismatch(w: torch.Tensor, g: torch.Tensor, floor: tuple[float, float] | None = None) -> str | None:
    """None when `g` equals `w` within the dtype's tolerance (at least `floor` for a float;
    NaN equals NaN), else by how much."""
    tol = _TOLERANCE.get(w.dtype)
    if tol is not None and floor is not None:
        tol = (max(tol[0], floor[0]), max(tol[1], floor[1]))
    if w.dtype in _COMPARED_AS:
        w, g = w.to(_COMPARED_AS[w.dtype]), g.to(_COMPARED_AS[w.dtype])
    if tol is None:
        if torch.equal(w, g):
            return None
        w, g = w.to(torch.float64), g.to(torch.float64)
    elif torch.allclose(g, w, rtol=tol[0], atol=tol[1], equal_nan=True):
        return None
    elif floor is not None and _within_scale(w, g, tol):
        # NOTE: under autocast, a sum over many low-precision products (a layer norm weight's
        # gradient over 468 tokens) differs from eager's by its rounding, relative to the
        # tensor's largest magnitude, not each element's
        return None
    same = (w == g) | (torch.isnan(w) & torch.isnan(g))
    diff = torch.where(same, torch.zeros((), dtype=torch.float64), (g - w).abs().to(torch.float64))
    bound = "exactly" if tol is None else f"rtol {tol[0]:g}, atol {tol[1]:g}"
    return f"differing from eager's by {diff.max().item():.3g} at most (max abs difference; {bound})"
