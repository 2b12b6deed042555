"""Every traced op against eager PyTorch: output, replay, and exactness of the minimal guards.

Exactness: on random new shapes, `GuardSet.check` is True exactly when re-tracing at those
shapes gives the same guard graph (a failing eager call counts as "not the same").
"""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import guardsolve

torch.manual_seed(0)
LIN_W, LIN_B = torch.randn(5, 4), torch.randn(5)
CONV_W, CONV_B = torch.randn(6, 3, 3, 3), torch.randn(6)
EMB = torch.randn(10, 4)


def r(*shape: int) -> torch.Tensor:
    return torch.randn(shape)


def idx(*shape: int) -> torch.Tensor:
    return torch.randint(0, 10, shape)


CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    # elementwise binary, broadcasting
    "add": (lambda a, b: a + b, (r(3, 1), r(1, 4))),
    "sub": (lambda a, b: torch.sub(a, b), (r(2, 3), r(3))),
    "mul": (lambda a, b: a.mul(b), (r(4), r(4))),
    "div": (lambda a, b: a / (b.abs() + 1), (r(2, 1, 3), r(4, 1))),
    "pow": (lambda a, b: torch.pow(a.abs(), b), (r(3), r(2, 3))),
    "maximum": (lambda a, b: torch.maximum(a, b), (r(3, 1), r(3))),
    "minimum": (lambda a, b: torch.minimum(a, b), (r(1), r(5))),
    "compare": (lambda a, b: (a < b, a >= b, a == b, a != b, a > b, a <= b), (r(3), r(2, 3))),
    "scalars": (lambda a: (a * 2, 2 - a, a / 4, 1 / (a.abs() + 1), a ** 2, a > 0, 3 + a, -a), (r(3, 2),)),
    "where": (lambda a, b: torch.where(a > 0, a, b), (r(3, 1), r(4))),
    "where_scalar": (lambda a: torch.where(a > 0, a, 0.0), (r(5),)),
    # unary
    "unary": (lambda a: (a.neg(), abs(a), a.exp(), (a.abs() + 1).log(), a.abs().sqrt(), a.relu(),
                         torch.sigmoid(a), torch.tanh(a), F.gelu(a), F.gelu(a, approximate="tanh"), F.relu(a)),
              (r(2, 3),)),
    # reductions
    "sum": (lambda a: (a.sum(), a.sum(1), a.sum((0, 2), keepdim=True), torch.sum(a, dim=-1)), (r(2, 3, 4),)),
    "mean_amax_amin": (lambda a: (a.mean(-1), a.amax(0), torch.amin(a, dim=(0, 1), keepdim=True)), (r(3, 4),)),
    "softmax": (lambda a: (a.softmax(-1), F.log_softmax(a, dim=1), torch.softmax(a, 0)), (r(2, 5),)),
    # linear algebra
    "dot": (lambda a, b: a @ b, (r(4), r(4))),
    "mv": (lambda a, b: torch.matmul(a, b), (r(3, 4), r(4))),
    "vm": (lambda a, b: a @ b, (r(4), r(4, 2))),
    "mm": (lambda a, b: torch.mm(a, b), (r(3, 4), r(4, 2))),
    "bmm": (lambda a, b: torch.bmm(a, b), (r(2, 3, 4), r(2, 4, 5))),
    "batched": (lambda a, b: a @ b, (r(2, 1, 3, 4), r(5, 4, 2))),
    "batched_vec": (lambda a, b: a @ b, (r(2, 3, 4), r(4))),
    "linear": (lambda x: F.linear(x, LIN_W, LIN_B), (r(2, 3, 4),)),
    # shape ops
    "view": (lambda x: x.view(-1, 6), (r(4, 3, 2),)),
    "reshape": (lambda x: torch.reshape(x, (x.shape[0], -1)).reshape(2, x.shape[0], -1), (r(4, 3, 2),)),
    "flatten": (lambda x: (x.flatten(), torch.flatten(x, 1), x.flatten(0, 1)), (r(2, 3, 4),)),
    "transpose": (lambda x: (x.transpose(0, 1), x.permute(2, 0, 1), torch.permute(x, (1, 2, 0))), (r(2, 3, 4),)),
    "T": (lambda x: (x.T, x.t(), torch.t(x)), (r(2, 3),)),
    "unsqueeze_squeeze": (lambda x: (x.unsqueeze(0), x.unsqueeze(-1), x.squeeze(), x.squeeze(1)), (r(3, 1, 2),)),
    "expand": (lambda x: (x.expand(4, -1, 3), x.expand(2, 4, 5, 3)), (r(5, 1),)),
    "cat": (lambda a, b: (torch.cat([a, b], 1), torch.cat((a, a), dim=0)), (r(2, 3), r(2, 5))),
    "stack": (lambda a, b: (torch.stack([a, b]), torch.stack([a, b], dim=-1)), (r(2, 3), r(2, 3))),
    "narrow": (lambda x: (x.narrow(1, 1, 2), torch.narrow(x, 0, -2, 1)), (r(3, 4),)),
    "getitem": (lambda x: (x[1:], x[:, 0], x[..., ::2], x[None], x[-1], x[1:-1, -3:], x[:, None, 2:5:2]),
                (r(4, 6),)),
    # layers
    "conv2d": (lambda x: F.conv2d(x, CONV_W, CONV_B, stride=2, padding=1), (r(2, 3, 9, 8),)),
    "conv2d_dilated": (lambda x: F.conv2d(x, CONV_W, None, 1, 0, 2), (r(1, 3, 7, 7),)),
    "layer_norm": (lambda x: F.layer_norm(x, (4,), LIN_W[0, :4], LIN_B[:4]), (r(2, 3, 4),)),
    "embedding": (lambda i: F.embedding(i, EMB), (idx(2, 5),)),
    # meta kernels that resize their own outputs (a traced tensor's resize_ is refused)
    "fft": (lambda x: (torch.fft.rfft(x), torch.fft.fft2(x)), (r(3, 8),)),
    # guardsolve's own rule (PyTorch's C++ meta fails over SymInts): pool size, samples' shape
    "fractional_max_pool3d": (lambda x, s: F.fractional_max_pool3d(x, 2, output_size=(3, 2, 3), _random_samples=s),
                              (r(2, 3, 5, 6, 5), torch.rand(3, 3, 3))),
    # size arithmetic in user code
    "size_arith": (lambda x: x.view(x.shape[0] * 2, x.size(-1) // 2), (r(3, 4),)),
    "modulo_branch": (lambda x: x * 2 if x.shape[0] % 8 == 0 else x - 1, (r(16, 2),)),
    "int_of_size": (lambda x: x.view(int(x.shape[0]), -1), (r(3, 4),)),
    "heads": (lambda x, h: x.view(x.shape[0], h, x.shape[1] // h).transpose(0, 1), (r(2, 8), 4)),
    # control flow on shapes
    "branch": (lambda x: x * x if x.shape[0] > 16 else x + x, (r(20),)),
    "assert": (lambda a, b: _assert_matmul(a, b), (r(3, 4), r(4, 5))),
    "loop": (lambda x: _loop(x), (r(3, 2),)),
}


def _assert_matmul(a: Any, b: Any) -> Any:
    assert a.shape[1] == b.shape[0]
    return a @ b


def _loop(x: Any) -> Any:
    out = x[0]
    for i in range(1, x.shape[0]):
        out = out + x[i]
    return out


MODULES: dict[str, tuple[Callable[[], nn.Module], tuple[Any, ...]]] = {
    "Linear": (lambda: nn.Linear(4, 3), (r(2, 4),)),
    "Conv2d": (lambda: nn.Conv2d(3, 4, 3, padding=1), (r(1, 3, 6, 6),)),
    "LayerNorm": (lambda: nn.LayerNorm(8), (r(2, 5, 8),)),
    "Embedding": (lambda: nn.Embedding(10, 6), (idx(3, 4),)),
    "Sequential": (lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.GELU()), (r(5, 8),)),
}


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and \
            torch.allclose(a.float(), b.float(), atol=1e-5, equal_nan=True)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _fresh(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return torch.randint_like(v, 0, 10) if not v.is_floating_point() else torch.randn_like(v)
    return v


def _check_case(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> None:
    t = guardsolve.trace(fn, *inputs)
    assert _close(t.output, fn(*inputs))
    fresh = tuple(_fresh(v) for v in inputs)
    replay = guardsolve.run_trace(t.graph, *fresh, constants=t.constants)
    assert _close(replay, fn(*fresh))
    gs = guardsolve.simplify(t.graph, explore=False)
    assert gs.check(*inputs)
    _assert_exact(fn, t, gs, inputs)


def _assert_exact(fn: Callable[..., Any], t: guardsolve.Trace, gs: guardsolve.GuardSet, inputs: tuple[Any, ...],
                  tries: int = 40) -> None:
    rng = random.Random(0)
    original = guardsolve.print_guards(t.guard_graph())
    for _ in range(tries):
        new = tuple(_perturb(rng, v) for v in inputs)
        try:
            same = guardsolve.print_guards(guardsolve.trace(fn, *new).guard_graph()) == original
        except (guardsolve.GuardsolveError, RuntimeError, IndexError, ValueError, AssertionError):
            same = False
        assert gs.check(*new) == same, ([tuple(v.shape) if isinstance(v, torch.Tensor) else v for v in new], str(gs))


def _perturb(rng: random.Random, v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        shape = [rng.choice([d, d, 1, rng.randint(0, 9)]) for d in v.shape]
        if not v.is_floating_point():
            return torch.randint(0, 10, shape)
        return torch.randn(shape)
    if isinstance(v, int):
        return rng.choice([v, v, rng.randint(1, 8)])
    return v


@pytest.mark.parametrize("name", list(CASES))
def test_op_against_eager(name: str) -> None:
    fn, inputs = CASES[name]
    _check_case(fn, inputs)


@pytest.mark.parametrize("name", list(MODULES))
def test_module_against_eager(name: str) -> None:
    make, inputs = MODULES[name]
    m = make().eval()
    t = guardsolve.trace(m, *inputs)
    with torch.no_grad():
        assert _close(t.output, m(*inputs))
    assert t.constants and all(n.params["name"] in t.constants for n in t.graph if n.op.value == "var_param")
    gs = guardsolve.simplify(t.graph, explore=False)
    _assert_exact(m, t, gs, inputs)
