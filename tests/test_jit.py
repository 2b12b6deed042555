"""`guarded(fn, backend="inductor")`: Inductor's kernels behind one proven check.

One small end-to-end compile runs in the default tests (so a missing compiler shows in CI);
the differential sweeps over models, examples and random programs, and the second process
reading a cache directory, are marked slow.
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import guardsolve
from guardsolve.errors import DataDependentError
from guardsolve.jit.store import FORMAT, Store, dumps, fingerprint, loads
from guardsolve.testing import boundary_variants, outcome, perturbed_inputs, random_program, same_outcome

ROOT = pathlib.Path(__file__).parent.parent


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()


def test_inductor_end_to_end_one_compile_every_batch_size_then_kept_across_instances(tmp_path: pathlib.Path) -> None:
    """The one compile of the default run: an MLP at batches 3, 1, 0, 5, 2 compiles once (its
    sizes are symbols from 0 up), equals eager, and its check is proven; a second guarded
    function on the same cache directory serves every batch with no trace and no compile; a
    truncated entry file is ignored with a reason."""
    model = _mlp()
    fast = guardsolve.guarded(model, backend="inductor", cache_dir=str(tmp_path))
    with torch.no_grad():
        for b in (3, 1, 0, 5, 2):
            x = torch.randn(b, 4)
            assert same_outcome(outcome(model, (x,)), outcome(fast, (x,))) is None, b
        info = fast.cache_info()
        assert (info.traces, info.compiles, info.variants, info.hits) == (1, 1, (1,), 4)
        v = fast.entries[0].variants[0]
        assert v.certificate is not None and v.certificate.equivalent and v.certificate.irredundant
        assert str(v.guards) == "input1 == 4"
        text = v.explain()
        assert "torch/nn/modules/linear.py" in text and "assumed by the backend" in text
        assert "input.stride()[1] == 1" in text  # the layout Inductor assumed is checked first
        whole = fast.entries[0].explain()
        assert whole.startswith("the trace's guards:") and "variant 0 (compiled in" in whole
        # NOTE: never called where its check fails: a wrong feature size misses and eager raises
        bad = torch.randn(3, 5)
        assert same_outcome(outcome(model, (bad,)), outcome(fast, (bad,))) is None
        assert not v.check(torch.randn(3, 8)[:, ::2])  # strides Inductor did not compile for

        m2 = _mlp()
        again = guardsolve.guarded(m2, backend="inductor", cache_dir=str(tmp_path))
        for b in (7, 1, 0):
            x = torch.randn(b, 4)
            assert torch.allclose(again(x), model(x), atol=1e-5)
        info = again.cache_info()
        assert (info.traces, info.compiles, info.loaded, info.hits) == (0, 0, 1, 3)
        # NOTE: a loaded entry reads its weights where they live: a swap is served, no compile
        m2[0].weight = torch.nn.Parameter(torch.randn(8, 4))
        x = torch.randn(3, 4)
        assert torch.allclose(again(x), m2(x), atol=1e-5)
        assert again.cache_info().compiles == 0 and again.cache_info().hits == 4

        files = list(pathlib.Path(tmp_path).rglob("*.gse"))
        assert len(files) == 1
        files[0].write_bytes(files[0].read_bytes()[:-100])
        third = guardsolve.guarded(_mlp(), backend="inductor", cache_dir=str(tmp_path))
        x = torch.randn(2, 4)
        assert torch.allclose(third(x), model(x), atol=1e-5)
        info = third.cache_info()
        assert info.loaded == 0 and info.traces == 1
        assert any("ignored" in r and "checksum mismatch" in r for r in info.miss_reasons), info.miss_reasons


def test_backend_and_cache_dir_are_checked() -> None:
    with pytest.raises(ValueError, match="choose one of 'replay', 'inductor'"):
        guardsolve.guarded(lambda x: x, backend="tvm")
    with pytest.raises(ValueError, match="needs backend='inductor'"):
        guardsolve.guarded(lambda x: x, cache_dir="somewhere")


def test_data_dependent_branch_runs_eagerly_with_its_reason() -> None:
    """With `value_guards=False` a branch on data cannot be traced: the call runs eagerly (it
    used to raise DataDependentError), and the reason is counted. By default (None) the call is
    traced again with value guards: one entry per path, no eager call."""
    calls = []

    def f(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x * 2 if x.sum() > 0 else x - 1

    g = guardsolve.guarded(f, value_guards=False)
    x = torch.ones(3)
    assert torch.equal(g(x), x * 2)
    assert torch.equal(g(-x), -x - 1)
    info = g.cache_info()
    assert info.eager_calls == 2 and info.entries == 0
    def pure(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x - 1

    auto = guardsolve.guarded(pure)
    for y in (x, -x, 2 * x, -3 * x):
        assert torch.equal(auto(y), pure(y))
    assert auto.cache_info().eager_calls == 0 and auto.cache_info().entries == 2 and auto.cache_info().hits == 2
    (why, count), = info.eager_reasons
    assert count == 2 and why.startswith("cannot be traced: DataDependentError") and "value_guards" in why
    with pytest.raises(DataDependentError):
        guardsolve.trace(f, x)  # NOTE: trace() itself still says why


def test_grad_mode_calls_run_eagerly_with_one_warning() -> None:
    model = torch.nn.Linear(3, 2)
    g = guardsolve.guarded(model)
    x = torch.randn(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out1, out2 = g(x), g(x)
    assert out1.requires_grad and out2.requires_grad  # eager's, with its autograd graph
    grad_warnings = [w for w in caught if "grad mode is on" in str(w.message)]
    assert len(grad_warnings) == 1
    assert g.cache_info().eager_reasons == (("autograd: grad mode is on and self.weight requires grad", 2),)


def test_an_eager_error_is_raised_not_run_eagerly() -> None:
    g = guardsolve.guarded(lambda a, b: a + b)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        g(torch.ones(3), torch.ones(4))
    assert g.cache_info().eager_calls == 0


# -- the store, without compiling --------------------------------------------------------------


def test_entry_files_are_checked_before_use() -> None:
    data = dumps({"fingerprint": "x", "n": 1})
    assert loads(data) == {"fingerprint": "x", "n": 1}
    with pytest.raises(ValueError, match="checksum mismatch"):
        loads(data[:-3])
    with pytest.raises(ValueError, match="checksum mismatch"):
        loads(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="header"):
        loads(b"garbage")
    with pytest.raises(ValueError, match="truncated"):
        loads(data[:25])


def test_fingerprint_covers_code_and_parameters() -> None:
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    assert fingerprint(a) == fingerprint(b)  # NOTE: values are not covered, names/shapes/dtypes are
    assert fingerprint(a) != fingerprint(torch.nn.Linear(4, 2))
    assert fingerprint(a) != fingerprint(torch.nn.Linear(3, 2).double())
    assert fingerprint(lambda x: x + 1) != fingerprint(lambda x: x - 1)


def test_a_file_for_another_fingerprint_is_ignored(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Linear(3, 2)
    store = Store(str(tmp_path), model)
    os.makedirs(store.folder)
    (pathlib.Path(store.folder) / "e-v.gse").write_bytes(dumps({"fingerprint": "0" * 24}))
    (pathlib.Path(store.folder) / "half.gse").write_bytes(FORMAT)
    assert store.load({}) == []
    assert sorted(store.skipped) == ["e-v.gse: ValueError: written for another fingerprint",
                                     "half.gse: ValueError: truncated (no checksum)"]


# -- differential sweeps (slow: each compiles) -------------------------------------------------


def _sweep(fn, inputs: tuple, variants: list[tuple]) -> list[str]:  # type: ignore[no-untyped-def]
    fast = guardsolve.guarded(fn, backend="inductor", max_entries=64)
    wrong = []
    with torch.no_grad():
        first = outcome(fast, inputs)
        why = same_outcome(outcome(fn, inputs), first)
        if why:
            wrong.append(f"example: {why}")
        entries = fast.entries
        gs = entries[0].guards if entries else None
        points = list(variants) + ([v for _, v in boundary_variants(gs, inputs)] if gs is not None else [])
        for args in points:
            why = same_outcome(outcome(fn, args), outcome(fast, args))
            if why:
                wrong.append(f"{[tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]}: {why}")
        # NOTE: each guard's boundary: the point where it alone fails (z3's witness of its
        # irredundancy), and the points one step from it
        for e in list(fast.entries):
            for v in e.variants:
                assert v.certificate is not None and v.certificate.equivalent and v.certificate.irredundant
                for point in v.certificate.witnesses.values():
                    for d, step in [(None, 0)] + [(d, k) for d in point for k in (-1, 1)]:
                        p = {**point, **({d: point[d] + step} if d is not None else {})}
                        args = _at(v.guards.signature, inputs, p)
                        if args is None:
                            continue
                        why = same_outcome(outcome(fn, args), outcome(fast, args))
                        if why:
                            wrong.append(f"boundary {p}: {why}")
    return wrong


def _at(signature, inputs: tuple, point: dict) -> tuple | None:  # type: ignore[no-untyped-def]
    """The example inputs resized to a point's dims (None where a size is negative or a tensor huge)."""
    from guardsolve.solve.explore import resized

    out = []
    for prm, x in zip(signature, inputs):
        if prm.kind != "tensor":
            out.append(point.get(prm.name, x))
            continue
        shape = [point.get(d, s) for d, s in zip(prm.dims, x.shape)]
        if any(n < 0 for n in shape) or torch.Size(shape).numel() > 2_000_000:
            return None
        out.append(resized(x, shape))
    return tuple(out)


MODEL_SHAPES = {
    "gpt2": [(2, 16), (4, 16), (1, 16), (2, 17), (1, 9), (3, 33), (2, 1), (2, 64), (2, 65), (0, 4)],
    "bert": [(2, 16), (1, 16), (2, 17), (1, 9), (2, 64), (2, 65)],
    "transformer_layer": [(2, 6, 16), (1, 6, 16), (3, 1, 16), (0, 4, 16), (2, 6, 15)],
    "lstm": [(2, 5, 8), (1, 5, 8), (2, 1, 8), (3, 10, 8), (2, 5, 7), (2, 0, 8)],
    "self_attention": [(2, 5, 16), (1, 5, 16), (2, 1, 16), (4, 7, 16), (2, 5, 15)],
    "conv_net": [(2, 3, 16, 16), (1, 3, 16, 16), (2, 3, 8, 8), (2, 3, 17, 15), (2, 3, 1, 1), (2, 4, 16, 16),
                 (0, 3, 16, 16)],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODEL_SHAPES))
def test_models_never_wrong(name: str) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    import models

    built = models.built([name])
    if name not in built:
        pytest.skip("transformers is not installed")
    model, inputs = built[name]
    ints = inputs[0].dtype == torch.int64
    variants = [(torch.randint(0, 100, s) if ints else torch.randn(s),) for s in MODEL_SHAPES[name]]
    variants += perturbed_inputs(random.Random(0), inputs, 6)
    assert _sweep(model, inputs, variants) == []


@pytest.mark.slow
@pytest.mark.parametrize("module, factory, shapes", [
    ("mlp", "MLP", [(32, 64)]), ("attention", "AttentionBlock", [(2, 16, 64)]), ("cnn", "SmallCNN", [(4, 3, 16, 16)]),
    ("cat_reshape", "merge_pairs", [(4, 6), (4, 10)]), ("branching", "route", [(32, 8), (8, 4)]),
])
def test_examples_never_wrong(module: str, factory: str, shapes: list) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"jit_example_{module}", ROOT / "examples" / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    obj = getattr(mod, factory)
    fn = obj().eval() if isinstance(obj, type) else obj
    inputs = tuple(torch.randn(*s) for s in shapes)
    assert _sweep(fn, inputs, perturbed_inputs(random.Random(1), inputs, 10)) == []


@pytest.mark.slow
def test_random_programs_never_wrong() -> None:
    rng = random.Random(0)
    wrong = []
    for _ in range(12):
        name, fn, inputs = random_program(rng)
        if outcome(fn, inputs)[0] == "raises":
            continue
        wrong += [f"{name}: {w}" for w in _sweep(fn, inputs, perturbed_inputs(rng, inputs, 6))]
    assert wrong == []


@pytest.mark.slow
def test_second_process_serves_from_the_cache_dir(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent("""
        import sys, torch, guardsolve
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
        fast = guardsolve.guarded(m, backend="inductor", cache_dir=sys.argv[1])
        with torch.no_grad():
            for b in (8, 4, 1, 3, 16, 1, 7):
                x = torch.randn(b, 16)
                assert torch.allclose(fast(x), m(x), atol=1e-5)
        i = fast.cache_info()
        print(i.traces, i.compiles, i.loaded)
    """)
    runs = [subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert runs[0].stdout.split() == ["1", "1", "0"]
    assert runs[1].stdout.split() == ["0", "0", "1"]


@pytest.mark.slow
def test_second_process_serves_a_closure_and_checks_its_state(tmp_path: pathlib.Path) -> None:
    """A closure over a module and a global is saved (its state check with it); the second
    process compiles nothing, serves a weight swap with no compile, and misses where a global
    the function reads differs."""
    script = textwrap.dedent("""
        import sys, torch, guardsolve
        torch.manual_seed(0)
        SHIFT = float(sys.argv[2])
        net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
        fast = guardsolve.guarded(lambda x: net(x) + SHIFT, backend="inductor", cache_dir=sys.argv[1])
        with torch.no_grad():
            for b in (8, 1, 3):
                x = torch.randn(b, 16)
                assert torch.allclose(fast(x), net(x) + SHIFT, atol=1e-5)
            net[2].weight = torch.nn.Parameter(torch.randn(8, 32))
            x = torch.randn(5, 16)
            assert torch.allclose(fast(x), net(x) + SHIFT, atol=1e-5)
        i = fast.cache_info()
        print(i.traces, i.compiles, i.loaded)
    """)
    runs = [subprocess.run([sys.executable, "-c", script, str(tmp_path), shift], capture_output=True, text=True,
                           timeout=600) for shift in ("0.5", "0.5", "1.5")]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr[-2000:] for r in runs]
    assert runs[0].stdout.split() == ["1", "1", "0"]
    assert runs[1].stdout.split() == ["0", "0", "1"]
    assert runs[2].stdout.split() == ["1", "1", "1"]  # SHIFT differs: the loaded entry misses


@pytest.mark.slow
def test_benchmark_quick_run() -> None:
    """`benchmarks/jit.py --quick` runs (it checks the script, not timings) and leaves JIT.md alone."""
    before = (ROOT / "benchmarks" / "JIT.md").read_bytes()
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jit.py"), "--quick"], capture_output=True,
                         text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| MLP 16-32-8 over batches | 1 vs" in out.stdout and "| branch on a size |" in out.stdout
    assert (ROOT / "benchmarks" / "JIT.md").read_bytes() == before


@pytest.mark.slow
def test_a_guard_that_cannot_be_translated_pins_the_variant_to_its_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never trusted: where a backend guard has no translation, the variant serves exactly its
    example's sizes and strides, and another batch compiles another variant."""
    import guardsolve.jit.inductor.backend_guards as backend_guards
    from guardsolve.pytorch.sympy_guards import TranslationError

    def untranslatable(code: str, symbol):  # type: ignore[no-untyped-def]
        raise TranslationError(f"cannot translate {code!r}")

    monkeypatch.setattr(backend_guards, "parse_guard", untranslatable)
    model = _mlp()
    fast = guardsolve.guarded(model, backend="inductor")
    with torch.no_grad():
        for b in (3, 5, 3):
            x = torch.randn(b, 4)
            assert torch.allclose(fast(x), model(x), atol=1e-5)
    (e,) = fast.entries
    assert [v.exact_example for v in e.variants] == [True, True]
    assert [str(v.guards) for v in e.variants] == ["input0 == 3\ninput1 == 4", "input0 == 5\ninput1 == 4"]
    assert fast.cache_info().hits == 1


@pytest.mark.slow
def test_an_artifact_that_differs_from_eager_where_it_was_compiled_is_never_used() -> None:
    """`(a * b)[:, :2]` compiled at `b` of one column gave two (the slice's end unclamped) where
    eager gives one, and the variant's check accepted those sizes. Now each artifact is run at
    the inputs it was compiled at against the trace's eager replay; one that differs is never
    trusted, and the call runs eagerly with the reason. (That artifact was itself served from
    Inductor's FX graph cache; every compile now runs lowering, and the artifact is right. The
    rejection path is tested in tests/test_inductor_soundness.py.)"""
    fn = lambda a, b: (a * b)[:, :2]  # noqa: E731
    fast = guardsolve.guarded(fn, backend="inductor", max_entries=64)
    with torch.no_grad():
        fast(torch.randn(4, 1), torch.randn(4, 1))
        a, b = torch.randn(1, 1), torch.randn(0, 1)
        assert fast(a, b).shape == fn(a, b).shape == (0, 1)
