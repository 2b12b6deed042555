"""Conv nets trained through compiled entries against eager: the channels-last pass
(`jit/layout.py`) and max pooling's backward as ATen's op, over the layouts, pools and sizes
they touch.

Each net trains side by side with an eager copy (`testing.train_side_by_side`: every step's
loss, gradients, parameters and buffers) with SGD and AdamW, over batches whose image sizes
change (odd, even, tiny, non-square), and every call is served compiled.

NOTE: a convolution followed by batch norm has no bias here (as in resnets): batch norm
removes it, so its gradient is zero but for rounding, and AdamW takes full steps on that
noise. With one, eager itself on channels-last copies differs from eager by 6e-4 (the
segmenter) to 5e-3 (the residual block) in that bias after a few steps, as the compiled
variant does; every other tensor within 2e-7.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import guardsolve
from guardsolve.testing import train_side_by_side

TOL = 1e-4


class _Segmenter(nn.Module):
    """A per-pixel head: conv, batch norm, max pool (3, stride 2, padding 1: overlapping
    windows), a transposed conv back up, and a 4-D output cropped to the input's size."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.head = nn.Conv2d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 3, 2, padding=1)
        h = self.head(F.relu(self.up(h)))
        return h[..., :x.shape[-2], :x.shape[-1]]


class _Block(nn.Module):
    """A resnet's basic block: conv, batch norm, relu, twice, plus the input."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + x)


class _Mixed(nn.Module):
    """Grouped, depthwise, dilated and strided convs; a ceil-mode max pool; adaptive pooling; a
    residual block; a 1-D conv on the flattened map."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=2, dilation=2)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.g = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.block = _Block(8)
        self.c1d = nn.Conv1d(8, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.c1(x)), 2, ceil_mode=True)
        h = self.block(F.relu(self.g(F.relu(self.dw(h)))))
        h = F.adaptive_max_pool2d(h, (2, 3)).flatten(2)
        return self.fc(self.c1d(h).mean(-1))


def _classifier_batches(shapes: list[tuple[int, int, int]], classes: int) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(3)
    return [(torch.randn(b, 3, h, w, generator=gen), torch.randint(0, classes, (b,), generator=gen))
            for b, h, w in shapes]


_OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}


def _check(make: Callable[[], nn.Module], batches: list[tuple[torch.Tensor, ...]], loss: Callable[..., Any],
           optimizer: str) -> Any:
    worst, fast = train_side_by_side(make, batches, _OPTIMIZERS[optimizer], loss,
                                     lambda m: guardsolve.guarded(m, backend="inductor"))
    info = fast.cache_info()
    assert worst < TOL, worst
    assert info.eager_calls == 0, info.eager_reasons
    return fast


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_segmenter_with_a_4d_output_trains_as_eager(optimizer: str) -> None:
    gen = torch.Generator().manual_seed(4)
    batches = [(torch.randn(b, 3, h, w, generator=gen), torch.randn(b, 3, h, w, generator=gen))
               for b, h, w in [(2, 12, 12), (3, 9, 13), (1, 16, 8), (2, 12, 12)]]
    fast = _check(_Segmenter, batches, F.mse_loss, optimizer)
    out = fast(torch.randn(2, 3, 10, 14))
    assert out.shape == (2, 3, 10, 14) and out.stride() == _Segmenter()(torch.randn(2, 3, 10, 14)).stride()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_net_of_grouped_dilated_and_pooled_convs_trains_as_eager(optimizer: str) -> None:
    batches = _classifier_batches([(4, 16, 16), (2, 13, 17), (4, 24, 20), (1, 9, 9), (4, 16, 16)], 5)
    _check(_Mixed, batches, F.cross_entropy, optimizer)


@pytest.mark.slow
def test_a_channels_last_input_and_tiny_images_train_as_eager() -> None:
    """Inputs already channels-last, and images down to 2x2 (a 1x1 map after pooling: strides
    that fit both layouts)."""
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 4, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    batches = _classifier_batches([(4, 8, 8), (3, 2, 2), (4, 8, 8), (2, 5, 3)], 4)
    batches = [(x.contiguous(memory_format=torch.channels_last), y) if i % 2 == 0 else (x, y)
               for i, (x, y) in enumerate(batches)]
    _check(make, batches, F.cross_entropy, "sgd")


def test_tiled_max_pooling_decomposes_to_atens_values_indices_and_gradients() -> None:
    """`jit/backward.py`: where the windows tile the input (stride = kernel), the forward's
    index is computed from the window offset and the backward is a gather; both equal ATen's
    (values, indices, gradient values and strides) at every layout, padding, ceil mode, window
    (2 and 3: a shift and a division), with ties (relu's zeros, rounded values) and NaN."""
    from guardsolve.jit.backward import pool_backward, pool_forward

    gen = torch.Generator().manual_seed(11)
    checked = 0
    for i in range(240):
        k = (1, 2, 3, 4)[i % 4]
        p, ceil = (i // 4) % (k // 2 + 1), bool((i // 8) % 2)
        n, c = 1 + i % 3, 1 + (i // 3) % 4
        h, w = (int(v) for v in torch.randint(max(1, k - 2 * p), 12, (2,), generator=gen))
        x = torch.randn(n, c, h, w, generator=gen)
        x = [x, x.relu(), x.round(), x][i % 4]
        if i % 7 == 0:
            x[0, 0, 0, 0] = float("nan")
        if i % 2:
            x = x.contiguous(memory_format=torch.channels_last)
        args = ([k, k], [k, k], [p, p], [1, 1], ceil)
        try:
            want, index = aten_pool = torch.ops.aten.max_pool2d_with_indices(x, *args)
        except RuntimeError:
            continue  # NOTE: sizes ATen rejects (an output of size 0)
        got, got_index = pool_forward(x, *args)
        assert torch.equal(got_index, index) and torch.equal(got.nan_to_num(), want.nan_to_num()), (k, p, ceil, x.shape)
        g = torch.randn(want.shape, generator=gen)
        ref = torch.ops.aten.max_pool2d_with_indices_backward(g, x, *args, index)
        grad = pool_backward(g, x, [k], [], [p], [1], ceil, index)
        assert torch.equal(grad, ref) and (grad.stride() == ref.stride() or min(c, h * w) == 1), (k, p, ceil, x.shape)
        checked += 1
        del aten_pool
    assert checked > 200


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_tiled_and_overlapping_max_pools_train_as_eager_and_return_eagers_indices(optimizer: str) -> None:
    """A 2x2 pool with padding, a 3x3 tiling one, and an overlapping one, at odd and even sizes,
    in one variant; the indices a ceil-mode pool returns are eager's on every compiled call.
    (A ceil-mode pool's output size is guarded by Inductor's lowering, `pooling_size`: a
    variant per size class.)"""
    class Pools(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, _ = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2, padding=1, return_indices=True)
            h = F.max_pool2d(F.relu(self.c2(h)), 3)
            return self.fc(F.max_pool2d(h, 2, 1, padding=1).amax((2, 3)))

    batches = _classifier_batches([(4, 12, 12), (2, 13, 15), (3, 14, 17), (4, 12, 12)], 4)
    fast = _check(Pools, batches, F.cross_entropy, optimizer)
    assert fast.cache_info().compiles == 1, fast.cache_info().miss_reasons

    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    pooled = guardsolve.guarded(lambda x: F.max_pool2d(net(x), 2, ceil_mode=True, return_indices=True),
                                backend="inductor")
    for n, shape in enumerate([(2, 3, 10, 12), (1, 3, 7, 9), (3, 3, 10, 12), (2, 3, 7, 9)]):
        x = torch.randn(shape)
        (v, i), (ev, ei) = pooled(x), F.max_pool2d(net(x), 2, ceil_mode=True, return_indices=True)
        assert torch.equal(i, ei) and torch.allclose(v, ev)
        assert n == 0 or pooled.last_call.how == "compiled", pooled.cache_info()
        v.sum().backward()


@pytest.mark.parametrize("grad", [True, False])
def test_a_padded_window_of_minus_infinity_returns_eagers_index_and_gradient(grad: bool) -> None:
    """A window whose in-bounds values are all -inf: Inductor's offset is its first position,
    in the padding (index -5 for a corner, as torch.compile returns), and the gradient was
    lost; `pool_forward` clamps it to the first in-bounds position, as ATen (found by a
    new-user hunt). Tiling (2, 2, pad 1) and overlapping (3, 2, pad 1) windows, training and
    inference, every call compiled after the first."""
    for k, s in [(2, 2), (3, 2)]:
        fn = lambda x: F.max_pool2d(x, k, s, 1, return_indices=True)  # noqa: E731
        fast = guardsolve.guarded(fn, backend="inductor")
        for n, shape in enumerate([(2, 3, 8, 8), (1, 2, 7, 9), (2, 3, 8, 8)]):
            base = torch.randn(shape)
            base[..., 0, :] = base[..., :, 0] = float("-inf")
            ours, eager = base.clone().requires_grad_(grad), base.clone().requires_grad_(grad)
            with torch.set_grad_enabled(grad):
                (v, i), (ev, ei) = fast(ours), fn(eager)
            assert torch.equal(i, ei) and torch.equal(v, ev), (k, shape)
            assert n == 0 or fast.last_call.how == "compiled", fast.cache_info()
            if grad:
                v.exp().sum().backward()
                ev.exp().sum().backward()
                assert torch.equal(ours.grad, eager.grad), (k, shape)
