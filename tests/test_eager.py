"""A trace behaves as eager does (issue 28): eager's kernels and values, eager's errors with
eager's numbers, no crash eager does not have, nothing traced left in the user's objects."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import guardsolve
from guardsolve.errors import EagerError, TraceError

ROOT = Path(__file__).resolve().parents[1]

_RNN_CHILD = r"""
import json, torch, guardsolve
out = {}
for kind in ("LSTM", "GRU", "RNN"):
    torch.manual_seed(0)
    m = getattr(torch.nn, kind)(8, 16, batch_first=True).eval()
    for shape in ([0, 5, 8], [2, 0, 8], [2, 5, 8]):
        x = torch.randn(*shape)
        key = f"{kind} {shape}"
        try:
            with torch.no_grad():
                e = m(x)[0]
            eager = ("ok", None)
        except Exception as err:
            eager = ("raises", f"{type(err).__name__}: {err}")
        got = {}
        warm = guardsolve.guarded(m)
        warm(torch.randn(2, 5, 8))  # NOTE: an entry first, so this call may be a hit
        for label, run in (("trace", lambda: guardsolve.trace(m, x).output[0]),
                           ("guarded", lambda: guardsolve.guarded(m)(x)[0]),
                           ("guarded after a hit", lambda: warm(x)[0])):
            try:
                with torch.no_grad():
                    r = run()
                # NOTE: a trace runs a small kernel on one thread; MKL's GEMM on one thread may
                # round the last bit otherwise than on two (it does on some CPUs)
                got[label] = ("ok", bool(eager[0] == "ok" and torch.allclose(r, e, rtol=1e-6, atol=1e-6)))
            except Exception as err:
                got[label] = ("raises", f"{type(err).__mro__[1].__name__ if isinstance(err, guardsolve.errors.EagerError) else type(err).__name__}: {err}")
        out[key] = {"eager": eager, **got}
print(json.dumps(out))
"""


def test_rnns_at_batch_0_and_sequence_0_end_as_eager_in_a_child_process() -> None:
    """nn.LSTM / GRU / RNN at batch 0 return eager's values; at sequence length 0 they raise
    eager's error. A child process, so a crash in a kernel fails this test instead of the run."""
    proc = subprocess.run([sys.executable, "-c", _RNN_CHILD], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-2000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for kind in ("LSTM", "GRU", "RNN"):
        for shape in ("[0, 5, 8]", "[2, 5, 8]"):
            case = got[f"{kind} {shape}"]
            assert case["eager"][0] == "ok"
            for label in ("trace", "guarded", "guarded after a hit"):
                assert case[label] == ["ok", True], (kind, shape, label, case[label])
        case = got[f"{kind} [2, 0, 8]"]
        assert case["eager"] == ["raises", "RuntimeError: Expected sequence length to be larger than 0 in RNN"]
        for label in ("trace", "guarded", "guarded after a hit"):
            status, text = case[label]
            assert status == "raises" and text.startswith(case["eager"][1]), (kind, label, text)


def _eager_error(fn, *args) -> Exception:
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize("fn, args", [
    (lambda a, b: a + b, (torch.randn(3, 4), torch.randn(5, 4))),
    (lambda x, b: torch.nn.functional.linear(x, torch.ones(4, 8), b), (torch.randn(3, 8), torch.randn(5))),
    (lambda x: x.sum(0).item(), (torch.randn(3, 2),)),
    (lambda x, w: torch.nn.functional.conv1d(x, w), (torch.randn(2, 3), torch.randn(4, 3, 2, 2))),
    (torch.nn.LSTM(8, 16, batch_first=True), (torch.randn(2, 5, 7),)),
    (lambda x: x.view(x.shape[0], 7), (torch.randn(3, 4),)),
    (lambda x: torch.cat([x, x.t()]), (torch.randn(3, 4),)),
])
def test_errors_are_eagers_own_type_and_message_with_numbers(fn, args) -> None:
    expected = _eager_error(fn, *args)
    got = _eager_error(guardsolve.trace, fn, *args)
    assert isinstance(got, type(expected))
    assert str(got) == str(expected) or str(got).startswith(str(expected) + " — "), (str(got), str(expected))
    g = guardsolve.guarded(fn)
    again = _eager_error(g, *args)
    assert isinstance(again, type(expected)) and str(again).startswith(str(expected))


def test_an_eager_error_is_also_a_trace_error_and_pickles() -> None:
    import pickle

    got = _eager_error(guardsolve.trace, lambda a, b: a + b, torch.randn(3), torch.randn(4))
    assert isinstance(got, RuntimeError) and isinstance(got, EagerError) and isinstance(got, TraceError)
    assert type(got).__name__ == "RuntimeError" and "test_eager.py" in str(got)
    back = pickle.loads(pickle.dumps(got))
    assert isinstance(back, RuntimeError) and isinstance(back, EagerError) and str(back) == str(got)


def test_sizes_format_as_their_values_inside_a_trace() -> None:
    seen = []

    def f(x):
        n = x.shape[0]
        seen.extend([str(n), repr(n), f"{n}", "%s" % n, str(x.shape)])
        return x * 2

    guardsolve.trace(f, torch.randn(3, 4))
    assert seen == ["3", "3", "3", "3", "torch.Size([3, 4])"]


def _symbolic_values(root: torch.nn.Module) -> list[str]:
    """Paths of traced values reachable from the module tree's attributes."""
    from guardsolve.trace.traced_tensor import TracedTensor

    found: list[str] = []

    def visit(v, path: str, depth: int = 0) -> None:
        if isinstance(v, TracedTensor) or (isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat))):
            found.append(path)
        elif depth < 6 and isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                visit(x, f"{path}[{i}]", depth + 1)
        elif depth < 6 and isinstance(v, dict):
            for k, x in v.items():
                visit(x, f"{path}[{k!r}]", depth + 1)

    for name, m in root.named_modules():
        for key, value in vars(m).items():
            visit(value, f"{name}.{key}", 0)
    return found


def _models() -> dict:
    sys.path.insert(0, str(ROOT / "examples"))
    import models

    return models.MODELS


@pytest.mark.parametrize("name", ["gpt2", "bert", "transformer_layer", "lstm", "self_attention", "conv_net", "swin"])
def test_tracing_leaves_no_traced_value_in_the_module(name: str) -> None:
    if name == "swin":
        transformers = pytest.importorskip("transformers")
        cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                      window_size=4)
        torch.manual_seed(0)
        model, args = transformers.SwinModel(cfg).eval(), (torch.randn(2, 3, 32, 32),)
        later = [(torch.randn(2, 3, 64, 64),), (torch.randn(2, 3, 48, 48),)]
    else:
        if name in ("gpt2", "bert"):
            pytest.importorskip("transformers")
        make, inputs = _models()[name]
        torch.manual_seed(0)
        model, args = make(), inputs()
        later = [args]
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        guardsolve.trace(model, *args)
    assert _symbolic_values(model) == []
    for x in later:  # NOTE: the same instance keeps working eagerly, as a fresh copy does
        with torch.no_grad():
            a, b = model(*x), fresh(*x)
        a = a.last_hidden_state if hasattr(a, "last_hidden_state") else a
        b = b.last_hidden_state if hasattr(b, "last_hidden_state") else b
        torch.testing.assert_close(a, b)


def test_swin_notes_the_attribute_it_made_concrete() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                  window_size=4)
    model = transformers.SwinModel(cfg).eval()
    with torch.no_grad():
        t = guardsolve.trace(model, torch.randn(2, 3, 32, 32))
    assert any(n.startswith("encoder.layers.1.blocks.0.window_size: set during the trace") for n in t.notes), t.notes
    assert type(model.encoder.layers[1].blocks[0].window_size) is int


def test_a_trace_that_raises_leaves_nothing_behind_either() -> None:
    class Keeps(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(2))

        def forward(self, x):
            self.rows = [x.shape[0], {"cols": x.shape[1]}]
            self.seen = x[0, :2] * 1
            return x @ torch.ones(5, 2)  # NOTE: raises: x is [3, 4]

    m = Keeps()
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x2\)"):
        guardsolve.trace(m, torch.randn(3, 4))
    assert m.rows == [3, {"cols": 4}] and type(m.rows[0]) is int
    assert type(m.seen) is torch.Tensor and _symbolic_values(m) == []


def test_fast_sweep_has_no_case_outside_the_contract() -> None:
    """The sweep's fast subset (benchmarks/eager.py --fast): error inputs and sizes 0 and 1,
    each entry in a forked child of a fresh process; it exits 1 on any case that ends unlike
    eager (a different type or message, a return where eager raises, wrong values, a crash)."""
    proc = subprocess.run([sys.executable, "benchmarks/eager.py", "--fast", "--no-write"], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "| trace |" in proc.stdout and "| guarded |" in proc.stdout


@pytest.mark.parametrize("fails", [False, True])
def test_a_dropped_trace_is_freed(fails: bool) -> None:
    """Nothing keeps a trace alive after the caller drops it, a failed one included (a cycle
    through the C++ sizes of cached meta tensors once kept every trace: memory grew per miss)."""
    import gc

    from guardsolve.ir.graph import Graph

    m = torch.nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(2, 0 if fails else 5, 8)

    def graphs() -> int:
        for _ in range(3):  # NOTE: a failed trace's exceptions and frames take more than one pass
            gc.collect()
        return sum(isinstance(o, Graph) for o in gc.get_objects())

    def once() -> None:
        try:
            guardsolve.trace(m, x)
        except RuntimeError:
            assert fails

    once()
    before = graphs()
    for _ in range(10):
        once()
    assert graphs() == before


def test_parameters_that_require_grad_trace_through_views() -> None:
    """`nn.MultiheadAttention` splits its packed weight (`w.chunk(3)`) while the parameters
    require grad: eager's view of a parameter traces, and the values are eager's."""
    m = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q = torch.randn(2, 4, 16)
    t = guardsolve.trace(m, q, q, q)
    assert torch.equal(t.output[0], m(q, q, q)[0])


def test_a_run_that_only_fails_under_tracing_says_so() -> None:
    """Library code may take another route while traced (it asks `is_compiling()`); where
    that route fails and eager runs, the trace says it cannot trace this (not eager's error)."""

    def f(x):
        if torch.compiler.is_compiling():
            return x[torch.tensor([5])]  # NOTE: out of range: only the traced route fails
        return x * 2

    with pytest.raises(guardsolve.UnsupportedOpError, match=r"fails where eager runs \(IndexError"):
        guardsolve.trace(f, torch.randn(3))


def test_a_failed_trace_raises_eagers_own_error_when_eager_fails_too() -> None:
    def f(x, y):
        if torch.compiler.is_compiling():
            return (x + y.t()).sum()  # NOTE: the traced route fails first, with another message
        return x @ y

    expected = _eager_error(f, torch.randn(3, 4), torch.randn(5, 2))
    got = _eager_error(guardsolve.trace, f, torch.randn(3, 4), torch.randn(5, 2))
    assert isinstance(got, RuntimeError) and str(got) == str(expected)


def test_an_output_object_holding_traced_tensors_is_concrete_and_not_cached() -> None:
    class Box:
        def __init__(self, t):
            self.t = t
            self.parts = [t * 2]

    f = lambda x: Box(x + 1)  # noqa: E731
    x = torch.randn(3)
    t = guardsolve.trace(f, x)
    assert t.opaque and type(t.output.t) is torch.Tensor and type(t.output.parts[0]) is torch.Tensor
    assert torch.equal(t.output.t, x + 1) and "Box held traced values" in t.notes[-1]
    g = guardsolve.guarded(f)
    y = torch.randn(3)
    assert torch.equal(g(x).t, x + 1) and torch.equal(g(y).t, y + 1)  # NOTE: never the example's object
    assert g.cache_info().entries == 0


def test_a_symbolic_value_where_pytorch_wants_a_plain_one_is_decided_or_gives_eagers_error() -> None:
    """PyTorch's argument parser refuses a SymBool (transformers' `is_causal` at some sizes):
    the trace decides it (a guard, `trace/plain.py`); where eager raises, eager's error."""

    def f(x):
        causal = x.shape[0] > 1  # NOTE: a SymBool while traced
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=causal)

    assert str(guardsolve.simplify(guardsolve.trace(f, torch.randn(2, 3, 4)))) == "x0 >= 2"

    def g(x, y):
        causal = x.shape[0] > 1
        return torch.nn.functional.scaled_dot_product_attention(x, y, y, is_causal=causal)

    expected = _eager_error(g, torch.randn(2, 3, 4), torch.randn(2, 5, 3))
    got = _eager_error(guardsolve.trace, g, torch.randn(2, 3, 4), torch.randn(2, 5, 3))
    assert isinstance(got, type(expected)) and str(got).startswith(f"{expected} — ") and "test_eager.py:" in str(got), got


def test_pytorchs_own_python_code_failing_on_its_compiled_route_gives_eagers_error() -> None:
    """`multi_head_attention_forward` asserts on the width on the route it takes while traced;
    eager's fused kernel raises a RuntimeError first: the trace raises eager's."""
    layer = torch.nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    f = lambda t, m: layer(t, m)  # noqa: E731
    args = (torch.randn(2, 4, 0), torch.randn(2, 6, 16))
    with torch.no_grad():
        expected = _eager_error(f, *args)
        got = _eager_error(guardsolve.trace, f, *args)
    assert isinstance(got, type(expected)) and str(got) == str(expected), (got, expected)


def test_a_value_guarded_programs_tensors_are_freed_after_its_calls() -> None:
    """`.item()` under value guards asks whether it reads a traced tensor: nothing remembers
    the arguments it asked about (a cache keyed on them once kept every traced tensor, and the
    trace's whole graph, alive for the life of the process)."""
    import gc
    import weakref

    from guardsolve.trace.traced_tensor import TracedTensor

    def f(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        if (x.sum() > 0).item():
            return x[:k] * 2
        return x[:k]

    def traced_alive() -> int:
        gc.collect()
        return sum(isinstance(o, TracedTensor) for o in gc.get_objects())

    before = traced_alive()
    refs = []
    for size in (6, 7, 9):
        x, n = torch.randn(size), torch.tensor(3)
        t = guardsolve.trace(f, x, n, value_guards=True)
        refs.append(weakref.ref(t))
        del t
    assert traced_alive() == before
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
