"""Concatenate two feature maps and regroup them in pairs: cat + reshape arithmetic guards.

Run: python examples/cat_reshape.py
CLI: guardsolve report examples/cat_reshape.py:merge_pairs --shape a=4,6 --shape b=4,10
"""

from __future__ import annotations

import torch

import guardsolve
from guardsolve.cli.report import trace_summary


def merge_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.cat([a, b], dim=1)
    pairs = c.reshape(a.shape[0], -1, 2)
    return pairs.sum(-1) + torch.stack([a[:, 0], b[:, -1]], dim=1).mean(-1, keepdim=True)


def main() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 10)
    t = guardsolve.trace(merge_pairs, a, b)
    assert torch.allclose(t.output, merge_pairs(a, b))
    gs = guardsolve.simplify(t, verify=True)
    print(trace_summary(t, gs))
    for sa, sb in (([2, 3], [2, 5]), ([2, 3], [2, 4]), ([2, 3], [3, 5])):
        print(f"accepts a={sa}, b={sb}: {gs.check(torch.randn(sa), torch.randn(sb))}")


if __name__ == "__main__":
    main()
