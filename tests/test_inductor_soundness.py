"""Inductor artifacts behind guardsolve's checks: what the backend assumed is read the same way
on every compile, and an artifact that differs from eager anywhere its check was probed is
never used.

Two bugs this file keeps fixed. (1) An FX graph cache hit did not run lowering, so the pooling
guard of an `AdaptiveAvgPool1d` compiled at one length was missing from a variant compiled at
another, whose artifact (the cached one) kept the first length's windows: an audio encoder gave
3-4 wrong outputs of 6. (2) The comparison with eager's replay covered sizes and dtypes at the
compile point only.

The default run compiles once (a deliberately wrong artifact); the models, the cold and warm
Inductor caches (second process) and the pools are `slow`.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest
import torch

import guardsolve
import guardsolve.jit.inductor.crosscheck as crosscheck
import guardsolve.jit.inductor.driver as driver
import guardsolve.jit.inductor.points as points
import guardsolve.jit.inductor.standalone as standalone
from guardsolve.jit.inductor import CompileFailure, compile_variant
from guardsolve.solve.simplify import simplify
from guardsolve.trace.tracer import trace

ROOT = pathlib.Path(__file__).parent.parent

# NOTE: the audio encoder of the report: three strided convolutions, an adaptive average pool
# to 4, a linear layer; lengths whose pooling windows differ, and one (401) inside the first's
AUDIO = textwrap.dedent("""
    import json, sys, torch, guardsolve
    from torch._dynamo.utils import counters
    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Conv1d(1, 8, 10, stride=5), torch.nn.ReLU(), torch.nn.Conv1d(8, 16, 3, 2), torch.nn.ReLU(),
                torch.nn.Conv1d(16, 16, 3, 2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool1d(4))
            self.out = torch.nn.Linear(64, 8)

        def forward(self, wave):
            return self.out(self.net(wave).flatten(1))

    model = Encoder().eval()
    fast = guardsolve.guarded(model, backend="inductor")
    wrong = []
    with torch.no_grad():
        for shape in ([2, 1, 400], [2, 1, 800], [1, 1, 400], [4, 1, 1000], [1, 1, 1600], [3, 1, 401]):
            wave = torch.randn(*shape)
            if not torch.allclose(fast(wave), model(wave), rtol=1e-3, atol=1e-4):
                wrong.append(shape)
    variants = [[[g.text, g.why] for g in v.backend if g.kind == "size"] for e in fast.entries for v in e.variants]
    info = fast.cache_info()
    print(json.dumps({"wrong": wrong, "variants": variants, "eager": info.eager_reasons,
                      "hits": counters["inductor"]["fxgraph_cache_hit"]}))
""")


def _run_audio(cache: pathlib.Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", AUDIO], capture_output=True, text=True, timeout=900, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _pool_guard(variant: list[list[str]]) -> bool:
    return any("_adaptive_avg_pool2d" in why and "//" in text for text, why in variant)


@pytest.mark.slow
def test_audio_encoder_never_wrong_with_the_inductor_cache_cold_then_warm(tmp_path: pathlib.Path) -> None:
    """Cold (a fresh TORCHINDUCTOR_CACHE_DIR) and warm (a second process on it): 0 wrong of 6;
    each of the 4 variants (lengths 400, 800, 1000, 1600; 401 is 400's) carries its own pooling
    guard, the same in both processes; no compile was served by the FX graph cache."""
    cold = _run_audio(tmp_path / "inductor")
    warm = _run_audio(tmp_path / "inductor")
    for run in (cold, warm):
        assert run["wrong"] == [] and run["eager"] == []
        assert len(run["variants"]) == 4 and all(_pool_guard(v) for v in run["variants"]), run["variants"]
        assert run["hits"] == 0
    assert warm["variants"] == cold["variants"]


def _never_wrong(model: torch.nn.Module, shapes: list[tuple[int, ...]]) -> tuple[guardsolve.GuardedFunction, list]:
    fast = guardsolve.guarded(model, backend="inductor", max_entries=16)
    wrong = []
    with torch.no_grad():
        for s in shapes:
            x = torch.randn(*s)
            if not torch.allclose(fast(x), model(x), rtol=1e-3, atol=1e-4):
                wrong.append(s)
    return fast, wrong


@pytest.mark.slow
@pytest.mark.parametrize("pool, shapes", [
    (torch.nn.AdaptiveAvgPool2d((3, 5)), [(2, 3, 12, 12), (2, 3, 24, 12), (1, 3, 12, 30), (3, 3, 9, 9),
                                          (2, 3, 13, 12), (2, 3, 12, 12)]),
    (torch.nn.AdaptiveMaxPool1d(4), [(2, 3, 16), (2, 3, 33), (1, 3, 8), (2, 3, 5), (2, 3, 100), (4, 3, 17)]),
    (torch.nn.AdaptiveAvgPool1d(7), [(2, 3, 16), (2, 3, 33), (1, 3, 50), (2, 3, 7), (2, 3, 18)]),
], ids=["avg2d", "max1d", "avg1d"])
def test_adaptive_pools_at_several_sizes_never_wrong(pool: torch.nn.Module, shapes: list[tuple[int, ...]]) -> None:
    """Adaptive pools after a convolution, at sizes whose windows differ: equal to eager at each;
    every variant carries the pool lowering's guard (`input.size()[2] == 16`); no artifact is
    rejected by the comparison (no false alarm: every call is served)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3) if isinstance(pool, torch.nn.AdaptiveAvgPool2d) else torch.nn.Conv1d(3, 4, 3)
    fast, wrong = _never_wrong(torch.nn.Sequential(conv, torch.nn.ReLU(), pool).eval(), shapes)
    assert wrong == []
    variants = [v for e in fast.entries for v in e.variants]
    assert all(any("adaptive" in g.why for g in v.backend) for v in variants), [v.backend for v in variants]
    info = fast.cache_info()
    assert info.eager_reasons == () and info.eager_calls == 0, info.eager_reasons


@pytest.mark.slow
def test_a_cache_served_artifact_is_caught_by_the_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defense in depth against the real bug: with the fresh cache key undone (one key for the
    whole test), the encoder's variant at 800 is served the artifact compiled at 400, with no
    pooling guard. The comparison with eager at its compile point rejects it, naming the point
    and the difference, and no output is wrong."""
    salt = uuid.uuid4().hex
    monkeypatch.setattr(standalone._FreshKey, "uuid", lambda self: salt)
    rejected: list[str] = []
    real = crosscheck.differs_at

    def spy(*args: Any, **kwargs: Any) -> str | None:
        why = real(*args, **kwargs)
        if why is not None:
            rejected.append(why)
        return why

    monkeypatch.setattr(driver, "differs_at", spy)
    torch.manual_seed(0)
    pool = torch.nn.Sequential(torch.nn.Conv1d(1, 8, 10, stride=5), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool1d(4), torch.nn.Flatten(1)).eval()
    _, wrong = _never_wrong(pool, [(2, 1, 400), (2, 1, 800), (1, 1, 1600)])
    assert wrong == []
    assert any("differing from eager's by" in r and "the sizes it was compiled at (input0=2, input1=1, input2=800)" in r
               for r in rejected), rejected


@pytest.mark.slow
def test_a_mutated_input_is_mutated_once_on_the_compiling_call() -> None:
    """The comparison runs eager's replay and the artifact on copies: the caller's tensor is
    changed once, as eager changes it (it was changed three times), and the inputs after the
    call are compared too."""
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    fast = guardsolve.guarded(bump, backend="inductor")
    with torch.no_grad():
        for b in (3, 5, 0):
            x, y = torch.zeros(b, 2), torch.zeros(b, 2)
            assert torch.equal(fast(x), bump(y)) and torch.equal(x, y), b
    assert fast.cache_info().eager_reasons == ()


@pytest.mark.slow
def test_random_ops_are_compared_in_sizes_only_and_leave_the_callers_stream_alone() -> None:
    """Dropout draws from Inductor's generator, not eager's: its values are not compared (no false
    alarm), and the comparison's replays draw nothing from the caller's stream."""
    def drop(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True) * 2

    fast = guardsolve.guarded(drop, backend="inductor")
    with torch.no_grad():
        for b in (3, 5):
            x = torch.randn(b, 4)
            torch.manual_seed(1)
            shape, after = drop(x).shape, torch.rand(3)
            torch.manual_seed(1)
            assert fast(x).shape == shape and torch.equal(torch.rand(3), after), b
    info = fast.cache_info()
    assert info.eager_reasons == () and info.variants == (1,), info


# -- the default run: one small compile, and the parts without Inductor -------------------------


def test_an_artifact_that_differs_from_eager_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong artifact (its outputs perturbed by 0.01) is rejected: away from its
    compile point, at a far point its check accepts; at its compile point; and through
    `guarded`, whose calls then run eagerly with the reason counted."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    real = driver.runner
    wrong_at: dict[str, Any] = {"compile point": False}

    def perturbed(*args: Any, **kwargs: Any) -> Any:
        run = real(*args, **kwargs)

        def wrong(x: torch.Tensor) -> torch.Tensor:
            out = run(x)
            at_example = tuple(x.shape) == (4, 3)
            return out + 0.01 if at_example == wrong_at["compile point"] else out
        return wrong

    monkeypatch.setattr(driver, "runner", perturbed)
    x = torch.randn(4, 3)
    t = trace(f, x)
    with pytest.raises(CompileFailure, match=r"differing from eager's by 0\.01 at most .* \(sizes its check accepts\)"):
        compile_variant(t, simplify(t), (x,), [], ("x",))
    wrong_at["compile point"] = True
    with pytest.raises(CompileFailure, match=r"by 0\.01 at most .* at the sizes it was compiled at \(x0=4, x1=3\)"):
        compile_variant(t, simplify(t), (x,), [], ("x",))

    fast = guardsolve.guarded(f, backend="inductor")
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(fast(x), f(x))
    (reason, count), = fast.cache_info().eager_reasons
    assert count == 1 and "Inductor cannot compile this trace: the artifact gives output 0" in reason
    assert "differing from eager's by 0.01" in reason


def test_every_compile_misses_inductors_caches_and_keeps_the_users_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_standalone` adds a post-grad pass whose uuid (part of the FX graph and AOTAutograd cache
    keys) no other compile has, after any pass the user set, for that call only."""
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Mine(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            return None

        def uuid(self) -> str:
            return "mine"

    seen: list[Any] = []
    monkeypatch.setattr(torch._inductor, "standalone_compile",
                        lambda gm, inputs, dynamic_shapes, **kw: seen.append(config.post_grad_custom_post_pass))
    mine = Mine()
    with config.patch(post_grad_custom_post_pass=mine):
        for _ in range(2):
            standalone.standalone_compiled(None, [], False, None, False)
        assert config.post_grad_custom_post_pass is mine
    assert [p[0] for p in seen] == [mine, mine] and len({p[1].uuid() for p in seen}) == 2


def test_values_are_compared_within_the_dtypes_tolerance() -> None:
    close = crosscheck._value_mismatch
    w = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert close(w, w + torch.tensor([5e-5, 0.0, 0.0, -1e-3])) is None  # rtol 1e-3, atol 1e-4; NaN == NaN
    assert "by 0.01 at most" in (close(w, w + 0.01) or "")
    assert "by nan" in (close(w, torch.tensor([1.0, 0.0, float("inf"), -2.0])) or "")
    ints = torch.tensor([1, 2, 3])
    assert close(ints, ints.clone()) is None
    assert "by 1 at most (max abs difference; exactly)" in (close(ints, ints + 1) or "")
    assert "by 1 at most" in (close(torch.tensor([True]), torch.tensor([False])) or "")


def test_copies_keep_layout_and_aliasing_and_leave_the_originals_alone() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    a, b = base.t(), base[1:, 1:3]
    ca, cb, n = crosscheck._copies([a, b, 5])
    assert (ca.stride(), cb.stride(), cb.storage_offset(), n) == (a.stride(), b.stride(), b.storage_offset(), 5)
    assert torch.equal(ca, a) and torch.equal(cb, b)
    ca.add_(100)
    assert torch.equal(cb, b + 100) and base.max().item() == 11.0  # the copies alias each other, not base


def test_random_inputs_follow_the_examples_dtype_and_stride_order() -> None:
    gen = torch.Generator().manual_seed(0)
    t = points._random_like(torch.randn(3, 5).t(), [7, 2], gen)
    assert t is not None and t.shape == (7, 2) and t.stride() == (1, 7)
    idx = points._random_like(torch.tensor([[4, 9]]), [3, 3], gen)
    assert idx is not None and idx.dtype == torch.int64 and set(idx.flatten().tolist()) <= {4, 9}
    flags = points._random_like(torch.ones(2, dtype=torch.bool), [0], gen)
    assert flags is not None and flags.shape == (0,) and flags.dtype == torch.bool
