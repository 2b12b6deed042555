"""Upsampling under `guarded(fn, backend="inductor")`: one compile serves every size the trace does.

The upsample family's `.vec` overloads are C++ composites that read their input's sizes as
ints; `jit/decompose.py` re-traces them through PyTorch's Python decompositions. The fast
tests check the re-trace itself (no Inductor) and two small programs end to end (one compile
each); the ViT-style bicubic table and the other modes are marked slow (10-30 s a compile).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import guardsolve
from guardsolve.jit.decompose import retrace_scope, symbolic_composites

aten = torch.ops.aten


def _retrace_guards(fn: Callable[..., Any], x: torch.Tensor, ops: Sequence[str]) -> list[str]:
    """make_fx of `fn` over a FakeTensor whose sizes are all symbols, as `compile_variant`
    re-traces (with `retrace_scope(ops)`): the ShapeEnv's guards, as text."""
    se = ShapeEnv(duck_shape=False, specialize_zero_one=False)
    mode = FakeTensorMode(shape_env=se)
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * x.dim())
    fake = mode.from_tensor(x, symbolic_context=ctx)
    with mode, torch.no_grad(), retrace_scope(ops):
        make_fx(fn, tracing_mode="fake")(fake)
    return [str(g.expr) for g in se.guards]


def test_every_upsample_vec_overload_decomposes_and_nothing_else() -> None:
    table = symbolic_composites()
    vec = {f"aten.{name}.vec" for name in dir(aten) if "upsample" in name and not name.endswith("backward")
           and "vec" in getattr(aten, name).overloads()}
    assert vec <= table, vec - table
    assert "aten.matmul.default" not in table and "aten.upsample_bilinear2d.default" not in table


@pytest.mark.parametrize("call, op", [
    (lambda x: aten.upsample_nearest2d.vec(x, None, [2.0, 2.0]), "aten.upsample_nearest2d.vec"),
    (lambda x: aten.upsample_bilinear2d.vec(x, [x.shape[2] * 2, x.shape[3] + 1], False, None), "aten.upsample_bilinear2d.vec"),
    (lambda x: aten.upsample_bicubic2d.vec(x, [x.shape[2] // 2 + 1, x.shape[3]], False, None), "aten.upsample_bicubic2d.vec"),
    (lambda x: aten._upsample_bilinear2d_aa.vec(x, [x.shape[2] // 2 + 1, 3], False, None), "aten._upsample_bilinear2d_aa.vec"),
])
def test_retrace_keeps_sizes_symbolic(call: Callable[..., Any], op: str) -> None:
    """Without the decomposition, the C++ composite pins every dim (`Eq(s, 6)`, from
    FakeTensor's `aten.size`) or fails ("SymIntArrayRef expected to contain only concrete
    integers"); with it, no size is pinned to a constant."""
    x = torch.randn(2, 3, 6, 7)
    assert _pinned(_retrace_guards(call, x, [op])) == []
    try:
        before = _retrace_guards(call, x, [])
    except RuntimeError as e:
        assert "concrete integers" in str(e)
    else:
        assert len(_pinned(before)) == 4, before


def _pinned(guards: list[str]) -> list[str]:
    """The guards that pin a size to a constant (`Eq(s16, 6)`)."""
    return [g for g in guards if g.startswith("Eq(") and g[:-1].split(", ")[-1].isdigit()]


def _served(fn: Callable[..., Any], shapes: Sequence[Sequence[int]], **kw: Any) -> Any:
    """`guarded(fn, backend="inductor")` at each shape (no grad), every output equal to eager's."""
    torch.manual_seed(0)
    fast = guardsolve.guarded(fn, backend="inductor", **kw)
    with torch.no_grad():
        for shape in shapes:
            x = torch.randn(*shape)
            got, want = fast(x), fn(x)
            assert got.shape == want.shape, shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    return fast


def test_upsample_scale_factor_two_one_compile_over_six_sizes() -> None:
    """Was: one compile per input shape, every dim pinned "at make_fx re-trace: wrapper
    (torch/utils/_stats.py:29)"."""
    up = torch.nn.Upsample(scale_factor=2)
    fast = _served(up, [(2, 3, 4, 4), (1, 3, 5, 5), (0, 3, 8, 8), (1, 3, 1, 1), (2, 3, 7, 2), (1, 3, 16, 16)])
    info = fast.cache_info()
    assert (info.traces, info.compiles, info.eager_calls, info.hits) == (1, 1, 0, 5)
    v = fast.entries[0].variants[0]
    assert not v.exact_example and v.certificate is not None and v.certificate.equivalent
    assert not any("==" in g.text for g in v.backend if g.kind == "size"), v.backend


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsample_by_a_fractional_scale_one_compile(mode: str) -> None:
    """`scale_factor=1.5`: was a pin of every dim, one compile per shape; the output size is
    `(h * 3) // 2` at symbolic sizes, through the trace and Inductor's re-trace alike."""
    up = lambda x: F.interpolate(x, scale_factor=1.5, mode=mode) * 2  # noqa: E731
    fast = _served(up, [(2, 3, 8, 10), (1, 3, 7, 9), (2, 3, 16, 5), (1, 3, 9, 9), (0, 3, 4, 4)])
    info = fast.cache_info()
    assert (info.traces, info.compiles, info.eager_calls) == (1, 1, 0), info


def test_unet_interpolate_size_from_shape_one_compile() -> None:
    """A U-Net skip: pooled features resized back to the input's own size and concatenated.
    Was: never compiled ("make_fx could not re-trace ... SymIntArrayRef expected to contain
    only concrete integers"), every call eager. Sizes 0 and 1 (batch), 2, odd and doubled."""
    # NOTE: no convolution: Inductor's conv lowering bounds the batch on its own (2 <= b <= 15
    # compiled at batch 2, another variant at 0 or 1), which is not what this test measures
    def unet(x: torch.Tensor) -> torch.Tensor:
        h = F.avg_pool2d(x, 2).relu()
        h = F.interpolate(h, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return torch.cat([x, h], 1)

    fast = _served(unet, [(2, 3, 8, 9), (0, 3, 8, 8), (1, 3, 2, 3), (1, 3, 5, 7), (2, 3, 16, 18), (1, 3, 33, 2)])
    info = fast.cache_info()
    assert (info.traces, info.compiles, info.eager_calls) == (1, 1, 0), info
    assert "interpolate" in fast.entries[0].variants[0].explain()


def test_a_size_read_from_another_ops_output_compiles_once() -> None:
    """A position table resized to a pooled grid: the decomposition's scale `4 / grid` is a
    float of a size no graph node reads (the input's, through the pool's output size), which
    Inductor's float-to-tensor pass could not find (`KeyError: s0`): every call ran eagerly."""
    pos = torch.randn(1, 3, 4, 4)

    def table(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(pos, size=F.avg_pool2d(x, 4).shape[-2:], mode="bilinear") + 1

    fast = _served(table, [(2, 3, 16, 16), (1, 3, 8, 24), (3, 3, 32, 12), (2, 3, 4, 4), (1, 3, 40, 20)])
    info = fast.cache_info()
    assert (info.traces, info.compiles, info.eager_calls) == (1, 1, 0), info


@pytest.mark.slow
def test_vit_bicubic_position_table_one_compile_over_grids() -> None:
    """A ViT's learned position table (4 x 4) resized by bicubic interpolation to the patch grid
    of each image (grids 4x4, 8x6, 5x9, 3x2, 2x3, 7x7): one compile. Was: eager every call. (A
    1x1 grid is another trace: the rule's route for an output of one row or column.)
    Patches are embedded by a matmul (see the U-Net test on convolutions); no batch 0 (eager's
    `pixel_unshuffle` of an empty tensor returns its input's shape, and einsum then fails)."""
    torch.manual_seed(0)
    embed = torch.randn(8, 3 * 16)
    pos = torch.randn(1, 8, 4, 4)

    def vit(x: torch.Tensor) -> torch.Tensor:
        tokens = torch.einsum("bchw,dc->bhwd", F.pixel_unshuffle(x, 4), embed)
        table = F.interpolate(pos, size=tokens.shape[1:3], mode="bicubic", align_corners=False)
        return (tokens + table.permute(0, 2, 3, 1)).flatten(1, 2)

    fast = _served(vit, [(2, 3, 16, 16), (1, 3, 32, 24), (2, 3, 20, 36), (1, 3, 12, 8), (3, 3, 8, 12), (1, 3, 28, 28)])
    info = fast.cache_info()
    assert (info.traces, info.compiles, info.eager_calls) == (1, 1, 0), info


@pytest.mark.slow
@pytest.mark.parametrize("fn, shapes", [
    (lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact"), [(1, 2, 6), (2, 2, 7), (0, 2, 1), (1, 2, 2)]),
    (lambda x: F.interpolate(x, size=x.shape[-1] * 3, mode="linear"), [(1, 2, 6), (2, 2, 7), (1, 2, 1), (1, 2, 2)]),
    (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), [(1, 1, 3, 3, 3), (1, 1, 4, 2, 5), (0, 1, 1, 1, 1)]),
    (lambda x: F.interpolate(x, size=(x.shape[-2] // 2, x.shape[-1] // 2), mode="bilinear", antialias=True),
     [(1, 2, 8, 8), (1, 2, 10, 6), (2, 2, 5, 7), (1, 2, 2, 2)]),
    (lambda x: F.interpolate(x, size=(x.shape[-2] * 2, x.shape[-1]), mode="bicubic", antialias=True),
     [(1, 2, 4, 4), (1, 2, 3, 6), (2, 2, 2, 2)]),
])
def test_other_modes_one_compile(fn: Callable[..., Any], shapes: Sequence[Sequence[int]]) -> None:
    info = _served(fn, shapes).cache_info()
    assert (info.traces, info.compiles, info.eager_calls) == (1, 1, 0), info
