"""Sizes PyTorch's own rules pin although the trace does not depend on them (issue 38).

A float a rule computes from a size (`pinv`'s default tolerance, an `upsample`'s index scale)
pins it only once something reads its value; `kron`, `max_pool1d` and the RNNs' rules read
sizes as ints in C++ (or unbind the sequence) and take symbolic rules of their own. Each is
checked against eager at sizes the example never had. A constant a C++ composite makes from a
size it read as an int (`cov`'s observation count) keeps the size pinned: a trace at another
size records another constant.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import guardsolve


def _agrees(fn: Callable[..., Any], shapes: list[tuple[tuple[int, ...], ...]]) -> guardsolve.GuardSet:
    """The guards of `fn` traced at `shapes[0]`; `guarded(fn)` equals eager at every shape (a
    shape where eager raises raises too)."""
    torch.manual_seed(0)
    gs = guardsolve.simplify(guardsolve.trace(fn, *[torch.randn(*s) for s in shapes[0]]))
    g = guardsolve.guarded(fn)
    for shape in shapes:
        xs = [torch.randn(*s) for s in shape]
        try:
            want = fn(*xs)
        except Exception as e:
            with pytest.raises(type(e)):
                g(*xs)
            continue
        got = g(*xs)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for a, b in zip(want, got):
            assert a.shape == b.shape and a.stride() == b.stride(), (shape, a.shape, b.shape)
            assert torch.allclose(a, b, atol=1e-5, equal_nan=True), shape
    return gs


def _pins(gs: guardsolve.GuardSet, dim: str) -> bool:
    return any(str(c).startswith(f"{dim} == ") and str(c)[len(dim) + 4:].isdigit() for c in gs.constraints)


def test_pinvs_default_tolerance_leaves_the_sizes_free() -> None:
    gs = _agrees(lambda A: torch.linalg.pinv(A), [((5, 5),), ((5, 7),), ((9, 3),), ((1, 1),), ((6, 6),)])
    assert not _pins(gs, "A0") and not _pins(gs, "A1"), gs
    assert gs.check(torch.ones(7, 7)) and gs.check(torch.ones(40, 40))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_an_upsample_to_a_fixed_size_leaves_the_input_width_free(mode: str) -> None:
    fn = lambda x: F.interpolate(x, size=[3], mode=mode)  # noqa: E731
    gs = _agrees(fn, [((2, 3, 4),), ((2, 3, 7),), ((2, 3, 11),), ((1, 3, 2),)])
    assert not _pins(gs, "x2"), gs
    assert gs.check(torch.ones(2, 3, 9)) and gs.check(torch.ones(2, 3, 50))


def test_an_upsample_by_a_fractional_scale_leaves_the_size_free() -> None:
    """The output size is `int(float(x) * 2.5)`: an exact fraction of an int, recorded as
    `(x * 5) // 2`, no pin; its only bound keeps PyTorch's double product exact."""
    fn = lambda x: F.interpolate(x, scale_factor=2.5)  # noqa: E731
    gs = _agrees(fn, [((1, 3, 5),), ((1, 3, 6),), ((1, 3, 13),), ((2, 3, 5),), ((1, 3, 1),)])
    assert not _pins(gs, "x2"), gs
    assert gs.check(torch.ones(1, 3, 7)) and gs.check(torch.ones(4, 3, 101))
    assert [c.text for c in gs if "x2" in c.text] == ["x2 <= 1801439850948198", "x2 >= 1"], gs
    shrink = lambda x: F.interpolate(x, scale_factor=0.75, mode="linear")  # noqa: E731
    gs = _agrees(shrink, [((1, 2, 8),), ((1, 2, 9),), ((2, 2, 31),), ((1, 2, 2),)])
    assert not _pins(gs, "x2"), gs


def test_kron_takes_a_symbolic_rule() -> None:
    gs = _agrees(lambda a, b: torch.kron(a, b), [((2, 3), (4, 5)), ((7, 3), (4, 1)), ((1, 3), (4, 5)), ((0, 3), (4, 5)),
                              ((2, 3, 4), (5,)), ((2, 3), (6, 2))])
    assert str(gs) == "", gs  # NOTE: every size is free (`a0 == 1` or not, the trace is one op)
    assert gs.check(torch.ones(6, 9), torch.ones(8, 3))


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, dilation=2)])
def test_max_pool1d_takes_a_symbolic_rule(kw: dict[str, Any]) -> None:
    fn = lambda x: F.max_pool1d(x, **kw)  # noqa: E731
    gs = _agrees(fn, [((2, 3, 10),), ((2, 3, 3),), ((2, 3, 2),), ((1, 1, 7),), ((0, 3, 9),), ((3, 11),),
                      ((2, 3, 4),), ((2, 3, 5),), ((2, 3, 31),)])
    assert not _pins(gs, "x2"), gs
    assert gs.check(torch.ones(2, 3, 64))


@pytest.mark.parametrize("make", [
    lambda: torch.nn.RNN(4, 6, num_layers=2, bidirectional=True, batch_first=True),
    lambda: torch.nn.RNN(4, 6, nonlinearity="relu"),
    lambda: torch.nn.GRU(4, 6, batch_first=True),
    lambda: torch.nn.GRU(4, 6, num_layers=2, bidirectional=True),
])
def test_rnns_keep_the_sequence_length_free(make: Callable[[], torch.nn.Module]) -> None:
    torch.manual_seed(0)
    m = make().eval()
    time = 1 if m.batch_first else 0
    shape = lambda t, b: (b, t, 4) if m.batch_first else (t, b, 4)  # noqa: E731
    gs = _agrees(lambda x: m(x), [(shape(5, 2),), (shape(1, 2),), (shape(9, 2),), (shape(3, 1),), (shape(0, 2),),
                                  (shape(4, 3),)])
    assert not _pins(gs, f"x{time}"), gs
    assert gs.check(torch.ones(*shape(64, 2)))


def test_a_constant_made_from_a_size_keeps_it_pinned() -> None:
    # NOTE: `cov` divides by `scalar_tensor(n)`: a trace at another n records another constant,
    # so no route at another size merges (it did, and a replay divided by the example's n)
    gs = _agrees(lambda input: torch.cov(input), [((3, 5),), ((3, 7),), ((3, 1),), ((2, 5),)])
    assert _pins(gs, "input1"), gs
    assert not gs.check(torch.ones(3, 7))
