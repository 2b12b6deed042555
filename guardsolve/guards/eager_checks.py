"""The checks eager makes that a meta kernel leaves out (so a trace rejects what eager rejects)."""

from __future__ import annotations

from typing import Any, Callable
import torch
from guardsolve.guards.rule_base import aten


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
EAGER_CHECKS: dict[Any, Callable[..., None]] = {
    aten._transformer_encoder_layer_fwd.default: lambda src, embed_dim, *_, **__: _fused_attention_checks(src, embed_dim),
    aten._native_multi_head_attention.default:
        lambda query, key, value, embed_dim, *_, **__: _fused_attention_checks(query, embed_dim),
    aten.native_batch_norm.default: _batch_norm_stats,
    aten._native_batch_norm_legit.default: _batch_norm_stats,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_stats,
    # NOTE: their CPU kernels index the per-channel tensors as `native_batch_norm`'s do: a probe
    # at a running mean of size 0 crashed the process (SIGSEGV) where the meta kernel passed
    aten._batch_norm_with_update.default: _batch_norm_stats,
    aten._batch_norm_with_update_functional.default: _batch_norm_stats,
    aten._batch_norm_no_update.default: _batch_norm_stats,
    # NOTE: reductions that pick an element: eager raises on an empty input's empty reduced dim
    **{op: _reduced_dim_nonempty(name) for name, op in (
        ("max", aten.max.dim), ("min", aten.min.dim), ("median", aten.median.dim),
        ("nanmedian", aten.nanmedian.dim), ("mode", aten.mode.default))},
    **{op: _numel_nonzero(name) for name, op in (
        ("max", aten.max.default), ("min", aten.min.default))},
}
