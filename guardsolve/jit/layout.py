"""Channels-last convolutions at symbolic sizes, for every graph guardsolve compiles.

A 2-D convolution's CPU kernel (oneDNN) runs 1.6x faster on a channels-last input than on a
contiguous one, forward and backward (a conv net with batch norm, 16x3x48x48, one thread: an
eager training step 11.1 ms contiguous, 6.9 ms channels-last). Inductor's own layout pass
(`layout_optimization`) restrides the backward's saved activations to the strides it chose at
the example's sizes, which pins every image size, so it is off for training graphs
(`inductor._standalone`), and it left an inference graph at symbolic sizes contiguous (a U-Net's
large call 1.17x torch.compile's; 0.97x with this pass). This pass does the same work in the
graph instead, before Inductor (and AOTAutograd, which traces the joint graph from it) sees it:
each 2-D convolution's input and weight become channels-last copies, so every stride that
follows is an expression of the symbolic sizes (`C*W`, `C`, ...), and one compile serves every
image size. A graph output that the pass restrided is copied back to the strides it had
(contiguous), so what the caller gets is laid out as eager's.

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> w = torch.randn(4, 3, 3, 3)
    >>> gm = make_fx(lambda x: torch.ops.aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1],
    ...                                                         False, [0, 0], 1))(torch.randn(2, 3, 8, 8))
    >>> new = channels_last(gm, None, [torch.randn(2, 3, 8, 8)])
    >>> [n.target.__name__ for n in new.graph.nodes if n.op == "call_function"]
    ['clone.default', 'clone.default', 'convolution.default', 'clone.default']
    >>> new(torch.randn(2, 3, 8, 8))[0].is_contiguous()
    True
"""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import torch

_CONV = torch.ops.aten.convolution.default
_CLONE = torch.ops.aten.clone.default


def _expr(d: Any) -> Any:
    """A size or stride as a sympy expression (a SymInt's, without a guard), or the int."""
    import sympy  # NOTE: lazily: a saved entry's process imports this module (the op) without it

    return d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(d)


def _strides(v: Any) -> tuple[Any, ...] | None:
    return tuple(_expr(s) for s in v.stride()) if isinstance(v, torch.Tensor) else None


def _outputs(gm: torch.fx.GraphModule) -> list[Any]:
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _convolutions(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The 2-D convolutions (a 4-D input), not transposed ones: those are left as they are (not
    measured; a training graph's input gradients, transposed convolutions of its own making,
    `inductor._conv_input_grad`, follow the layout of the gradient they read)."""
    found = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not _CONV or n.args[6]:
            continue
        x = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else None
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            found.append(n)
    return found


def channels_last(gm: torch.fx.GraphModule, mode: Any, args: Sequence[Any]) -> torch.fx.GraphModule:
    """`gm` with each 2-D convolution's input and weight copied channels-last and re-traced by
    make_fx over `args` (in fake `mode`, or real tensors where `mode` is None), its outputs laid
    out as before; `gm` itself where it has no such convolution, where an output it restrides
    was not contiguous (its layout is kept as it was rather than guessed), or where the re-trace
    fails (the graph is compiled as it was: slower, not wrong)."""
    if not _convolutions(gm):
        return gm
    before = [_strides(r.meta.get("val")) if isinstance(r, torch.fx.Node) else None for r in _outputs(gm)]
    work = torch.fx.GraphModule(gm, gm.graph.__deepcopy__())
    for n in _convolutions(work):
        # NOTE: the weight too (oneDNN reorders a contiguous one at every call): a training
        # step of a small conv net 2% faster; its gradient comes back through the copy
        x, w = n.args[0], n.args[1]
        with work.graph.inserting_before(n):
            x = work.graph.call_function(_CLONE, (x,), {"memory_format": torch.channels_last})
            wv = w.meta.get("val") if isinstance(w, torch.fx.Node) else None
            if isinstance(wv, torch.Tensor) and wv.dim() == 4:
                w = work.graph.call_function(_CLONE, (w,), {"memory_format": torch.channels_last})
        n.args = (x, w, *n.args[2:])
    work.recompile()
    from torch.fx.experimental.proxy_tensor import make_fx

    scope = mode if mode is not None else contextlib.nullcontext()
    try:
        with scope, torch.no_grad():
            new = make_fx(work, tracing_mode="fake" if mode is not None else "real")(*args)
    except Exception:  # NOTE: any guard the failed re-trace added only narrows the check
        return gm
    results = _outputs(new)
    fixed = []
    for r, old in zip(results, before):
        v = r.meta.get("val") if isinstance(r, torch.fx.Node) else None
        if old is None or not isinstance(v, torch.Tensor) or _strides(v) == old:
            fixed.append(r)
            continue
        if r.op == "placeholder" or not _contiguous_exprs(v, old):
            return gm
        with new.graph.inserting_after(r):
            c = new.graph.call_function(_CLONE, (r,), {"memory_format": torch.contiguous_format})
        with scope:
            c.meta["val"] = _CLONE(v, memory_format=torch.contiguous_format)
        fixed.append(c)
    out = [n for n in new.graph.nodes if n.op == "output"][0]
    out.args = (type(out.args[0])(fixed) if isinstance(out.args[0], (tuple, list)) else fixed[0],)
    new.recompile()
    return new


def _contiguous_exprs(v: torch.Tensor, old: tuple[Any, ...]) -> bool:
    """Whether the strides `old` (expressions) are the contiguous strides of `v`'s sizes."""
    import sympy

    want = sympy.Integer(1)
    for size, stride in reversed(list(zip(v.shape, old))):
        if sympy.simplify(stride - want) != 0:
            return False
        want = want * _expr(size)
    return True


# -- max pooling's backward as ATen's kernel -----------------------------------------------------

_SCHEMA = ("max_pool2d_backward(Tensor grad_out, Tensor x, int[] kernel_size, int[] stride, int[] padding, "
           "int[] dilation, bool ceil_mode, Tensor indices) -> Tensor")


def _aten_pool_backward(grad_out: torch.Tensor, x: torch.Tensor, kernel_size: list[int], stride: list[int],
                        padding: list[int], dilation: list[int], ceil_mode: bool,
                        indices: torch.Tensor) -> torch.Tensor:
    """ATen's `max_pool2d_with_indices_backward`, as an op Inductor calls rather than lowers.

    NOTE: Inductor lowers it (through a `scatter_add` decomposition, or its own gather) into a
    kernel fused with what follows (batch norm's backward). At symbolic sizes that kernel's
    loops merge height and width into one index and recover them by dividing by the runtime
    width for every element: a conv net's backward kernel took 2.6 ms per step at 16x16x48x48
    where Inductor's static one takes 1.15 ms. ATen's kernel reads no such index, and the
    kernel that follows reads its output in order. Its meta kernel is its fake: the input's
    suggested memory format, as ATen's CPU kernel."""
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


def pool_backward(grad_out: Any, x: Any, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                  dilation: Sequence[int], ceil_mode: bool, indices: Any) -> Any:
    """A decomposition of `max_pool2d_with_indices_backward` into `max_pool2d_backward` (for the
    training decomposition table)."""
    return torch.ops.guardsolve.max_pool2d_backward(grad_out, x, list(kernel_size), list(stride), list(padding),
                                                    list(dilation), ceil_mode, indices)
