"""A symbolic value where PyTorch's parser takes a plain one (`is_causal=q_len > 1`) is decided
in the trace (`trace/plain.py`): GPT-2, BERT and DistilBERT trace at sequence length 1."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

import guardsolve
from guardsolve.trace.plain import PlainCalls

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import models  # noqa: E402

F = torch.nn.functional


def causal(x: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(x, x, x, is_causal=x.shape[1] > 1)


def test_the_decision_is_a_guard_and_both_sides_serve_eager_values() -> None:
    sdpa = F.scaled_dot_product_attention
    gs = guardsolve.simplify(guardsolve.trace(causal, torch.randn(2, 1, 4)))
    assert str(gs) == "x1 <= 1"
    assert F.scaled_dot_product_attention is sdpa and torch._C._nn.scaled_dot_product_attention is sdpa
    f = guardsolve.guarded(causal)
    for shape in [(2, 1, 4), (3, 1, 8), (2, 5, 4), (1, 0, 4), (2, 1, 4)]:
        x = torch.randn(*shape)
        assert torch.allclose(f(x), causal(x), atol=1e-6), shape
    assert f.cache_info().traces == 2  # NOTE: seq <= 1 and seq >= 2


def test_only_a_parser_rejection_of_a_symbolic_value_is_learned() -> None:
    calls = PlainCalls()
    assert not calls.learn("scaled_dot_product_attention(): argument 'is_causal' must be bool, not Tensor")
    assert not calls.learn("no_such_function(): argument 'x' must be bool, not SymBool")
    assert calls.learn("scaled_dot_product_attention(): argument 'scale' must be float, not SymFloat")
    with calls.installed():
        wrapped = F.scaled_dot_product_attention
        assert wrapped.__guardsolve_plain__ is torch._C._nn.scaled_dot_product_attention.__guardsolve_plain__
        x = torch.randn(2, 3, 4)
        assert torch.equal(wrapped(x, x, x), wrapped.__guardsolve_plain__(x, x, x))  # NOTE: no symbolic value: unchanged
    assert not hasattr(F.scaled_dot_product_attention, "__guardsolve_plain__")


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_trace_at_sequence_length_1(name: str) -> None:
    model = getattr(models, name)()
    f = guardsolve.guarded(model)
    with torch.no_grad():
        for shape in [(2, 1), (1, 1), (3, 1), (2, 6)]:
            ids = torch.randint(0, 100, shape)
            assert torch.allclose(f(ids).last_hidden_state, model(ids).last_hidden_state, atol=1e-5), shape
            assert f.last_call.how in ("traced", "replayed"), f.last_call
    assert f.cache_info().eager_calls == 0
