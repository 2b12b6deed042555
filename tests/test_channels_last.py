"""The channels-last pass of compiled graphs (`jit/layout.py`) and max pooling's backward as
ATen's op: where the pass copies, the layouts of what the graph returns at real and symbolic
sizes, and random conv nets served compiled against eager. The layouts a compile decides
without reading the batch size (`conv_formats`, `squeeze_views`) against ATen's own."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch._subclasses.fake_tensor import FakeTensorMode

from guardsolve.jit.layout import channels_last, channels_last_strides, conv_formats, squeeze_strides

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
        # NOTE: batch 1 and 17 too: a fake convolution's layout read the batch (oneDNN from 2 and
        # from 16), which held every compile to 2 <= batch <= 15 (`conv_formats`)
        for shape in [(2, 3, 16, 16), (3, 3, 12, 20), (1, 3, 10, 14), (17, 3, 8, 8), (0, 3, 8, 8)]:
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
    values and strides, at sizes from 8 up, odd and non-square, batch 0 to 3 and 17."""
    import random

    import guardsolve

    rng = random.Random(seed)
    torch.manual_seed(seed)
    net = _random_conv_net(rng)
    fast = guardsolve.guarded(net, backend="inductor")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(rng.choice([0, 1, 2, 3, 17]), net[0].in_channels, rng.randint(8, 20), rng.randint(8, 20))
            try:
                want = net(x)
            except RuntimeError:
                continue  # NOTE: sizes eager rejects (a reflect pad wider than the map)
            got = fast(x)
            assert got.shape == want.shape and got.stride() == want.stride(), (net, x.shape)
            assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (net, x.shape)
    assert fast.cache_info().eager_calls == 0, fast.cache_info().eager_reasons


def _format_cases() -> "Iterator[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]":
    """2-D convolutions of every kind `conv_formats` decides: dtypes, input and weight layouts,
    batch 0 to 17 (oneDNN's thresholds 2 and 16), spatial sizes, kernels, strides, dilations,
    groups, transposed, an input that requires grad."""
    import itertools

    for dt, fi, fw, b, hw, k, s, d, g, tr, rg in itertools.product(
            (torch.float32, torch.float64, torch.bfloat16), (0, 1), (0, 1), (0, 1, 2, 15, 16, 17), (1, 6), (1, 3),
            (1, 2), (1, 2), (1, 2), (False, True), (False, True)):
        if hw + 2 < d * (k - 1) + 1:
            continue  # NOTE: a kernel wider than the padded input: ATen raises
        x = torch.randn(b, 4, hw, hw, dtype=dt, requires_grad=rg)
        w = torch.randn(4, 4 // g, k, k, dtype=dt)  # NOTE: (out, in / g) or, transposed, (in, out / g)
        if fi:
            x = x.detach().to(memory_format=torch.channels_last).requires_grad_(rg)
        if fw:
            w = w.to(memory_format=torch.channels_last)
        yield x, w, dict(bias=None, stride=[s, s], padding=[1, 1], dilation=[d, d], transposed=tr,
                         output_padding=[0, 0], groups=g)


def test_conv_formats_lays_out_every_convolution_as_atens_own_pick() -> None:
    """The memory format a fake convolution takes under `conv_formats` (no batch read) is the
    one ATen's own backend pick gives, on 1 and 2 threads (oneDNN's 1x1 rule reads them)."""
    select, fmt = torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format
    threads = torch.get_num_threads()
    cases = differ = 0
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for x, w, kw in _format_cases():
                want = fmt(x, w, select(x, w, **kw))
                with conv_formats():
                    got = torch._C._conv_determine_backend_memory_format(x, w, torch._C._select_conv_backend(x, w, **kw))
                cases, differ = cases + 1, differ + (got != want)
    finally:
        torch.set_num_threads(threads)
    assert (torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format) == (select, fmt)
    assert cases > 10000 and differ == 0


def test_conv_formats_leaves_convolutions_it_does_not_decide_to_aten() -> None:
    """With oneDNN off (NNPACK then takes batches from 16, contiguous), ATen picks as before."""
    x, w = torch.randn(16, 4, 6, 6).to(memory_format=torch.channels_last), torch.randn(4, 4, 3, 3)
    kw = dict(bias=None, stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=1)
    with torch.backends.mkldnn.flags(enabled=False):
        want = torch._C._select_conv_backend(x, w, **kw)
        with conv_formats():
            got = torch._C._select_conv_backend(x, w, **kw)
    assert got == want and str(got) != "_ConvBackend.Slow2d"


def test_channels_last_strides_is_atens_suggestion() -> None:
    """`channels_last_strides` against ATen's suggested memory format (a channels-last weight
    never suggested: its convolution's format is the input's), over permuted, sliced and
    expanded tensors with sizes 0, 1 and more."""
    import itertools
    import random

    rng = random.Random(0)
    w = torch.randn(1, 1, 1, 1)
    slow = torch._C._ConvBackend.Slow2d
    checked = 0
    for sizes in itertools.product((0, 1, 2, 3), repeat=4):
        for _ in range(6):
            base = torch.randn(*[s + rng.randint(0, 2) for s in sizes])
            x = base[tuple(slice(0, s, rng.choice([1, 2]) if s > 1 else 1) for s in sizes)]
            x = x.permute(*rng.sample(range(4), 4)).contiguous().permute(*rng.sample(range(4), 4))
            x = x[:sizes[0] if x.shape[0] >= sizes[0] else None]
            if rng.random() < 0.2:
                x = torch.randn(1, *x.shape[1:]).expand(x.shape)
            ww = w.expand(1, x.shape[1], 1, 1).contiguous()
            want = torch._C._conv_determine_backend_memory_format(x, ww, slow) == torch.channels_last
            assert channels_last_strides(x.shape, x.stride()) == want, (x.shape, x.stride())
            checked += 1
    assert checked == 256 * 6


def test_squeeze_strides_address_what_the_view_addresses() -> None:
    """A view that drops or inserts dims of size 1, laid out by `squeeze_strides`, reads the
    elements `view` reads, over permuted and sliced tensors; any other view is left (None)."""
    import random

    rng = random.Random(1)
    for _ in range(400):
        sizes = [rng.choice([1, 1, 2, 3, 5]) for _ in range(rng.randint(1, 4))]
        x = torch.randn(*[s * 2 for s in sizes])[tuple(slice(0, s * rng.choice([1, 2]), rng.choice([1, 2])) for s in sizes)]
        x = x[tuple(slice(0, s) for s in sizes)].permute(*rng.sample(range(len(sizes)), len(sizes)))
        new = [s for s in x.shape if s != 1 or rng.random() < 0.5]
        for _ in range(rng.randint(0, 2)):
            new.insert(rng.randint(0, len(new)), 1)
        strides = squeeze_strides(list(x.shape), list(x.stride()), new)
        assert strides is not None
        got = torch.as_strided(x, new, strides, x.storage_offset())
        assert torch.equal(got, x.reshape(new)), (x.shape, x.stride(), new)
    assert squeeze_strides([2, 3], [3, 1], [6]) is None and squeeze_strides([2, 3], [3, 1], [3, 2]) is None


@pytest.mark.parametrize("backend", ["replay", "inductor"])
def test_the_tracing_call_returns_eagers_layout(backend: str) -> None:
    """A convolution of a channels-last input is channels-last in eager and contiguous by its
    shape rule; the trace copies eager's output into the rule's strides, so the call that
    traced returned a contiguous output where every later call (and eager) gives channels-last.
    It is served as the later calls are; a trace that writes its input keeps its own run (once)."""
    import guardsolve

    torch.manual_seed(0)
    w = torch.randn(4, 3, 3, 3)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    want = torch.conv2d(x, w)
    g = guardsolve.guarded(lambda a: torch.conv2d(a, w), backend=backend)
    for _ in range(2):
        got = g(x)
        assert got.stride() == want.stride() and torch.allclose(got, want, atol=1e-5)
    def written(a: torch.Tensor) -> torch.Tensor:
        return torch.conv2d(a.mul_(2), w)
    x2 = x.clone()
    out = guardsolve.guarded(written, backend=backend)(x2)
    assert torch.equal(x2, x * 2) and torch.allclose(out, torch.conv2d(x * 2, w), atol=1e-5)


def test_an_output_is_laid_out_as_eagers_where_its_shape_rule_differs() -> None:
    """`group_norm` of a channels-last input: channels-last in eager, contiguous by its shape
    rule, which Inductor followed on every compiled call; the compiled graph now writes it as
    eager lays it out (`layout.eager_layouts`), at other batches and sizes too (the trace reads
    the input's strides, so each shape is its own entry here)."""
    import guardsolve

    f = lambda a: torch.nn.functional.group_norm(a, 3) * 2  # noqa: E731
    g = guardsolve.guarded(f, backend="inductor")
    for shape in [(2, 6, 8, 8), (2, 6, 8, 8), (3, 6, 5, 7), (1, 6, 4, 4)]:
        x = torch.randn(shape).to(memory_format=torch.channels_last)
        got, want = g(x), f(x)
        assert got.stride() == want.stride() and torch.allclose(got, want, atol=1e-5), (shape, got.stride())
    assert g.cache_info().eager_calls == 0 and g.cache_info().hits == 1
