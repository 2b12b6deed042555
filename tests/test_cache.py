"""guarded(fn): hits, misses with reasons, the size limit and eviction; results equal eager."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

import guardsolve


def test_hits_misses_and_reasons() -> None:
    @guardsolve.guarded
    def add(a, b):
        return a + b

    calls = [((4,), (4,)), ((5,), (5,)), ((4,), (1,)), ((7,), (7,)), ((3, 1), (3,))]
    for sa, sb in calls:
        a, b = torch.randn(sa), torch.randn(sb)
        assert torch.equal(add(a, b), a + b)
    info = add.cache_info()
    assert (info.entries, info.hits, info.misses) == (3, 2, 3)
    assert info.miss_reasons[0] == "no entries yet"
    reason = info.miss_reasons[1]
    assert reason.startswith("entry 0: a0 == b0 failed (a0=4, b0=1) — ") and "test_cache.py:" in reason
    assert reason.endswith("return a + b")
    assert "inputs do not fit the traced signature (a: rank 1, b: rank 1)" in info.miss_reasons[-1]


def test_replay_is_compiled_and_equals_eager() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    fast = guardsolve.guarded(model)
    for n in (3, 5, 3, 9, 5, 1):
        x = torch.randn(n, 8)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x), atol=1e-6)
    info = fast.cache_info()
    # two entries: x0 is free except that PyTorch's addmm decides x0 == 1 (as its 0/1
    # specialization does for make_fx and torch.export)
    assert (info.entries, info.hits, info.misses) == (2, 4, 2)
    src = fast.entries[0].run.__source__
    assert src.startswith("def replay(input):") and "bailout" not in src and "interpret" not in src


def test_size_limit_runs_eagerly_with_a_warning() -> None:
    @guardsolve.guarded(max_entries=2)
    def f(x):
        return x.view(-1, 2) if x.shape[0] % 2 == 0 else x * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [(f(torch.ones(n)), n) for n in (4, 3, 6, 5)]
        outs.append((f(torch.ones(2, 2)), 0))  # rank 2: a new entry would be needed
    assert len(caught) == 1 and "cache is full (2 entries); running eagerly" in str(caught[0].message)
    for out, n in outs[:4]:
        assert torch.equal(out, torch.ones(n).view(-1, 2) if n % 2 == 0 else torch.ones(n) * 2)
    info = f.cache_info()
    assert (info.entries, info.hits, info.misses, info.eager_calls) == (2, 2, 3, 1)


def test_eviction_keeps_the_most_recent() -> None:
    @guardsolve.guarded(max_entries=2, evict=True)
    def f(x):
        if x.shape[0] > 8:
            return x.sum()
        if x.shape[0] > 4:
            return x.mean()
        return x * 3

    seq = [10, 6, 2, 10, 9, 3, 6]
    for n in seq:
        x = torch.randn(n)
        expected = x.sum() if n > 8 else x.mean() if n > 4 else x * 3
        assert torch.allclose(f(x), expected)
    info = f.cache_info()
    # 10 miss, 6 miss, 2 miss(evict >8), 10 miss(evict >4), 9 hit, 3 hit, 6 miss(evict <=4)
    assert (info.entries, info.hits, info.misses, info.evictions) == (2, 2, 5, 3)


def test_value_guards_in_the_cache() -> None:
    @guardsolve.guarded(value_guards=True)
    def f(x):
        return x * 2 if x.sum() > 0 else x - 1

    pos, neg = torch.ones(3), -3 * torch.ones(3)
    assert torch.equal(f(pos), pos * 2)
    assert torch.equal(f(2 * pos), 4 * pos)
    assert torch.equal(f(neg), neg - 1)
    info = f.cache_info()
    assert info.hits == 1 and info.misses == 2
    assert any("bool_bailout" in r for r in info.miss_reasons)


def test_random_shape_sequences_equal_eager() -> None:
    import random

    rng = random.Random(0)

    def g(a, b):
        c = torch.cat([a, b], 0)
        return c.view(-1, 2).sum(-1) if c.shape[0] % 2 == 0 else c[1:] * b.shape[0]

    fast = guardsolve.guarded(g, max_entries=4, evict=True)
    for _ in range(40):
        a, b = torch.randn(rng.randint(1, 5)), torch.randn(rng.randint(1, 5))
        assert torch.allclose(fast(a, b), g(a, b))
    info = fast.cache_info()
    assert info.hits + info.misses == 40 and info.hits > 0
