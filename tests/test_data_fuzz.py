"""Random programs that decide on tensor data, through `guarded(..., value_guards=True)` against
eager: loops over the rows of a `nonzero`, branches on `.item()`, boolean-mask indexing, an
expert skipped when no row chose it, `topk` of a count read from data. Sizes from 0 up, data
whose selections are empty, one row, or all rows. Each call's output must equal eager's; the
replay backend in the default run, Inductor's compiled segments in the slow one."""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
import torch

import guardsolve

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _rows_hit(thr: float) -> Step:
    def step(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        for i in (x.sum(1) > thr).nonzero():
            acc = acc + x.index_select(0, i).sum(0)
        return acc
    return step


def _item_branch(thr: float) -> Step:
    def step(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        if x.abs().sum().item() > thr:
            return acc * 2
        return acc - 1
    return step


def _masked(thr: float) -> Step:
    def step(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        return acc + x[x > thr].sum()
    return step


def _skip_empty(thr: float) -> Step:
    def step(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        tok = (x[:, 0] > thr).nonzero(as_tuple=True)[0]
        if tok.numel() == 0:
            return acc + 1
        return acc + x.index_select(0, tok).mean(0)
    return step


def _topk_count(thr: float) -> Step:
    def step(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        k = int((x > thr).sum().item())
        return acc + x.flatten().topk(k).values.sum()
    return step


_STEPS = (_rows_hit, _item_branch, _masked, _skip_empty, _topk_count)


def _program(rng: random.Random) -> Callable[[torch.Tensor], torch.Tensor]:
    steps = [rng.choice(_STEPS)(rng.choice([-0.5, 0.0, 0.5, 1.0])) for _ in range(rng.randint(1, 3))]

    def program(x: torch.Tensor) -> torch.Tensor:
        acc = x.new_zeros(x.shape[1])
        for s in steps:
            acc = s(x, acc)
        return acc * 1.5
    return program


def _inputs(rng: random.Random, gen: torch.Generator, d: int, calls: int) -> list[torch.Tensor]:
    out = []
    for _ in range(calls):
        n = rng.choice([0, 1, 2, 3, 5, 8])
        shift = rng.choice([0.0, 0.0, -3.0, 3.0])  # NOTE: selections empty or full, now and then
        out.append(torch.randn(n, d, generator=gen) + shift)
    return out


def _check(seed: int, backend: str, calls: int) -> Any:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    fn = _program(rng)
    g = guardsolve.guarded(fn, backend=backend, value_guards=True)
    with torch.no_grad():
        for x in _inputs(rng, gen, rng.choice([1, 2, 4]), calls):
            want = fn(x)
            got = g(x)
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5, equal_nan=True), (seed, x.shape)
    g.wait_background()
    return g.cache_info()


@pytest.mark.parametrize("seed", range(24))
def test_random_data_dependent_programs_replay_as_eager(seed: int) -> None:
    info = _check(seed, "replay", 10)
    assert info.hits + info.misses == 10 and info.eager_calls == 0, info.eager_reasons


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_random_data_dependent_programs_served_as_segments_as_eager(seed: int) -> None:
    info = _check(seed, "inductor", 12)
    assert info.hits + info.misses == 12 and info.eager_calls == 0, info.eager_reasons
