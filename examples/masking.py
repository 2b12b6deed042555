"""Boolean masks: ops whose output size depends on the data get an unbacked size.

`x[x > 0]`, `torch.nonzero`, `masked_select` and `unique` return as many rows as the data
says. guardsolve gives that size a fresh name (`u0`), as PyTorch's FakeTensor does: the trace
stays valid for any data, the guards speak only of input dims, and a shape decision on `u0`
itself is the one thing that cannot be traced.

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

    try:
        guardsolve.trace(rows_needed, torch.randn(6, 4))
    except guardsolve.DataDependentError as e:
        print(f"\nrows_needed: DataDependentError: {e}")


if __name__ == "__main__":
    main()
