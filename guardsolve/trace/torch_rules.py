"""The tracer's rule table: torch functions and tensor methods, with PyTorch's shape logic.

Each rule checks arguments like PyTorch, makes every shape decision on guarded ints (so it
becomes a bailout), then records a shape-explicit op. Tensors that are not traced (module
parameters, captured constants) become `var_param` constants with static shapes.

    F.linear(x, w, b)   ->   i3 = int_eq(i1, i2)          # x.shape[-1] == w.shape[1]
                             bool_bailout(i3, expect=True)
                             v0 = var_permute(w, dims=[1, 0])
                             v1 = var_matmul(x, v0) ...
"""

from __future__ import annotations

from numbers import Number
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from guardsolve.errors import TraceError, UnsupportedOpError
from guardsolve.ir.ops import Op
from guardsolve.trace.guarded import GuardedInt, GuardedSize, as_int
from guardsolve.trace.record import Recorder
from guardsolve.trace.shapes import (
    broadcast_sizes, infer_size, product, same_sizes, slice_bounds, wrap_dim, wrap_index,
)
from guardsolve.trace.tensor import TracedTensor

# -- helpers --------------------------------------------------------------------------------


def _new(rec: Recorder, tensor: torch.Tensor, op: Op, inputs: tuple[Any, ...], *, shape: Any = None,
         **params: Any) -> TracedTensor:
    """Record `op` and wrap its result; `shape` is its symbolic size (see TracedTensor)."""
    return TracedTensor(tensor, rec.record(op, inputs, **params), rec, shape)


def _size_of(rec: Recorder, fn: Callable[[], list[Any]]) -> Callable[[], GuardedSize]:
    return lambda: GuardedSize.make(rec, fn())


def _rec_of(*xs: Any) -> Recorder:
    recs = {id(x.rec): x.rec for x in _flat(xs) if isinstance(x, (TracedTensor, GuardedInt))}
    if len(recs) != 1:
        raise TraceError("these values belong to different traces" if recs else "no traced tensor among the arguments")
    return next(iter(recs.values()))


def _flat(xs: Any) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out += _flat(x)
        else:
            out.append(x)
    return out


def lift(rec: Recorder, t: Any) -> TracedTensor:
    """A traced tensor for `t`: traced ones pass; plain tensors become `var_param` constants."""
    if isinstance(t, TracedTensor):
        if t.rec is not rec:
            raise TraceError(f"{t.name} belongs to a different trace")
        return t
    if isinstance(t, torch.Tensor):
        hit = rec._lifted.get(id(t))
        if hit is not None:
            return hit
        name = rec.constant_name(t)
        rec.constants[name] = t
        out = TracedTensor(t, rec.graph.emit(Op.VAR_PARAM, (), out=name, name=name, shape=tuple(t.shape)), rec)
        rec._lifted[id(t)] = out
        return out
    raise TraceError(f"expected a tensor, got {type(t).__name__}")


def _scalar_value(v: Any) -> Any:
    """A Python number for a scalar operand; a traced int is specialized (with its guard)."""
    if isinstance(v, GuardedInt):
        return v.specialize()
    if isinstance(v, bool) or not isinstance(v, Number):
        raise UnsupportedOpError(f"an operand of type {type(v).__name__}", supported_names())
    return v


def _sizes(args: Sequence[Any]) -> list[Any]:
    """`view(2, 3)`, `view((2, 3))`, `view(x.shape)` -> a list of ints / guarded ints."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, GuardedSize, torch.Size)):
        return list(args[0])
    return list(args)


def _dims(dim: Any, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    ds = list(dim) if isinstance(dim, (tuple, list)) else [dim]
    if not ds:
        return list(range(rank))  # NOTE: torch reads an empty dim list as "all dims"
    return sorted({wrap_dim(d, rank) for d in ds})


def reshape_to(t: TracedTensor, sizes: Sequence[Any]) -> TracedTensor:
    """Record `var_reshape` to sizes already known to hold t's elements."""
    size = GuardedSize.make(t.rec, list(sizes))
    return _new(t.rec, t.value.reshape(size.value), Op.VAR_RESHAPE, (t, size), shape=size)


def expand_to(t: TracedTensor, size: GuardedSize) -> TracedTensor:
    """Expand `t` to `size`, eliding the expand when the sizes already match (the notebook's)."""
    if t.shape == size:
        return t
    return force_expand(t, size)


def force_expand(t: TracedTensor, size: GuardedSize) -> TracedTensor:
    """Expand to a size known to be compatible by construction (no check, so no bailout)."""
    return _new(t.rec, t.value.expand(size.value), Op.VAR_EXPAND, (t, size), shape=size)


# -- elementwise ----------------------------------------------------------------------------

_TENSOR_OPS = {"add": Op.VAR_ADD, "sub": Op.VAR_SUB, "mul": Op.VAR_MUL, "div": Op.VAR_DIV}


def arith(fn: str, a: Any, b: Any) -> Any:
    """A broadcasting binary op between tensors, or a tensor and a scalar."""
    ta, tb = isinstance(a, (TracedTensor, torch.Tensor)), isinstance(b, (TracedTensor, torch.Tensor))
    if ta and tb:
        rec = _rec_of(a, b)
        a, b = lift(rec, a), lift(rec, b)
        shape = broadcast_sizes(rec, a.shape, b.shape)
        ea, eb = expand_to(a, shape), expand_to(b, shape)
        from guardsolve.ir.kernels import BINARY

        value = BINARY[fn](ea.value, eb.value)
        if fn in _TENSOR_OPS:
            return _new(rec, value, _TENSOR_OPS[fn], (ea, eb), shape=shape)
        return _new(rec, value, Op.VAR_BINARY, (ea, eb), shape=shape, fn=fn)
    if ta:
        return scalar_op(fn, a, b)
    if tb:
        return scalar_op(fn, b, a, reverse=True)
    return NotImplemented


def scalar_op(fn: str, t: TracedTensor, v: Any, reverse: bool = False) -> TracedTensor:
    from guardsolve.ir.kernels import scalar

    v = _scalar_value(v)
    if fn in ("eq", "ne", "lt", "le", "gt", "ge") and reverse:
        fn, reverse = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(fn, fn), False
    return _new(t.rec, scalar(t.value, fn=fn, value=v, reverse=reverse), Op.VAR_SCALAR, (t,), shape=t,
                fn=fn, value=v, reverse=reverse)


def _binary_rule(fn: str) -> Callable[..., Any]:
    def rule(a: Any, b: Any, *, alpha: Any = 1, out: Any = None, rounding_mode: Any = None) -> Any:
        if alpha != 1 or out is not None or rounding_mode is not None:
            raise UnsupportedOpError(f"{fn} with alpha/out/rounding_mode", supported_names())
        return arith(fn, a, b)
    return rule


def unary(fn: str, a: TracedTensor) -> TracedTensor:
    from guardsolve.ir.kernels import UNARY

    return _new(a.rec, UNARY[fn](a.value), Op.VAR_UNARY, (a,), shape=a, fn=fn)


def _unary_rule(fn: str) -> Callable[..., TracedTensor]:
    def rule(a: TracedTensor, *args: Any, **kwargs: Any) -> TracedTensor:
        if args or any(v not in (False, None) for v in kwargs.values()):
            raise UnsupportedOpError(f"{fn} with extra arguments", supported_names())
        return unary(fn, a)
    return rule


def gelu(a: TracedTensor, approximate: str = "none") -> TracedTensor:
    if approximate not in ("none", "tanh"):
        raise UnsupportedOpError(f"gelu(approximate={approximate!r})", supported_names())
    return unary("gelu" if approximate == "none" else "gelu_tanh", a)


def where(cond: Any, a: Any, b: Any) -> TracedTensor:
    rec = _rec_of(cond, a, b)
    c = lift(rec, cond)
    ta = lift(rec, a if isinstance(a, (TracedTensor, torch.Tensor)) else torch.tensor(a))
    tb = lift(rec, b if isinstance(b, (TracedTensor, torch.Tensor)) else torch.tensor(b))
    shape = broadcast_sizes(rec, list(broadcast_sizes(rec, list(c.shape), list(ta.shape))), list(tb.shape))
    ec, ea, eb = expand_to(c, shape), expand_to(ta, shape), expand_to(tb, shape)
    return _new(rec, torch.where(ec.value, ea.value, eb.value), Op.VAR_WHERE, (ec, ea, eb), shape=shape)


# -- reductions -----------------------------------------------------------------------------


def _reduce_rule(fn: str) -> Callable[..., TracedTensor]:
    def rule(a: TracedTensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> TracedTensor:
        if dtype is not None:
            raise UnsupportedOpError(f"{fn}(dtype=...)", supported_names())
        dims = _dims(dim, a.ndim)
        if fn in ("amax", "amin"):
            for d in dims:  # NOTE: max/min over an empty dim has no identity: PyTorch raises.
                if a.shape[d] == 0:
                    raise TraceError(f"{fn}(): expected reduction dim {d} to have non-zero size")
        from guardsolve.ir.kernels import reduce

        value = reduce(a.value, fn=fn, dims=dims, keepdim=keepdim)
        shape = _size_of(a.rec, lambda: [1 if i in dims else d for i, d in enumerate(a.shape)] if keepdim
                         else [d for i, d in enumerate(a.shape) if i not in dims])
        return _new(a.rec, value, Op.VAR_REDUCE, (a,), shape=shape, fn=fn, dims=tuple(dims), keepdim=bool(keepdim))
    return rule


def _softmax_rule(log: bool) -> Callable[..., TracedTensor]:
    def rule(a: TracedTensor, dim: Any = None, *args: Any, dtype: Any = None, **kwargs: Any) -> TracedTensor:
        if dim is None or dtype is not None or (args and args[-1] is not None and not isinstance(args[-1], int)):
            raise UnsupportedOpError("softmax without an explicit dim, or with dtype", supported_names())
        d = wrap_dim(dim, a.ndim)
        value = torch.log_softmax(a.value, d) if log else torch.softmax(a.value, d)
        return _new(a.rec, value, Op.VAR_SOFTMAX, (a,), shape=a, dim=d, log=log)
    return rule


# -- linear algebra -------------------------------------------------------------------------


def _mm_checked(a: TracedTensor, b: TracedTensor) -> TracedTensor:
    """`var_matmul` of equal-rank operands with equal batch dims; checks the inner dims."""
    if not (a.shape[-1] == b.shape[-2]):
        raise TraceError(f"mat1 and mat2 shapes cannot be multiplied ({tuple(a.value.shape)} and {tuple(b.value.shape)})")
    return _matmul_prim(a, b)


def _matmul_prim(a: TracedTensor, b: TracedTensor) -> TracedTensor:
    shape = _size_of(a.rec, lambda: list(a.shape)[:-1] + [b.shape[-1]])
    return _new(a.rec, torch.matmul(a.value, b.value), Op.VAR_MATMUL, (a, b), shape=shape)


def matmul(a: Any, b: Any) -> TracedTensor:
    """torch.matmul: 1-D operands are promoted and squeezed back; batch dims broadcast."""
    rec = _rec_of(a, b)
    a, b = lift(rec, a), lift(rec, b)
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise TraceError("both arguments to matmul need to be at least 1D")
    a2 = reshape_to(a, [1, a.shape[0]]) if da == 1 else a
    b2 = reshape_to(b, [b.shape[0], 1]) if db == 1 else b
    if a2.ndim == 2 and b2.ndim == 2:
        r = _mm_checked(a2, b2)
    elif b2.ndim == 2:
        # NOTE: PyTorch folds the batch dims of an N-D @ 2-D product into rows: no broadcasting.
        dims = list(a2.shape)
        flat = _mm_checked(reshape_to(a2, [product(rec, dims[:-1]), dims[-1]]), b2)
        r = reshape_to(flat, dims[:-1] + [b2.shape[-1]])
    else:
        if not (a2.shape[-1] == b2.shape[-2]):
            raise TraceError(f"matmul shapes {tuple(a.value.shape)} and {tuple(b.value.shape)} do not match")
        batch = broadcast_sizes(rec, list(a2.shape)[:-2], list(b2.shape)[:-2])
        ea = expand_to(a2, GuardedSize.make(rec, list(batch) + list(a2.shape)[-2:]))
        eb = expand_to(b2, GuardedSize.make(rec, list(batch) + list(b2.shape)[-2:]))
        r = _matmul_prim(ea, eb)
    if da == 1 or db == 1:
        dims = list(r.shape)
        keep = dims[:-2] + ([] if da == 1 else [dims[-2]]) + ([] if db == 1 else [dims[-1]])
        r = reshape_to(r, keep)
    return r


def mm(a: Any, b: Any) -> TracedTensor:
    rec = _rec_of(a, b)
    a, b = lift(rec, a), lift(rec, b)
    if a.ndim != 2 or b.ndim != 2:
        raise TraceError("mm takes 2-D tensors")
    return _mm_checked(a, b)


def bmm(a: Any, b: Any) -> TracedTensor:
    rec = _rec_of(a, b)
    a, b = lift(rec, a), lift(rec, b)
    if a.ndim != 3 or b.ndim != 3:
        raise TraceError("bmm takes 3-D tensors")
    if not (a.shape[0] == b.shape[0]):
        raise TraceError("bmm batch sizes differ")
    return _mm_checked(a, b)


def linear(x: Any, weight: Any, bias: Any = None) -> TracedTensor:
    rec = _rec_of(x, weight, bias)
    w = lift(rec, weight)
    r = matmul(lift(rec, x), permute(w, [1, 0]) if w.ndim == 2 else w)
    if bias is None:
        return r
    b = force_expand(lift(rec, bias), r.shape)
    return _new(rec, r.value + b.value, Op.VAR_ADD, (r, b), shape=r)


# -- shape ops ------------------------------------------------------------------------------


def view(t: TracedTensor, *args: Any) -> TracedTensor:
    if len(args) == 1 and isinstance(args[0], torch.dtype):
        raise UnsupportedOpError("Tensor.view(dtype)", supported_names())
    sizes = infer_size(t.rec, t.numel() if t.ndim else 1, _sizes(args))
    return reshape_to(t, sizes)


def numel(t: TracedTensor) -> Any:
    return product(t.rec, list(t.shape))


def size(t: TracedTensor, dim: Any = None) -> Any:
    return t.shape if dim is None else t.shape[wrap_dim(dim, t.ndim)]


def flatten(t: TracedTensor, start_dim: int = 0, end_dim: int = -1) -> TracedTensor:
    if t.ndim == 0:
        return reshape_to(t, [1])
    s, e = wrap_dim(start_dim, t.ndim), wrap_dim(end_dim, t.ndim)
    if s > e:
        raise TraceError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return t
    dims = list(t.shape)
    return reshape_to(t, dims[:s] + [product(t.rec, dims[s:e + 1])] + dims[e + 1:])


def permute(t: TracedTensor, *dims: Any) -> TracedTensor:
    ds = [wrap_dim(d, t.ndim) for d in (dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims)]
    if sorted(ds) != list(range(t.ndim)):
        raise TraceError(f"permute: {ds} is not a permutation of the dims")
    if ds == list(range(t.ndim)):
        return t
    shape = _size_of(t.rec, lambda: [t.shape[d] for d in ds])
    return _new(t.rec, t.value.permute(ds), Op.VAR_PERMUTE, (t,), shape=shape, dims=tuple(ds))


def transpose(t: TracedTensor, dim0: int, dim1: int) -> TracedTensor:
    ds = list(range(t.ndim))
    a, b = wrap_dim(dim0, t.ndim), wrap_dim(dim1, t.ndim)
    ds[a], ds[b] = ds[b], ds[a]
    return permute(t, ds)


def t_(t: TracedTensor) -> TracedTensor:
    if t.ndim > 2:
        raise TraceError("t() expects a tensor with <= 2 dimensions")
    return permute(t, list(range(t.ndim))[::-1])


def unsqueeze(t: TracedTensor, dim: int) -> TracedTensor:
    d = wrap_dim(dim, t.ndim + 1)
    dims = list(t.shape)
    return reshape_to(t, dims[:d] + [1] + dims[d:])


def squeeze(t: TracedTensor, dim: Any = None) -> TracedTensor:
    dims = list(t.shape)
    cand = _dims(dim, t.ndim) if dim is not None else list(range(t.ndim))
    drop = [d for d in cand if dims[d] == 1]
    if not drop:
        return t
    return reshape_to(t, [x for i, x in enumerate(dims) if i not in drop])


def expand(t: TracedTensor, *args: Any) -> TracedTensor:
    sizes = _sizes(args)
    if len(sizes) < t.ndim:
        raise TraceError("expand: the number of sizes must be >= the tensor's rank")
    lead = len(sizes) - t.ndim
    out: list[Any] = []
    for i, s in enumerate(sizes):
        if i < lead:
            if not isinstance(s, GuardedInt) and s == -1:
                raise TraceError("expand: -1 is not allowed in a leading, new dimension")
            out.append(s)
            continue
        cur = t.shape[i - lead]
        if not isinstance(s, GuardedInt) and s == -1:
            out.append(cur)
        elif not (cur == s):
            if not (cur == 1):
                raise TraceError(f"expand: size {s} does not match the existing size")
            out.append(s)
        else:
            out.append(cur)
    return expand_to(t, GuardedSize.make(t.rec, out))


def contiguous(t: TracedTensor, *args: Any, **kwargs: Any) -> TracedTensor:
    return t  # NOTE: values are equal; traces never alias-mutate.


def cat(tensors: Sequence[Any], dim: int = 0) -> TracedTensor:
    rec = _rec_of(*tensors)
    ts = [lift(rec, t) for t in tensors]
    if not ts:
        raise TraceError("cat expects a non-empty list of tensors")
    rank = ts[0].ndim
    if any(t.ndim != rank for t in ts) or rank == 0:
        raise TraceError("cat: tensors must have the same, non-zero rank")
    d = wrap_dim(dim, rank)
    first = list(ts[0].shape)
    for t in ts[1:]:
        other = list(t.shape)
        for i in range(rank):
            if i != d and not (other[i] == first[i]):
                raise TraceError(f"cat: sizes of tensors must match except in dimension {d}")
    if len(ts) == 1:
        return ts[0]
    return _cat_prim(rec, ts, d)


def _cat_prim(rec: Recorder, ts: list[TracedTensor], d: int) -> TracedTensor:
    def size() -> list[Any]:
        total = ts[0].shape[d]
        for t in ts[1:]:
            total = total + t.shape[d]
        return list(ts[0].shape)[:d] + [total] + list(ts[0].shape)[d + 1:]
    return _new(rec, torch.cat([t.value for t in ts], d), Op.VAR_CAT, tuple(ts), shape=_size_of(rec, size), dim=d)


def stack(tensors: Sequence[Any], dim: int = 0) -> TracedTensor:
    rec = _rec_of(*tensors)
    ts = [lift(rec, t) for t in tensors]
    if not ts:
        raise TraceError("stack expects a non-empty list of tensors")
    for t in ts[1:]:
        same_sizes(list(t.shape), list(ts[0].shape), "stack expects each tensor to be equal size")
    d = wrap_dim(dim, ts[0].ndim + 1)
    parts = [unsqueeze(t, d) for t in ts]
    if len(parts) == 1:
        return parts[0]
    return _cat_prim(rec, parts, d)


def narrow(t: TracedTensor, dim: int, start: Any, length: Any) -> TracedTensor:
    d = wrap_dim(dim, t.ndim)
    n = t.shape[d]
    if start < 0:
        start = start + n
    if start < 0 or start > n or length < 0 or start > n - length:
        raise TraceError("narrow: start and length out of range")
    lo, hi = as_int(t.rec, start), as_int(t.rec, start + length)
    return _slice(t, d, lo, hi, 1)


def _slice(t: TracedTensor, d: int, lo: GuardedInt, hi: GuardedInt, step: int) -> TracedTensor:
    index = (slice(None),) * d + (slice(lo.value, hi.value, step),)

    def size() -> list[Any]:
        n = hi - lo if step == 1 else (hi - lo + (step - 1)) // step
        return list(t.shape)[:d] + [n] + list(t.shape)[d + 1:]
    return _new(t.rec, t.value[index], Op.VAR_SLICE, (t, lo, hi), shape=_size_of(t.rec, size), dim=d, step=step)


def getitem(t: TracedTensor, idx: Any) -> TracedTensor:
    """Basic indexing: ints, slices (positive step), None and Ellipsis."""
    items = list(idx) if isinstance(idx, tuple) else [idx]
    for it in items:
        if isinstance(it, (TracedTensor, torch.Tensor, list)):
            raise UnsupportedOpError("advanced (tensor or list) indexing", supported_names())
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if used > t.ndim:
        raise TraceError(f"too many indices for a rank-{t.ndim} tensor")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + [slice(None)] * (t.ndim - used) + items[k + 1:]
    else:
        items = items + [slice(None)] * (t.ndim - used)
    out, d = t, 0  # d: the dim of `out` the next item applies to
    for it in items:
        if it is None:
            out = unsqueeze(out, d)
            d += 1
        elif isinstance(it, slice):
            step = 1 if it.step is None else _scalar_value(it.step)
            if step <= 0:
                raise TraceError("slice step must be positive")
            if it.start is None and it.stop is None and step == 1:
                d += 1
                continue
            n = out.shape[d]
            lo, hi = slice_bounds(out.rec, it.start, it.stop, n)
            out = _slice(out, d, lo, hi, step)
            d += 1
        elif isinstance(it, (int, GuardedInt)) and not isinstance(it, bool):
            i = wrap_index(out.rec, it, out.shape[d])
            out = _select(out, d, i)
        else:
            raise UnsupportedOpError(f"indexing with {type(it).__name__}", supported_names())
    return out


def _select(t: TracedTensor, d: int, i: GuardedInt) -> TracedTensor:
    shape = _size_of(t.rec, lambda: list(t.shape)[:d] + list(t.shape)[d + 1:])
    return _new(t.rec, t.value.select(d, i.value), Op.VAR_SELECT, (t, i), shape=shape, dim=d)


# -- layers ---------------------------------------------------------------------------------


def _pair(v: Any, what: str) -> tuple[int, int]:
    if isinstance(v, str):
        raise UnsupportedOpError(f"conv2d({what}={v!r})", supported_names())
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise TraceError(f"conv2d {what} must have 2 values")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> TracedTensor:
    rec = _rec_of(x, weight, bias)
    x, w = lift(rec, x), lift(rec, weight)
    if x.ndim != 4 or w.ndim != 4:
        raise UnsupportedOpError("conv2d on a non-4-D input (batched NCHW only)", supported_names())
    s, p, dl = _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation")
    n, c, h, wd = list(x.shape)
    oc, icg, kh, kw = list(w.shape)
    if not (c == icg * groups):
        raise TraceError(f"conv2d: expected input with {icg * groups} channels, got {c.value}")
    out = [n, oc]
    for size, k, i in ((h, kh, 0), (wd, kw, 1)):
        span = dl[i] * (k - 1) + 1
        if size + 2 * p[i] < span:
            raise TraceError("conv2d: kernel size can't be greater than the padded input size")
        out.append((size + 2 * p[i] - span) // s[i] + 1)
    osize = GuardedSize.make(rec, out)
    value = F.conv2d(x.value, w.value, None, s, p, dl, groups)
    r = _new(rec, value, Op.VAR_CONV2D, (x, w, osize), shape=osize, stride=s, padding=p, dilation=dl,
             groups=int(groups))
    if bias is None:
        return r
    b = lift(rec, bias)
    b4 = force_expand(reshape_to(b, [1, b.shape[0], 1, 1]), osize)
    return _new(rec, r.value + b4.value, Op.VAR_ADD, (r, b4), shape=osize)


def layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> TracedTensor:
    rec = _rec_of(x, weight, bias)
    x = lift(rec, x)
    ns = list(normalized_shape) if isinstance(normalized_shape, (list, tuple, torch.Size)) else [normalized_shape]
    k = len(ns)
    if k == 0 or k > x.ndim:
        raise TraceError("layer_norm: bad normalized_shape")
    same_sizes(list(x.shape)[x.ndim - k:], ns, "layer_norm: input shape and normalized_shape")
    value = F.layer_norm(x.value, x.value.shape[x.ndim - k:], eps=eps)
    r = _new(rec, value, Op.VAR_LAYER_NORM, (x,), shape=x, ndim=k, eps=float(eps))
    if weight is not None:
        wt = force_expand(lift(rec, weight), r.shape)
        r = _new(rec, r.value * wt.value, Op.VAR_MUL, (r, wt), shape=r)
    if bias is not None:
        bt = force_expand(lift(rec, bias), r.shape)
        r = _new(rec, r.value + bt.value, Op.VAR_ADD, (r, bt), shape=r)
    return r


def embedding(idx: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> TracedTensor:
    if max_norm is not None:
        raise UnsupportedOpError("embedding(max_norm=...) (it rewrites the weight)", supported_names())
    rec = _rec_of(idx, weight)
    i, w = lift(rec, idx), lift(rec, weight)
    if w.ndim != 2:
        raise TraceError("embedding weight must be 2-D")
    shape = _size_of(rec, lambda: list(i.shape) + [w.shape[1]])
    return _new(rec, F.embedding(i.value, w.value), Op.VAR_EMBEDDING, (i, w), shape=shape)


def dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    if training and p > 0:
        raise UnsupportedOpError("dropout in training mode (random)", supported_names())
    return x


# -- the table ------------------------------------------------------------------------------

T = torch.Tensor

TORCH_RULES: Mapping[Any, Callable[..., Any]] = {
    **{f: _binary_rule(fn) for fn, fs in {
        "add": (torch.add, T.add, T.__add__, T.__radd__),
        "sub": (torch.sub, torch.subtract, T.sub, T.__sub__, T.__rsub__),
        "mul": (torch.mul, torch.multiply, T.mul, T.__mul__, T.__rmul__),
        "div": (torch.div, torch.true_divide, torch.divide, T.div, T.__truediv__),
        "pow": (torch.pow, T.pow, T.__pow__),
        "maximum": (torch.maximum, T.maximum), "minimum": (torch.minimum, T.minimum),
        "eq": (torch.eq, T.eq, T.__eq__), "ne": (torch.ne, T.ne, T.__ne__),
        "lt": (torch.lt, T.lt, T.__lt__), "le": (torch.le, T.le, T.__le__),
        "gt": (torch.gt, T.gt, T.__gt__), "ge": (torch.ge, T.ge, T.__ge__),
    }.items() for f in fs},
    T.__rtruediv__: lambda a, b: arith("div", b, a),
    T.__rpow__: lambda a, b: arith("pow", b, a),
    **{f: _unary_rule(fn) for fn, fs in {
        "neg": (torch.neg, T.neg, T.__neg__), "abs": (torch.abs, T.abs, T.__abs__),
        "exp": (torch.exp, T.exp), "log": (torch.log, T.log), "sqrt": (torch.sqrt, T.sqrt),
        "relu": (torch.relu, T.relu, F.relu), "sigmoid": (torch.sigmoid, T.sigmoid, F.sigmoid),
        "tanh": (torch.tanh, T.tanh, F.tanh),
    }.items() for f in fs},
    F.gelu: gelu,
    torch.where: where, T.where: lambda self, cond, other: where(cond, self, other),
    **{f: _reduce_rule(fn) for fn, fs in {
        "sum": (torch.sum, T.sum), "mean": (torch.mean, T.mean),
        "amax": (torch.amax, T.amax), "amin": (torch.amin, T.amin),
    }.items() for f in fs},
    **{f: _softmax_rule(False) for f in (torch.softmax, T.softmax, F.softmax)},
    **{f: _softmax_rule(True) for f in (torch.log_softmax, T.log_softmax, F.log_softmax)},
    torch.matmul: matmul, T.matmul: matmul, T.__matmul__: matmul, T.__rmatmul__: lambda a, b: matmul(b, a),
    torch.mm: mm, T.mm: mm, torch.bmm: bmm, T.bmm: bmm, F.linear: linear,
    torch.reshape: lambda t, shape: view(t, shape), T.reshape: view, T.view: view,
    torch.flatten: flatten, T.flatten: flatten,
    torch.permute: permute, T.permute: permute, torch.transpose: transpose, T.transpose: transpose,
    torch.t: t_, T.t: t_, torch.unsqueeze: unsqueeze, T.unsqueeze: unsqueeze,
    torch.squeeze: squeeze, T.squeeze: squeeze, T.expand: expand, T.contiguous: contiguous,
    torch.cat: cat, torch.concat: cat, torch.stack: stack, torch.narrow: narrow, T.narrow: narrow,
    T.__getitem__: getitem,
    F.conv2d: conv2d, F.layer_norm: layer_norm, F.embedding: embedding, F.dropout: dropout,
    T.size: size, T.dim: lambda t: t.dim(), T.numel: numel, torch.numel: numel,
    T.item: lambda t: t.item(),
}


def func_name(func: Any) -> str:
    """`torch.add`, `Tensor.add`, `torch.nn.functional.relu`: how a user would spell it."""
    name = getattr(func, "__name__", None) or repr(func)
    for prefix, namespace in (("torch.", torch), ("Tensor.", torch.Tensor), ("torch.nn.functional.", F)):
        if getattr(namespace, name, None) is func:
            return prefix + name
    mod = getattr(func, "__module__", None)
    return f"{mod}.{name}" if mod else name


def supported_names() -> list[str]:
    """The torch functions and tensor methods the tracer understands."""
    return sorted({func_name(f) for f in TORCH_RULES} | {"Tensor.shape", "Tensor.ndim", "Tensor.T", "len(Tensor)"})


# -- dispatch: TracedTensor looks every torch function, tensor method and operator up here -----
# NOTE: installed from this module, not defined in tensor.py, because the rules above need the
# TracedTensor class to build their results: tensor.py stays below this module (no import cycle).


def _torch_function(cls: type, func: Any, types: Any, args: tuple[Any, ...] = (),
                    kwargs: Mapping[str, Any] | None = None) -> Any:
    rule = TORCH_RULES.get(func)
    if rule is None:
        raise UnsupportedOpError(func_name(func), supported_names())
    rec = next((a.rec for a in args if isinstance(a, TracedTensor)), None)
    if rec is None:
        return rule(*args, **(kwargs or {}))
    return rec.call(rule, *args, **(kwargs or {}))


def _getattr(self: TracedTensor, name: str) -> Any:
    method = getattr(torch.Tensor, name, None)
    if method is not None:
        rule = TORCH_RULES.get(method)
        if rule is None:
            raise UnsupportedOpError(f"Tensor.{name}", supported_names())
        return lambda *args, **kwargs: self.rec.call(rule, self, *args, **kwargs)
    raise AttributeError(f"'TracedTensor' object has no attribute {name!r}")


def _transpose_all(self: TracedTensor) -> TracedTensor:
    return permute(self, list(range(self.ndim))[::-1])


def _item(self: TracedTensor) -> Any:
    v = self.value.item()
    if not self.rec.value_guards:
        self._observe(".item()")
    scalar_op("eq", self, v)._observe(".item()")
    return v


def _install() -> None:
    """`__torch_function__`, tensor methods (`__getattr__`), `.T`, `.item()` and the Python
    operators of TracedTensor, all delegating to the rules above."""
    TracedTensor.__torch_function__ = classmethod(_torch_function)  # type: ignore[assignment]
    TracedTensor.__getattr__ = _getattr  # type: ignore[method-assign]
    TracedTensor.T = property(_transpose_all)  # type: ignore[assignment]
    TracedTensor.item = _item  # type: ignore[method-assign]
    # NOTE: Python operators delegate to the same rules as the torch functions they mirror.
    ops = {
        "__add__": lambda a, b: arith("add", a, b), "__radd__": lambda a, b: arith("add", b, a),
        "__sub__": lambda a, b: arith("sub", a, b), "__rsub__": lambda a, b: arith("sub", b, a),
        "__mul__": lambda a, b: arith("mul", a, b), "__rmul__": lambda a, b: arith("mul", b, a),
        "__truediv__": lambda a, b: arith("div", a, b), "__rtruediv__": lambda a, b: arith("div", b, a),
        "__pow__": lambda a, b: arith("pow", a, b), "__rpow__": lambda a, b: arith("pow", b, a),
        "__matmul__": lambda a, b: matmul(a, b), "__rmatmul__": lambda a, b: matmul(b, a),
        "__eq__": lambda a, b: arith("eq", a, b), "__ne__": lambda a, b: arith("ne", a, b),
        "__lt__": lambda a, b: arith("lt", a, b), "__le__": lambda a, b: arith("le", a, b),
        "__gt__": lambda a, b: arith("gt", a, b), "__ge__": lambda a, b: arith("ge", a, b),
        "__neg__": lambda a: unary("neg", a), "__abs__": lambda a: unary("abs", a),
        "__getitem__": lambda a, idx: getitem(a, idx),
    }

    def at_user(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda a, *rest: a.rec.call(fn, a, *rest)

    for name, fn in ops.items():
        setattr(TracedTensor, name, at_user(fn))


_install()
