"""Identity ops set aside (issue 38, part 3) and sizes of 1 kept as symbols (part 2).

A route that records the trace but for ops that are identities at its sizes (an `expand` to the
tensor's own size, a full `slice`, a `view` to its own shape), skipped there or recorded there,
serves the same inputs where those ops are identities, and only there: the condition (each
such op's output sizes equal to its input's) is part of the route's guards. The replay of the
example's trace at every accepted input equals eager.
"""

from __future__ import annotations

import pytest
import torch

import guardsolve
from guardsolve.trace.identity import candidates, identities_at, same_but_identities
from guardsolve.trace.replay import compile_replay
from guardsolve.trace.tracer import trace_once


def _replays_as_eager(t: guardsolve.Trace, fn, *inputs: torch.Tensor) -> bool:
    got, want = compile_replay(t.graph, t.out_spec, t.constants)(*inputs), fn(*inputs)
    if not isinstance(want, torch.Tensor):
        got, want = got[0], want[0]
    return got.shape == want.shape and torch.allclose(got, want, atol=1e-5)


def skip_at_1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 1:
        return y * 2
    return y.expand(x.shape[0], -1) * 2


def test_an_expand_the_user_skips_at_batch_1_is_set_aside_where_it_is_the_identity() -> None:
    t = guardsolve.trace(skip_at_1, torch.randn(3), torch.randn(1, 4))
    assert [(i.out, i.src) for i in candidates(t)] == [("v0", "y")]
    assert [i.equal for i in identities_at(t, {"x0": 1, "y0": 1, "y1": 4})] == [(("x0", "y0"),)]
    assert identities_at(t, {"x0": 3, "y0": 1, "y1": 4}) == []
    gs = guardsolve.simplify(t)
    ok = (torch.randn(1), torch.randn(1, 4))
    assert gs.check(*ok) and _replays_as_eager(t, skip_at_1, *ok)
    # NOTE: the route at x0 = 1 takes any y0; the trace's expand is the identity only at y0 == 1
    # (eager's `expand` of 3 rows to 1 raises): the identity's condition is part of the guards
    assert not gs.check(torch.randn(1), torch.randn(3, 4))
    assert gs.check(torch.randn(3), torch.randn(3, 4)) and _replays_as_eager(t, skip_at_1, torch.randn(3), torch.randn(3, 4))


def test_a_branch_to_other_ops_at_batch_1_is_still_rejected() -> None:
    def branch(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:
            return x * 2
        return x + 1

    gs = guardsolve.simplify(guardsolve.trace(branch, torch.randn(3, 4)))
    assert str(gs) == "x0 != 1" and not gs.check(torch.randn(1, 4))
    assert same_but_identities(guardsolve.trace(branch, torch.randn(3, 4)), trace_once(branch, (torch.randn(1, 4),), False),
                               {"x0": 1, "x1": 4}) is None


def test_an_op_that_is_no_identity_at_the_route_keeps_it_apart() -> None:
    def shrink(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            y = y.expand(x.shape[0] - 2, -1)
        return y * 2

    t = guardsolve.trace(shrink, torch.randn(5), torch.randn(1, 4))
    gs = guardsolve.simplify(t)
    assert not gs.check(torch.randn(2), torch.randn(1, 4))  # NOTE: no expand there, and expand(0) is no identity
    assert gs.check(torch.randn(3), torch.randn(1, 4)) and _replays_as_eager(t, shrink, torch.randn(3), torch.randn(1, 4))


class _Broadcast(torch.nn.Module):
    """Adds a `[1, 8]` bias, then reads the batch size: at batch 1 the broadcast could give the
    bias's constant 1, and `new_zeros` would record `[1]` where any other batch records a symbol."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + self.bias
        return y.new_zeros(y.shape[0], 2) + y.sum(1, keepdim=True)


def test_a_size_of_1_stays_its_symbol_in_what_the_trace_records() -> None:
    m = _Broadcast().eval()
    at1, at2 = guardsolve.trace(m, torch.randn(1, 8)), guardsolve.trace(m, torch.randn(2, 8))
    assert str(at1.graph).splitlines()[1:] == str(at2.graph).splitlines()[1:]  # NOTE: the placeholder's example shape aside
    assert "new_zeros.default(v0, [i0, 2]" in str(at1.graph)
    gs = guardsolve.simplify(at1)
    assert str(gs) == "(x1 == 1) or (x1 == 8)" and gs.check(torch.randn(5, 8)) and _replays_as_eager(at1, m, torch.randn(5, 8))


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_at_batch_2_accept_batch_1_and_the_replay_is_eagers(name: str) -> None:
    """GPT-2 skips `position_ids.expand(batch, -1)` at batch 1 and PyTorch skips full slices of
    a dim of constant size 1: identities there. BERT's mask code at batch 1 asks other questions
    (contiguity of size-1 dims) but records the same ops. Both accept batch 1, and the batch-2
    trace replayed there gives eager's output."""
    pytest.importorskip("transformers")
    from examples.models import MODELS

    torch.manual_seed(0)
    m = MODELS[name][0]()
    t = guardsolve.trace(m, torch.randint(0, 100, (2, 16)))
    gs = guardsolve.simplify(t)
    for shape in [(1, 16), (1, 9), (3, 7)]:
        x = torch.randint(0, 100, shape)
        assert gs.check(x), (shape, gs.explain_failure(x))
        assert _replays_as_eager(t, m, x), shape
    assert not gs.check(torch.randint(0, 100, (1, 1)))  # NOTE: sequence 1: `is_causal = q_length > 1`
