"""The channels-last pass of compiled graphs (`jit/layout.py`) and max pooling's backward as
ATen's op: where the pass copies, the layouts of what the graph returns at real and symbolic
sizes, and random conv nets served compiled against eager."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch._subclasses.fake_tensor import FakeTensorMode

from guardsolve.jit.layout import channels_last

aten = torch.ops.aten
W = torch.randn(4, 3, 3, 3)


def _conv(x: torch.Tensor) -> torch.Tensor:
    return aten.convolution.default(x, W, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


def _calls(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_a_convolution_reads_a_channels_last_copy_and_its_output_is_laid_out_as_before() -> None:
    x = torch.randn(2, 3, 8, 8)
    gm = make_fx(lambda x: (_conv(x).relu(),))(x)
    new = channels_last(gm, None, [x])
    assert _calls(new).count("aten.clone.default") == 3  # NOTE: the input, the weight, the output
    out = new(x)[0]
    assert out.is_contiguous() and torch.allclose(out, gm(x)[0], atol=1e-5)


def test_a_graph_without_a_2d_convolution_is_left_as_it_is() -> None:
    x = torch.randn(2, 3, 8)
    w = torch.randn(4, 3, 3)
    gm = make_fx(lambda x: aten.convolution.default(x, w, None, [1], [1], [1], False, [0], 1))(x)
    assert channels_last(gm, None, [x]) is gm


def test_an_output_that_was_not_contiguous_keeps_the_graph_unchanged() -> None:
    x = torch.randn(2, 3, 8, 8)
    gm = make_fx(lambda x: (_conv(x).transpose(1, 2),))(x)
    assert channels_last(gm, None, [x]) is gm


def test_at_symbolic_sizes_the_output_strides_stay_expressions_of_the_sizes() -> None:
    se = ShapeEnv()
    mode = FakeTensorMode(shape_env=se)
    fake = mode.from_tensor(torch.randn(2, 3, 8, 8))
    w = mode.from_tensor(W, static_shapes=True)

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1) * 2,)

    with mode:
        gm = make_fx(f, tracing_mode="fake")(fake, w)
    new = channels_last(gm, mode, [fake, w])
    out = [n for n in new.graph.nodes if n.op == "output"][0].args[0][0].meta["val"]
    convs = [n.meta["val"] for n in new.graph.nodes if n.target is aten.convolution.default]
    assert convs[0].stride()[1] == 1  # channels-last: the channel stride is 1
    weights = [n.args[1].meta["val"] for n in new.graph.nodes if n.target is aten.convolution.default]
    assert weights[0].stride() == (27, 1, 9, 3)
    assert out.stride()[3] == 1 and isinstance(out.stride()[0], torch.SymInt)


def test_max_pooling_backward_is_atens_kernel_at_every_layout_with_the_meta_kernels_strides() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    for fmt, (k, s, p, ceil) in [(torch.contiguous_format, (2, 2, 0, False)),
                                 (torch.channels_last, (3, 2, 1, True)), (torch.channels_last, (2, 1, 0, False))]:
        x = torch.randn(2, 4, 7, 9).contiguous(memory_format=fmt)
        out, idx = aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p], [1, 1], ceil)
        g = torch.randn_like(out)
        args = (g, x, [k, k], [s, s], [p, p], [1, 1], ceil, idx)
        ours = torch.ops.guardsolve.max_pool2d_backward(*args)
        want = aten.max_pool2d_with_indices_backward(*args)
        assert torch.equal(ours, want) and ours.stride() == want.stride()
        with FakeTensorMode() as mode:
            fake = torch.ops.guardsolve.max_pool2d_backward(*[mode.from_tensor(a) if isinstance(a, torch.Tensor)
                                                              else a for a in args])
        assert fake.stride() == want.stride()


def test_an_inference_conv_net_is_served_channels_last_over_image_sizes_with_eagers_outputs() -> None:
    import guardsolve

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    fast = guardsolve.guarded(net, backend="inductor")
    with torch.no_grad():
        for shape in [(2, 3, 16, 16), (3, 3, 12, 20), (2, 3, 10, 14)]:
            x = torch.randn(shape)
            got, want = fast(x), net(x)
            assert got.stride() == want.stride() and torch.allclose(got, want, atol=1e-5)
    info = fast.cache_info()
    assert info.compiles == 1 and info.eager_calls == 0, info.miss_reasons


def _random_conv_net(rng: "random.Random") -> torch.nn.Module:
    """Convolutions of random kinds (groups, stride, dilation, padding modes, 1x1), pools,
    residual adds, an upsample and a 4-D or pooled output."""
    nn = torch.nn
    c = rng.choice([2, 3, 4])
    layers: list[nn.Module] = []
    for _ in range(rng.randint(1, 3)):
        out = rng.choice([4, 6, 8])
        groups = rng.choice([g for g in (1, 2) if c % g == 0 and out % g == 0])
        layers.append(nn.Conv2d(c, out, rng.choice([1, 3]), stride=rng.choice([1, 2]), padding=1,
                                dilation=rng.choice([1, 2]), groups=groups,
                                padding_mode=rng.choice(["zeros", "reflect", "circular"]), bias=rng.random() < 0.5))
        layers.append(rng.choice([nn.ReLU(), nn.BatchNorm2d(out).eval(), nn.Identity()]))
        if rng.random() < 0.4:
            layers.append(rng.choice([nn.MaxPool2d(2, ceil_mode=True), nn.AvgPool2d(2), nn.MaxPool2d(3, 1, 1)]))
        c = out
    if rng.random() < 0.5:
        layers.append(nn.Upsample(scale_factor=2, mode="nearest"))
    if rng.random() < 0.5:
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers).eval()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
def test_random_conv_nets_are_served_as_eager_at_image_sizes(seed: int) -> None:
    """Random conv nets through `guarded` (inference): every call's output equals eager's in
    values and strides, at sizes from 8 up, odd and non-square, batch 1 to 3."""
    import random

    import guardsolve

    rng = random.Random(seed)
    torch.manual_seed(seed)
    net = _random_conv_net(rng)
    fast = guardsolve.guarded(net, backend="inductor")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(rng.randint(1, 3), net[0].in_channels, rng.randint(8, 20), rng.randint(8, 20))
            try:
                want = net(x)
            except RuntimeError:
                continue  # NOTE: sizes eager rejects (a reflect pad wider than the map)
            got = fast(x)
            assert got.shape == want.shape and got.stride() == want.stride(), (net, x.shape)
            assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (net, x.shape)
    assert fast.cache_info().eager_calls == 0, fast.cache_info().eager_reasons
