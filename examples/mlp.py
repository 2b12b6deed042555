"""An MLP: its parameters fix the input's feature dim; the batch dim stays free.

Run: python examples/mlp.py
CLI: guardsolve report examples/mlp.py:MLP --shape x=32,64
"""

from __future__ import annotations

import torch
import torch.nn as nn

import guardsolve
from guardsolve.cli.report import trace_summary


class MLP(nn.Module):
    def __init__(self, d_in: int = 64, hidden: int = 128, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x))).log_softmax(dim=-1)


def main() -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(32, 64)
    t = guardsolve.trace(model, x)
    assert torch.allclose(t.output, model(x), atol=1e-6)
    gs = guardsolve.simplify(t, verify=True)
    print(trace_summary(t, gs))
    print(f"\naccepts [7, 64]: {gs.check(torch.randn(7, 64))}; accepts [7, 65]: {gs.check(torch.randn(7, 65))}")


if __name__ == "__main__":
    main()
