"""The compile-time comparison of an Inductor artifact with eager, for dtypes whose CPU kernels
lack `equal` (`jit/inductor/crosscheck.py`, `_COMPARED_AS`)."""

from __future__ import annotations

import warnings

import torch

import guardsolve


def test_complex_half_output_is_compared_not_raised() -> None:
    """`x.chalf()` under Inductor raised `"equal_cpu" not implemented for 'ComplexHalf'` from the
    compile's comparison (the user's call failed where eager works); it is compared as
    complex64, served compiled at two sizes with one compile, and equal to eager."""
    fast = guardsolve.guarded(lambda x: x.chalf() * 2, backend="inductor")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # NOTE: "ComplexHalf support is experimental"
        for n in (4, 7):
            x = torch.randn(n, 3)
            got, want = fast(x), x.chalf() * 2
            assert got.dtype == torch.complex32
            assert torch.equal(got.to(torch.complex64), want.to(torch.complex64))
    info = fast.cache_info()
    assert (info.compiles, info.eager_calls) == (1, 0), info
