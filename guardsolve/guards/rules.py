"""PyTorch's shape rules: run an aten op on meta tensors whose sizes are our SymInts.

The order is FakeTensorMode's (`torch/_subclasses/fake_tensor.py`): metadata queries answer
from the tensor; an op with a Python meta registration (`torch._meta_registrations`) runs it;
an op without a SymInt-aware C++ meta kernel runs its Python decomposition (`torch._decomp`,
`torch._refs`), else its CompositeImplicit decomposition; last, the C++ meta kernel itself. Nested calls dispatch back here (`with self:`), so every op a decomposition
calls follows the same order, and every decision any of them makes is a recorded guard.

>>> import torch
>>> shape_rule(torch.ops.aten.mm.default, (torch.empty(2, 3, device="meta"), torch.empty(3, 4, device="meta")), {}).shape
torch.Size([2, 4])
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
from torch._decomp import decomposition_table, meta_table
from torch._dispatch.python import enable_python_dispatcher
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_map

from guardsolve.errors import UnsupportedOpError
from guardsolve.guards.symbolic import ITEM_DATA, Recorder, SymGuard
from guardsolve.ir.aten import qualified_name
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.ir.ops import Op

# NOTE: FakeTensor's list: view_copy ops and these have C++ meta kernels that accept SymInts.
_CPP_SYMINT = frozenset({
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
    torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_.default,
    torch.ops.aten.zeros.default, torch.ops.aten.detach.default,
    torch.ops.aten.view_as_real.default, torch.ops.aten.view_as_complex.default,
})


@functools.lru_cache(maxsize=None)
def takes_device(func: Any) -> bool:
    """Does the op take a `device` argument (a factory)? Its shape rule then runs on meta."""
    return any(a.name == "device" and a.kwarg_only for a in func._schema.arguments)


def _prefers_kernel(func: Any) -> bool:
    return func in meta_table or func in _CPP_SYMINT or torch.Tag.view_copy in func.tags


class ShapeRules(TorchDispatchMode):
    """A dispatch mode over meta tensors that picks each op's shape rule in FakeTensor's order.

    `rec` supplies the fresh sizes of ops whose output shape depends on tensor data."""

    def __init__(self, rec: Recorder | None = None, tried: Any = None) -> None:
        super().__init__()
        self.rec = rec
        self.tried = tried  # NOTE: the op whose fast path `shape_rule` already tried (once)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        handler = _METADATA.get(func)
        if handler is not None:
            return handler(*args)
        if func is _aten._local_scalar_dense.default and self.rec is not None:
            return _item(self.rec, *args)
        if func in _UNBACKED_ARGS and self.rec is not None and _reads_data(args, kwargs):
            with self:
                return _UNBACKED_ARGS[func](_DataMode(self.rec, func), func, *args, **kwargs)
        data_shaped = DATA_SHAPED.get(func)
        if data_shaped is not None and self.rec is not None:
            rec = self.rec
            with self:
                return data_shaped(lambda numel, pick: _unbacked(rec, func, numel, pick), *args, **kwargs)
        if func is self.tried:
            self.tried = None
        else:
            out = _fast(func, args, kwargs)
            if out is not None:
                return out
        if takes_device(func) and kwargs.get("device") != _META:
            # NOTE: a factory inside a decomposition (`nll_loss`'s `arange`) makes a stand-in too
            kwargs = {**kwargs, "device": _META}
        check = _EAGER_CHECKS.get(func)
        if check is not None:
            check(*args, **kwargs)
        own = OWN_META.get(func)
        meta = own(self.rec) if own is not None else meta_table.get(func)
        if meta is not None:
            with self:
                return meta(*args, **kwargs)
        if not _prefers_kernel(func):
            decomp = decomposition_table.get(func)
            if decomp is not None:
                with self:
                    return decomp(*args, **kwargs)
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


_aten = torch.ops.aten
_META = torch.device("meta")
_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND
# FakeTensor's fast path for binary pointwise ops (`fake_impls.get_fast_op_impls`): broadcast the
# shapes; when an operand has the result's shape and all are contiguous, the result is a
# contiguous tensor of the promoted dtype. Otherwise the op takes its ordinary rule.
_FAST_BINARY: dict[Any, Any] = {
    _aten.add.Tensor: _KIND.DEFAULT, _aten.sub.Tensor: _KIND.DEFAULT, _aten.mul.Tensor: _KIND.DEFAULT,
    _aten.div.Tensor: _KIND.INT_TO_FLOAT,
}


def _fast(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """FakeTensor's fast path for a pointwise op, or None where it does not apply."""
    promotion = _FAST_BINARY.get(func)
    if promotion is not None:
        return _fast_binary(args, promotion)
    if func in _FAST_UNARY:
        return _fast_unary(args, kwargs)
    if func is _aten.linear.default:
        return _fast_linear(*args, **kwargs)
    return None


def _fast_binary(operands: tuple[Any, ...], promotion: Any) -> torch.Tensor | None:
    from torch.fx.experimental.symbolic_shapes import guard_or_false, sym_eq

    shape: Any = None
    for op in operands:
        here = op.shape if isinstance(op, torch.Tensor) else ()
        shape = here if shape is None else _broadcast(shape, here)
    if not any(isinstance(op, torch.Tensor) and len(op.shape) == len(shape)
               and (_same_sizes(op.shape, shape) or guard_or_false(sym_eq(op.shape, shape))) for op in operands):
        return None
    tensors = [op for op in operands if isinstance(op, torch.Tensor)]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) == 1 and len(tensors) == len(operands) and promotion is _KIND.DEFAULT:
        dtype = tensors[0].dtype
    else:
        dtype = elementwise_dtypes(*operands, type_promotion_kind=promotion)[1]
    if not all(_known_contiguous(t) for t in tensors):
        return None
    return torch.empty(shape, dtype=dtype, device="meta")


def _same_sizes(a: Any, b: Any) -> bool:
    """Are `a` and `b` the same sizes as values (guard-graph names or constants)? `sym_eq`
    answers True for them without a decision; this asks nothing of PyTorch."""
    return all(x is not None and x == y for x, y in zip(map(sym_of, a), map(sym_of, b)))


def _broadcast(a: Any, b: Any) -> tuple[Any, ...]:
    """FakeTensor's `infer_size`: its decisions in its order, from the last dim to the first.

    Two sizes that are one value (one guard-graph name) broadcast to it and decide nothing:
    PyTorch's rule would still ask whether it is 1, and `x + x.exp()` would keep `x0 != 1`,
    which eager never needs. Sizes over guardsolve's own nodes are compared on the nodes,
    without PyTorch's SymInt wrappers around each comparison (the hot path of every chain
    of pointwise ops); anything else (an unbacked size) takes PyTorch's own helpers.
    """
    from torch.fx.experimental.symbolic_shapes import expect_true, guard_or_false

    ndim = max(len(a), len(b))
    out: list[Any] = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        ia, ib = i - ndim + len(a), i - ndim + len(b)
        sa = a[ia] if ia >= 0 else 1
        sb = b[ib] if ib >= 0 else 1
        ka = sym_of(sa)
        if ka is not None and ka == sym_of(sb):
            out[i] = sa
            continue
        na, nb = _plain(sa), _plain(sb)
        if na is None and nb is not None and isinstance(sa, int):
            na = nb.wrap_int(sa)
        elif nb is None and na is not None and isinstance(sb, int):
            nb = na.wrap_int(sb)
        if na is not None and nb is not None:
            a_one = na.eq(na.wrap_int(1)).guard_bool("", 0)
            ok = a_one or nb.eq(nb.wrap_int(1)).guard_bool("", 0) or na.eq(nb).expect_true("", 0)
        else:
            a_one = guard_or_false(sa == 1)
            ok = a_one or guard_or_false(sb == 1) or expect_true(sa == sb)
        if not ok:
            raise RuntimeError(f"The size of tensor a ({sa}) must match the size of tensor b ({sb}) "
                               f"at non-singleton dimension {i}")
        out[i] = sb if a_one else sa
    return tuple(out)


def _plain(v: Any) -> SymGuard | None:
    """The node of a size guardsolve decides on directly, or None (an int, or an unbacked or
    lazily decided size, which take PyTorch's helpers)."""
    if isinstance(v, torch.SymInt):
        node = v.node
        return node if isinstance(node, SymGuard) and node.data is None and node.lazy is None else None
    return None


# Unary pointwise ops that keep a float input's dtype: on a contiguous input the result is a
# contiguous tensor like it. Their decompositions (`torch._refs`) run a `where` or a type
# promotion through the elementwise machinery, ~10 ms each over SymInts: a hot path in models.
_FAST_UNARY = frozenset({
    _aten.relu.default, _aten.gelu.default, _aten.silu.default, _aten.sigmoid.default, _aten.tanh.default,
    _aten.neg.default, _aten.exp.default, _aten.log.default, _aten.sqrt.default, _aten.rsqrt.default,
    _aten.hardtanh.default, _aten.leaky_relu.default, _aten.elu.default,
})


def _fast_unary(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    x = args[0] if args else None
    if (not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or not _known_contiguous(x)
            or any(isinstance(a, torch.Tensor) for a in (*args[1:], *kwargs.values()))):
        return None
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _fast_linear(input: Any, weight: Any, bias: Any = None) -> torch.Tensor | None:
    """`linear` of a contiguous float input (two dims or more) and a matrix, with a bias of the
    weight's rows or none: eager's one check (the inner sizes agree: `addmm`'s or `mm`'s, with
    its words and numbers), and a contiguous result of the input's leading sizes and the
    weight's rows, as eager's kernel makes it on every route.

    Its composite runs `matmul`, which folds the leading dims with a `reshape` whose view and
    contiguity questions ask whether each of them is 1 (~1 ms over SymInts, and `x0 >= 2` on
    every leading dim of a 3-D input where eager's result is the same at 1). Anything else (other
    dtypes, a 1-D operand, a bias to broadcast, a strided input) takes the composite.

    >>> x = torch.empty(2, 5, 8, device="meta")
    >>> _fast_linear(x, torch.empty(4, 8, device="meta"), torch.empty(4, device="meta")).shape
    torch.Size([2, 5, 4])
    """
    tensors = (input, weight) if bias is None else (input, weight, bias)
    if not all(isinstance(t, torch.Tensor) and t.device.type == "meta" and t.layout is torch.strided
               and not t.is_conj() and not t.is_neg() for t in tensors):
        return None
    if (input.dim() < 2 or weight.dim() != 2 or len({t.dtype for t in tensors}) != 1
            or not input.dtype.is_floating_point or not _known_contiguous(input)):
        return None
    rows, inner = weight.shape
    if bias is not None and (bias.dim() != 1 or not _same_sizes(bias.shape, (rows,))):
        return None
    k = input.shape[-1]

    def message() -> str:
        flat = functools.reduce(lambda a, b: a * b, input.shape[:-1], 1)
        return f"mat1 and mat2 shapes cannot be multiplied ({flat}x{k} and {inner}x{rows})"

    torch._check(k == inner, message)
    return torch.empty((*input.shape[:-1], rows), dtype=input.dtype, device="meta")


def _known_contiguous(t: torch.Tensor) -> bool:
    """Are `t`'s strides the contiguous strides of its sizes, as expressions? Then it is
    contiguous for every value of its sizes, and deciding so asks nothing (FakeTensor asks
    `is_contiguous_or_false`, which observes whether a size is 0 or 1)."""
    expected: Any = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if sym_of(stride) != sym_of(expected):
            return False
        expected = expected * size  # NOTE: hash-consed product; no decision
    return True


# Metadata queries answer from the tensor itself (FakeTensor's `_DISPATCH_META_HANDLERS`).
_METADATA: dict[Any, Callable[..., Any]] = {
    _aten.size.default: lambda t: tuple(t.size()),
    _aten.stride.default: lambda t: tuple(t.stride()),
    _aten.storage_offset.default: lambda t: t.storage_offset(),
    _aten.sym_size.default: lambda t: tuple(t.size()),
    _aten.sym_stride.default: lambda t: tuple(t.stride()),
    _aten.sym_storage_offset.default: lambda t: t.storage_offset(),
    _aten.sym_numel.default: lambda t: t.numel(),
    _aten.is_contiguous.default: lambda t: t.is_contiguous(),
}


def _fused_attention_checks(query: torch.Tensor, embed_dim: Any) -> None:
    torch._check(query.dim() == 3, lambda: f"expected 3-D `query`, got {query.dim()}-D tensor")
    torch._check(query.size(2) == embed_dim,
                 lambda: f"passed-in embed_dim {embed_dim} didn't match last dim of query {query.size(2)}")


def _batch_norm_stats(input: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                      *_: Any, **__: Any) -> None:
    """`batch_norm`'s own check (`_batch_norm_impl_index`), which `native_batch_norm` skips: its
    CPU kernel indexes the per-channel tensors by channel (out of bounds when they are shorter),
    and its decomposition broadcasts a one-element statistic."""
    channels = input.size(1) if input.dim() > 1 else 1
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if isinstance(t, torch.Tensor):
            torch._check(t.numel() == channels,
                         lambda what=what, t=t: f"{what} should contain {channels} elements not {t.numel()}")


def _reduced_dim_nonempty(name: str) -> Callable[..., None]:
    """Eager's check of a reduction to values and indices along `dim` (`zero_numel_check_dims`):
    an empty input's reduced dim must not be empty, for there is no value to pick. Their meta
    kernels skip it."""

    def check(x: torch.Tensor, dim: int = 0, *_: Any, **__: Any) -> None:
        if x.dim() > 0:
            torch._check(x.size(dim) != 0,
                         lambda: f"{name}(): Expected reduction dim {dim % x.dim()} to have non-zero size.")

    return check


def _numel_nonzero(name: str) -> Callable[..., None]:
    """Eager's check of a reduction over all elements that picks one (`max()`, `argmin()`)."""

    def check(x: torch.Tensor, *_: Any, **__: Any) -> None:
        for size in x.shape:  # NOTE: numel != 0, one size at a time (`x0 >= 1`, not `x0*x1 != 0`)
            torch._check(size != 0, lambda: f"{name}(): Expected reduction dim to be specified for input.numel() "
                         "== 0. Specify the reduction dim with the 'dim' argument.")

    return check


# NOTE: fused ops whose meta kernel checks less than their eager kernel does (PyTorch's meta for
# `_transformer_encoder_layer_fwd` is `empty_like(src)`): the eager kernel's checks on the input,
# so the guards reject what eager rejects (nn.TransformerEncoderLayer's and nn.MultiheadAttention's
# inference fast paths).
_EAGER_CHECKS: dict[Any, Callable[..., None]] = {
    _aten._transformer_encoder_layer_fwd.default: lambda src, embed_dim, *_, **__: _fused_attention_checks(src, embed_dim),
    _aten._native_multi_head_attention.default:
        lambda query, key, value, embed_dim, *_, **__: _fused_attention_checks(query, embed_dim),
    _aten.native_batch_norm.default: _batch_norm_stats,
    _aten._native_batch_norm_legit.default: _batch_norm_stats,
    _aten._native_batch_norm_legit_no_training.default: _batch_norm_stats,
    # NOTE: their CPU kernels index the per-channel tensors as `native_batch_norm`'s do: a probe
    # at a running mean of size 0 crashed the process (SIGSEGV) where the meta kernel passed
    _aten._batch_norm_with_update.default: _batch_norm_stats,
    _aten._batch_norm_with_update_functional.default: _batch_norm_stats,
    _aten._batch_norm_no_update.default: _batch_norm_stats,
    # NOTE: reductions that pick an element: eager raises on an empty input's empty reduced dim
    **{op: _reduced_dim_nonempty(name) for name, op in (
        ("max", _aten.max.dim), ("min", _aten.min.dim), ("median", _aten.median.dim),
        ("nanmedian", _aten.nanmedian.dim), ("mode", _aten.mode.default))},
    **{op: _numel_nonzero(name) for name, op in (
        ("max", _aten.max.default), ("min", _aten.min.default))},
}


def _fractional_max_pool3d(x: torch.Tensor, kernel_size: list[int], output_size: list[int],
                           samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The C++ structured meta of `fractional_max_pool3d` (`FractionalMaxPool3d.cpp`) and the
    eager kernel's checks on `_random_samples` (as PyTorch's Python meta for the 2-D op)."""
    torch._check(len(kernel_size) == 3, lambda: "fractional_max_pool3d: kernel_size must either be a "
                 "single Int or tuple of three Ints")
    torch._check(len(output_size) == 3, lambda: "fractional_max_pool3d: output_size must either be a "
                 "single Int or tuple of three Ints")
    ndim = x.dim()
    torch._check(ndim in (4, 5), lambda: f"fractional_max_pool3d_out(): Expected 4D or 5D tensor, but got: {ndim}")
    for d in range(1, ndim):
        torch._check(x.size(d) > 0, lambda: "fractional_max_pool3d_out(): Expected input to have non-zero "
                     f"size for non-batch dimensions, but dimension {d} is empty")
    batch = x.size(0) if ndim == 5 else 1
    planes, *spatial = x.shape[-4:]
    for out, pool, size, what in zip(output_size, kernel_size, spatial, ("time", "height", "width")):
        torch._check(out + pool - 1 < size, lambda: f"fractional_max_pool3d_out(): pool {what} {pool} too large "
                     f"relative to input {what} {size}")
    torch._check(samples.dtype == x.dtype, lambda: "Expect _random_samples to have the same dtype as input")
    torch._check(samples.dim() == 3, lambda: f"Expect _random_samples to have 3 dimensions, got {samples.dim()}")
    torch._check(samples.size(0) >= batch, lambda: "Expect _random_samples.size(0) no less then input batch size.")
    torch._check(samples.size(1) == planes, lambda: "Expect _random_samples.size(1) equals to input channel size.")
    torch._check(samples.size(2) == 3, lambda: "Expect _random_samples.size(2) equals to 3.")
    shape = (*x.shape[:-3], *output_size)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def _kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`kron`'s C++ kernel (`KronImpl`, `LinearAlgebra.cpp`) with symbolic sizes: it reads the
    sizes as ints, which pins every dim. Each operand padded to the larger rank, interleaved
    with 1s, multiplied (a broadcast against 1s: no decision) and merged pairwise."""
    rank = max(a.dim(), b.dim())
    sa = [1] * (rank - a.dim()) + list(a.shape)
    sb = [1] * (rank - b.dim()) + list(b.shape)
    left = _aten.reshape.default(a, [s for d in sa for s in (d, 1)])
    right = _aten.reshape.default(b, [s for d in sb for s in (1, d)])
    return _aten._unsafe_view.default(_aten.mul.Tensor(left, right), [x * y for x, y in zip(sa, sb)])


def _max_pool1d(x: torch.Tensor, kernel_size: list[int], stride: list[int] = (), padding: list[int] = (0,),  # type: ignore[assignment]
                dilation: list[int] = (1,), ceil_mode: bool = False) -> torch.Tensor:  # type: ignore[assignment]
    """`max_pool1d`'s CPU kernel (`MaxPooling.cpp`: `check_max_pool1d`, then a contiguous output)
    with a symbolic length: the kernel reads it as an int (`guard_int`), which pins it."""
    from torch._meta_registrations import pooling_output_shape

    torch._check(x.dim() in (2, 3), lambda: f"max_pool1d() Expected 2D or 3D input tensor, but got {list(x.shape)}")
    torch._check(len(kernel_size) == 1, lambda: "max_pool1d() kernel_size must be an int, list of ints or tuple "
                 f"of ints of size 1 but got size {len(kernel_size)}")
    torch._check(len(stride) in (0, 1), lambda: "max_pool1d() stride must be None, an int, list of ints, or tuple "
                 f"of ints of size 1 but got size {len(stride)}")
    torch._check(len(padding) == 1, lambda: "max_pool1d() padding must be an int, list of ints, or tuple of ints "
                 f"of size 1 but got size {len(padding)}")
    torch._check(len(dilation) == 1, lambda: "max_pool1d() dilation must be an int, list of ints or tuple of "
                 f"ints of size 1 but got size {len(dilation)}")
    (k,), (p,), (d,) = kernel_size, padding, dilation
    (s,) = stride or kernel_size
    torch._check(k > 0, lambda: f"max_pool1d() kernel_size must be greater than zero, but got {k}")
    torch._check(s > 0, lambda: f"max_pool1d() stride must be greater than zero, but got {s}")
    torch._check(p >= 0, lambda: f"max_pool1d() padding must be non-negative, but got {p}")
    torch._check(p <= k // 2, lambda: f"max_pool1d() padding should be at most half of kernel size, but got "
                 f"padding={p} and kernel_size={k}")
    torch._check(d > 0, lambda: f"max_pool1d() dilation must be greater than zero, but got {d}")
    width = pooling_output_shape(x.size(-1), k, p, s, d, ceil_mode)
    torch._check(width > 0, lambda: f"max_pool1d() Invalid computed output size: {width}")
    return x.new_empty((*x.shape[:-1], width))


def _rnn_one_step(name: str) -> Callable[[Recorder | None], Callable[..., Any]]:
    """`rnn_tanh.input`, `rnn_relu.input`, `gru.input`: PyTorch's decomposition unbinds the
    sequence (pinning its length); run on the first step alone, it makes every check of the
    weights and hidden state, and the output takes the sequence's length, laid out as eager's
    CPU kernel lays it (steps concatenated, then transposed for `batch_first`)."""

    def make(rec: Recorder | None) -> Callable[..., Any]:
        def rule(input: torch.Tensor, hx: torch.Tensor, params: Any, has_biases: bool, num_layers: int,
                 dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Any:
            try:
                from torch._decomp import decompositions

                decomp = getattr(decompositions, name)
            except AttributeError as e:  # pragma: no cover - a torch outside the pinned range
                raise UnsupportedOpError(f"aten.{name}", f"torch {torch.__version__} moved this RNN's "
                                         f"decomposition ({e}); guardsolve is tested on 2.13") from e
            time = 1 if batch_first else 0
            torch._check(input.dim() == 3, lambda: f"input must have 3 dimensions, got {input.dim()}")
            torch._check(input.size(time) > 0, lambda: "Expected sequence length to be larger than 0 in RNN")
            step, hy = decomp(input.narrow(time, 0, 1), hx, params, has_biases, num_layers, dropout, train,
                              bidirectional, batch_first)
            batch, width = step.size(1 - time), step.size(2)
            out = step.new_empty((input.size(time), batch, width))
            return (out.transpose(0, 1) if batch_first else out), hy

        return rule

    return make


def _resize_in_place(x: torch.Tensor, sizes: Any, memory_format: Any = None) -> torch.Tensor:
    """`resize_` / `resize_as_` to the tensor's own sizes, a no-op: a guard that the sizes are
    equal. A traced tensor's sizes are fixed when it is made (a wrapper's cannot be changed in
    place), so a resize to other sizes does not trace."""
    sizes = tuple(sizes)
    if len(sizes) != x.dim() or any(a != b for a, b in zip(sizes, x.shape)) or memory_format not in (
            None, torch.preserve_format):
        raise UnsupportedOpError("aten.resize_", "guardsolve traces an in-place resize only to the tensor's "
                                 "own sizes (a traced tensor's sizes cannot change in place)")
    return x


def _lstm(rec: Recorder | None) -> Callable[..., Any]:
    """`lstm.input`'s decomposition, taking eager's route on the CPU.

    PyTorch's `lstm_impl` picks `mkldnn_rnn_layer` (one op for the whole sequence) only for
    tensors on the CPU, so on meta tensors it unrolls the time steps and pins the sequence
    length. Eager's CPU kernel runs mkldnn for float and bfloat16 inputs without projections or
    grad, the decomposition's own conditions; the device is the eager output's (CPU when a
    saved trace is replayed).
    """

    def rule(input: torch.Tensor, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
             train: bool, bidirectional: bool, batch_first: bool) -> Any:
        try:
            from torch._decomp import decompositions as d

            gather, helper, mkldnn, plain = (d.gather_params, d._rnn_helper, d.mkldnn_one_layer_lstm,
                                             d.one_layer_lstm)
        except AttributeError as e:  # pragma: no cover - a torch outside the pinned range
            raise UnsupportedOpError("aten.lstm.input", f"torch {torch.__version__} moved its lstm "
                                     f"decomposition ({e}); guardsolve is tested on 2.13") from e
        # NOTE: eager's CPU kernel checks this before any route (`_rnn_impl`'s input check); the
        # decomposition does not, so without it a batch-0 trace accepted an empty sequence
        torch._check(input.size(1 if batch_first else 0) > 0,
                     lambda: "Expected sequence length to be larger than 0 in RNN")
        real = rec.real if rec is not None else None
        device = real[0].device if isinstance(real, tuple) and isinstance(real[0], torch.Tensor) else torch.device("cpu")
        projections = hx[0].size(2) != hx[1].size(2)
        tensors = [input, *hx, *params]
        eager_mkldnn = (torch._C._get_mkldnn_enabled() and device.type == "cpu" and not projections
                        and all(t.dtype in (torch.float, torch.bfloat16) for t in tensors)
                        and not input.requires_grad)
        gathered = gather(params, has_biases, projections)
        hidden = list(zip(hx[0], hx[1]))
        out, final = helper(input, hidden, gathered, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first, mkldnn if eager_mkldnn else plain)
        final = list(zip(*final))
        return out, torch.stack(final[0], 0), torch.stack(final[1], 0)

    return rule


def _stand_in(t: Any) -> Any:
    """A CPU tensor of `t`'s example sizes and dtype (for asking eager's kernel choice)."""
    if not isinstance(t, torch.Tensor):
        return t
    hint = [s.node.hint if isinstance(s, torch.SymInt) else s for s in t.shape]
    return torch.empty(hint, dtype=t.dtype)


def _sdpa(rec: Recorder | None) -> Callable[..., Any]:
    """`scaled_dot_product_attention` as eager's CPU kernel runs it.

    Its composite asks `_fused_sdp_choice`, which on meta tensors always answers "math" (a
    dozen ops and ~60 more size decisions) while the CPU kernel takes the fused flash kernel
    for plain float inputs. The choice is asked of CPU stand-ins at the example sizes; both
    routes give the same output shape (`query`'s sizes with `value`'s last), so the choice
    only decides which checks become guards: the fused kernel's, as in eager.
    """

    def rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
             dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
             enable_gqa: bool = False) -> Any:
        real = rec.real if rec is not None else None
        on_cpu = real is None or (isinstance(real, torch.Tensor) and real.device.type == "cpu")
        if on_cpu and not enable_gqa:
            with _disable_current_modes():
                choice = _aten._fused_sdp_choice.default(
                    *map(_stand_in, (query, key, value)), attn_mask=_stand_in(attn_mask), dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale)
            if choice == _FLASH and _flash_holds(query, key, value, attn_mask):
                return _aten._scaled_dot_product_flash_attention_for_cpu.default(
                    query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return _aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    return rule


def _flash_holds(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any) -> bool:
    """The size conditions under which `_fused_sdp_choice` picks the fused kernel on the CPU
    (`sdp_utils_cpp.cpp`: `check_batch_size_and_num_heads_dense`, `check_head_dim_size_cpp`,
    `check_nonzero_sequence_lengths_dense`, `check_attn_mask_shape`), each a decision the
    guards record: the fused kernel's output takes `query`'s head dim and its meta checks none
    of them, so where one fails eager runs the math route (another output shape, other checks).

    >>> q = torch.empty(2, 2, 5, 4, device="meta")
    >>> _flash_holds(q, q, torch.empty(2, 2, 5, 8, device="meta"), None)
    False
    """
    if not (query.dim() == key.dim() == value.dim() == 4):
        return False
    b, h, lq, d = query.shape
    same = (b == key.size(0), b == value.size(0), h == key.size(1), h == value.size(1), d == key.size(3),
            d == value.size(3), lq != 0, key.size(2) != 0)
    if not all(bool(c) for c in same):
        return False
    if attn_mask is None:
        return True
    m = attn_mask
    if not (bool(m.size(-2) == lq) or bool(m.size(-2) == 1)) or not (bool(m.size(-1) == key.size(2))
                                                                    or bool(m.size(-1) == 1)):
        return False
    if m.dim() == 2:
        return True
    return m.dim() == 4 and (bool(m.size(0) == 1) or bool(m.size(0) == b)) and (bool(m.size(1) == 1)
                                                                                or bool(m.size(1) == h))


_FLASH = 1  # NOTE: `torch.nn.attention.SDPBackend.FLASH_ATTENTION`, as `_fused_sdp_choice` returns it


# Ops whose only meta kernel is C++ code that fails over symbolic sizes (FakeTensor gets past it
# by running the kernel on its own subclass), or whose decomposition on meta takes another route
# than eager's kernel: the same rule in Python, checks included. Each entry takes the recorder.
OWN_META: dict[Any, Callable[[Recorder | None], Callable[..., Any]]] = {
    _aten.fractional_max_pool3d.default: lambda rec: _fractional_max_pool3d,
    _aten.lstm.input: _lstm,
    _aten.rnn_tanh.input: _rnn_one_step("rnn_tanh_input"),
    _aten.rnn_relu.input: _rnn_one_step("rnn_relu_input"),
    _aten.gru.input: _rnn_one_step("gru_impl"),
    _aten.kron.default: lambda rec: _kron,
    _aten.max_pool1d.default: lambda rec: _max_pool1d,
    _aten.scaled_dot_product_attention.default: _sdpa,
    _aten.item.default: lambda rec: lambda x: _item_checked(rec, x),
}


def _item_checked(rec: Recorder | None, x: torch.Tensor) -> Any:
    """`item`: eager's check (one element), then `_local_scalar_dense` (`torch._refs.item`
    runs `prims.item`, which has no rule on meta)."""
    torch._check(x.numel() == 1, lambda: f"a Tensor with {x.numel()} elements cannot be converted to Scalar")
    return _item(rec, x) if rec is not None else _aten._local_scalar_dense.default(x)
# Rules for an op user code calls on a traced tensor (`shape_rule`'s own op), not for the same op
# inside another's rule (meta kernels resize their own meta outputs: `_fft_r2c`'s).
_TRACED_ONLY: dict[Any, Callable[..., Any]] = {
    _aten.resize_.default: lambda x, size, memory_format=None: _resize_in_place(x, size, memory_format),
    _aten.resize_as_.default: lambda x, other, memory_format=None: _resize_in_place(x, other.shape, memory_format),
}

def _unbacked(rec: Recorder, func: Any, numel: Any, pick: Callable[[Any], int]) -> Any:
    """A fresh size for `func`'s data-dependent output, `pick(eager's output)` while tracing;
    0 when `numel` (the most it can be) is a static 0, as FakeTensor does."""
    if isinstance(numel, int) and numel == 0:
        return 0
    # NOTE: eager's output is that of the op traced now; a data-shaped op nested in its rule
    # (`index` with a bool mask runs `nonzero`) reads it once, as the first such op. A wrong
    # value there shows as a disagreement with eager, which the tracer reports.
    real, rec.real = rec.real, None
    # NOTE: replaying a saved trace has no eager output: PyTorch's own stand-in for an unbacked
    # size's hint (`unbacked_symint_fallback`), which only arithmetic on it ever sees
    return torch.SymInt(rec.unbacked(qualified_name(func), pick(real) if real is not None else 8192))


def _reads_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Is a scalar argument (not nested: `slice`'s start and end) a value read from data?"""
    return any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) and isinstance(a.node, SymGuard)
               and a.node.data is not None for a in (*args, *kwargs.values()))


class _DataMode:
    """What FakeTensor's own rules for ops over data-dependent arguments (`fake_impls`) ask of
    the fake mode: a ShapeEnv that makes a fresh unbacked size where no bound decides one."""

    def __init__(self, rec: Recorder, func: Any) -> None:
        self.shape_env = self
        self.rec, self.func = rec, func

    def create_unbacked_symint(self) -> torch.SymInt:
        return torch.SymInt(self.rec.unbacked(qualified_name(self.func), 8192))


def _fake_impl(name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        from torch._subclasses import fake_impls

        return getattr(fake_impls, name)(*args, **kwargs)

    return run


# Ops whose arguments may be values read from tensor data (`x[:n]` with `n = t.item()`):
# FakeTensor's rules, which decide with `guard_or_false` and fall back to a fresh unbacked size.
# Over sizes alone they take PyTorch's ordinary rule.
_UNBACKED_ARGS: dict[Any, Callable[..., Any]] = {
    _aten.slice.Tensor: _fake_impl("slice_forward"),
}


def _item(rec: Recorder, x: torch.Tensor) -> Any:
    """`.item()`: an unbacked value of the tensor's Python type, eager's value while tracing
    (FakeTensor's `local_scalar_dense`; PyTorch's stand-in when a saved trace is replayed)."""
    if x.is_complex():
        raise UnsupportedOpError("aten._local_scalar_dense.default", "a complex .item() does not trace")
    real, rec.real = rec.real, None
    if real is not None and not isinstance(real, (int, float, bool)):
        # NOTE: a decomposition reading its argument's data: the traced op's eager output is not
        # this value (the tracer decomposes such an op over the traced tensors instead)
        raise RuntimeError("a decomposition reads tensor data on meta tensors")
    kind = bool if x.dtype is torch.bool else float if x.is_floating_point() else int
    node = rec.unbacked("", 8192, ITEM_DATA)
    node.pytype, node.hint = kind, kind(real) if real is not None else kind(8192)
    return {int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool}[kind](node)


def _unique(new: Callable[[Any], Any], x: torch.Tensor, dim: int | None, inverse: bool, counts: bool) -> Any:
    """FakeTensor's `_unique`: unique values along `dim` (all of `x` when None), and the
    inverse indices and counts (empty unless asked for; eager CPU fills them when `dim` is given)."""
    if dim is not None:
        dim = dim % max(x.dim(), 1)
    n = new(x.numel() if dim is None else x.size(dim), lambda real: real[0].shape[0 if dim is None else dim])
    out = x.new_empty((n,)) if dim is None else x.new_empty((*x.shape[:dim], n, *x.shape[dim + 1:]))
    filled = dim is not None
    inv = x.new_empty(tuple(x.shape) if dim is None else (x.shape[dim],), dtype=torch.int64) if inverse or filled \
        else x.new_empty((0,), dtype=torch.int64)
    cnt = x.new_empty((n,), dtype=torch.int64) if counts or filled else x.new_empty((0,), dtype=torch.int64)
    return out, inv, cnt


def _masked_select(new: Callable[[Any], Any], x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(x.shape, mask.shape)  # NOTE: eager's check, as guards
    return x.new_empty((new(math.prod(shape), lambda real: real.shape[0]),))


# Ops whose output shape depends on tensor data (FakeTensor's `fake_impls`): the shape rule
# takes `new(numel, pick)`, a fresh unbacked size (at most `numel`; `pick` reads its value
# from eager's output), and builds the outputs around it.
# Ops whose result is read from tensor data (a value, not a shape): on meta tensors they cannot run
READS_DATA = frozenset({_aten._local_scalar_dense.default, _aten.item.default})
DATA_SHAPED: dict[Any, Callable[..., Any]] = {
    _aten.nonzero.default: lambda new, x: x.new_empty_strided((n := new(x.numel(), lambda real: real.shape[0]), x.dim()),
                                                              (1, n), dtype=torch.int64),
    _aten.masked_select.default: _masked_select,
    _aten._unique2.default: lambda new, x, sorted=True, return_inverse=False, return_counts=False:
        _unique(new, x, None, return_inverse, return_counts),
    _aten._unique.default: lambda new, x, sorted=True, return_inverse=False:
        _unique(new, x, None, return_inverse, False)[:2],
    _aten.unique_dim.default: lambda new, x, dim, sorted=True, return_inverse=False, return_counts=False:
        _unique(new, x, dim, return_inverse, return_counts),
    _aten.unique_consecutive.default: lambda new, x, return_inverse=False, return_counts=False, dim=None:
        _unique(new, x, dim, return_inverse, return_counts),
}


def shape_rule(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], rec: Recorder | None = None) -> Any:
    """The meta result of `func(*args, **kwargs)`: PyTorch's rule decides its shape."""
    traced_only = _TRACED_ONLY.get(func)
    if traced_only is not None:
        return traced_only(*args, **kwargs)
    out = _fast(func, args, kwargs)  # NOTE: the fast paths need no mode: no dispatch round trip
    if out is not None:
        return out
    tried = func if func in _FAST_BINARY or func in _FAST_UNARY else None
    with enable_python_dispatcher(), ShapeRules(rec, tried):
        return func(*args, **kwargs)


class RuleCache:
    """Shape rules memoized within one trace: a call whose inputs have the same symbolic sizes,
    strides, dtypes and other arguments as an earlier one takes the same decisions, so its
    output and its bailouts are the earlier ones (re-recorded at the current user line).

    Within one trace a guard-graph name stands for one value, so the key decides the rule.
    Transformers repeat their layers: most calls hit. Mutating ops and outputs with a storage
    offset are never cached; a hit hands back fresh meta tensors.
    """

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.entries: dict[Any, tuple[Any, list[tuple[str, bool]]]] = {}

    def close(self) -> None:
        """Drop the memoized meta tensors when the trace ends.

        NOTE: a meta tensor's symbolic sizes are held by its C++ TensorImpl, which Python's
        collector cannot see into: recorder -> cache -> meta tensor -> SymGuard -> recorder is
        a cycle it never frees, so every trace (a failed one too) stayed in memory.
        """
        self.entries.clear()

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = self._rule(func, args, kwargs)
        values = _VALUES.get(func)
        if values is not None:
            values(out, *args, **kwargs)
        return out

    def _rule(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rec = self.rec
        # NOTE: two calls of a data-shaped op on the same shapes have different output sizes
        key = None if func._schema.is_mutable or func in DATA_SHAPED or func in READS_DATA else _key(func, args, kwargs)
        hit = self.entries.get(key) if key is not None else None
        if hit is not None:
            out, guards = hit
            for g, expect in guards:
                rec.g_bailout(g, expect, rec.loc)
            return tree_map(_fresh(rec), out)
        outer, rec.capture = rec.capture, []
        counted = rec._unbacked
        try:
            out = shape_rule(func, args, kwargs, rec)
            guards = rec.capture
            if guards and not func._schema.is_mutable:
                out = sizes_stay_symbols(rec, args, kwargs, out, guards)
        finally:
            captured, rec.capture = rec.capture, outer
            if outer is not None:
                outer.extend(captured)
        # NOTE: nor a rule that counted a size from data inside (`index` with a bool mask runs
        # `nonzero`): the next call on masks of the same shape counts its own
        if key is not None and rec._unbacked == counted and all(_cacheable(x) for x in flatten(out)[0]):
            self.entries[key] = (out, guards)
        return out


# -- the values of index tensors made from sizes ---------------------------------------------
# An index tensor whose values are a function of sizes (`torch.arange(x.shape[1])`, GPT-2's
# position ids) reads a table (an `nn.Embedding`'s weight, `W[idx]`) in bounds only for some
# sizes: eager raises IndexError past them, though no shape rule asks. The rules keep, on such a
# meta tensor, bounds of its values (`_RANGE`: lowest, highest, as sizes) through the ops that
# move them unchanged, and an op that indexes with it checks them as eager's kernel does.

_RANGE = "_guardsolve_values"  # NOTE: an attribute of the meta tensor: (lowest, highest) of its values


def _range_of(t: Any) -> tuple[Any, Any] | None:
    return getattr(t, _RANGE, None) if isinstance(t, torch.Tensor) else None


def _arange(out: Any, *args: Any, **kwargs: Any) -> None:
    """`arange(end)`, `arange(start, end)`, `arange(start, end, step)` of ints, step > 0:
    values from `start` up to at most `end - 1`."""
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if (isinstance(out, torch.Tensor) and not out.dtype.is_floating_point and out.dtype is not torch.bool
            and all(isinstance(v, (int, torch.SymInt)) for v in (start, end)) and isinstance(step, int) and step > 0):
        setattr(out, _RANGE, (start, end - 1))


def _keeps(out: Any, x: Any, *args: Any, **kwargs: Any) -> None:
    """An op whose output holds values of its first input only (a view, a copy, a repeat)."""
    r = _range_of(x)
    if r is not None and isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
        setattr(out, _RANGE, r)


def _shifts(sign: int) -> Callable[..., None]:
    def shift(out: Any, x: Any, other: Any, *args: Any, **kwargs: Any) -> None:
        r = _range_of(x)
        if r is not None and isinstance(other, (int, torch.SymInt)) and not isinstance(other, bool) and kwargs.get(
                "alpha", 1) == 1 and isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
            setattr(out, _RANGE, (r[0] + sign * other, r[1] + sign * other))
    return shift


def _in_bounds(r: tuple[Any, Any], size: Any, lowest: Any, what: str) -> None:
    """Eager's bounds check of index values `r` into a dim of `size` (from `lowest` up)."""
    lo, hi = r
    torch._check(hi < size, lambda: f"{what}: index {hi} is out of bounds for size {size}")
    if not (isinstance(lo, int) and isinstance(lowest, int) and lo >= lowest):
        torch._check(lo >= lowest, lambda: f"{what}: index {lo} is out of bounds for size {size}")


def _embedding(out: Any, weight: Any, indices: Any, *args: Any, **kwargs: Any) -> None:
    r = _range_of(indices)
    if r is not None:
        _in_bounds(r, weight.size(0), 0, "embedding")


def _along(what: str) -> Callable[..., None]:
    """`index_select` / `gather`: `index`'s values read `x` along `dim`."""

    def check(out: Any, x: Any, dim: int, index: Any, *args: Any, **kwargs: Any) -> None:
        r = _range_of(index)
        if r is not None:
            _in_bounds(r, x.size(dim) if x.dim() else 1, 0, what)

    return check


def _index(out: Any, x: Any, indices: Any, *args: Any, **kwargs: Any) -> None:
    d = 0
    for i in indices:
        r = _range_of(i)
        if r is not None and d < x.dim():
            _in_bounds(r, x.size(d), -x.size(d), "index")
        d += 1 if i is None or i.dtype not in (torch.bool, torch.uint8) else max(i.dim(), 1)


_VALUES: dict[Any, Callable[..., None]] = {
    _aten.arange.default: _arange, _aten.arange.start: _arange, _aten.arange.start_step: _arange,
    **{op: _keeps for op in (
        _aten.unsqueeze.default, _aten.squeeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.view.default,
        _aten._unsafe_view.default, _aten.reshape.default, _aten.expand.default, _aten.slice.Tensor,
        _aten.select.int, _aten.clone.default, _aten.alias.default, _aten.detach.default, _aten.t.default,
        _aten.transpose.int, _aten.permute.default, _aten._to_copy.default, _aten.repeat.default,
        _aten.flatten.using_ints, _aten.lift_fresh.default, _aten.lift_fresh_copy.default,
        _aten.contiguous.default, _aten.to.dtype, _aten.narrow.default)},
    _aten.add.Tensor: _shifts(1), _aten.add.Scalar: _shifts(1), _aten.sub.Tensor: _shifts(-1),
    _aten.sub.Scalar: _shifts(-1),
    _aten.embedding.default: _embedding,
    _aten.index_select.default: _along("index_select"),
    _aten.gather.default: _along("gather"),
    _aten.index.Tensor: _index,
}


def _pinned_here(rec: Recorder, node: SymGuard, c: int, decided: list[tuple[str, bool]]) -> bool:
    """Did this rule decide `node == c` (as `node == c` true or `node != c` false)?"""
    const = rec._memo.get(("const", int, c))
    if const is None or node.g is None:
        return False
    for op, expect in ((Op.INT_EQ, True), (Op.INT_NE, False)):
        for key in ((op, node.g, const), (op, const, node.g)):
            g = rec._memo.get(key)
            if g is not None and (g, expect) in decided:
                return True
    return False


def _size_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Any]]:
    """The sizes an op's output dims may come from: each tensor argument's, each list of sizes."""
    rows: list[list[Any]] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            rows.append(list(a.shape))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(x, (int, torch.SymInt)) for x in a):
            rows.append(list(a))
        elif isinstance(a, (list, tuple)):
            rows.extend(list(x.shape) for x in a if isinstance(x, torch.Tensor))
    return rows


def sizes_stay_symbols(rec: Recorder, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                       decided: list[tuple[str, bool]]) -> Any:
    """`out` with each output size that PyTorch's rule made a constant 0 or 1 because a symbol
    was that value put back as that symbol.

    A rule that finds `x0 == 1` picks either side: a broadcast of `[x0, 8]` with a `[1, 8]`
    weight takes the weight's 1, `w.expand(x0, -1)` keeps `w`'s own 1. The value is the same
    (the rule's decision is a bailout of the trace), but a constant flows on: user code that
    reads the size records `1` where any other batch records a symbol, and later rules skip
    ops at a size known to be 1. The symbol is the one at the same place from the right in a
    tensor argument or a list of sizes, decided equal to that constant by this rule; where
    none or several are, the constant stays. So batch 1 records the trace batch 2 records.
    """
    leaves, spec = flatten(out)
    if not any(isinstance(m, torch.Tensor) and any(type(s) is int and s in (0, 1) for s in m.shape)
               for m in leaves):
        return out
    rows = _size_rows(args, kwargs)
    changed = False
    for k, m in enumerate(leaves):
        if not isinstance(m, torch.Tensor) or m.device.type != "meta":
            continue
        sizes = list(m.shape)
        moved = False
        for i, s in enumerate(sizes):
            if type(s) is not int or s not in (0, 1):
                continue
            found: dict[str, Any] = {}
            for row in rows:
                j = i - (len(sizes) - len(row))
                x = row[j] if 0 <= j < len(row) else None
                if (isinstance(x, torch.SymInt) and isinstance(x.node, SymGuard) and not x.node.const
                        and x.node.lazy is None and x.node.data is None and x.node.hint == s
                        and _pinned_here(rec, x.node, s, decided)):
                    found[x.node.g] = x
            if len(found) == 1:
                sizes[i] = next(iter(found.values()))
                moved = True
        if moved:
            muted, rec.muted = rec.muted, True  # NOTE: a new view of our stand-in asks nothing of user code
            try:
                with _disable_current_modes():
                    leaves[k] = m.as_strided(sizes, m.stride(), m.storage_offset())
            finally:
                rec.muted = muted
            changed = True
    return unflatten(leaves, spec) if changed else out


def sym_of(v: Any) -> Any:
    """A size's identity: its guard-graph name, or its value when static; None when neither."""
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        node = v.node
        if not isinstance(node, SymGuard) or node.lazy is not None:
            return None
        return node.hint if node.const else node.g
    return v


def _key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    flat, spec = flatten((args, kwargs))
    parts: list[Any] = [func, spec, torch.is_grad_enabled()]
    for a in flat:
        if isinstance(a, torch.Tensor):
            part = (tuple(map(sym_of, a.shape)), tuple(map(sym_of, a.stride())), sym_of(a.storage_offset()), a.dtype,
                    a.device, a.layout)
            if None in part[0] or None in part[1] or part[2] is None:
                return None
        elif isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            part = ("sym", sym_of(a))
            if part[1] is None:
                return None
        elif a is None or isinstance(a, (int, float, bool, str, torch.dtype, torch.device, torch.layout,
                                         torch.memory_format)):
            part = (type(a), a)
        else:
            return None
        parts.append(part)
    return tuple(parts)


def _cacheable(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return sym_of(x.storage_offset()) == 0 and None not in map(sym_of, x.shape) and None not in map(sym_of, x.stride())
    return not isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat))


def _fresh(rec: Recorder) -> Callable[[Any], Any]:
    def make(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        muted, rec.muted = rec.muted, True  # NOTE: building a stand-in asks nothing of user code
        try:
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        finally:
            rec.muted = muted

    return make
