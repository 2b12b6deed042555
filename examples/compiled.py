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
