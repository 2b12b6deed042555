"""A function that branches on shapes: each path has its own guards.

Run: python examples/branching.py
CLI: guardsolve report examples/branching.py:route --shape x=32,8 --shape y=8,4
"""

from __future__ import annotations

import torch

import guardsolve
from guardsolve.cli.report import trace_summary


def route(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 16:            # big batch: project
        assert x.shape[1] == y.shape[0], "x @ y needs matching inner dims"
        return x @ y
    if x.shape[1] % 4 == 0:        # small batch, groups of 4 features
        return x.view(x.shape[0], -1, 4).sum(-1)
    return x * 2


def main() -> None:
    torch.manual_seed(0)
    for xs, ys in (([32, 8], [8, 4]), ([8, 12], [3, 3]), ([8, 5], [3, 3])):
        x, y = torch.randn(xs), torch.randn(ys)
        t = guardsolve.trace(route, x, y)
        assert torch.allclose(t.output, route(x, y))
        gs = guardsolve.simplify(t, verify=True)
        print(f"== route(x={xs}, y={ys})")
        print(trace_summary(t, gs))
        print()


if __name__ == "__main__":
    main()
