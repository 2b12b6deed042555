"""Random programs and eager's outcomes, for the JIT's differential tests."""

from __future__ import annotations

import random
from typing import Any, Callable


_UNARY: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("sin", lambda x: x.sin()), ("relu", lambda x: x.relu()), ("sum(-1, keepdim)", lambda x: x.sum(-1, keepdim=True)),
    ("softmax(-1)", lambda x: x.softmax(-1)), ("view(b, -1)", lambda x: x.view(x.shape[0], -1)),
    ("t().contiguous()", lambda x: x.transpose(0, 1).contiguous()), ("* 2", lambda x: x * 2),
    ("mean(0)", lambda x: x.mean(0)), ("[:, :2]", lambda x: x[:, :2]), ("exp().log1p()", lambda x: x.exp().log1p()),
)


_BINARY: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
    ("a + b", lambda a, b: a + b), ("a * b", lambda a, b: a * b), ("cat([a, b])", lambda a, b: __import__("torch").cat([a, b])),
    ("a @ b.T", lambda a, b: a @ b.transpose(0, 1)), ("where(a > b, a, b)", lambda a, b: __import__("torch").where(a > b, a, b)),
)


def random_program(rng: random.Random) -> tuple[str, Callable[..., Any], tuple[Any, ...]]:
    """A small random program of two 2-D tensors (a binary op, then up to three unary ones:
    broadcasts, reductions, views, slices, matmul) with example inputs; its name says what it runs.

    >>> name, fn, inputs = random_program(random.Random(1))
    >>> isinstance(name, str), len(inputs)
    (True, 2)
    """
    import torch

    b_name, binary = rng.choice(_BINARY)
    unary = [rng.choice(_UNARY) for _ in range(rng.randint(0, 3))]

    def program(a: Any, b: Any) -> Any:
        z = binary(a, b)
        for _, u in unary:
            z = u(z)
        return z

    shape = lambda: (rng.choice([1, 2, 3, 4, 6]), rng.choice([1, 2, 3, 5]))  # noqa: E731
    a = shape()
    b = a if rng.random() < 0.5 else shape()
    name = " -> ".join([b_name, *[n for n, _ in unary]]) + f" at {list(a)}, {list(b)}"
    return name, program, (torch.randn(*a), torch.randn(*b))


def outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    """("ok", value) or ("raises", "Type: message") of one call."""
    try:
        return ("ok", fn(*args))
    except Exception as e:  # NOTE: the outcome is compared, not handled
        return ("raises", f"{type(e).__name__}: {e}")


def same_outcome(expected: tuple[str, Any], got: tuple[str, Any], atol: float = 1e-4) -> str | None:
    """None when `got` is eager's `expected`: the same values (tensors close, same shape and
    dtype) or an error of the same type; else what differs."""
    import torch
    from torch.utils._pytree import tree_flatten

    if expected[0] != got[0]:
        return f"eager {expected[0]} ({str(expected[1])[:120]}), got {got[0]} ({str(got[1])[:120]})"
    if expected[0] == "raises":
        e_type, g_type = expected[1].split(":")[0], got[1].split(":")[0]
        return None if e_type == g_type else f"eager raises {expected[1][:120]}, got {got[1][:120]}"
    fe, se = tree_flatten(expected[1])
    fg, sg = tree_flatten(got[1])
    if se != sg:
        return f"output structure {sg} where eager has {se}"
    for i, (x, y) in enumerate(zip(fe, fg)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return f"output {i}: {getattr(y, 'shape', y)} where eager has {tuple(x.shape)} {x.dtype}"
            if not torch.allclose(x, y, atol=atol, rtol=atol, equal_nan=True):
                return f"output {i}: values differ by {(x - y).abs().max().item():.3g}"
        elif x != y:
            return f"output {i}: {y!r} where eager has {x!r}"
    return None
