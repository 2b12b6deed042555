"""guarded(fn): hits, misses with reasons, the size limit and eviction; results equal eager."""

from __future__ import annotations

import warnings

import pytest

import torch
import torch.nn as nn

import guardsolve


def test_hits_misses_and_reasons() -> None:
    @guardsolve.guarded(explore=False)  # NOTE: the example's path: a broadcast at size 1 misses
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
    assert reason.startswith("entry 0: a0 == b0 failed (a0=4, b0=1) (aten.add.Tensor's shape rule) — ") and "test_cache.py:" in reason
    assert reason.endswith("return a + b")
    assert "inputs do not fit the traced signature: a has rank 2, traced at rank 1" in info.miss_reasons[-1]
    merged = guardsolve.guarded(add.fn)  # NOTE: the broadcast routes record the same trace: they hit
    for sa, sb in calls:
        merged(torch.randn(sa), torch.randn(sb))
    info = merged.cache_info()
    assert (info.entries, info.hits, info.misses) == (2, 3, 2)


def test_replay_is_compiled_and_equals_eager() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    fast = guardsolve.guarded(model)
    for n in (3, 5, 3, 9, 5, 1):
        x = torch.randn(n, 8)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x), atol=1e-6)
    info = fast.cache_info()
    # one entry: PyTorch's addmm decides x0 == 1 (as its 0/1 specialization does for make_fx
    # and torch.export), but at x0 = 1 the trace is the same, so the merged route serves it
    assert (info.entries, info.hits, info.misses) == (1, 5, 1)
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


# -- a trace is reused only when it fits (issue 15) ---------------------------------------------


def test_dtype_branch_gives_eagers_answer() -> None:
    @guardsolve.guarded
    def f(x):
        if x.dtype == torch.float32:
            return x + 1
        return x - 1

    for dtype in (torch.float32, torch.float64, torch.float32, torch.float64, torch.int64):
        x = torch.zeros(3, dtype=dtype)
        out = f(x)
        assert out.dtype == dtype and torch.equal(out, f.fn(x))
    info = f.cache_info()
    assert (info.entries, info.hits, info.misses) == (3, 2, 3)
    assert "entry 0: x.dtype == torch.float32 failed (found torch.float64)" in info.miss_reasons
    text = f.entries[0].guards.explain()
    assert "x.dtype == torch.float32" in text and "x.device == torch.device('cpu')" in text


def test_device_is_a_static_guard() -> None:
    @guardsolve.guarded
    def f(x):
        return x * 2

    f(torch.ones(3))
    gs = f.entries[0].guards
    meta = torch.empty(3, device="meta")
    assert gs.check(torch.ones(5)) and not gs.check(meta)
    assert gs.explain_failure(meta) == "x.device == torch.device('cpu') failed (found device(type='meta'))"
    assert "x.is_cpu" in gs.source()  # the same test as `x.device == torch.device("cpu")`, cheaper


def test_requires_grad_and_grad_mode() -> None:
    @guardsolve.guarded
    def f(x):
        return x * 2 if x.requires_grad else x * 3

    @guardsolve.guarded
    def g(x):
        return x + 1 if torch.is_grad_enabled() else x - 1

    x = torch.ones(3)
    with torch.no_grad():
        assert torch.equal(f(x), 3 * x)
        assert torch.equal(f(x.clone().requires_grad_()), 2 * x)  # requires_grad is guarded
        assert torch.equal(g(x), x - 1)
    assert torch.equal(g(x), x + 1)  # grad mode is guarded
    assert f.cache_info().entries == 2 and g.cache_info().entries == 2
    # grad mode on and an input requires grad: the trace would record no autograd graph, so eager
    w = torch.ones(3, requires_grad=True)
    out = f(w)
    assert out.grad_fn is not None and torch.equal(out, 2 * x)
    out.sum().backward()
    assert torch.equal(w.grad, torch.full((3,), 2.0))
    assert f.cache_info().eager_calls == 1 and "autograd" in f.cache_info().miss_reasons[-1]


def test_contiguity_and_strides_give_eagers_answer() -> None:
    @guardsolve.guarded
    def branch(x):
        return x + 1 if x.is_contiguous() else x - 1

    @guardsolve.guarded
    def stride(x):
        return x * x.stride(0)

    @guardsolve.guarded
    def flat(x):
        return x.reshape(-1) * 2

    for x in (torch.zeros(3, 4), torch.zeros(4, 3).t(), torch.zeros(5, 4), torch.zeros(6, 3).t(),
              torch.zeros(4, 8)[:, ::2], torch.zeros(3, 4)):
        for f in (branch, stride, flat):
            assert torch.equal(f(x), f.fn(x)), (f.__name__, x.shape, x.stride())
    assert "x.is_contiguous()" in [g.text for g in branch.entries[0].guards.static]
    assert branch.cache_info().hits >= 2 and stride.cache_info().hits >= 1


def test_layout_not_observed_is_not_guarded() -> None:
    @guardsolve.guarded
    def f(a, b):
        return a * b + 1

    a = torch.randn(3, 4)
    f(a, a)
    t = torch.randn(4, 3).t()
    assert torch.equal(f(t, a), t * a + 1)
    assert f.cache_info().hits == 1
    assert not any("stride()" in g.text or "contiguous" in g.text for g in f.entries[0].guards.static)


def test_in_place_on_a_transposed_input_mutates_it_as_eager_does() -> None:
    @guardsolve.guarded
    def f(x):
        x.add_(1)
        return x.sum(0)

    x, y = torch.zeros(4, 3).t(), torch.zeros(4, 3).t()
    assert torch.equal(f(x), f.fn(y)) and torch.equal(x, y)


def test_module_train_and_eval_modes_are_guarded() -> None:
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    with torch.no_grad():
        bn.running_mean.fill_(3.0)
    fast = guardsolve.guarded(bn.eval())
    x = torch.randn(8, 4)
    with torch.no_grad():
        assert torch.allclose(fast(x), bn(x))
        bn.train()
        expected = nn.BatchNorm1d(4).train()(x)  # batch statistics, not the running ones
        assert torch.allclose(fast(x), expected, atol=1e-6)
    assert fast.cache_info().misses == 2 and "eval mode" in fast.entries[0].guards.explain()


# -- keyword arguments -----------------------------------------------------------------------


def test_keyword_arguments_defaults_and_pinned_values() -> None:
    @guardsolve.guarded
    def g(x, y=None, *rest, scale=2.0, **extra):
        out = x * scale
        if y is not None:
            out = out + y
        for r in rest:
            out = out + r
        for v in extra.values():
            out = out - v
        return out

    a, b = torch.randn(3), torch.randn(3)
    calls = [((a,), {}), ((a,), {"y": b}), ((a, b, a), {"scale": 3.0}), ((a, b, a), {"scale": 3.0, "z": b}),
             ((), {"x": a}), ((a,), {"scale": 3}), ((a,), {"scale": True}), ((a,), {"scale": 3.0}),
             ((a,), {"y": b}), ((), {"x": b, "y": a}), ((a,), {"scale": 2.0})]
    for args, kwargs in calls:
        assert torch.allclose(g(*args, **kwargs), g.fn(*args, **kwargs))
    info = g.cache_info()
    assert info.hits == 3 and info.eager_calls == 0
    assert info.entries == 8  # defaults are not filled in: fn is called with what was passed
    assert any(r.endswith("scale == 3.0 failed (found 2.0)") for r in info.miss_reasons)
    assert any(r.endswith("scale is True failed (found 3.0)") for r in info.miss_reasons)
    with pytest.raises(TypeError):
        g(a, q=1, x=a)


def test_positional_and_keyword_calls_share_entries() -> None:
    @guardsolve.guarded
    def f(x, y):
        return x - y

    a, b = torch.randn(3), torch.randn(3)
    assert torch.equal(f(a, b), a - b) and torch.equal(f(a, y=b), a - b) and torch.equal(f(y=a, x=b), b - a)
    assert f.cache_info().entries == 1 and f.cache_info().hits == 2


def test_arguments_that_cannot_be_traced_run_eagerly() -> None:
    @guardsolve.guarded
    def f(xs, x):
        return sum(xs) + x

    xs = [torch.ones(2), torch.ones(2)]
    assert torch.equal(f(xs, torch.ones(2)), torch.full((2,), 3.0))
    info = f.cache_info()
    assert info.entries == 0 and info.eager_calls == 1 and "neither traced nor comparable" in info.miss_reasons[-1]


# -- bounded memory ----------------------------------------------------------------------------


def test_miss_reasons_stay_bounded_and_are_built_lazily() -> None:
    @guardsolve.guarded(max_entries=1, miss_history=16, explore=False)
    def f(x):
        return x + 1

    f(torch.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(10**5):
            f(torch.ones(1))  # a miss (x0 != 1 fails), run eagerly: the cache is full
    assert all(m._text is None for m in f._log if not isinstance(m, str))  # nothing explained yet
    info = f.cache_info()
    assert info.misses == 10**5 + 1 and info.eager_calls == 10**5 and len(f._log) == 16
    assert len(info.miss_reasons) == 32  # per miss: the entry's failure and the eager note
    assert info.miss_reasons[-2].startswith("entry 0: x0 != 1 failed (x0=1)")
    assert info.miss_reasons[-1] == "ran eagerly: the cache is full (1 entries)"


# -- faults ------------------------------------------------------------------------------------


def test_a_raising_trace_leaves_no_entry() -> None:
    calls = []

    @guardsolve.guarded(explore=False)  # NOTE: exploring calls f again (boom at 0 and 1)
    def f(x, boom):
        calls.append(boom)
        if boom == 1:
            raise ValueError("boom")
        if boom == 2:
            raise KeyboardInterrupt
        return x * 2

    with pytest.raises(ValueError):
        f(torch.ones(3), 1)
    with pytest.raises(KeyboardInterrupt):
        f(torch.ones(3), 2)
    assert f.cache_info().entries == 0 and f.cache_info().traces == 0
    assert torch.equal(f(torch.ones(3), 0), torch.full((3,), 2.0))
    assert f.cache_info().entries == 1
    assert f.cache_info().entries == 1 and calls == [1, 2, 0]
    from guardsolve.trace.tracer import tracing

    assert not tracing() and not torch.compiler.is_compiling()  # the interrupted trace cleaned up


def test_solver_timeout_keeps_the_undecided_constraint(monkeypatch: pytest.MonkeyPatch) -> None:
    import z3

    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "timeout")

    @guardsolve.guarded(timeout_ms=1)
    def f(x, n):
        return x.view(n, -1) if x.shape[0] * n % 3 == 0 else x + n

    for n, size in ((2, 6), (3, 6), (2, 7), (4, 12), (5, 7), (3, 9), (2, 6)):
        x = torch.randn(size)
        assert torch.equal(f(x, n), f.fn(x, n))
    assert any(not e.guards.minimal for e in f.entries)


def test_nested_guarded_calls() -> None:
    @guardsolve.guarded
    def inner(a, b):
        return a * b if a.shape[0] > 2 else a - b

    @guardsolve.guarded
    def outer(x):
        return inner(x, x + 1).sum(0)

    for n in (4, 2, 5, 1, 4, 2):
        x = torch.randn(n, 3)
        assert torch.allclose(outer(x), outer.fn(x))
        assert torch.allclose(inner(x, x), inner.fn(x, x))
    assert outer.cache_info().hits > 0 and inner.cache_info().hits > 0


# -- threads -----------------------------------------------------------------------------------


def test_concurrent_misses_on_the_same_inputs_trace_once() -> None:
    import threading

    barrier = threading.Barrier(8)

    @guardsolve.guarded
    def f(x):
        return (x * 2).sum()

    x = torch.randn(4, 5)
    outs, errors = [], []

    def worker() -> None:
        try:
            barrier.wait()
            outs.extend(f(x) for _ in range(20))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = f.cache_info()
    assert errors == [] and len(outs) == 160 and all(torch.allclose(o, (x * 2).sum()) for o in outs)
    assert info.traces == 1 and info.entries == 1
    assert info.hits + info.misses == 160 and info.misses == info.traces + info.eager_calls


def test_threads_on_varied_shapes_equal_eager() -> None:
    import random
    import threading

    def g(a, b):
        c = torch.cat([a, b], 0)
        return c.view(-1, 2).sum(-1) if c.shape[0] % 2 == 0 else c[1:] * b.shape[0]

    fast = guardsolve.guarded(g, max_entries=3, evict=True)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(30):
                    dtype = rng.choice((torch.float32, torch.float64))
                    a, b = torch.randn(rng.randint(1, 4), dtype=dtype), torch.randn(rng.randint(1, 4), dtype=dtype)
                    assert torch.equal(fast(a, b), g(a, b))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = fast.cache_info()
    assert info.hits + info.misses == 120 and info.entries <= 3


def test_an_interrupted_trace_evicts_nothing() -> None:
    @guardsolve.guarded(max_entries=1, evict=True)
    def f(x, stop):
        if stop:
            raise KeyboardInterrupt
        return x + 1

    x = torch.ones(3)
    f(x, 0)
    before = f.entries
    with pytest.raises(KeyboardInterrupt):
        f(torch.ones(4, 2), 1)
    assert f.entries is before and f.cache_info().evictions == 0
    assert torch.equal(f(x, 0), x + 1) and f.cache_info().hits == 1


def test_contiguous_of_a_strided_input_aliases_as_eager_does() -> None:
    # `contiguous()` copies a strided input and returns a contiguous one itself: an entry traced
    # on a strided input must not serve a contiguous one (its replay would copy)
    @guardsolve.guarded
    def f(x):
        y = x.contiguous()
        y.add_(1)
        return y.sum()

    for x in (torch.zeros(10)[::2], torch.zeros(5), torch.zeros(14)[::2], torch.zeros(7)):
        expected = x.clone() + (1 if x.is_contiguous() else 0)
        assert f(x).item() == x.numel() and torch.equal(x, expected), x.stride()
    assert f.cache_info().hits == 2
