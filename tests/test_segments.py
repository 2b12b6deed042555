"""Data-dependent programs served as compiled segments (`jit/segments/`): cut where the
program reads tensor data, each segment compiled at symbolic sizes, the decisions on data
checked between segments, compared with eager on every call."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import guardsolve
from guardsolve.jit.segments.plan import Plan
from guardsolve.jit.segments.writes import state_writes


def branch(x: torch.Tensor) -> torch.Tensor:
    if x.mean().item() > 0:
        return (x.relu() * 2).sum(-1)
    return (x.sigmoid() - 1).sum(-1)


def moe(x: torch.Tensor, w_gate: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    probs = (x @ w_gate).softmax(-1)
    top, idx = probs.topk(2, dim=-1)
    out = torch.zeros_like(x)
    for e in range(experts.shape[0]):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x.index_select(0, tok) @ experts[e]
        out.index_add_(0, tok, h * top[tok, slot].unsqueeze(-1))
    return out


def test_a_trace_is_cut_where_it_reads_data() -> None:
    """Each `nonzero` is a cut run eagerly; the size it counted is an input size of the segment
    after it (one compile serves every count); `tok.numel() == 0` is checked on the data."""
    torch.manual_seed(0)
    x, w, experts = torch.randn(16, 8), torch.randn(8, 3), torch.randn(3, 8, 8)
    t = guardsolve.trace(moe, x, w, experts, value_guards=True)
    plan = Plan.of(t)
    cut_ops = [str(t.graph.nodes[i].params.get("fn", t.graph.nodes[i].op.value)) for i in plan.cuts]
    assert cut_ops.count("aten.nonzero.default") == 3 and cut_ops.count("bool_bailout") == 3
    assert len(plan.runs) == 4
    nonzero_out = {t.graph.nodes[i].outputs[0] for i in plan.cuts if "nonzero" in cut_ops[plan.cuts.index(i)]}
    # NOTE: the expert segments read the counted rows (through `unbind` of the nonzero output)
    assert all(any(name in nonzero_out or name.startswith("v") for name in ins) for ins in plan.ins[1:])
    assert state_writes(plan) is None  # NOTE: `out` is made by the program: writing it is no state
    # the glue, run with the segments' eager ops, is eager's program
    ns: dict = {}
    for k in range(len(plan.runs)):
        seg_ns: dict = {}
        exec(plan.segment_source(k, seg_ns), seg_ns)
        ns[f"seg{k}"] = seg_ns["segment"]
    exec(plan.glue_source(ns), ns)
    for n in (16, 5, 1):
        x = torch.randn(n, 8)
        try:
            got = ns["glue"](x, w, experts, *[])
        except guardsolve.GuardFailure:
            continue  # NOTE: an expert with no token: the other path, another trace
        assert torch.allclose(got, moe(x, w, experts), atol=1e-6)


def test_a_write_to_state_before_a_decision_on_data_is_not_cut() -> None:
    """A call that fails the decision would have written the buffer already: such a trace is
    not served in segments (it runs eagerly, with the reason), and stays exact."""

    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.add_(1)
            return x * 2 if x.sum().item() > 0 else -x

    m, ref = Counting(), Counting()
    t = guardsolve.trace(Counting(), torch.ones(3), value_guards=True)
    why = state_writes(Plan.of(t))
    assert why is not None and "aten.add_.Tensor writes" in why and "before a decision on data" in why
    g = guardsolve.guarded(m, value_guards=True, backend="inductor")
    for s in (1.0, -1.0, 1.0):
        x = torch.full((3,), s)
        assert torch.equal(g(x), ref(x))
    assert torch.equal(m.seen, ref.seen)
    reasons = " ".join(r for r, _ in g.cache_info().eager_reasons)
    assert "cannot be cut where it reads data" in reasons


def test_an_item_branch_runs_as_compiled_segments_and_resumes_in_the_other_path() -> None:
    """`if x.mean().item() > 0`: one trace per path, each served compiled; a call whose data
    takes the other path continues in that path's trace from what the first computed (no
    trace, no eager call); sizes vary under the same compiles; every call equals eager's."""
    torch.manual_seed(0)
    g = guardsolve.guarded(branch, backend="inductor")  # NOTE: value guards by default, on DataDependentError
    for n, s in [(4, 1.0), (4, -1.0), (6, 1.0), (9, -1.0), (3, 2.0), (5, -2.0)]:
        x = torch.randn(n, 8).abs() * s
        assert torch.allclose(g(x), branch(x), atol=1e-6)
    info = g.cache_info()
    assert info.traces == 2 and info.eager_calls == 0, info
    assert info.hits == 4
    variants = [v for e in g.entries for v in e.variants]
    assert len(variants) == 2 and all(v.segments is not None for v in variants)
    text = g.entries[0].variants[0].explain()
    assert "checked on the data: v0.item() > 0.0" in text or "checked on the data: not (v0.item() > 0.0)" in text
    assert "compiled variant" in text
    # NOTE: the second call's miss: entry 0's sizes held and its data took the other path, said
    # as such (was "no compiled variant's check holds: variant 0: all guards hold")
    second = [r for r in info.miss_reasons if r.startswith("entry 0") and "variant 0" in r]
    assert second and all("the call's data took a path its segments do not run" in r for r in second), \
        info.miss_reasons
    assert not any("variant 0: all guards hold" in r for r in info.miss_reasons)


@pytest.mark.slow
def test_moe_routing_runs_as_compiled_segments_over_token_counts() -> None:
    """Top-2 routing with per-expert `nonzero`: one compile per segment serves every batch and
    every expert's token count; an expert left without tokens takes the other path."""
    torch.manual_seed(0)
    w, experts = torch.randn(16, 4), torch.randn(4, 16, 16)
    g = guardsolve.guarded(moe, backend="inductor")
    for n in (8, 12, 32, 7, 64, 16, 1, 9):
        x = torch.randn(n, 16)
        assert torch.allclose(g(x, w, experts), moe(x, w, experts), atol=1e-5)
    info = g.cache_info()
    assert info.eager_calls == 0, info.eager_reasons
    assert info.traces <= 3 and info.hits >= 5, info


def test_a_segment_is_not_shared_by_traces_whose_inputs_differ_in_dtype() -> None:
    """A segment's check holds sizes only (its inputs' kinds follow from the entry's check), so
    traces of the same program over float32 and float64 get segments of their own: each call
    returns eager's values in eager's dtype."""
    g = guardsolve.guarded(branch, backend="inductor")
    gen = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.float64) * 6:  # NOTE: past the first calls, which time eager ops
        for sign in (1.0, -1.0):
            x = (torch.randn(6, 5, generator=gen) + sign).to(dtype)
            got, want = g(x), branch(x)
            assert got.dtype == want.dtype == dtype and torch.allclose(got, want, atol=1e-6)
    info = g.cache_info()
    assert info.eager_calls == 0 and info.traces == 4, info
    segs = {id(s) for e in g.entries for v in e.variants if v.segments is not None for s in v.segments.segments}
    assert len(segs) >= 4  # NOTE: the mean's segment once per dtype, each branch's once per dtype


@pytest.mark.slow
def test_topk_of_a_value_read_from_data() -> None:
    """`topk(x, k=int(n.item()))`: k is pinned (a value bailout per k), each k's segments
    compiled; the same k at other sizes reuses them."""

    def f(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return torch.topk(x, k=int(n.item())).values.sum(-1)

    g = guardsolve.guarded(f, value_guards=True, backend="inductor")
    for rows, k in [(4, 3), (6, 3), (4, 5), (8, 5), (3, 3)]:
        x, n = torch.randn(rows, 16), torch.tensor(k)
        assert torch.allclose(g(x, n), f(x, n), atol=1e-6)
    info = g.cache_info()
    assert info.traces == 2 and info.eager_calls == 0 and info.hits == 3, info


def test_the_report_lists_the_segments_and_the_decisions_on_data(tmp_path, capsys) -> None:
    """`guardsolve report --value-guards` of a program that decides on data: the decision among
    those shapes cannot check, and how a compiled entry runs it, step by step."""
    from guardsolve.cli import main

    src = tmp_path / "route.py"
    src.write_text("import torch\n\ndef route(x):\n    if x.mean().item() > 0:\n"
                   "        return (x.relu() * 2).sum(-1)\n    return (x.sigmoid() - 1).sum(-1)\n")
    assert main(["report", f"{src}:route", "--shape", "x=4,8", "--values", "x=ones", "--value-guards"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"not checkable from shapes alone: a decision on tensor data  at \S*route.py:4  if x", out), out
    at = r"  at \S*route.py:4  if x\.mean\(\)\.item\(\) > 0:\n"
    assert re.search(r"compiled \(guarded\(\.\.\., backend=\"inductor\"\)\), it runs as segments cut where it reads data:\n"
                     r"    segment 0: 1 op \(aten\.mean\.default\), run as its eager call\n"
                     r"    then eagerly: aten\.item\.default" + at +
                     r"    then, on the data: v0\.item\(\) > 0\.0" + at +
                     r"    segment 1: 3 ops \(aten\.relu\.default, aten\.mul\.Tensor, aten\.sum\.dim_IntList\), compiled at "
                     r"symbolic sizes\n", out), out


def hit_columns(x: torch.Tensor) -> torch.Tensor:
    """Iterates over the rows of a `nonzero`: how many there are is counted from the data."""
    hit = (x.sum(0) > 0).nonzero()
    out = x.new_zeros(x.shape[0])
    for i in hit:
        out = out + x.index_select(1, i).sum(1)
    return out


def test_iterating_over_rows_counted_from_data_pins_their_count() -> None:
    """`for i in x.nonzero()`: `unbind`'s shape rule needs the count as an int, so the trace pins
    it (a value bailout, `count == n`) instead of refusing the program; a call with another
    count fails that bailout and is traced for its own count; every call equals eager's,
    counts 0 and 1 included."""
    t = guardsolve.trace(hit_columns, torch.tensor([[1.0, -1.0, 2.0]]), value_guards=True)
    pins = [n for n in t.graph.nodes if n.op.value == "int_eq"
            and any(m.op.value == "size_index" and m.outputs[0] in n.inputs for m in t.graph.nodes)]
    assert pins, "the count is pinned by a value bailout"
    # NOTE: a saved trace reinterprets alike: the pin decides the count for the rules after it
    assert str(guardsolve.guard_graph(t.graph)) == str(t.guard_graph())
    g = guardsolve.guarded(hit_columns, value_guards=True)
    gen = torch.Generator().manual_seed(0)
    counts = set()
    for rows, cols, shift in [(3, 4, 0.0), (2, 6, 0.0), (3, 4, -9.0), (5, 3, 9.0), (1, 5, 0.0), (4, 4, 0.0)]:
        x = torch.randn(rows, cols, generator=gen) + shift
        counts.add(int((x.sum(0) > 0).sum()))
        assert torch.equal(g(x), hit_columns(x))
    x = torch.full((2, 3), -1.0)
    x[:, 1] = 1.0  # NOTE: exactly one column hit
    counts.add(1)
    assert torch.equal(g(x), hit_columns(x))
    info = g.cache_info()
    assert info.eager_calls == 0, info.eager_reasons
    assert 0 in counts and info.traces <= len(counts) + 1, (counts, info)


def test_attention_without_dropout_before_a_decision_on_data_can_be_cut() -> None:
    """`scaled_dot_product_attention` is tagged random (its dropout); at `dropout_p=0.0` it draws
    nothing, so a trace that attends before deciding on data is still cut into segments, while
    dropout in training before the decision is still refused."""

    def attend_then_route(drop: float) -> Any:
        def f(q: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.scaled_dot_product_attention(q, q, q)
            h = torch.nn.functional.dropout(h, drop, training=drop > 0)
            out = h.new_zeros(())
            for i in (h.sum(-1) > 0).flatten().nonzero():
                out = out + h.flatten(0, -2)[i[0]].sum()
            return out
        return f

    q = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    assert state_writes(Plan.of(guardsolve.trace(attend_then_route(0.0), q, value_guards=True))) is None
    why = state_writes(Plan.of(guardsolve.trace(attend_then_route(0.5), q, value_guards=True)))
    assert why is not None and "random stream" in why, why


@pytest.mark.slow
def test_olmoe_with_its_expert_loop_runs_as_compiled_segments() -> None:
    """transformers' OLMoE with its eager experts (per expert: `for expert_idx in
    expert_hit`, `torch.where`, `index_add_`), where torch.compile breaks its graph at each
    `nonzero`: served as compiled segments, no eager call, every call equal to eager's; a
    repeated call runs one path (the entry its data takes is tried first)."""
    pytest.importorskip("transformers")
    from transformers import OlmoeConfig, OlmoeModel

    torch.manual_seed(0)
    cfg = OlmoeConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=32, num_attention_heads=2,
                      num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, vocab_size=100,
                      max_position_embeddings=64, use_cache=False, experts_implementation="eager",
                      eos_token_id=0, bos_token_id=0, pad_token_id=0)
    model = OlmoeModel(cfg).eval()

    def hidden(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids).last_hidden_state

    g = guardsolve.guarded(hidden, backend="inductor", value_guards=True)
    with torch.no_grad():
        for n in (12, 1, 3, 20, 2, 9, 1, 30):
            ids = torch.randint(0, 100, (1, n))
            assert torch.allclose(g(ids), hidden(ids), atol=1e-5)
        # NOTE: a decode-sized call: entries traced at longer prompts accept its sizes, and their
        # segments diverge on its routing; the entry that serves it is tried first from then on
        one = torch.randint(0, 100, (1, 1))
        assert torch.allclose(g(one), hidden(one), atol=1e-5)
        g.wait_background()
        assert torch.allclose(g(one), hidden(one), atol=1e-5)
        log = g.cache_info().miss_reasons
        for _ in range(2):
            assert torch.allclose(g(one), hidden(one), atol=1e-5)
            assert g.last_call.how == "compiled", g.last_call
        assert g.cache_info().miss_reasons == log  # NOTE: no segments diverged on the way
    info = g.cache_info()
    assert info.eager_calls == 0, info.eager_reasons
    assert info.compiles >= 1 and info.hits >= 3, info


def test_a_segment_whose_variant_never_takes_a_size_class_keeps_no_growing_timings() -> None:
    """Calls of a size class that the compiled variant's check refuses run eagerly; the timing
    of that class stops at its trials (a long-running server's calls do not grow it)."""
    from guardsolve.jit.segments.segment import _TRIALS, Segment

    class Refusing:
        def check(self, *args: Any) -> bool:
            return False

    seg = Segment(0, ("x",), ("y",), 3, lambda x: x * 2, (), variants=[Refusing()])
    x = torch.ones(5)
    for _ in range(50):
        assert torch.equal(seg(x), x * 2)
    compiled, eager = seg.timed[x.numel().bit_length()]
    assert compiled == [] and len(eager) == _TRIALS
    assert seg.eager_calls.value == 50
