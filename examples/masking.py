"""Boolean masks and `.item()`: values that depend on the data are unbacked.

`x[x > 0]`, `torch.nonzero`, `masked_select` and `unique` return as many rows as the data
says. guardsolve gives that size a fresh name (`u0`), as PyTorch's FakeTensor does: the trace
stays valid for any data, the guards speak only of input dims, and a shape decision on `u0`
itself is the one thing that cannot be traced. `.item()` is such a value too (torch.export's
unbacked symbol): `window` slices by a length read from a tensor, and each replay reads it anew.

Run: python examples/masking.py
CLI: guardsolve report examples/masking.py:positive_scores --shape x=6,4 --shape w=4
"""

from __future__ import annotations

import torch

import guardsolve
from guardsolve.cli.report import trace_summary


def positive_scores(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    scores = x * w                  # broadcast: guards on x1 and w0
    kept = scores[scores > 0]       # as many entries as are positive: unbacked size u0
    return kept.sum() + torch.nonzero(x).float().mean()


def window(x: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    n = length.item()               # a value read from data: recorded, never guarded
    return x[:, :n] * 2


def rows_needed(x: torch.Tensor) -> torch.Tensor:
    kept = x[x > 0]
    if kept.shape[0] > 4:           # a decision on u0: no shape guard can check it
        return kept[:4]
    return kept


def main() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(6, 4), torch.randn(4)
    t = guardsolve.trace(positive_scores, x, w)
    gs = guardsolve.simplify(t, verify=True)
    print("== positive_scores(x=[6, 4], w=[4])")
    print(trace_summary(t, gs))

    fast = guardsolve.guarded(positive_scores)
    for shape in ([6, 4], [3, 4], [6, 4]):
        x = torch.randn(shape)
        assert torch.allclose(fast(x, w), positive_scores(x, w))  # other data: other u0, same trace
    print(f"\nguarded: {fast.cache_info()}")

    t = guardsolve.trace(window, torch.randn(3, 8), torch.tensor(5))
    print("\n== window(x=[3, 8], length=5)")
    print(trace_summary(t, guardsolve.simplify(t)))
    fast = guardsolve.guarded(window)
    for n in (5, 2, 7):
        x = torch.randn(3, 8)
        assert torch.equal(fast(x, torch.tensor(n)), window(x, torch.tensor(n)))  # one trace, each n
    print(f"guarded: {fast.cache_info()}")

    try:
        guardsolve.trace(rows_needed, torch.randn(6, 4))
    except guardsolve.DataDependentError as e:
        print(f"\nrows_needed: DataDependentError: {e}")


if __name__ == "__main__":
    main()
