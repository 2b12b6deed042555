"""Guards exact to the trace: the routes that record the same trace are merged (solve/explore/).

The oracle everywhere: at a perturbed input where eager runs, a fresh trace records the same
trace (`divergence.difference`) exactly when the guards accept it; where the guards accept, the
saved trace's replay equals eager.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from hypothesis import given, settings, strategies as st

import guardsolve
from guardsolve.solve.disjoin import IntSet, clauses_text
from guardsolve.solve.explore import prove_union
from guardsolve.testing import boundary_variants, examples, residual_block as _Block
from guardsolve.trace.replay import compile_replay
from guardsolve.trace.divergence import difference

ROOT = Path(__file__).resolve().parent.parent


def _judge(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[guardsolve.GuardSet, list[str]]:
    """The merged guards, and every boundary input where they are not exact to the trace."""
    t = guardsolve.trace(fn, *inputs)
    gs = guardsolve.simplify(t)
    wrong = []
    replay = compile_replay(t.graph, t.out_spec, t.constants)
    for what, variant in boundary_variants(guardsolve.simplify(t, explore=False), inputs):
        try:
            expected = fn(*variant)
        except Exception:  # NOTE: eager raises: no trace serves it
            if gs.check(*variant):
                wrong.append(f"{what}: accepted, eager raises")
            continue
        try:
            same = difference(t, guardsolve.trace(fn, *variant)) is None
        except Exception:
            same = False
        if gs.check(*variant) != same:
            wrong.append(f"{what}: check says {gs.check(*variant)}, the fresh trace is "
                         f"{'the same' if same else 'another'}")
        if same and gs.check(*variant):
            got = replay(*variant)
            assert torch.allclose(got, expected, equal_nan=True), what  # NOTE: the saved trace serves it
    return gs, wrong


LAYER = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
CASES = {
    "sin": (lambda x: x.sin(), (torch.randn(32, 8),), []),
    "abs": (lambda x: x.abs(), (torch.randn(32, 8),), []),
    "linear": (torch.nn.Linear(8, 4), (torch.randn(5, 8),), ["input1 == 8"]),
    "layer_norm": (torch.nn.LayerNorm(8), (torch.randn(5, 8),), ["input1 == 8"]),
    "view": (lambda x: x.view(x.shape[0], -1), (torch.randn(3, 4, 5),), ["x0 >= 1"]),
    "sum": (lambda x: x.sum(0), (torch.randn(3, 4),), []),
    "add": (lambda a, b: a + b, (torch.randn(4), torch.randn(4)), ["(a0 == 1) or (a0 == b0) or (b0 == 1)"]),
    "transformer_layer": (LAYER, (torch.randn(2, 5, 16),), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sizes_0_and_1_accepted_exactly_where_the_trace_is_the_same(name: str) -> None:
    fn, inputs, expected = CASES[name]
    with torch.no_grad():
        gs, wrong = _judge(fn, inputs)
    assert wrong == [], wrong
    if expected is not None:
        assert [c.text for c in gs] == expected
    gs.verify()


def test_the_path_alone_rejects_what_the_merged_guards_accept() -> None:
    # NOTE: `layer_norm`'s composite asks whether the batch is 1; at 1 it records the same trace
    t = guardsolve.trace(torch.nn.LayerNorm(8), torch.randn(5, 8))
    assert [c.text for c in guardsolve.simplify(t, explore=False)] == ["input1 == 8", "input0 >= 2"]
    merged = guardsolve.simplify(t)
    assert merged.check(torch.randn(1, 8)) and merged.check(torch.randn(0, 8)) and str(merged) == "input1 == 8"
    assert "input0=1 (replayed call by call): takes another route where" in merged.explain(verbose=True)
    assert "aten.layer_norm.default's shape rule" in merged.explain(verbose=True)


def test_the_seed_ir_keeps_its_own_semantics() -> None:
    """A parsed seed trace is no function to trace again: the notebook's own five-op IR keeps
    `a0 == b0`, `a0 != 1` (its explicit `var_expand` records another trace at size 1)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import notebook

    gs = guardsolve.simplify(guardsolve.Graph.parse(notebook.SEED_TRACE))
    assert [c.text for c in gs] == ["a0 == b0", "a0 != 1"] and gs.paths == ()


def test_user_code_that_branches_on_the_size_still_rejects() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() if x.shape[0] > 1 else x.cos()

    gs = guardsolve.simplify(guardsolve.trace(f, torch.randn(5, 8)))
    assert [c.text for c in gs] == ["x0 >= 2"]
    why = gs.explain_failure(torch.randn(1, 8))
    assert why.startswith("x0 >= 2 failed (x0=1)") and "a fresh trace at these sizes records another trace" in why
    assert "records another trace at tests/test_paths.py:" in why and "the program's own test of a size" in why, why
    assert "(in the trace x0=5, here x0=1)" in why, why


def test_a_size_where_eager_raises_is_not_merged() -> None:
    m = torch.nn.LSTM(8, 16, batch_first=True).eval()
    gs = guardsolve.simplify(guardsolve.trace(m, torch.randn(2, 5, 8)))
    assert [c.text for c in gs] == ["input2 == 8", "input1 >= 1"]
    with pytest.raises(RuntimeError, match="sequence length"):
        m(torch.randn(0, 0, 8))
    assert not gs.check(torch.randn(0, 0, 8)) and gs.check(torch.randn(0, 3, 8)) and gs.check(torch.randn(1, 1, 8))


def test_gpt2_at_batch_1_skips_only_identity_ops_and_is_accepted_batch_0_is_not() -> None:
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT / "examples"))
    import models

    torch.manual_seed(0)
    m = models.gpt2()
    ids = torch.randint(0, 100, (2, 16))
    gs = guardsolve.simplify(guardsolve.trace(m, ids))
    assert gs.check(torch.randint(0, 100, (1, 16)))
    route = next(p for p in gs.paths if p.point["input_ids0"] == 1)
    assert any(n.meta.get("why") == "aten.expand.default is the identity" for n in route.graph.bailouts())
    why = gs.explain_failure(torch.randint(0, 100, (0, 16)))
    assert why.startswith("input_ids0 >= 1 failed (input_ids0=0)") and "transformers/" in why, why


def test_guarded_serves_batch_1_from_the_batch_2_entry() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).eval()
    g = guardsolve.guarded(mlp)
    with torch.no_grad():
        g(torch.randn(2, 8))
        x = torch.randn(1, 8)
        assert torch.equal(g(x), mlp(x))
    info = g.cache_info()
    assert (info.entries, info.hits, info.misses) == (1, 1, 1)
    off = guardsolve.guarded(mlp, explore=False)
    with torch.no_grad():
        off(torch.randn(2, 8))
        off(torch.randn(1, 8))
    assert off.cache_info().entries == 2


def test_exploration_leaves_the_random_stream_and_training_modules_alone() -> None:
    f = lambda x: torch.nn.functional.dropout(x, 0.5)  # noqa: E731
    x = torch.randn(4, 4)
    torch.manual_seed(3)
    guardsolve.trace(f, x)
    after_trace = torch.rand(4)  # NOTE: the trace's own dropout draws from the user's stream, as eager's
    torch.manual_seed(3)
    gs = guardsolve.simplify(guardsolve.trace(f, x))
    ex = gs.exploration
    assert ex.traces + ex.replayed > 0 and torch.equal(torch.rand(4), after_trace)  # the probes' draws do not
    bn = torch.nn.BatchNorm1d(4).train()
    t = guardsolve.trace(bn, torch.randn(3, 4))
    before = bn.running_mean.clone()
    gs = guardsolve.simplify(t)
    assert torch.equal(bn.running_mean, before) and gs.exploration.traces == 0
    assert gs.exploration.skipped is not None and "writes to a parameter or buffer" in gs.exploration.skipped


def test_verify_proves_the_disjunction_of_the_routes() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)))
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant and cert.paths == len(gs.paths) == 3
    assert "the disjunction of 4 routes' bailouts" in str(cert)
    assert prove_union(list(gs), [list(guardsolve.simplify(gs.graph))] + [list(p.guards) for p in gs.paths],
                       gs.sizes, 5000) is None


def test_disjoin_merges_one_dim_sets_and_distributes_the_rest() -> None:
    p0 = {"sets": {"x0": IntSet.at_least(2), "x1": IntSet.at_least(2)}, "rest": {}}
    p1 = {"sets": {"x0": IntSet.point(1), "x1": IntSet.at_least(2)}, "rest": {}}
    p2 = {"sets": {"x0": IntSet.point(0), "x1": IntSet.at_least(2)}, "rest": {}}
    assert clauses_text([p0, p1, p2], {"x0", "x1"}) == ["x1 >= 2"]
    assert sorted(clauses_text([p0, {"sets": {"x1": IntSet.point(1)}, "rest": {}}], {"x0", "x1"})) == \
        ["x0 >= 2 or x1 == 1", "x1 >= 1"]
    assert IntSet.full().minus_point(1).union(IntSet.point(1)) == IntSet.full()


@settings(max_examples=examples(200), deadline=None)
@given(parts=st.lists(st.tuples(st.integers(-3, 14), st.integers(0, 6)), min_size=1, max_size=4),
       open_end=st.booleans(), sized=st.booleans())
def test_a_set_prints_as_a_formula_with_the_same_members(parts: list, open_end: bool, sized: bool) -> None:
    """`IntSet.formula` (how the routes' sets print) holds exactly at the set's members inside
    its domain: `{0} | [2, 9]` once printed as `x == 0`, which the union proof caught."""
    from guardsolve.solve.disjoin import SIZES
    from guardsolve.solve.one_dim import holds

    s = IntSet.of([(lo, lo + w) for lo, w in parts] + ([(20, None)] if open_end else []))
    domain = SIZES if sized else IntSet.full()
    f = s.formula("x", domain)
    for v in range(-6 if not sized else 0, 30):
        assert holds(f, {"x": v}) == s.contains(v), (s, f, v)


# -- property: random programs ---------------------------------------------------------------

UNARY = [torch.sin, torch.relu, lambda x: x.sum(-1, keepdim=True), lambda x: x.softmax(-1),
         lambda x: x.view(x.shape[0], -1), lambda x: x.transpose(0, 1).contiguous(), lambda x: x * 2]
BINARY = [torch.add, torch.mul, lambda a, b: torch.cat([a, b], 0), lambda a, b: a @ b.transpose(0, 1)]


@settings(max_examples=examples(30), deadline=None)
@given(ops=st.lists(st.integers(0, len(UNARY) - 1), min_size=1, max_size=3), binary=st.integers(0, len(BINARY) - 1),
       a=st.tuples(st.integers(1, 5), st.integers(1, 5)), b=st.tuples(st.integers(1, 5), st.integers(1, 5)))
def test_random_programs_accept_only_the_same_trace(ops: list[int], binary: int, a: tuple, b: tuple) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = BINARY[binary](x, y)
        for k in ops:
            z = UNARY[k](z)
        return z

    x, y = torch.randn(*a), torch.randn(*b)
    try:
        fn(x, y)
    except Exception:
        return
    gs, wrong = _judge(fn, (x, y))
    unsound = [w for w in wrong if "check says True" in w or "eager raises" in w]
    assert unsound == [], unsound
    # NOTE: each merged route is proved: the guards are the disjunction of the routes' guards
    assert prove_union(list(gs), [list(guardsolve.simplify(gs.graph))] + [list(p.guards) for p in gs.paths],
                       gs.sizes, 5000) is None


# -- the sweep's fast subset and the command line ----------------------------------------------


def test_fast_sweep_has_no_unsound_merge() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "paths.py"), "--fast"], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "### accepted_different (unsound): 0" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| merged paths"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[5]) == 0 and int(cells[3]) > 0, row


def test_report_lists_the_routes_merged_and_can_keep_the_path_alone() -> None:
    cmd = [sys.executable, "-m", "guardsolve", "report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4"]
    text = subprocess.run(cmd + ["--verbose"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "(a0 == 1) or (a0 == b0) or (b0 == 1)" in text.stdout and "same trace at a0=1" in text.stdout
    off = subprocess.run(cmd + ["--no-explore"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "a0 == b0\n" in off.stdout and "a0 != 1\n" in off.stdout and "other routes" not in off.stdout
    doc = json.loads(subprocess.run(cmd + ["--format", "json"], capture_output=True, text=True, cwd=ROOT,
                                    timeout=300).stdout)
    assert sorted(map(str, (p["at"] for p in doc["paths"]["merged"]))) == sorted(
        map(str, [{"a0": 1, "b0": 4}, {"a0": 4, "b0": 1}, {"a0": 1, "b0": 1}]))
    assert doc["paths"]["rejected"][0]["why"].startswith(
        "stops at examples/notebook.py:47  return a + b: aten.add.Tensor's shape rule rejects these sizes")
    assert doc["paths"]["rejected"][0]["where"] == "examples/notebook.py:47"
    assert doc["paths"]["rejected"][0]["op"] == "aten.add.Tensor"


def test_dynamic_says_where_the_trace_serves_more_than_torch_export() -> None:
    cmd = [sys.executable, "-m", "guardsolve", "report", "examples/models.py:lstm", "--shape", "input=2,5,8",
           "--dynamic", "input0", "--dynamic", "input1"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "no guard constrains them" in out.stdout  # NOTE: torch.export's sizes >= 2 ask for nothing more
    note = next(line for line in out.stdout.splitlines() if line.startswith("note: the trace also serves "))
    assert {"input0=0", "input0=1", "input1=1"} <= set(note.split(" (routes merged)")[0].split("serves ")[1].split("; ")), note
    assert 'dynamic_shapes = {"input": {0: input0, 1: input1}}' in out.stdout


def test_routes_past_the_clause_budget_read_as_one_of_the_routes() -> None:
    """A broadcast of three operands has a route per operand and dim at size 1: past the
    reader's clause budget the guards are one `(route) or (route) ...`, exact (`verify`), printed a
    route to a line; each printed line, read as Python, holds exactly where its route does."""
    import random
    import re

    from guardsolve.solve.one_dim import holds

    def clamp(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, lo, hi)

    gs = guardsolve.simplify(guardsolve.trace(clamp, *(torch.randn(3, 4) for _ in range(3))))
    (c,) = [c for c in gs if c.lines()[0].startswith("one of")]
    # NOTE: past a reader's count (issue 49, 9) printed as the example's route and how many more;
    # `lines(full=True)` (explain(verbose=True)) lists them all
    assert c.lines()[1].strip() == "x0 == lo0 == hi0, x1 == lo1 == hi1, x0 >= 2, x1 >= 2", c.lines()
    rows = c.lines(full=True)[1:]
    assert len(rows) == int(c.lines(full=True)[0].split()[2].rstrip(":")) > 8
    assert c.lines()[2] == f"    (or one of {len(rows) - 1} more: explain(verbose=True) lists them)"
    assert any(re.search(r"^x0 == lo0 == hi0, ", r.strip()) for r in rows)  # NOTE: equal dims print as one chain
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant
    rng = random.Random(3)
    for _ in range(400):
        point = {d: rng.choice([0, 1, 2, 3, 4]) for d in c.dims}
        printed = any(all(eval(part, {}, dict(point)) for part in r.strip().split(", ")) for r in rows)
        assert printed == holds(c.formula, point), (point, c.text)
    # batch 1 of one operand is served, a size that broadcasts nowhere is not
    assert gs.check(torch.randn(1, 4), torch.randn(3, 4), torch.randn(3, 1))
    assert not gs.check(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 4))


def datadep(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x * 2
    return x - 1


@pytest.mark.parametrize("fill", ["randn0", "randn1", "randn2", "ones", "arange"])
def test_value_guards_size_guards_do_not_depend_on_the_data(fill: str) -> None:
    """Issue 37 (5): with value guards, the sizes tried take the example's answer to a decision
    on data, so the size guards are the same whatever data is drawn; where the data drawn at a
    size flips the decision, explain() says so and names the value bailout."""
    if fill.startswith("randn"):
        torch.manual_seed(int(fill[-1]))
        x = torch.randn(4).abs() + 0.1  # NOTE: the example takes the `x * 2` branch; its [:1] may not
        x[0] = -0.05 if fill == "randn1" else x[0]
    else:
        x = torch.ones(4) if fill == "ones" else torch.arange(4.0)
    gs = guardsolve.simplify(guardsolve.trace(datadep, x, value_guards=True))
    assert str(gs) == "" and len(gs.value_guards) == 1
    (i,) = gs.value_guards
    flipped = gs.value_flips(i)
    text = gs.explain()
    line = datadep.__code__.co_firstlineno + 1
    assert f"test_paths.py:{line}  if x.sum() > 0:" in text
    if fill in ("randn1", "arange"):  # NOTE: the data at x0=1 ([-0.05], [0.]) answers `x.sum() > 0` otherwise
        assert flipped == ["x0=1"] and "the data drawn at x0=1 answers it otherwise" in text
    else:
        assert flipped == [] and "answers it otherwise" not in text


class _ResNet(torch.nn.Module):
    """resnet18's shape: a strided 7x7 stem, max pooling, a residual block, adaptive average
    pooling to 1x1, `flatten(x, 1)` and a linear head (torchvision is not a dependency)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, 2, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(3, 2, 1))
        self.block = _Block(8)
        self.pool = torch.nn.AdaptiveAvgPool2d((1, 1))
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.block(self.stem(x))), 1))


def test_a_resnet_traced_at_batch_1_accepts_batch_2_found_on_the_far_side_of_its_decision() -> None:
    """At batch 1 the example's path pins `x0 == 1` (contiguity of size-1 dims); its far
    side, batch 2, records the same trace and is probed first."""
    m = _ResNet().eval()
    with torch.no_grad():
        t = guardsolve.trace(m, torch.randn(1, 3, 32, 32))
        assert "x0 == 1" in [c.text for c in guardsolve.simplify(t, explore=False)]
        gs = guardsolve.simplify(t)
        assert gs.paths[0].point == {"x0": 2, "x1": 3, "x2": 32, "x3": 32}
        for shape in [(2, 3, 32, 32), (5, 3, 40, 24), (1, 3, 9, 9)]:
            x = torch.randn(*shape)
            assert gs.check(x), gs.explain_failure(x)
            assert torch.allclose(guardsolve.trace(m, x).output, m(x), atol=1e-5)
        assert not gs.check(torch.randn(2, 4, 32, 32))


def test_a_run_budget_probes_the_far_sides_and_the_0s_and_1s_first_and_says_what_it_left() -> None:
    from guardsolve.solve.explore import SMALL_TRACE
    from guardsolve.solve.simplify import merge_paths

    # NOTE: two residual blocks before the resnet: more than SMALL_TRACE nodes, whose run
    # budget does not grow with the routes found
    m = torch.nn.Sequential(_Block(3), _Block(3), _ResNet()).eval()
    with torch.no_grad():
        t = guardsolve.trace(m, torch.randn(1, 3, 32, 32))
        assert len(t.graph.nodes) > SMALL_TRACE
        base = guardsolve.simplify(t, explore=False, readable=False)
        gs = merge_paths(t, base, runs=0)
    ex = gs.exploration
    # NOTE: the far side of the example's `x0 == 1` and each dim at 0 and 1 came first, whatever the budget
    assert {"input0": 2, "input1": 3, "input2": 32, "input3": 32} in [dict(p.point) for p in gs.paths]
    tried = len(ex.paths) + len(ex.probes)
    assert tried >= 1 + 2 * 4 and ex.left > 0, ex.summary()
    assert ex.summary().endswith(f"the run budget (0 runs) left {ex.left} queued points unexplored"), ex.summary()


def test_a_small_traces_run_budget_goes_on_while_every_probe_finds_a_route() -> None:
    """A trace of at most SMALL_TRACE nodes whose probes all find routes goes on past its run
    budget (ROUTE_PROBES more runs per route): `torch.masked.var`'s 20 points are 20 routes,
    merged whole with a budget of 0 runs past the first points. The resnet's probes find
    routes and rejections: its budget holds."""
    from guardsolve.solve.explore import SMALL_TRACE
    from guardsolve.solve.simplify import merge_paths

    t = guardsolve.trace(lambda x: torch.masked.var(x, mask=None), torch.randn(5, 5, 5))
    assert len(t.graph.nodes) <= SMALL_TRACE
    base = guardsolve.simplify(t, explore=False, readable=False)
    budgeted, unbounded = merge_paths(t, base, runs=0), merge_paths(t, base)
    ex = budgeted.exploration
    assert ex.left == 0 and not ex.out_of_runs and not ex.probes, ex.summary()
    assert len(ex.paths) == len(unbounded.paths) >= 16, (ex.summary(), unbounded.exploration.summary())
    assert [c.text for c in budgeted] == [c.text for c in unbounded] == []
    m = _ResNet().eval()
    with torch.no_grad():
        r = guardsolve.trace(m, torch.randn(1, 3, 32, 32))
        assert len(r.graph.nodes) <= SMALL_TRACE
        held = merge_paths(r, guardsolve.simplify(r, explore=False, readable=False), runs=0).exploration
    assert held.probes and held.left > 0, held.summary()


@pytest.mark.parametrize("shapes", [[(2, 3), (2, 3)], [(6,), (6,)], [(4, 5), (1, 5)]])
def test_exploring_never_writes_to_the_callers_tensors(shapes: list[tuple[int, ...]]) -> None:
    """The first call of a function that writes to its input (`x.add_(y)`) writes once, as
    eager: exploration traces the function again at other sizes on inputs of its own. It used
    to pass the caller's tensor itself where a probe left its sizes as they were (x got y 4
    times at (2, 3), twice at (6,))."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.add_(y) * y

    x, y = torch.zeros(shapes[0]), torch.ones(shapes[1])
    want_x = x.clone().add_(y)
    g = guardsolve.guarded(f)
    out = g(x, y)
    assert torch.equal(x, want_x) and torch.equal(out, want_x * y)
    assert g.cache_info().traces == 1
