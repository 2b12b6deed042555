"""A training graph's lowerings at symbolic sizes: what Inductor's static compile of a conv net's
step does, without pinning a size or dividing by one at every element.

A training variant is one joint graph (AOTAutograd) compiled at symbolic sizes. Three places
in Inductor decide by the example's sizes, or compute slowly where a size is not a constant:

- `convolution_backward`'s lowering orders its gradients' strides by reading them as ints
  (`guard_int_seq`) unless layout optimization is on, which it is only for graphs holding a
  forward convolution: a backward never does, so a conv net's second convolution pinned the
  image's height and width. `conv_backward_layouts` lowers it as under layout optimization
  (channels-last operands, the layout the forward pass gave them: `jit/layout.py`).
- Max pooling's backward: Inductor's gather, at symbolic sizes, merges height and width into one
  loop and divides by the runtime width at every element (a conv net's step 1.8x slower at
  16x16x48x48). Where the windows tile the input (stride = kernel, the common 2x2 pooling),
  `pool_backward` decomposes it into a gather that reads each input position's one window,
  with no division by a size; other windows call ATen's kernel
  (`guardsolve::max_pool2d_backward`). `pool_forward` computes the indices both read.
- Batch norm's variance: Inductor's CPU lowering takes two passes over at most 1024 elements
  and Welford's one pass above, by the example's size; at a symbolic size it always took
  Welford's (the forward's kernel 12 us where the static one takes 7, at a 4x16x16 batch).
  `two_pass_variances` takes two passes at symbolic sizes, as eager's batch norm does.

All three are exact at every size they serve (each value is the same computation as
eager's or Inductor's own: a gather reading the index ATen's scatter writes, the same two
variance formulas); `decompositions` collects the table a graph is traced with.

    >>> x = torch.randn(1, 2, 4, 4)
    >>> values, index = pool_forward(x, [2, 2])  # in eager, the prim runs ATen's kernel
    >>> torch.equal(index, torch.ops.aten.max_pool2d_with_indices(x, [2, 2])[1])
    True
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch

from guardsolve.jit.layout import strides_in_format, strides_of
from guardsolve.patching import Patch, patched

_CLONE = torch.ops.aten.clone.default


# -- convolution_backward without reading its strides as ints ------------------------------------


@contextlib.contextmanager
def conv_backward_layouts() -> Any:
    """While it holds, Inductor lowers a CPU `convolution_backward` with oneDNN enabled as its
    layout optimization does: channels-last operands, gradients laid out by their meta kernels
    (symbolic strides), no size read as an int. For a compile only. The gradients' strides are
    still checked against ATen's at every call (Inductor's `assert_size_stride` on an extern
    kernel's outputs), and oneDNN's being enabled is a static guard of every entry."""
    from torch._inductor import lowering

    with patched(Patch(lowering.lowerings, torch.ops.aten.convolution_backward.default, _layout_optimized, item=True)):
        yield


def _layout_optimized(original: Callable[..., Any]) -> Callable[..., Any]:
    """Inductor's lowering of `convolution_backward`, run with the graph's layout optimization on."""
    from torch._inductor.virtualized import V

    def lower(grad_out: Any, input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
        if not (torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()) or \
                input.get_device() is None or input.get_device().type != "cpu":
            return original(grad_out, input, weight, *args, **kwargs)
        # NOTE: the graph being lowered is this compile's own (V is per thread), not shared state
        before = V.graph.layout_opt
        V.graph.layout_opt = True
        try:
            return original(grad_out, input, weight, *args, **kwargs)
        finally:
            V.graph.layout_opt = before

    return lower


# -- batch norm's variance: two passes, as eager's ------------------------------------------------


@contextlib.contextmanager
def two_pass_variances() -> Any:
    """While it holds, a CPU variance over a symbolic number of elements (batch norm's, over the
    batch and the image) takes Inductor's two-pass formula (the mean, then the squared
    deviations: eager's batch norm's own), which Inductor's static compile takes up to 1024
    elements, not Welford's one pass, which it takes for every symbolic count. For a compile only.

    NOTE: measured on a conv net's training step (16 and 32 channels, one thread): at 4x16x16
    the forward kernel took 12 us with Welford's pass, 9 us with two; at 16x48x48 and at
    32x112x112 (a 25 MB activation) the steps cost the same both ways. A choice by size would
    need a guard, and a variant more for every workload on both sides of 1024."""
    from torch._inductor import lowering

    with patched(Patch(lowering, "use_two_step_variance", _two_pass_on_cpu)):
        yield


def _two_pass_on_cpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Inductor's `use_two_step_variance`, true for a CPU reduction over a symbolic count."""
    import sympy
    from torch._inductor import lowering
    from torch._inductor.utils import sympy_product

    def two_pass(x: Any, axis: Any, keepdim: Any, input_dtype: Any) -> Any:
        device = x.get_device()
        if device is None or device.type != "cpu":
            return original(x, axis, keepdim, input_dtype)
        inner = lowering._make_reduction_inner(x, axis=lowering._validate_reduction_axis(x, axis), keepdims=keepdim,
                                               dtype=None, override_return_dtype=None)
        numel = sympy_product(inner["reduction_ranges"])
        if isinstance(numel, sympy.Integer) or sympy_product(inner["ranges"]) == 1:
            return original(x, axis, keepdim, input_dtype)
        return True

    return two_pass


# -- max pooling ----------------------------------------------------------------------------------


def _pair(v: Sequence[int], default: Sequence[int]) -> list[int]:
    """A pooling argument as two ints (`[]` is the default, one int is both dims)."""
    out = [int(d) for d in v] or [int(d) for d in default]
    return out * 2 if len(out) == 1 else out


def _pool_args(kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
               dilation: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """A max pool's kernel, stride, padding and dilation as two ints each (an empty stride is
    the kernel)."""
    kernel = _pair(kernel_size, ())
    return kernel, _pair(stride, kernel), _pair(padding, (0,)), _pair(dilation, (1,))


def _tiles(x: Any, kernel: list[int], step: list[int], dilation: list[int]) -> bool:
    """Whether the pooling windows tile a batched 2-D input: stride = kernel, no dilation."""
    return x.dim() == 4 and len(kernel) == 2 and kernel == step and dilation == [1, 1]


def _index_dtype(x: Any) -> torch.dtype:
    """int32 where every flat index of an image plane fits it (a guard at a symbolic size: height
    times width below 2**31), else int64. Every index a max pooling computes or compares is one
    of the plane's, so int32 arithmetic on them never overflows; int64 vector arithmetic was
    half of a conv net's backward kernel (20 us of a 4x16x16 step's, 9 with int32)."""
    return torch.int32 if x.shape[-2] * x.shape[-1] < 2 ** 31 else torch.int64


def pool_forward(x: Any, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                 dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Any:
    """`max_pool2d_with_indices` of a batched 2-D input without dilation: Inductor's max and
    offset in the window (`_low_memory_max_pool_with_offsets`, as its own decomposition), and the
    flat index ATen returns computed from the offset (in int32 where it fits: `_index_dtype`)
    without a division for a power-of-2 window width (a shift and a mask, which a gather's
    backward recomputes from the saved offset at every element). NotImplemented elsewhere
    (Inductor's own decomposition, or ATen's kernel for windows over 25, as Inductor's).

    NOTE: a window whose in-bounds values are all -inf: Inductor's offset is the window's first
    position, which lies in the padding where the window starts there (an index of -5 for a
    corner, and its gradient lost), where ATen's is the first in-bounds one; the row and column
    are clamped at 0 to it (found by a new-user hunt; torch.compile returns the same -5).

        >>> x = torch.tensor([[[[float("-inf"), 1.], [2., 3.]]]])
        >>> pool_forward(x, [2, 2], [2, 2], [1, 1])[1].flatten().tolist()
        [0, 1, 2, 3]
    """
    from torch._inductor import inductor_prims  # noqa: F401  (registers the prim)
    from torch._inductor.lowering import should_fallback_max_pool_with_indices

    kernel, step, pad, dil = _pool_args(kernel_size, stride, padding, dilation)
    if x.dim() != 4 or len(kernel) != 2 or dil != [1, 1] or should_fallback_max_pool_with_indices(kernel, n_dim=2):
        return NotImplemented
    aten = torch.ops.aten
    values, offsets = torch.ops.prims._low_memory_max_pool_with_offsets(x, kernel, step, pad, dil, ceil_mode)
    dtype = _index_dtype(x)
    off = offsets.to(dtype)
    shift = kernel[1].bit_length() - 1
    if 1 << shift == kernel[1]:
        row, col = torch.bitwise_right_shift(off, shift), torch.bitwise_and(off, kernel[1] - 1)
    else:
        row, col = off // kernel[1], off % kernel[1]
    rows = aten.arange.default(values.shape[-2], dtype=dtype, device=x.device).unsqueeze(1) * step[0] - pad[0] + row
    cols = aten.arange.default(values.shape[-1], dtype=dtype, device=x.device) * step[1] - pad[1] + col
    if pad[0]:
        rows = aten.clamp_min.default(rows, 0)
    if pad[1]:
        cols = aten.clamp_min.default(cols, 0)
    return values, (rows * x.shape[-1] + cols).to(torch.int64)


def tiled_pool_backward(grad_out: Any, x: Any, kernel: Sequence[int], padding: Sequence[int], indices: Any) -> Any:
    """Max pooling's backward where the windows tile the input (stride = kernel, dilation 1), as a
    gather: input position (h, w) lies in window `((h + pad) // kernel, (w + pad) // kernel)` and
    takes that window's gradient where the window's index is its own position; a row or column
    that no window covers (the floor's leftover) takes 0. ATen's kernel scatters each window's
    gradient to its index, which lies in that window, and no other window reaches it: the same
    values, in the same dtype, with no sum of two.

        >>> x = torch.tensor([[[[1., 4., 2.], [3., 0., 5.], [6., 7., 8.]]]])
        >>> _, index = torch.ops.aten.max_pool2d_with_indices(x, [2, 2])
        >>> tiled_pool_backward(torch.ones(1, 1, 1, 1), x, [2, 2], [0, 0], index)
        tensor([[[[0., 1., 0.],
                  [0., 0., 0.],
                  [0., 0., 0.]]]])
    """
    aten = torch.ops.aten
    width = x.shape[-1]
    rows = aten.arange.default(x.shape[-2], dtype=torch.int64, device=x.device)
    cols = aten.arange.default(width, dtype=torch.int64, device=x.device)
    win_r, win_c = (rows + padding[0]) // kernel[0], (cols + padding[1]) // kernel[1]
    covered = (win_r < grad_out.shape[-2]).unsqueeze(1) & (win_c < grad_out.shape[-1]).unsqueeze(0)
    at = [None, None, aten.clamp_max.default(win_r, grad_out.shape[-2] - 1).unsqueeze(1),
          aten.clamp_max.default(win_c, grad_out.shape[-1] - 1).unsqueeze(0)]
    dtype = _index_dtype(x)
    mine = aten._unsafe_index.Tensor(indices, at).to(dtype) == (rows.unsqueeze(1) * width + cols.unsqueeze(0)).to(dtype)
    zero = aten.scalar_tensor.default(0, dtype=grad_out.dtype, device=grad_out.device)
    return aten.where.self(covered & mine, aten._unsafe_index.Tensor(grad_out, at), zero)


def pool_backward(grad_out: Any, x: Any, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                  dilation: Sequence[int], ceil_mode: bool, indices: Any) -> Any:
    """A decomposition of `max_pool2d_with_indices_backward`: `tiled_pool_backward` where the
    windows tile a contiguous or channels-last input (laid out as ATen's kernel lays its
    gradient out: the input's format), else ATen's kernel (`guardsolve::max_pool2d_backward`)."""
    kernel, step, pad, dil = _pool_args(kernel_size, stride, padding, dilation)
    strides = strides_of(x)
    if _tiles(x, kernel, step, dil) and strides is not None:
        for fmt in (torch.channels_last, torch.contiguous_format):
            if strides_in_format(x, strides, fmt):
                return _CLONE(tiled_pool_backward(grad_out, x, kernel, pad, indices), memory_format=fmt)
    return torch.ops.guardsolve.max_pool2d_backward(grad_out, x, list(kernel_size), list(stride), list(padding),
                                                    list(dilation), ceil_mode, indices)


_SCHEMA = ("max_pool2d_backward(Tensor grad_out, Tensor x, int[] kernel_size, int[] stride, int[] padding, "
           "int[] dilation, bool ceil_mode, Tensor indices) -> Tensor")


def _aten_pool_backward(grad_out: torch.Tensor, x: torch.Tensor, kernel_size: list[int], stride: list[int],
                        padding: list[int], dilation: list[int], ceil_mode: bool,
                        indices: torch.Tensor) -> torch.Tensor:
    """ATen's `max_pool2d_with_indices_backward`, as an op Inductor calls rather than lowers (for
    windows that overlap: Inductor's own kernel divides by the runtime width at every element).
    Its meta kernel is its fake: the input's suggested memory format, as ATen's CPU kernel."""
    return torch.ops.aten.max_pool2d_with_indices_backward.default(
        grad_out, x, kernel_size, stride, padding, dilation, ceil_mode, indices)


def _register() -> torch.library.Library:
    """`guardsolve::max_pool2d_backward`, registered once per process (a plain `Library` op: a
    call costs about 4 µs over ATen's, `torch.library.custom_op`'s about 15)."""
    lib = torch.library.Library("guardsolve", "DEF")
    lib.define(_SCHEMA)
    lib.impl("max_pool2d_backward", _aten_pool_backward, "CompositeExplicitAutograd")
    lib.impl("max_pool2d_backward", _aten_pool_backward, "Meta")
    return lib


_LIB = _register()  # NOTE: the registration's handle: dropping it would unregister the op


# -- the table ------------------------------------------------------------------------------------


class _Table(dict):  # type: ignore[type-arg]
    """A decomposition table that pickles as the call that makes it: Inductor's FX graph cache
    pickles the table into its key, and its own entries (some not picklable) made the compile
    skip the cache, which `CompiledArtifact.save` (the store) needs."""

    def __init__(self, entries: dict[Any, Any], train: bool) -> None:
        super().__init__(entries)
        self.train = train

    def __reduce__(self) -> Any:
        return (decompositions, (self.train,))


def decompositions(train: bool) -> dict[Any, Any]:
    """Inductor's decompositions, and max pooling's: `pool_forward` (every compile: the indices
    ATen returns) and, for a training graph's joint trace, `pool_backward`."""
    from torch._inductor.decomposition import select_decomp_table

    aten = torch.ops.aten
    table = {**select_decomp_table(), aten.max_pool2d_with_indices.default: pool_forward}
    if train:
        table[aten.max_pool2d_with_indices_backward.default] = pool_backward
    return _Table(table, train)


__all__ = ["conv_backward_layouts", "pool_backward", "pool_forward", "two_pass_variances", "tiled_pool_backward",
           "decompositions"]
