"""torch.compile's own guards (`guardsolve.pytorch`): the sympy translation, `explain_compile`
against Dynamo itself as the oracle, specializations explained, and `watch_recompiles`.

The oracle: each eager-valid perturbed input (dims to 0, 1, 2, +-1, x2; classes of equal dims
moved together and apart) runs through the compiled function under
`torch.compiler.set_stance("fail_on_recompile")`; every frame Dynamo entered must be accepted
by the report's guards exactly when Dynamo ran it without recompiling.
"""

from __future__ import annotations

import json
import random
import re
import sys

import pytest
import sympy
import torch
import z3

import guardsolve
from guardsolve.errors import GuardFailure, InterpretError
from guardsolve.ir.concrete import run_concrete
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.pytorch.explain.compile import explain_compile
from guardsolve.pytorch.oracle import agrees, dynamo_calls
from guardsolve.pytorch.recompiles import watch_recompiles
from guardsolve.pytorch.sympy_guards import TranslationError, emit_bool, parse_guard
from guardsolve.solve.smt import graph_to_z3, z3_vars
from guardsolve.testing import size_variants
from torch.utils._sympy import functions as F
from torch.utils._sympy.printers import PythonPrinter

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent.parent))

X, Y, Z = sympy.symbols("x y z", integer=True)

# Every construct the translation takes, each a condition over x, y, z
CONSTRUCTS = {
    "FloorDiv": sympy.Eq(F.FloorDiv(X + 3, Y + 1), Z),
    "Mod": sympy.Eq(F.Mod(X, 3), 1),
    "PythonMod": sympy.Ne(F.PythonMod(X - Y, 4), 0),
    "sympy.Mod": sympy.Eq(sympy.Mod(X + Z, 5), 2),
    "CeilToInt(IntTrueDiv)": sympy.Le(F.CeilToInt(F.IntTrueDiv(X, 4)), Y),
    "FloorToInt(IntTrueDiv)": sympy.Ge(F.FloorToInt(F.IntTrueDiv(X + 1, 3)), Z),
    "ceiling(rational)": sympy.Lt(sympy.ceiling(X / 2), Y),
    "Max": sympy.Le(F.Max(X, Y, 3), Z + 4),
    "Min": sympy.Gt(F.Min(X, Y + 1), 2),
    "Max in a product": sympy.Eq(F.Max(1, X) * Y, Z * 2),
    "Abs": sympy.Le(sympy.Abs(X - Y), 2),
    "Where": sympy.Ge(F.Where(sympy.Gt(X, Y), X, Y), 3),
    "ModularIndexing": sympy.Eq(F.ModularIndexing(X, 2, 4), 1),
    "CleanDiv": sympy.Le(F.CleanDiv(X * 4, 2), Y * 3),
    "LShift/RShift": sympy.Eq(F.LShift(X, 2), F.RShift(Y, 1) + Z),
    "PowByNatural": sympy.Le(F.PowByNatural(X, 2), Y * Z + 1),
    "Pow": sympy.Ne(X ** 3 - Y, 0),
    "Eq/Ne/Lt/Le/Gt/Ge": sympy.And(sympy.Eq(X, X), sympy.Ne(X, Y + 1), sympy.Lt(X, 40), sympy.Le(Y, 40),
                                   sympy.Gt(Z + 1, 0), sympy.Ge(Z, 0)),
    "sums and products": sympy.Eq(2 * X * Y + 3 * Z - 7, X * Y + Z),
    "Or/Not": sympy.Or(sympy.Not(sympy.Eq(X, 2)), sympy.Lt(Y, Z)),
}


def _translated(expr: object) -> Graph:
    g = Graph()
    names = {s: g.emit(Op.INT_ARG, (), name=str(s)) for s in (X, Y, Z)}
    g.emit(Op.BOOL_BAILOUT, (emit_bool(g, expr, names),), expect=True)
    return g


def _holds(g: Graph, point: dict[str, int]) -> bool:
    try:
        run_concrete(g, point)
        return True
    except GuardFailure:
        return False
    except InterpretError as e:
        assert "ZeroDivisionError" in str(e)
        return False  # NOTE: a zero divisor: Python raises, so the guard rejects


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_translation_agrees_with_sympy_on_random_values(name: str) -> None:
    """Each construct: sympy's own evaluation == the guard graph's == z3's, at random values
    (negative ones too: Python's floor division and modulo)."""
    expr = CONSTRUCTS[name]
    g = _translated(expr)
    ctx = z3.Context()
    var = z3_vars(ctx)
    accept = graph_to_z3(g, var)
    rng = random.Random(name)
    low = 0 if name == "Mod" else -9  # NOTE: torch's Mod is defined for non-negative arguments only
    for _ in range(60):
        point = {"x": rng.randint(low, 20), "y": rng.randint(low, 20), "z": rng.randint(low, 20)}
        try:
            want = bool(expr.xreplace({X: sympy.Integer(point["x"]), Y: sympy.Integer(point["y"]),
                                       Z: sympy.Integer(point["z"])}))
        except ZeroDivisionError:
            want = False  # NOTE: Python raises, so Dynamo's guard rejects
        assert _holds(g, point) == want, (name, point)
        s = z3.Solver(ctx=ctx)
        s.add(accept, *(var(k) == v for k, v in point.items()))
        assert (s.check() == z3.sat) == want, (name, point)


@pytest.mark.parametrize("name", ["FloorDiv", "PythonMod", "CeilToInt(IntTrueDiv)", "Max", "Min", "Abs",
                                  "Eq/Ne/Lt/Le/Gt/Ge", "Or/Not", "sums and products"])
def test_printed_code_parses_back_to_the_same_condition(name: str) -> None:
    """Dynamo checks the Python code torch's printer makes of a guard; `parse_guard` reads it back
    (one symbol per source), and the translation agrees with Python's own `eval` of that code."""
    expr = CONSTRUCTS[name]
    code = PythonPrinter().doprint(expr)
    symbols: dict[str, sympy.Symbol] = {}
    import re
    parsed = parse_guard(re.sub(r"\b([xyz])\b", r"L['\1']", code),
                         lambda src: symbols.setdefault(src, sympy.Symbol(src[3], integer=True)))
    g = _translated(parsed.xreplace({s: {"x": X, "y": Y, "z": Z}[s.name] for s in parsed.free_symbols}))
    rng = random.Random(name)
    import math
    for _ in range(40):
        point = {"x": rng.randint(0, 20), "y": rng.randint(0, 20), "z": rng.randint(0, 20)}
        try:
            want = bool(eval(code, {"math": math, **point}))
        except ZeroDivisionError:
            want = False
        assert _holds(g, point) == want, (name, code, point)


def test_a_construct_without_integer_meaning_is_named() -> None:
    g = Graph()
    names = {X: g.emit(Op.INT_ARG, (), name="x")}
    with pytest.raises(TranslationError, match="OpaqueUnaryFn_sqrt"):
        emit_bool(g, sympy.Lt(F.OpaqueUnaryFn_sqrt(X), 3), names)
    with pytest.raises(TranslationError, match="true division"):
        emit_bool(g, sympy.Lt(X / 2, 3), names)
    with pytest.raises(TranslationError, match="cannot translate .math.isnan"):
        parse_guard("not math.isnan(L['f'])", sympy.Symbol)


# -- explain_compile against Dynamo ----------------------------------------------------------

from examples.compiled import graph_break, view_mm  # noqa: E402
from examples.compiled import route as branches  # noqa: E402


def _cases() -> dict[str, tuple]:
    from examples.attention import AttentionBlock
    from examples.cat_reshape import merge_pairs
    from examples.cnn import SmallCNN
    from examples.mlp import MLP

    torch.manual_seed(0)
    return {
        "view_mm": (view_mm, (torch.randn(3, 2, 4), torch.randn(3, 2, 4))),
        "branches": (branches, (torch.randn(12), torch.randn(13))),
        "graph_break": (graph_break, (torch.randn(5, 3), torch.randn(4))),
        "mlp": (MLP().eval(), (torch.randn(32, 64),)),
        "cat_reshape": (merge_pairs, (torch.randn(4, 6), torch.randn(4, 10))),
        "attention": (AttentionBlock().eval(), (torch.randn(2, 16, 64),)),
        "cnn": (SmallCNN().eval(), (torch.randn(2, 3, 16, 16),)),
    }


def _models() -> dict[str, tuple]:
    import examples.models as M

    torch.manual_seed(0)
    return M.built(("gpt2", "bert", "transformer_layer", "lstm"))


def _oracle(fn, args) -> tuple[object, int]:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        report = explain_compile(fn, *args, dynamic=True)
        checked = 0
        for what, new in size_variants(args):
            try:
                fn(*new)
            except Exception:
                continue  # NOTE: eager rejects it; so does any guard set
            assert agrees(report, *new) == [], what
            if len(report.frames) == 1:
                # NOTE: the stated API itself: the outermost guards over the call's own arguments
                (call,) = dynamo_calls(report, *new)
                assert report.guards.check(*new) == call.accepted, what
            checked += 1
    return report, checked


def _judge(report, checked: int) -> None:  # type: ignore[no-untyped-def]
    assert checked > 0
    for f in report.frames:
        cert = f.guards.verify()
        assert cert.equivalent and cert.irredundant and f.guards.minimal
        assert len(f.guards) <= len(f.dynamo_guards)
        assert all(g.sources for g in f.dynamo_guards), [g.code for g in f.dynamo_guards if not g.sources]
        assert all(f.sources_of(i) for c in f.guards for i in c.prov)


FAST = ["view_mm", "branches", "graph_break", "mlp", "cat_reshape"]


@pytest.mark.parametrize("name", FAST)
def test_guards_accept_exactly_what_dynamo_runs_without_recompiling(name: str) -> None:
    fn, args = _cases()[name]
    report, checked = _oracle(fn, args)
    _judge(report, checked)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention", "cnn", "gpt2", "bert", "transformer_layer", "lstm"])
def test_guards_agree_with_dynamo_on_real_models(name: str) -> None:
    fn, args = {**_cases(), **_models()}.get(name, (None, None))
    if fn is None:
        pytest.skip("transformers is not installed")
    # NOTE: Dynamo runs nn.LSTM eagerly (no frame, no guards) unless allow_rnn is set
    with torch._dynamo.config.patch(allow_rnn=True):
        report, checked = _oracle(fn, args)
    _judge(report, checked)


def test_lstm_without_allow_rnn_is_a_report_without_guards_that_says_why() -> None:
    """Issue 37 (3): Dynamo's default (allow_rnn=False) runs an nn.LSTM eagerly: no frame, so no
    guard; the report says why and names the setting, and says it again on a second call."""
    lstm = torch.nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(2, 5, 8)
    with torch._dynamo.config.patch(allow_rnn=False):
        for _ in range(2):
            report = explain_compile(lstm, x)
            assert report.ran_eagerly and report.frames == [] and len(report.guards) == 0
            assert report.setting == "torch._dynamo.config.allow_rnn = True"
            text = str(report)
            assert "no guards: Dynamo compiled no frame of LSTM: it runs every call eagerly" in text
            assert "Attempted to wrap RNN, GRU, or LSTM" in text and "allow_rnn = True" in text
            assert report.guards.check(torch.randn(3, 1, 8)) and report.guards.check(torch.randn(0, 7, 8))
            assert torch.equal(report.result[0], lstm(x)[0])
            assert json.loads(report.json())["ran_eagerly"]["setting"] == report.setting


def _deprecation_style(forward):  # type: ignore[no-untyped-def]
    """A decorator as transformers' deprecation wrapper is: `wrapped_func(*args, **kwargs)`."""
    import functools

    @functools.wraps(forward)
    def wrapped_func(*args, **kwargs):  # type: ignore[no-untyped-def]
        return forward(*args, **kwargs)

    return wrapped_func


class Wrapped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    @_deprecation_style
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.emb(input_ids).sum(-1)


def test_a_module_called_positionally_through_a_wrapper_names_dims_after_forward() -> None:
    """Issue 37 (2): `wrapped_func(*args)` gets the module as `args[0]`: the dims are named after
    forward's parameters (input_ids0, not args_1_0), the frame as the user called it."""
    with torch.no_grad():
        report = explain_compile(Wrapped(), torch.randint(0, 10, (2, 5)), dynamic=True)
    frame = report.frames[0]
    assert frame.params == ("input_ids",) and set(frame.names.values()) == {"input_ids0", "input_ids1"}
    assert re.match(r"Wrapped\.forward \(\S*test_compile\.py:\d+\), through its wrapper wrapped_func \(", frame.title)
    assert "args_" not in str(report)
    with torch.no_grad():
        assert report.guards.check(torch.randint(0, 10, (3, 7))) and not report.guards.check(torch.randint(0, 10, (1, 7)))


def test_llama_called_positionally_names_dims_after_forward() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with torch.no_grad():
        report = explain_compile(transformers.LlamaModel(cfg).eval(), torch.randint(0, 100, (2, 9)), dynamic=True)
    text = str(report)
    assert "dims: input_ids0 = L['args'][1].size()[0], input_ids1 = L['args'][1].size()[1]" in text
    assert re.search(r"\nframe \d+/0 LlamaModel\.forward \(transformers/models/llama/modeling_llama\.py:\d+\), ", text)
    assert "through its wrapper wrapped_func (transformers/utils/deprecation.py:" in text and "args_1" not in text


def branchy(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 16:
        return x.sum(0)
    return x.reshape(x.shape[0], x.shape[1] // 2, 2)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.act = torch.nn.Conv1d(1, 4, 5, stride=2), torch.nn.ReLU()

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x = self.conv(wave.unsqueeze(1))
        return self.act(x.transpose(1, 2))


def test_sources_are_the_users_lines() -> None:
    """Issue 37 (8): a dim's 0/1 specialization names a line that uses that dim (not the first
    read of another size of the tensor); a library line comes with the user's line that called it."""
    with torch.no_grad():
        r = explain_compile(branchy, torch.randn(4, 10), dynamic=True)
    first = branchy.__code__.co_firstlineno
    (x1,) = [g for g in r.dynamo_guards if g.code == "2 <= L['x'].size()[1]"]
    assert [(s.assumption, s.line) for s in x1.sources] == [("0/1 specialization", first + 3)]
    with torch.no_grad():
        r = explain_compile(Encoder(), torch.randn(2, 40), dynamic=True)
    call = Encoder.forward.__code__.co_firstlineno + 2
    for g in (g for g in r.dynamo_guards if g.kind in ("shape", "static size")):
        files = [s.file for s in g.sources if s.assumption is None and s.file]
        if any("torch" in f or f.startswith("nn/") for f in files):
            assert g.sources[0].file.endswith("test_compile.py"), [str(s) for s in g.sources]
    assert any(s.line == call and s.code == "return self.act(x.transpose(1, 2))" for g in r.dynamo_guards
               for s in g.sources), [str(s) for g in r.dynamo_guards for s in g.sources]


def test_branches_are_fewer_than_dynamos_and_named_by_line() -> None:
    with torch.no_grad():
        r = explain_compile(branches, torch.randn(12), torch.randn(13), dynamic=True)
    assert [g.code for g in r.dynamo_guards] == ["L['x'].size()[0] < L['y'].size()[0]", "11 <= L['x'].size()[0]",
                                                 "12 <= L['y'].size()[0]"]
    assert [c.text for c in r.guards] == ["x0 >= 11", "x0 < y0"]
    (implied,) = r.guards.implied
    assert r.frames[0].sources_of(implied)[0].code == "if x.shape[0] < y.shape[0]:"
    assert [s.line for c in r.guards for i in c.prov for s in r.frames[0].sources_of(i)] == [
        branches.__code__.co_firstlineno + 4, branches.__code__.co_firstlineno + 6]


def test_dynamos_own_assumptions_are_named_with_a_fix() -> None:
    with torch.no_grad():
        r = explain_compile(view_mm, torch.randn(3, 2, 4), torch.randn(3, 2, 4), dynamic=True)
    by_code = {g.code: g for g in r.dynamo_guards}
    duck = by_code["L['y'].size()[0] == L['x'].size()[0]"]
    assert duck.sources[0].assumption == "duck sizing" and "use_duck_shape" in duck.sources[0].fix
    assert by_code["2 <= L['x'].size()[0]"].sources[0].assumption == "0/1 specialization"
    stride = by_code["L['x'].stride()[0] == L['x'].size()[1]*L['x'].size()[2]"]
    assert stride.kind == "stride" and stride.sources[0].assumption == "stride"
    assert "x.stride()[0] == x.size()[1]*x.size()[2]" in [g.text for g in r.guards.static]
    doc = json.loads(r.json())
    assert doc["counts"]["dynamo_guards"] == 13 and len(doc["guards"]) == len(r.guards)
    assert all(s.get("assumption") or s["line"] for g in doc["guards"] for s in g["sources"])


def test_static_by_default_without_dynamic() -> None:
    with torch.no_grad():
        r = explain_compile(lambda x: x.sin(), torch.randn(3, 5))
    assert [c.text for c in r.guards] == ["x0 == 3", "x1 == 5"]
    assert {s.assumption for g in r.dynamo_guards for s in g.sources} == {"static by default"}


def h(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 5:
        x = x * 2
    if x.shape[0] <= 6:
        x = x + 1
    return x.sin()


def test_a_violated_mark_dynamic_names_every_guard_that_pins_it() -> None:
    """pytorch/pytorch#136002: `x > 5 and x <= 6` pins x; Dynamo names only the last line."""
    x = torch.randn(6, 3)
    torch._dynamo.mark_dynamic(x, 0)
    r = explain_compile(h, x)
    assert "specialized it to be a constant (6)" in r.error
    (s,) = r.specializations
    assert (s.dim, s.value, s.marked) == ("x0", 6, True)
    assert [p.sources[0].code for p in s.pins] == ["if x.shape[0] > 5:", "if x.shape[0] <= 6:"]
    assert [p.witness for p in s.pins] == [{"x0": 5}, {"x0": 7}]
    assert x._dynamo_dynamic_indices == {0}  # NOTE: the user's mark is back after the explaining compile
    assert "x0 == 6" in [c.text for c in r.guards]


def test_a_failed_compile_is_one_clear_error() -> None:
    def bad(x: torch.Tensor) -> torch.Tensor:
        return x @ x

    # NOTE: eager fails too: eager's own error (a RuntimeError) with the user's line, not Dynamo's wrapper
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x3\) — "
                                           r".*test_compile.py:\d+  return x @ x") as info:
        explain_compile(bad, torch.randn(2, 3))
    assert isinstance(info.value, guardsolve.GuardsolveError)


# -- recompiles --------------------------------------------------------------------------------


def _entries(code) -> int:  # type: ignore[no-untyped-def]
    """The graphs Dynamo holds for one code object (its own cache)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(code))


class Head(torch.nn.Module):
    """An MLP of its own (Dynamo's cache is per code object: no other test compiles this one)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 32), torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x).relu())


def test_recompiles_are_counted_explained_and_avoided(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import guardsolve.pytorch.recompiles as R

    replays = []
    replay = R.replay
    monkeypatch.setattr(R, "replay", lambda *a, **k: replays.append(1) or replay(*a, **k))
    model = Head().eval()
    before = _entries(Head.forward.__code__)
    compiled = torch.compile(model, backend="eager")
    with watch_recompiles() as log, torch.no_grad():
        for b in (2, 3, 8, 1):
            compiled(torch.randn(b, 64))
    compiles = _entries(Head.forward.__code__) - before
    # batch 2 compiles (static), 3 recompiles (automatic dynamic), 8 hits, 1 recompiles (0/1 specialization)
    assert len(log.calls) == compiles == 3 and len(log) == 2
    first, second = log.recompiles
    assert first.failed == "x0 == 2" and first.sources[0].assumption == "static by default"
    assert second.failed == "x0 >= 2" and second.sources[0].assumption == "0/1 specialization"
    capsys.readouterr()
    # NOTE: issue 49 (8): printing never compiles; the check runs once, when asked, and says so
    cheap = str(log)
    assert not replays and not log.checked and capsys.readouterr().err == ""
    assert "suggestion: not checked yet (print(log.check()) checks it" in cheap and "trace-exact" not in cheap
    text = str(log.check())
    checked = len(replays)
    err = capsys.readouterr().err
    assert err.startswith("guardsolve: checking the suggestion by compiling again... ")
    assert "\nguardsolve: tracing the first call with guardsolve... " in err
    assert checked and log.suggestion_seconds is not None and log.checked
    s = log.suggestion
    assert s is not None and s.recompiles_before == 2 and s.recompiles_after < 2
    assert str(log) == text and len(replays) == checked and capsys.readouterr().err == ""
    assert "3 compiles, 2 recompiles" in text and "suggestion: torch._dynamo.mark" in text
    # guardsolve's trace of batch 2 is the same trace at every batch size (MLP): it serves them
    assert len(log.trace_accepts) == 2


def pinned(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 3:
        return x.sin()
    return x.cos()


def test_checking_the_suggestion_keeps_pytorchs_logs_off_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 49 (8): the mark_dynamic option Dynamo refuses (the code pins the size) logs an
    ERROR traceback from torch._guards; it must not cut into guardsolve's progress line."""
    compiled = torch.compile(pinned, backend="eager")
    with watch_recompiles() as log:
        for n in (3, 4, 5, 3):
            compiled(torch.randn(n, 4))
    capfd.readouterr()
    log.check()
    err = capfd.readouterr().err
    assert "Error while creating guard" not in err and "Traceback" not in err, err
    assert re.fullmatch(r"guardsolve: checking the suggestion by compiling again\.\.\. [\d.]+ s\n"
                        r"guardsolve: tracing the first call with guardsolve\.\.\. [\d.]+ s\n", err), err
    assert log.suggestion is None and "suggestion: none found" in str(log)


class UNet(torch.nn.Module):
    """Conv down, max-pool, conv, upsample, the skip concatenated, conv."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.out = torch.nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = torch.relu(self.down(x))
        h = torch.relu(self.mid(torch.nn.functional.max_pool2d(skip, 2)))
        h = torch.nn.functional.interpolate(h, scale_factor=2)
        return self.out(torch.cat([h, skip], dim=1))


def test_a_range_guard_names_each_bound_by_what_decided_it() -> None:
    """Issue 49 (8): Dynamo's `2 <= x0 <= 15` joins two bounds: 0/1 specialization (>= 2) and
    the convolution's backend choice FakeTensor makes for the output's layout (mkldnn from batch
    16: <= 15). Each minimal guard names its own bound's source, and no line twice."""
    with torch.no_grad():
        r = explain_compile(UNet(), torch.randn(2, 3, 16, 16), dynamic=True)
    f = r.frames[0]
    (rng,) = [g for g in f.dynamo_guards if g.code == "2 <= L['x'].size()[0] <= 15"]
    assert [b.code for b in rng.bounds] == ["2 <= L['x'].size()[0]", "L['x'].size()[0] <= 15"]
    by_text = {c.text: [s for i in sorted(c.prov) for s in f.sources_of(i)] for c in r.guards}
    assert [s.assumption for s in by_text["x0 >= 2"]] == ["0/1 specialization"]
    upper = by_text["x0 <= 15"]
    call = UNet.forward.__code__.co_firstlineno + 1
    assert [(s.assumption, s.line) for s in upper][0] == (None, call)
    assert upper[-1].decided is not None and "_subclasses/fake_impls.py" in upper[-1].decided, upper
    assert "_select_conv_backend" in upper[-1].decided
    text = str(r)
    assert all(line.count(f"test_compile.py:{call} ") <= 1 for line in text.splitlines()), text
    assert "Dynamo: L['x'].size()[0] <= 15 (of 2 <= L['x'].size()[0] <= 15)  <- " in text
    assert len(f.dynamo_guards) == json.loads(r.json())["counts"]["dynamo_guards"]  # NOTE: Dynamo's count


@pytest.mark.slow
def test_gpt2_recompiles_explained() -> None:
    import examples.models as M

    try:
        model = M.gpt2()
    except ImportError:
        pytest.skip("transformers is not installed")
    compiled = torch.compile(model, backend="eager", isolate_recompiles=True)
    calls = [(b, s) for b in (1, 2, 3, 8) for s in (16, 17)]
    code = type(model).forward.__code__  # NOTE: transformers' forward wrapper: the frame Dynamo compiles
    before = _entries(code)
    with watch_recompiles() as log, torch.no_grad():
        for b, s in calls:
            compiled(torch.randint(0, 100, (b, s)))
    compiles = _entries(code) - before
    assert {c.code for c in log.calls} == {code}
    assert len(log) == len(log.calls) - 1 == compiles - 1 >= 2
    assert all(r.failed and r.sources for r in log)
    assert log.suggestion is not None and log.suggestion.recompiles_after < len(log)


def test_oracle_reports_the_frame_dynamo_refused() -> None:
    with torch.no_grad():
        r = explain_compile(graph_break, torch.randn(5, 3), torch.randn(4), dynamic=True)
        calls = dynamo_calls(r, torch.randn(2, 3), torch.randn(4))
    assert [(c.name, c.accepted) for c in calls] == [("graph_break", True),
                                                     (r.frames[1].name, False)]
    assert tuple(calls[1].f_locals["z"].shape) == (2, 3)


def test_a_guard_dynamo_names_no_source_for_gets_guardsolves_line() -> None:
    """Where Dynamo's comment names neither a line nor an assumption, guardsolve's own trace of
    the same call gives the user lines of its bailouts over the same dims."""
    from dataclasses import replace

    from guardsolve.pytorch.explain.provenance import GuardSource
    from guardsolve.pytorch.explain.attribution import attribute_from_trace

    args = (torch.randn(12), torch.randn(13))
    with torch.no_grad():
        r = explain_compile(branches, *args, dynamic=True)
    frame = r.frames[0]
    bare = GuardSource("symbol replacement")
    frame.dynamo_guards[1] = replace(frame.dynamo_guards[1], sources=(bare,))  # `11 <= L['x'].size()[0]`
    attribute_from_trace(frame, branches, args)
    lines = {s.code for s in frame.dynamo_guards[1].sources if s.assumption is None}
    assert "if x.shape[0] > 10:" in lines and all("unknown" not in str(s) or s.assumption for s in frame.dynamo_guards[1].sources)
