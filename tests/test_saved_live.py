"""A saved trace gives the guards its live trace gives (issue 38, part 4).

`simplify(Graph.parse(str(t.graph)))` reinterprets the text with PyTorch's rules and explores
it by replaying its own ops (`paths.explore_saved`); `simplify(t)` keeps the guards recorded
while tracing and explores by tracing the function again (`paths.explore`). On every example
and real model the two are the same constraints: the replay runs each op as the trace saw it
(below autograd: `lstm` whole, not unrolled over time), a replay at other sizes stops where a
fresh trace records another node (a decision of the program's own answered otherwise, a size
the program reads that is a constant there, or the other way round), and it rejects regions
and spends its probe budget as a live exploration does. (Both are compared with the same probe
budget and no run budget: `simplify`'s default also stops after a number of probes run that
the trace's size sets, `explore.budget.run_budget`, which a live trace and a saved one spend differently.)

One kind of route only a live trace finds: where the program branches to a route that leaves
out ops that are identities there (`trace/identity.py`: GPT-2 at batch 1 skips an `expand` to
the tensor's own size), the function is traced again down the other branch, which the trace's
ops do not hold. Exploring records each such route in the trace's text (`ir.routes`: `#route`
blocks after the nodes), so the text saved after exploring (as `guardsolve trace` writes it)
gives the live guards; a text saved before exploring lacks those routes: narrower, never wider.
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any, Callable

import pytest
import torch

import guardsolve
from guardsolve.solve.explore import ROUTE_WHY, prove_union

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(path: pathlib.Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _example(name: str) -> Any:
    return _load(ROOT / "examples" / f"{name}.py", f"saved_live_{name}")


def _vit() -> torch.nn.Module:
    return _load(ROOT / "tests" / "test_rejections.py", "saved_live_rejections").TinyViT().eval()


# name: (the program, its example inputs); as the examples trace them (their `main`, their CLI
# line, tests/test_examples.py, tests/test_compile.py)
EXAMPLES: dict[str, tuple[Callable[[], Any], Callable[[], tuple[Any, ...]]]] = {
    "notebook.add": (lambda: _example("notebook").add, lambda: (torch.randn(4), torch.randn(4))),
    "mlp": (lambda: _example("mlp").MLP().eval(), lambda: (torch.randn(32, 64),)),
    "attention": (lambda: _example("attention").AttentionBlock().eval(), lambda: (torch.randn(2, 16, 64),)),
    "attention at batch 1": (lambda: _example("attention").AttentionBlock().eval(), lambda: (torch.randn(1, 16, 64),)),
    "cnn": (lambda: _example("cnn").SmallCNN().eval(), lambda: (torch.randn(4, 3, 16, 16),)),
    "cat_reshape": (lambda: _example("cat_reshape").merge_pairs, lambda: (torch.randn(4, 6), torch.randn(4, 10))),
    "branching": (lambda: _example("branching").route, lambda: (torch.randn(32, 8), torch.randn(8, 4))),
    "masking.positive_scores": (lambda: _example("masking").positive_scores, lambda: (torch.randn(6, 4), torch.randn(4))),
    "masking.window": (lambda: _example("masking").window, lambda: (torch.randn(3, 8), torch.tensor(5))),
    "compiled.route": (lambda: _example("compiled").route, lambda: (torch.randn(12), torch.randn(13))),
    "compiled.view_mm": (lambda: _example("compiled").view_mm, lambda: (torch.randn(3, 2, 4), torch.randn(3, 2, 4))),
    "compiled.graph_break": (lambda: _example("compiled").graph_break, lambda: (torch.randn(5, 3), torch.randn(4))),
    "compiled.scale": (lambda: _example("compiled").scale, lambda: (torch.randn(3, 4),)),
    "vit": (_vit, lambda: (torch.randn(4, 3, 16, 16),)),
}
MODELS = _example("models").MODELS
NEEDS_TRANSFORMERS = {"gpt2", "bert"}


def _unbudgeted(x: Any) -> guardsolve.GuardSet:
    """`simplify(x)` with its default probe budget and no run budget (`simplify`'s default stops
    after `explore.budget.run_budget` probes run, which a live trace and a saved one spend differently)."""
    from guardsolve.solve.simplify import merge_paths, readable_guards

    return readable_guards(merge_paths(x, guardsolve.simplify(x, explore=False, readable=False), runs=None))


def _out_of_runs(gs: guardsolve.GuardSet) -> bool:
    return bool(getattr(gs.exploration, "out_of_runs", 0))


def _guards(fn: Any, inputs: tuple[Any, ...]) -> tuple[guardsolve.GuardSet, guardsolve.GuardSet]:
    """The live trace's guards (explored without a run budget; where `simplify`'s default ran to
    the end, it gives those guards too) and its text's, saved after exploring (`simplify`'s default)."""
    t = guardsolve.trace(fn, *inputs)
    live = _unbudgeted(t)  # NOTE: records in `t.graph` the routes only tracing again finds
    text = str(t.graph)
    parsed = guardsolve.Graph.parse(text)
    assert parsed == t.graph and str(parsed) == text
    saved = _unbudgeted(parsed)
    by_default = guardsolve.simplify(t)
    if not _out_of_runs(by_default):
        assert [c.text for c in by_default] == [c.text for c in live]
    # NOTE: by default the text's exploration spends the live one's run budget: the same guards
    assert sorted(c.text for c in guardsolve.simplify(parsed)) == sorted(c.text for c in by_default)
    assert str(t.graph) == text  # NOTE: exploring again records no route twice
    return live, saved


def _assert_same(live: guardsolve.GuardSet, saved: guardsolve.GuardSet) -> None:
    """The same constraints: the same texts, else proved equivalent by z3."""
    texts = sorted(c.text for c in live), sorted(c.text for c in saved)
    if texts[0] == texts[1]:
        return
    failed = prove_union(live.constraints, [saved.constraints], live.sizes | saved.sizes, 10_000)
    assert failed is None, f"live {texts[0]} != saved {texts[1]}: {failed}"


def _identity_routes(gs: guardsolve.GuardSet) -> list[Any]:
    """The routes found by setting aside ops that are identities there (a live trace's), or
    recorded so in a saved trace's text."""
    return [p for p in gs.paths if any(str(n.meta.get("why", "")).endswith("is the identity")
                                       or n.meta.get("why") == ROUTE_WHY for n in p.graph.bailouts())]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_an_examples_saved_trace_gives_its_live_guards(name: str) -> None:
    make, inputs = EXAMPLES[name]
    _assert_same(*_guards(make(), inputs()))


@pytest.mark.parametrize("name", list(MODELS))
def test_a_models_saved_trace_gives_its_live_guards(name: str) -> None:
    if name in NEEDS_TRANSFORMERS:
        pytest.importorskip("transformers")
    make, inputs = MODELS[name]
    with torch.no_grad():
        _assert_same(*_guards(make(), inputs()))


def test_gpt2s_batch_1_route_is_recorded_in_its_text() -> None:
    """GPT-2 traced at batch 2 tests `batch_size != position_ids.shape[0]` and expands; at batch
    1 it skips the `expand` (an identity there): another trace, the same but for that op. The
    live trace traces that branch and merges it, and records it in its text (`#route at
    input_ids0=1, ...`): the saved guards accept batch 1 too. The text saved before exploring
    holds only the example's branch: its replay at batch 1 stops at that test, and its guards
    keep `input_ids0 >= 2`."""
    pytest.importorskip("transformers")
    make, inputs = MODELS["gpt2"]
    with torch.no_grad():
        m = make()
        before = str(guardsolve.trace(m, *inputs()).graph)
        live, saved = _guards(m, inputs())
    assert "#route" not in before
    assert _identity_routes(live) and _identity_routes(saved)
    # NOTE: `input_ids1 <= 64`: `wpe(position_ids)` reads a table of `n_positions` rows
    assert [c.text for c in saved] == [c.text for c in live] == ["input_ids0 >= 1", "input_ids1 <= 64", "input_ids1 >= 2"]
    assert saved.check_dims({"input_ids0": 1, "input_ids1": 9})
    narrow = guardsolve.simplify(guardsolve.Graph.parse(before))
    assert [c.text for c in narrow] == ["input_ids0 >= 2", "input_ids1 <= 64", "input_ids1 >= 2"]
    probe = next(p for p in narrow.probes if p.point["input_ids0"] == 1 and p.point["input_ids1"] == 16)
    assert "the program's own test of a size answers otherwise" in probe.because(), probe.because()


def test_a_recorded_route_is_merged_only_where_its_guards_hold(tmp_path: pathlib.Path) -> None:
    """`guardsolve trace` explores first and writes the routes found by tracing again; the
    saved text accepts batch 1 (its recorded route) as the function does, and a route's block
    that is malformed is a `ParseError` naming its line."""
    from guardsolve.cli import main
    from guardsolve.errors import ParseError

    src = tmp_path / "f.py"
    src.write_text("def f(x):\n    y = x.sum(0, keepdim=True)\n"
                   "    return (y.expand(x.shape[0], -1) if x.shape[0] != 1 else y) * 2\n")
    out = tmp_path / "f.gs"
    assert main(["trace", f"{src}:f", "--shape", "x=3,4", "-o", str(out)]) == 0
    text = out.read_text()
    assert "#route at x0=1, x1=4 where x0 == 1; x1 >= 2" in text
    saved = guardsolve.simplify(guardsolve.Graph.parse(text))
    assert saved.check_dims({"x0": 1, "x1": 7}) and saved.check_dims({"x0": 5, "x1": 7})
    without = guardsolve.simplify(guardsolve.Graph.parse("\n".join(
        ln for ln in text.splitlines() if not ln.startswith("#route"))))
    assert not without.check_dims({"x0": 1, "x1": 7}) and without.check_dims({"x0": 5, "x1": 7})
    broken = text.replace("#route| bool_bailout(i3, expect=True)", "#route| bool_bailout(i99, expect=True)", 1)
    with pytest.raises(ParseError, match=r"line \d+, column \d+: in a route's guards: .*'i99' is not defined"):
        guardsolve.Graph.parse(broken)
    with pytest.raises(ParseError, match="a route's point should read"):
        guardsolve.Graph.parse(text.replace("#route at x0=1, x1=4", "#route at x0=one", 1))


def test_the_lstm_replays_whole_and_keeps_its_sequence_length_free() -> None:
    """The issue's case: `aten.lstm.input` replayed above autograd decomposed in C++, unrolled
    over the 5 time steps, and the saved path alone said `input1 == 5` (merged:
    `(input1 == 1) or (input1 == 5)`). Below autograd, as the live trace runs it, it reaches
    its own rule (eager's mkldnn route) whole."""
    t = guardsolve.trace(torch.nn.LSTM(8, 16, batch_first=True).eval(), torch.randn(2, 5, 8))
    saved = guardsolve.Graph.parse(str(t.graph))
    path = guardsolve.simplify(saved, explore=False)
    assert [c.text for c in path] == [c.text for c in guardsolve.simplify(t, explore=False)]
    assert "input1 == 5" not in [c.text for c in path]
    gs = guardsolve.simplify(saved)
    assert [c.text for c in gs] == ["input2 == 8", "input1 >= 1"]
    assert gs.check_dims({"input0": 2, "input1": 10, "input2": 8})


def test_a_saved_trace_rejects_where_the_program_reads_a_size_otherwise() -> None:
    """The attention block traced at batch 2 reads the heads dim of its `transpose` output as a
    size (`size_index(s3, index=2)`, its contiguity check); at batch 1 PyTorch's rules make it
    the constant 4, and a fresh trace records `int_const(val=4)` there. Traced at batch 1, the
    other way round. The replay rejects both, as a fresh trace does, naming the read."""
    block = _example("attention").AttentionBlock().eval()
    for batch, other in ((2, 1), (1, 2)):
        t = guardsolve.trace(block, torch.randn(batch, 16, 64))
        gs = guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)))
        assert not gs.check_dims({"x0": other, "x1": 16, "x2": 64})
        fresh = guardsolve.trace(block, torch.randn(other, 16, 64))
        assert fresh.graph != t.graph  # NOTE: the oracle: another trace there
        probe = next(p for p in gs.probes if p.point["x0"] == other and p.point["x1"] == 16)
        assert "user code reads" in probe.because() and "where the trace reads" in probe.because(), probe.because()


def test_a_saved_trace_merges_the_routes_a_data_shaped_op_takes() -> None:
    """`x[x * w > 0]` has as many rows as the data says. A live probe ran each op's rule before
    its eager kernel, so the mask's row count was a stand-in that eager contradicted, and no
    probe merged; an op whose size the data decides now runs eager first, as the saved replay
    takes any value for it. Both accept an empty batch, which records the same trace."""
    fn, inputs = EXAMPLES["masking.positive_scores"]
    live, saved = _guards(fn(), inputs())
    for gs in (live, saved):
        assert gs.check(torch.randn(0, 4), torch.randn(4))
    t = guardsolve.trace(fn(), *inputs())
    assert guardsolve.trace(fn(), torch.randn(0, 4), torch.randn(4)).graph.nodes[2:] == t.graph.nodes[2:]


def test_a_saved_trace_rejects_where_a_cpp_composite_reads_its_sizes_otherwise() -> None:
    """`torch.cov` reads the observation count as an int in C++ (`aten.size.default(v0)` in
    the trace) and divides by `scalar_tensor(n)`, a constant the trace holds by checksum. A
    replay of the text at other counts ran through with the same constant, so the saved
    guards accepted every count up to 64 and the replay gave NaNs at 1. The replay now
    rejects where those ints read otherwise, as a fresh trace does."""
    t = guardsolve.trace(torch.cov, torch.randn(2))
    live, saved = guardsolve.simplify(t), guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)))
    for n in (0, 1, 3, 4):
        assert guardsolve.trace(torch.cov, torch.randn(n)).graph != t.graph  # NOTE: the oracle
        assert not live.check(torch.randn(n)) and not saved.check(torch.randn(n)), n
    assert saved.check(torch.randn(2))
    why = saved.explain_failure(torch.randn(3))
    assert "PyTorch's C++ code reads, as ints, [1, 3] where the trace reads [1, 2]" in why, why


def test_a_saved_trace_rejects_where_a_kernel_hands_an_input_back() -> None:
    """`broadcast_tensors` hands an operand already at the broadcast shape back as itself
    (`expand_outplace`): user code then holds the input, and a fresh trace returns it, another
    trace. The saved replay merged such points; it now sees the meta kernel hand it back."""
    shapes = ((3,), (1, 2, 1), (1, 1), (5, 1, 1))
    fn = lambda *ts: torch.broadcast_tensors(*ts)  # noqa: E731
    t = guardsolve.trace(fn, *map(torch.randn, shapes))
    saved = guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)))
    for other in (((1,), (1, 1, 1), (1, 1), (5, 1, 1)), ((1,), (1, 2, 1), (1, 1), (1, 1, 1))):
        ins = tuple(map(torch.randn, other))
        assert guardsolve.trace(fn, *ins).out_spec != t.out_spec  # NOTE: the oracle: an input returned
        assert not saved.check(*ins), other
        assert "hands an input back as" in saved.explain_failure(*ins), saved.explain_failure(*ins)
    assert saved.check(*map(torch.randn, ((4,), (1, 2, 1), (1, 1), (5, 1, 1))))


class _BasicBlock(torch.nn.Module):
    """torchvision's resnet18 block: two 3x3 convolutions with batch norm, a 1x1 downsample
    where the stride or the width changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(torch.nn.Module):
    """torchvision's resnet18 topology (its wheel here is a CUDA build): a 7x7 stride-2 stem, batch
    norm, max pooling 3 stride 2 padding 1, four stages of two blocks (`width` to 8 * `width`
    channels), adaptive average pooling and a linear head."""

    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        for i, c in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stages.append(nn.Sequential(_BasicBlock(cin, c, 1 if i == 0 else 2), _BasicBlock(c, c, 1)))
            cin = c
        self.stages = nn.Sequential(*stages)
        self.pool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


def _resnet18_saved_is_live(width: int) -> None:
    """Issue 49 (11): resnet18 traced at [1, 3, 64, 64]. The live exploration stops at its run
    budget; the saved text's used to explore on (no budget), merging routes at batch 0 with
    other image sizes: 7 guards against the live 6, agreeing at batch 2 and not at batch 0.
    Both were sound (at those sizes a fresh trace records the same trace and its values are
    eager's); the text's exploration now spends the same trace's run budget: the same guards,
    and the same answer at every batch-0 size."""
    from guardsolve.trace.divergence import difference

    torch.manual_seed(0)
    m = ResNet18(width).eval()
    with torch.no_grad():
        t = guardsolve.trace(m, torch.randn(1, 3, 64, 64))
        live = guardsolve.simplify(t)
        saved = guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)))
        assert _out_of_runs(live) and _out_of_runs(saved), live.exploration.summary()
        assert sorted(c.text for c in saved) == sorted(c.text for c in live), (str(live), str(saved))
        assert prove_union(live.constraints, [saved.constraints], live.sizes, 10_000) is None
        for shape in [(2, 3, 64, 64), (0, 3, 64, 64), (0, 3, 40, 40), (0, 3, 1, 33), (0, 3, 20, 64)]:
            x = torch.randn(*shape)
            assert live.check(x) == saved.check(x), shape
            if live.check(x):  # NOTE: exact: a fresh trace records the same trace, with eager's values
                u = guardsolve.trace(m, x)
                assert difference(t, u) is None and torch.allclose(u.output, m(x), atol=1e-5), shape
        assert live.check(torch.randn(0, 3, 64, 64)) and not live.check(torch.randn(0, 3, 1, 33))


def test_resnet18s_saved_trace_gives_its_live_guards_by_default() -> None:
    _resnet18_saved_is_live(64)  # NOTE: about 5 s; width 8 shows the same (6 guards against 7 before)
