"""Training side by side with eager, for the JIT's training differential tests."""

from __future__ import annotations

from typing import Any, Callable


def _relative(a: Any, b: Any) -> float:
    """max |a - b| / max(1, max |b|): a relative difference that does not blow up near 0."""
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return float("inf")
    if not a.numel():
        return 0.0
    scale = max(1.0, b.abs().max().item())
    return ((a - b).abs().max().item()) / scale


def train_side_by_side(make_model: Callable[[], Any], batches: list[tuple[Any, ...]],
                       make_opt: Callable[[Any], Any], loss_fn: Callable[..., Any],
                       wrap: Callable[[Any], Callable[..., Any]]) -> tuple[float, Any]:
    """Train two copies of `make_model()` on the same `batches`, one called eagerly, one through
    `wrap(model)`, each with its own `make_opt(params)`: `loss = loss_fn(out, *batch[1:])`,
    `loss.backward()`, `opt.step()`, `opt.zero_grad()`. Returns the largest relative difference
    (`_relative`) over every step's loss, gradients, parameters and buffers (batch norm's
    running statistics and `num_batches_tracked` too), and the wrapped function.

    >>> import torch
    >>> worst, _ = train_side_by_side(lambda: torch.nn.Linear(3, 2), [(torch.randn(4, 3), torch.randn(4, 2))],
    ...                               lambda p: torch.optim.SGD(p, lr=0.1), torch.nn.functional.mse_loss, lambda m: m)
    >>> worst
    0.0
    """
    import copy

    import torch

    torch.manual_seed(0)
    ours = make_model()
    ref = copy.deepcopy(ours)
    fast = wrap(ours)
    opt_ours, opt_ref = make_opt(ours.parameters()), make_opt(ref.parameters())
    worst = 0.0
    for batch in batches:
        x, rest = batch[0], batch[1:]
        l_ours = loss_fn(fast(x), *rest)
        l_ours.backward()
        l_ref = loss_fn(ref(x), *rest)
        l_ref.backward()
        worst = max(worst, _relative(l_ours, l_ref))
        for p, q in zip(ours.parameters(), ref.parameters()):
            if (p.grad is None) != (q.grad is None):
                return float("inf"), fast
            if p.grad is not None:
                worst = max(worst, _relative(p.grad, q.grad))
        opt_ours.step()
        opt_ref.step()
        opt_ours.zero_grad()
        opt_ref.zero_grad()
        for p, q in zip(list(ours.parameters()) + list(ours.buffers()), list(ref.parameters()) + list(ref.buffers())):
            worst = max(worst, _relative(p, q))
    return worst, fast
