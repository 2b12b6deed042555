"""Train a small conv net with batch norm through `guarded(model, backend="inductor")`.

    python examples/train.py

The loop is an ordinary one over images of changing sizes. One trace and one compile (a
forward and a backward from one joint graph) serve every step; an eager copy of the model
trains side by side, and each step prints both losses and how far the parameters and batch
norm's running statistics are from eager's. At the end: how each call was served, and the
check the compiled variant runs (the sizes it serves).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import guardsolve


def main() -> None:
    torch.manual_seed(0)
    # NOTE: one convolution: a convolution whose input needs a gradient (a second one) has its
    # height and width pinned by Inductor's lowering of its backward (one variant per image size,
    # as under torch.compile(dynamic=True)); the README says so
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    eager = copy.deepcopy(model)
    fast = guardsolve.guarded(model, backend="inductor")
    opt, opt_eager = (torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, eager))
    gen = torch.Generator().manual_seed(1)
    for step, (batch, side) in enumerate([(4, 16), (6, 24), (4, 12), (8, 20), (2, 16)]):
        x = torch.randn(batch, 3, side, side, generator=gen)
        y = torch.randint(0, 4, (batch,), generator=gen)
        loss = F.cross_entropy(fast(x), y)
        how = fast.last_call.how
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref = F.cross_entropy(eager(x), y)
        ref.backward()
        opt_eager.step()
        opt_eager.zero_grad()
        state = zip([*model.parameters(), *model.buffers()], [*eager.parameters(), *eager.buffers()])
        apart = max((a.double() - b.double()).abs().max().item() for a, b in state)
        print(f"step {step}: x {list(x.shape)}: {how:8} loss {loss.item():.6f} (eager {ref.item():.6f}), "
              f"parameters and buffers within {apart:.1e} of eager's")
    info = fast.cache_info()
    print(f"traces {info.traces}, compiles {info.compiles}, calls run eagerly {info.eager_calls}")
    print("the compiled variant serves (sizes part of its check):")
    print("   ", str(fast.entries[0].variants[0].guards).replace("\n", "\n    "))


if __name__ == "__main__":
    main()
