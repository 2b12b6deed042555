"""torch.compile's own guards, minimal and explained, and its recompiles explained as they happen.

Run: python examples/compiled.py
CLI: guardsolve report examples/compiled.py:route --shape x=12 --shape y=13 --via torch.compile
"""

from __future__ import annotations

import torch

import guardsolve


def route(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Three branches on sizes: Dynamo guards all three; the third follows from the first two."""
    if x.shape[0] > 5:
        x = x * 2
    if x.shape[0] > 10:
        x = x + 1
    if x.shape[0] < y.shape[0]:
        return x.sum() + y.sum()
    return x.sum()


W = torch.randn(8, 4)


def view_mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch's own example: 12 shape lambdas, four of them "unknown source"."""
    return (x + y).view(x.shape[0], -1) @ W


def graph_break(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Two frames: the second gets `z`, computed inside the function."""
    z = x * 2
    torch._dynamo.graph_break()
    if z.shape[0] > 3:
        return z + y.sum()
    return z - 1


def scale(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin()


def main() -> None:
    report = guardsolve.explain_compile(route, torch.randn(12), torch.randn(13), dynamic=True)
    print("Dynamo's guards:", [g.code for g in report.dynamo_guards])
    print("minimal:", [c.text for c in report.guards])
    print(report.guards.verify())
    print()
    print(report)

    compiled = torch.compile(scale, backend="eager")
    with guardsolve.watch_recompiles() as log:
        for n in (2, 3, 8, 1):
            compiled(torch.randn(n, 4))
    print()
    print(log)


if __name__ == "__main__":
    main()
