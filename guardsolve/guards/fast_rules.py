"""Shape rules computed without running a meta kernel: same-size and broadcast elementwise ops,
unary ops and linear layers over symbolic sizes.
"""

from __future__ import annotations

import functools
from typing import Any
import torch
from torch._prims_common import elementwise_dtypes
from guardsolve.guards.symbolic import SymGuard
from guardsolve.guards.rule_base import PROMOTION, aten, sym_of


# FakeTensor's fast path for binary pointwise ops (`fake_impls.get_fast_op_impls`): broadcast the
# shapes; when an operand has the result's shape and all are contiguous, the result is a
# contiguous tensor of the promoted dtype. Otherwise the op takes its ordinary rule.
FAST_BINARY: dict[Any, Any] = {
    aten.add.Tensor: PROMOTION.DEFAULT, aten.sub.Tensor: PROMOTION.DEFAULT, aten.mul.Tensor: PROMOTION.DEFAULT,
    aten.div.Tensor: PROMOTION.INT_TO_FLOAT,
}


def fast_rule(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """FakeTensor's fast path for a pointwise op, or None where it does not apply."""
    promotion = FAST_BINARY.get(func)
    if promotion is not None:
        return _fast_binary(args, promotion)
    if func in FAST_UNARY:
        return _fast_unary(args, kwargs)
    if func is aten.linear.default:
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
    if len(dtypes) == 1 and len(tensors) == len(operands) and promotion is PROMOTION.DEFAULT:
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
FAST_UNARY = frozenset({
    aten.relu.default, aten.gelu.default, aten.silu.default, aten.sigmoid.default, aten.tanh.default,
    aten.neg.default, aten.exp.default, aten.log.default, aten.sqrt.default, aten.rsqrt.default,
    aten.hardtanh.default, aten.leaky_relu.default, aten.elu.default,
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
