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


def strides_of(v: Any) -> tuple[Any, ...] | None:
    return tuple(_expr(s) for s in v.stride()) if isinstance(v, torch.Tensor) else None


def _outputs(gm: torch.fx.GraphModule) -> list[Any]:
    out = _outputs_node(gm).args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _replace_outputs(gm: torch.fx.GraphModule, fixed: Sequence[Any]) -> torch.fx.GraphModule:
    """`gm` returning `fixed` (one per output, in its output's structure), recompiled."""
    out = _outputs_node(gm)
    out.args = (type(out.args[0])(fixed) if isinstance(out.args[0], (tuple, list)) else fixed[0],)
    gm.recompile()
    return gm


def _outputs_node(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return [n for n in gm.graph.nodes if n.op == "output"][0]


def _convolutions(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The 2-D convolutions (a 4-D input), not transposed ones: those are left as they are (not
    measured)."""
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
    before = [strides_of(r.meta.get("val")) if isinstance(r, torch.fx.Node) else None for r in _outputs(gm)]
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
        if old is None or not isinstance(v, torch.Tensor) or strides_of(v) == old:
            fixed.append(r)
            continue
        if r.op == "placeholder" or not _contiguous_exprs(v, old):
            return gm
        with new.graph.inserting_after(r):
            c = new.graph.call_function(_CLONE, (r,), {"memory_format": torch.contiguous_format})
        with scope:
            c.meta["val"] = _CLONE(v, memory_format=torch.contiguous_format)
        fixed.append(c)
    return _replace_outputs(new, fixed)


def eager_format(t: Any) -> torch.memory_format | None:
    """The memory format eager laid a 4-D output out in, where it is one and only one of
    contiguous and channels-last at these sizes (None otherwise: another layout, or sizes
    where both hold).

        >>> x = torch.ones(2, 3, 4, 5)
        >>> eager_format(x), eager_format(x.to(memory_format=torch.channels_last)), eager_format(x[:, :1, :1, :1])
        (torch.contiguous_format, torch.channels_last, None)
    """
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.layout is not torch.strided:
        return None
    plain, last = t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last)
    return None if plain == last else (torch.contiguous_format if plain else torch.channels_last)


def _aliases_input(n: torch.fx.Node) -> bool:
    """Whether graph output `n` is an input or a view of one (through view ops)."""
    while n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target.is_view \
            and n.args and isinstance(n.args[0], torch.fx.Node):
        n = n.args[0]
    return n.op != "call_function"


def strides_in_format(v: torch.Tensor, strides: tuple[Any, ...], fmt: torch.memory_format) -> bool:
    """Whether the stride expressions are `fmt`'s strides of `v`'s sizes (no guard)."""
    import sympy

    n, c, h, w = (_expr(d) for d in v.shape)
    want = (c * h * w, h * w, w, sympy.Integer(1)) if fmt == torch.contiguous_format else (h * w * c, sympy.Integer(1), w * c, c)
    return all(sympy.simplify(a - b) == 0 for a, b in zip(strides, want))


def eager_layouts(gm: torch.fx.GraphModule, mode: Any, formats: Sequence[torch.memory_format | None]) -> torch.fx.GraphModule:
    """`gm` with each 4-D output copied into the memory format eager gave it (`formats`, one per
    output, from eager's run at the example) where the graph lays it out in the other one.

    NOTE: a shape rule can lay out an output otherwise than eager's kernel: `group_norm`, `cat`
    and `pixel_shuffle` of channels-last inputs are channels-last in eager and contiguous by
    their rules, and Inductor lays out a graph's outputs as the rules do. The copy is a layout
    Inductor writes its kernel's output in, not a pass more. Where a copy is made, eager's
    format holds at every size the variant serves: the inputs' layout is in its check. An
    output that is an input or a view keeps its layout (eager's aliases memory, a copy would not)."""
    outs = _outputs(gm)
    if len(outs) != len(formats):
        return gm
    changed = False
    fixed = []
    for r, fmt in zip(outs, formats):
        v = r.meta.get("val") if isinstance(r, torch.fx.Node) else None
        strides = strides_of(v)
        view = isinstance(r, torch.fx.Node) and _aliases_input(r)
        if fmt is None or view or not isinstance(v, torch.Tensor) or v.dim() != 4 or strides is None or \
                strides_in_format(v, strides, fmt):
            fixed.append(r)
            continue
        with gm.graph.inserting_after(r):
            c = gm.graph.call_function(_CLONE, (r,), {"memory_format": fmt})
        scope = mode if mode is not None else contextlib.nullcontext()
        with scope:
            c.meta["val"] = _CLONE(v, memory_format=fmt)
        fixed.append(c)
        changed = True
    return _replace_outputs(gm, fixed) if changed else gm


def _contiguous_exprs(v: torch.Tensor, old: tuple[Any, ...]) -> bool:
    """Whether the strides `old` (expressions) are the contiguous strides of `v`'s sizes."""
    import sympy

    want = sympy.Integer(1)
    for size, stride in reversed(list(zip(v.shape, old))):
        if sympy.simplify(stride - want) != 0:
            return False
        want = want * _expr(size)
    return True


# -- a fake convolution's memory format, without the batch size ---------------------------------

_FORMAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _batch_free(input: Any, weight: Any) -> bool:
    """Whether `conv_formats` decides this convolution's backend: a 2-D one on CPU tensors
    (neither a oneDNN tensor) of a measured dtype, with oneDNN enabled (a static guard of every
    entry: with it off, NNPACK takes batches from 16 and lays out its output contiguously)."""
    return (isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor) and input.dim() == 4
            and weight.dim() == 4 and input.device.type == "cpu" and weight.device.type == "cpu"
            and not input.is_mkldnn and not weight.is_mkldnn and input.dtype in _FORMAT_DTYPES
            and torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled())


@contextlib.contextmanager
def conv_formats() -> Any:
    """While it holds, a fake 2-D convolution on CPU picks its output's memory format without
    reading the batch size; for a compile only (guardsolve's tracing runs ATen's own choice).

    A fake convolution lays out its output as the backend ATen would pick
    (`_select_conv_backend`), and the pick reads the batch size: oneDNN from batch 2 or 16
    (`use_mkldnn`: `input.size(0) > 1`, `>= 16`), the native kernel below. Every compile of a
    conv net then held `x0 > 1` (and `x0 < 16`): a U-Net or ViT served batch 1 by a second
    compile. On CPU with oneDNN enabled, every backend ATen picks for a 2-D convolution lays out
    its output by one rule (channels-last where the input or the weight suggests it) except
    `Empty` (a batch or channel count of 0: contiguous). So the pick here is `Empty` where the
    input has no elements (a guard on the sizes that decide it) and the native kernel of the
    same kind otherwise, and the format that kernel gives is computed by `channels_last_strides`
    (ATen's rule, less a comparison of the batch that decides nothing). Checked against ATen's
    own pick and format over 67,584 convolutions once (dtypes with float16, layouts, batch 0-17,
    spatial sizes, kernels, strides, dilations, groups, transposed, grad, 1-2 threads) and over
    a part of them in `tests/test_channels_last.py`: 0 formats differ. An output whose strides
    still differed at run time would fail Inductor's `assert_size_stride` on the convolution's
    output (an error, which the call turns into a miss, never a wrong result).

        >>> import torch
        >>> x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
        >>> with conv_formats():
        ...     kind = torch._C._select_conv_backend(x, w, stride=[1, 1], padding=[1, 1], dilation=[1, 1],
        ...                                          transposed=False, output_padding=[0, 0], groups=1, bias=None)
        ...     str(kind), torch._C._conv_determine_backend_memory_format(x.to(memory_format=torch.channels_last), w, kind)
        ('_ConvBackend.Slow2d', torch.channels_last)
    """
    select_backend, backend_format = torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format
    kinds = torch._C._ConvBackend
    ours = (kinds.Empty, kinds.Slow2d, kinds.SlowDilated2d, kinds.SlowTranspose2d)

    def select(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
        if args or not _batch_free(input, weight):
            return select_backend(input, weight, *args, **kwargs)
        if input.shape[0] == 0 or input.shape[1] == 0:
            return kinds.Empty
        if kwargs.get("transposed"):
            return kinds.SlowTranspose2d
        return kinds.SlowDilated2d if any(d != 1 for d in kwargs.get("dilation", ())) else kinds.Slow2d

    def fmt(input: Any, weight: Any, kind: Any) -> Any:
        if kind not in ours or not _batch_free(input, weight):
            return backend_format(input, weight, kind)
        if kind == kinds.Empty:
            return torch.contiguous_format
        cl = channels_last_strides(input.shape, input.stride()) or channels_last_strides(weight.shape, weight.stride())
        return torch.channels_last if cl else torch.contiguous_format

    torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format = select, fmt
    try:
        yield
    finally:
        torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format = select_backend, backend_format


def _literal_one(d: Any) -> bool:
    if isinstance(d, torch.SymInt):
        return bool(d.node.expr == 1)
    return type(d) is int and d == 1


def _same(a: Any, b: Any) -> bool:
    """Whether two sizes are the same expression (compared as written: no guard)."""
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return bool(a.node.expr == b.node.expr)
    return type(a) is int and type(b) is int and a == b


def squeeze_strides(old_shape: Sequence[Any], old_stride: Sequence[Any], new_shape: Sequence[Any]) -> list[Any] | None:
    """The strides of a view that only drops or inserts dims of size 1 (`old_shape` with some
    literal 1s taken out or put in is `new_shape`, expression by expression), or None for any
    other view: the kept dims keep their strides, an inserted one takes the next dim's extent.
    Exact at every size, with no guard: a dim of size 1 is only ever indexed at 0, so its
    stride addresses nothing.

        >>> squeeze_strides([1, 4, 3], [99, 1, 4], [4, 3]), squeeze_strides([4, 3], [1, 4], [4, 1, 3])
        ([1, 4], [1, 12, 4])
        >>> squeeze_strides([4, 3], [3, 1], [12]) is None
        True
    """
    out: list[Any] = []
    inserted: list[int] = []
    i = j = 0
    while i < len(old_shape) or j < len(new_shape):
        if i < len(old_shape) and j < len(new_shape) and _same(old_shape[i], new_shape[j]):
            out.append(old_stride[i])
            i, j = i + 1, j + 1
        elif i < len(old_shape) and _literal_one(old_shape[i]):
            i += 1
        elif j < len(new_shape) and _literal_one(new_shape[j]):
            inserted.append(len(out))
            out.append(None)
            j += 1
        else:
            return None
    for k in reversed(inserted):
        out[k] = out[k + 1] * new_shape[k + 1] if k + 1 < len(out) else 1
    return out


@contextlib.contextmanager
def squeeze_views() -> Any:
    """While it holds, Inductor lays out a view that only drops or inserts dims of size 1 (a
    `squeeze`, `unsqueeze`, or `select`, which Inductor lowers as a slice and a squeeze) by
    `squeeze_strides`; for a compile only.

    Inductor computes a view's strides by PyTorch's general rule (`_compute_stride`), which
    asks of every dim whether its size is 1: a ViT's `q, k, v = qkv.permute(2, 0, 3, 1,
    4)` (an `unbind` of the permuted projection) held `x0 != 1` and `x0 > 1` on the batch,
    so batch 1 needed a second compile. Fake tensors' own views keep PyTorch's rule (their
    strides are the ones eager computes)."""
    from torch._inductor import ir
    from torch._subclasses import fake_impls

    general = fake_impls._compute_stride
    create = ir.View.__dict__["create"]

    def strides(old_shape: Any, old_stride: Any, new_shape: Any, *args: Any, **kwargs: Any) -> Any:
        found = squeeze_strides(old_shape, old_stride, new_shape)
        return found if found is not None else general(old_shape, old_stride, new_shape, *args, **kwargs)

    def view(cls: Any, x: Any, new_size: Any) -> Any:
        fake_impls._compute_stride = strides
        try:
            return create.__func__(cls, x, new_size)
        finally:
            fake_impls._compute_stride = general

    ir.View.create = classmethod(view)
    try:
        yield
    finally:
        ir.View.create = create


def channels_last_strides(sizes: Sequence[Any], strides: Sequence[Any]) -> bool:
    """Whether ATen suggests channels-last for a 4-D tensor of these sizes and strides
    (`is_channels_last_strides_2d`, c10/core/MemoryFormat.h), with one comparison fewer: ATen
    multiplies its running minimum by the batch size where it exceeds 1 after the last check,
    which decides nothing but, at symbolic sizes, guarded `x0 > 1`.

        >>> channels_last_strides([2, 3, 4, 5], [60, 1, 15, 3]), channels_last_strides([2, 3, 4, 5], [60, 20, 5, 1])
        (True, False)
        >>> channels_last_strides([2, 1, 1, 1], [1, 1, 1, 1])  # N111: contiguous by ATen's convention
        False
    """
    if strides[1] == 0:
        return False
    least: Any = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d]
        if d != 0 and sizes[d] > 1:
            least = least * sizes[d]
    return True
