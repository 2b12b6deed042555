"""A small CNN: conv2d (floordiv output sizes), 2x2 max pooling via reshape, flatten, linear.

Run: python examples/cnn.py
CLI: guardsolve report examples/cnn.py:SmallCNN --shape x=4,3,16,16
"""

from __future__ import annotations

import torch
import torch.nn as nn

import guardsolve
from guardsolve.cli.report import trace_summary


def pool2x2(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.view(b, c, h // 2, 2, w // 2, 2).amax(dim=(3, 5))


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = pool2x2(torch.relu(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.head(x.flatten(1))


def main() -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    x = torch.randn(4, 3, 16, 16)
    t = guardsolve.trace(model, x)
    assert torch.allclose(t.output, model(x), atol=1e-5)
    gs = guardsolve.simplify(t, verify=True)
    print(trace_summary(t, gs))
    for shape in ([1, 3, 16, 16], [1, 3, 15, 16], [1, 3, 16, 14]):
        print(f"accepts {shape}: {gs.check(torch.randn(shape))}")


if __name__ == "__main__":
    main()
