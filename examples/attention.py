"""A pre-norm transformer attention block with a multi-head split `view(b, t, h, d // h)`.

Run: python examples/attention.py
CLI: guardsolve report examples/attention.py:AttentionBlock --shape x=2,16,64
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

import guardsolve
from guardsolve.cli.report import trace_summary


class AttentionBlock(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.norm(x)
        q, k, v = self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h))
        att = (q @ k.transpose(-2, -1)) * self.scale
        y = att.softmax(dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        return x + self.out(y)


def main() -> None:
    torch.manual_seed(0)
    block = AttentionBlock().eval()
    x = torch.randn(2, 16, 64)
    t = guardsolve.trace(block, x)
    assert torch.allclose(t.output, block(x), atol=1e-5)
    gs = guardsolve.simplify(t, verify=True)
    print(trace_summary(t, gs))
    print(f"\naccepts [3, 9, 64]: {gs.check(torch.randn(3, 9, 64))}; "
          f"accepts [3, 1, 64]: {gs.check(torch.randn(3, 1, 64))}")


if __name__ == "__main__":
    main()
