"""Serving: how each call was served (`last_call`), warm-up before traffic (`warm_up`), calls
that ran eagerly while another thread traced (traced in the background), progress of slow
steps, miss reasons that name what failed, and autocast among the static guards."""

from __future__ import annotations

import io
import logging
import os
import threading
import time
import types

import pytest
import torch

import guardsolve
from guardsolve.jit import progress
from guardsolve.jit.entry import Entry
from guardsolve.jit.warmup import Example
from guardsolve.jit.misses import Miss


def test_last_call_names_how_each_call_was_served() -> None:
    lin = torch.nn.Linear(4, 3)
    f = guardsolve.guarded(lambda x: lin(x))
    assert f.last_call is None
    with torch.no_grad():
        f(torch.randn(2, 4))
        first = f.last_call
        f(torch.randn(7, 4))
        hit = f.last_call
    assert (first.how, first.entry) == ("traced", 0) and "no entries yet" in first.why
    assert (hit.how, hit.entry, hit.variant) == ("replayed", 0, None)
    f(torch.randn(2, 4))  # NOTE: grad mode on, the weights require grad: eager, and why
    eager = f.last_call
    assert eager.how == "eager" and "autograd" in eager.why and "lin.weight" in eager.why, eager


def test_last_call_is_per_thread() -> None:
    f = guardsolve.guarded(lambda x: x + 1)
    f(torch.ones(3))
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(f.last_call))
    t.start()
    t.join()
    assert seen == [None] and f.last_call.how == "traced"


def test_warm_up_makes_the_entries_a_server_needs_from_shapes() -> None:
    emb = torch.nn.Embedding(10, 4)

    def classify(ids: torch.Tensor) -> torch.Tensor:
        return emb(ids).mean(1)

    f = guardsolve.guarded(classify)
    with torch.no_grad():
        served = f.warm_up((Example((2, 5), torch.int64),), {"ids": Example((3, 9), torch.int64)})
        assert [s.how for s in served] == ["traced", "replayed"]
        traces = f.cache_info().traces
        for b, n in [(1, 1), (4, 16), (8, 3)]:
            ids = torch.randint(0, 10, (b, n))
            assert torch.allclose(f(ids), classify(ids))
            assert f.last_call.how == "replayed"
    assert f.cache_info().traces == traces == 1


def test_warm_up_waits_for_another_threads_trace_instead_of_running_eagerly() -> None:
    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.05)
        return x * 3

    f = guardsolve.guarded(slow)
    t = threading.Thread(target=lambda: f(torch.ones(2, 2)))
    t.start()
    time.sleep(0.02)
    served = f.warm_up((torch.ones(5),))
    t.join()
    assert served[0].how == "traced", served


def test_calls_that_ran_eagerly_while_another_thread_traced_are_traced_in_the_background() -> None:
    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.05)  # NOTE: every run of fn (the trace's and exploration's) takes this long
        return torch.relu(x) * 2

    f = guardsolve.guarded(slow)
    t = threading.Thread(target=lambda: f(torch.randn(2, 3, 4)))
    t.start()
    time.sleep(0.02)
    others = [torch.randn(5), torch.randn(4, 4), torch.randn(6)]  # NOTE: [6] has [5]'s guards: queued once
    for x in others:
        assert torch.equal(f(x), slow(x))
        assert f.last_call.how == "eager" and f.last_call.why == "another thread is tracing this function"
    t.join()
    assert f.wait_background(120)
    info = f.cache_info()
    assert info.pending == 0 and info.traces == 3, info
    assert sum("background: traced" in r for r in info.miss_reasons) == 2
    before = f.cache_info().traces
    for x in [torch.randn(2, 3, 4)] + others:  # NOTE: the second pass traces nothing
        assert torch.equal(f(x), slow(x))
        assert f.last_call.how == "replayed", f.last_call
    assert f.cache_info().traces == before


def test_the_background_runs_a_queued_call_in_the_modes_it_came_in() -> None:
    lin = torch.nn.Linear(3, 3)

    def net(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.05)
        return lin(x)

    def first() -> None:
        with torch.no_grad():  # NOTE: grad mode is per thread
            f(torch.randn(2, 3))

    f = guardsolve.guarded(net)
    with torch.no_grad():
        t = threading.Thread(target=first)
        t.start()
        time.sleep(0.02)
        f(torch.randn(2, 5, 3))  # NOTE: no_grad in this thread; the background's is another thread
        assert f.last_call.how == "eager"
    t.join()
    assert f.wait_background(120)
    with torch.no_grad():
        f(torch.randn(2, 5, 3))
        assert f.last_call.how == "replayed", f.last_call


def test_a_miss_whose_trace_fits_names_the_variant_check_that_failed() -> None:
    x = torch.randn(6, 4)
    gs = guardsolve.simplify(guardsolve.trace(lambda x: x.sum(1), x))
    narrow = guardsolve.simplify(guardsolve.trace(lambda x: x.view(2, 3, 4).sum(2), x))  # NOTE: x0 == 6
    e = Entry(None, gs, lambda *a: None, ("x",), None, gs.entry_check)  # type: ignore[arg-type]
    e.trace = types.SimpleNamespace()  # type: ignore[assignment]
    e.variants = (types.SimpleNamespace(guards=narrow),)
    y = torch.randn(5, 4)
    miss = Miss((e,), ("x",), (y,), {})
    e.variants = e.variants + (types.SimpleNamespace(guards=gs),)  # NOTE: compiled after the miss
    why = miss.reasons()[0]
    assert why.startswith("entry 0: its trace's guards hold; no compiled variant's check holds: variant 0: "), why
    assert "x0=5" in why and "variant 1" not in why


def test_progress_is_logged_and_shown_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    log = logging.getLogger("guardsolve")
    handler, level = Keep(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.delenv("GUARDSOLVE_PROGRESS", raising=False)
    try:
        def double(x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.05)
            return x * 2

        guardsolve.guarded(double)(torch.ones(2, 3))
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert "double: tracing at x=[2, 3] ..." in records
    assert any(r.startswith("double: tracing at x=[2, 3]: done in ") for r in records)
    shown = term.getvalue()
    assert "guardsolve: double: tracing at x=[2, 3] ..." in shown and "done in" in shown, shown
    monkeypatch.setenv("GUARDSOLVE_PROGRESS", "0")
    assert not progress._interactive()


def test_autocast_is_a_static_guard() -> None:
    lin = torch.nn.Linear(4, 4)
    f = guardsolve.guarded(lambda x: lin(x))
    x = torch.randn(3, 4)
    with torch.no_grad():
        plain = f(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cast = f(x)
            assert f.last_call.how == "traced", f.last_call
            want = lin(x)
        again = f(x)
    assert plain.dtype == again.dtype == torch.float32 and cast.dtype == want.dtype == torch.bfloat16
    assert torch.equal(cast, want)
    assert "entry 0: torch.autocast is off failed" in f.cache_info().miss_reasons[-1]
    text = f.entries[1].guards.explain()
    assert "torch.autocast('cpu', dtype=torch.bfloat16) is on, and no other" in text


@pytest.mark.skipif(os.environ.get("GUARDSOLVE_SKIP_INDUCTOR") == "1", reason="Inductor compiles skipped")
def test_warm_up_with_inductor_leaves_the_entries_compiled_and_saved(tmp_path: object) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    f = guardsolve.guarded(net, backend="inductor", cache_dir=str(tmp_path))
    with torch.no_grad():
        served = f.warm_up((Example((2, 8)),), (Example((64, 8)),))
    assert [(s.how, s.entry, s.variant) for s in served] == [("traced", 0, 0), ("compiled", 0, 0)], served
    saved = [p for _, _, files in os.walk(str(tmp_path)) for p in files if p.endswith(".gse")]
    assert len(saved) == 1
    again = guardsolve.guarded(net, backend="inductor", cache_dir=str(tmp_path))
    with torch.no_grad():
        x = torch.randn(5, 8)
        assert torch.allclose(again(x), net(x), atol=1e-5)
    assert again.last_call.how == "compiled" and again.cache_info().traces == 0
    with torch.no_grad():  # NOTE: a loaded entry's layout guard reads the description's strides and sizes
        t = torch.randn(8, 5).t()
        assert torch.allclose(again(t), net(t), atol=1e-5)
    loaded_why = again.cache_info().miss_reasons[-1]
    assert loaded_why.startswith("entry 0: input.stride()") and "failed (found 1)" in loaded_why, loaded_why
    assert "Error" not in loaded_why
    with torch.no_grad():
        t = torch.randn(8, 5).t()  # NOTE: [5, 8], strides (1, 5): the trace fits, Inductor's layout does not
        assert torch.allclose(f(t), net(t), atol=1e-5)
    why = f.cache_info().miss_reasons[-2]
    assert why.startswith("entry 0: its trace's guards hold; no compiled variant's check holds: variant 0: input.stride()"), why
    assert "failed (found 1)" in why and f.last_call.how == "compiled" and f.last_call.variant == 1, (why, f.last_call)


def test_a_call_that_cannot_be_traced_is_not_traced_again_at_its_signature() -> None:
    runs = []

    def branchy(x: torch.Tensor) -> torch.Tensor:
        runs.append(1)
        if x.sum().item() > 0:  # NOTE: a decision on data: DataDependentError with value_guards=False
            return x * 2
        return x - 1

    f = guardsolve.guarded(branchy, value_guards=False)
    x = torch.randn(4, 3)
    assert torch.equal(f(x), branchy(x))
    first = len(runs)
    assert f.last_call.how == "eager" and "DataDependentError" in f.last_call.why
    for _ in range(3):
        y = torch.randn(4, 3)
        assert torch.equal(f(y), branchy(y))
        assert f.last_call.how == "eager" and "DataDependentError" in f.last_call.why
    assert len(runs) == first + 3 * 2  # NOTE: each later call runs fn once (and the check here once): no trace
    f(torch.randn(5, 3))  # NOTE: another signature is tried again
    assert len(runs) > first + 3 * 2 + 1
    assert f.cache_info().eager_calls == 5


def test_compiles_are_bounded(recwarn: pytest.WarningsRecorder) -> None:
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    f = guardsolve.guarded(scale, backend="inductor", max_compiles=2)
    with torch.no_grad():
        for shape in [(3,), (2, 3), (2, 3, 4), (2, 2, 2, 2), (5,)]:
            x = torch.randn(*shape)
            assert torch.equal(f(x), scale(x))
    info = f.cache_info()
    assert info.compiles == 2 and info.traces == 2, info
    assert dict(info.eager_reasons) == {"the compile limit is reached (2 compiles: guarded(..., max_compiles=N) raises it)": 2}
    assert f.last_call.how == "compiled"  # NOTE: [5] is served by the first variant
    said = [str(w.message) for w in recwarn if "compile limit" in str(w.message)]
    assert len(said) == 1


def test_a_call_that_raises_says_so_and_is_not_traced_again_at_its_signature() -> None:
    lin = torch.nn.Linear(4, 2)
    traced: list[int] = []

    def net(x: torch.Tensor) -> torch.Tensor:
        traced.append(1)
        return lin(x)

    f = guardsolve.guarded(net)
    with torch.no_grad():
        f(torch.randn(3, 4))
        f(torch.randn(5, 4))
        assert f.last_call.how == "replayed"
        for _ in range(3):
            with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
                f(torch.randn(3, 5))
            assert f.last_call.how == "eager" and "mat1 and mat2" in f.last_call.why, f.last_call
        runs = len(traced)
        with pytest.raises(RuntimeError):
            f(torch.randn(3, 5))
        assert len(traced) == runs + 1  # NOTE: remembered: eager's one run, no trace
    assert f.cache_info().traces == 1


def test_a_signature_that_raised_is_traced_again_once_eager_runs_there() -> None:
    emb = torch.nn.Embedding(10, 3)
    f = guardsolve.guarded(lambda ids: emb(ids) * 2)
    with torch.no_grad():
        with pytest.raises(IndexError):
            f(torch.tensor([[1, 99]]))  # NOTE: a bad request: an index out of range
        good = torch.tensor([[1, 2]])
        assert torch.equal(f(good), emb(good) * 2) and f.last_call.how == "eager"
        assert torch.equal(f(good), emb(good) * 2) and f.last_call.how == "traced"
        assert torch.equal(f(good), emb(good) * 2) and f.last_call.how == "replayed"
