"""Meta rules of guardsolve's own, where PyTorch has none over symbolic sizes (pooling, kron,
recurrent layers, attention, in-place resize).
"""

from __future__ import annotations

from typing import Any, Callable
import torch
from torch.utils._python_dispatch import _disable_current_modes
from guardsolve.errors import UnsupportedOpError
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.data_shaped import item_checked
from guardsolve.guards.rule_base import aten


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
    left = aten.reshape.default(a, [s for d in sa for s in (d, 1)])
    right = aten.reshape.default(b, [s for d in sb for s in (1, d)])
    return aten._unsafe_view.default(aten.mul.Tensor(left, right), [x * y for x, y in zip(sa, sb)])


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
                choice = aten._fused_sdp_choice.default(
                    *map(_stand_in, (query, key, value)), attn_mask=_stand_in(attn_mask), dropout_p=dropout_p,
                    is_causal=is_causal, scale=scale)
            if choice == _FLASH and _flash_holds(query, key, value, attn_mask):
                return aten._scaled_dot_product_flash_attention_for_cpu.default(
                    query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return aten.scaled_dot_product_attention.default.decompose(
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
    aten.fractional_max_pool3d.default: lambda rec: _fractional_max_pool3d,
    aten.lstm.input: _lstm,
    aten.rnn_tanh.input: _rnn_one_step("rnn_tanh_input"),
    aten.rnn_relu.input: _rnn_one_step("rnn_relu_input"),
    aten.gru.input: _rnn_one_step("gru_impl"),
    aten.kron.default: lambda rec: _kron,
    aten.max_pool1d.default: lambda rec: _max_pool1d,
    aten.scaled_dot_product_attention.default: _sdpa,
    aten.item.default: lambda rec: lambda x: item_checked(rec, x),
}
