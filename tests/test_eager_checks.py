"""Checks eager's kernels make that no meta kernel asks, found by a new user's sweep: each
program's guards (live and saved) accept no input where eager raises (the oracle: eager)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import guardsolve


def _both(fn: Callable[..., Any], *inputs: torch.Tensor) -> tuple[guardsolve.GuardSet, guardsolve.GuardSet]:
    t = guardsolve.trace(fn, *inputs)
    return guardsolve.simplify(t), guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)))


def _raises(fn: Callable[..., Any], *inputs: torch.Tensor) -> bool:
    try:
        fn(*inputs)
    except Exception:
        return True
    return False


def _sound(fn: Callable[..., Any], example: tuple[torch.Tensor, ...], shapes: list[tuple[tuple[int, ...], ...]]
           ) -> tuple[guardsolve.GuardSet, guardsolve.GuardSet]:
    live, saved = _both(fn, *example)
    for shape in shapes:
        ins = tuple(torch.randn(s) for s in shape)
        if _raises(fn, *ins):
            assert not live.check(*ins) and not saved.check(*ins), (shape, str(live), str(saved))
    return live, saved


def test_sdpas_fused_route_holds_only_where_its_choice_does() -> None:
    """The 4-D CPU route took the fused kernel's meta (no checks, `query`'s head dim) at every
    size: a `key` of another head dim or head count was accepted, and an output of `value`'s
    head dim was given `query`'s."""
    x = torch.randn(2, 2, 5, 4)
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    live, saved = _sound(sdpa, (x, x.clone(), x.clone()), [
        ((2, 2, 5, 4), (2, 2, 5, 3), (2, 2, 5, 3)), ((2, 2, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)),
        ((2, 2, 1, 4), (3, 3, 7, 9), (1, 1, 1, 1))])
    assert {"q0 == k0", "q1 == k1", "q3 == k3"} <= {c.text for c in guardsolve.simplify(
        guardsolve.trace(sdpa, x, x.clone(), x.clone()), explore=False)}
    plus_q = lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + q  # noqa: E731
    _sound(plus_q, (x, x.clone(), x.clone()), [((2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 8))])
    assert live.check(torch.randn(3, 4, 7, 4), torch.randn(3, 4, 9, 4), torch.randn(3, 4, 9, 4))


@pytest.mark.parametrize("name, fn", [
    ("max.dim", lambda x: x.max(dim=0).values), ("min.dim", lambda x: x.min(1)[0]),
    ("median.dim", lambda x: x.median(0).values), ("mode", lambda x: x.mode(0).values),
    ("max()", lambda x: x.max()), ("min()", lambda x: x.min())])
def test_a_reduction_that_picks_an_element_rejects_an_empty_dim(name: str, fn: Callable[..., Any]) -> None:
    live, _ = _sound(fn, (torch.randn(4, 3),), [((0, 3),), ((4, 0),), ((0, 0),)])
    assert live.check(torch.randn(1, 1)) and live.check(torch.randn(7, 2))


def test_an_index_made_from_a_size_reads_its_table_in_bounds() -> None:
    """`torch.arange(x.shape[0])` into a table of 6 rows is in bounds for at most 6 rows; the
    guards had no bound at all (eager raises IndexError at 7)."""
    w = torch.randn(6, 4)
    for fn, bound in ((lambda x: x + F.embedding(torch.arange(x.shape[0]), w), "x0 <= 6"),
                      (lambda x: x + w[torch.arange(x.shape[0])], "x0 <= 6"),
                      (lambda x: x + w.index_select(0, torch.arange(x.shape[0]) + 1), "x0 <= 5")):
        live, saved = _sound(fn, (torch.randn(5, 4),), [((n, 4),) for n in range(0, 10)])
        assert bound in {c.text for c in live} and bound in {c.text for c in saved}, str(live)


def test_gpt2s_position_table_bounds_its_sequence() -> None:
    """GPT-2 looks up `wpe(position_ids)`, `position_ids` an `arange` of the sequence length:
    past `n_positions` eager raises IndexError, and the guard names that line."""
    pytest.importorskip("transformers")
    from examples.models import MODELS

    torch.manual_seed(0)
    m = MODELS["gpt2"][0]()
    gs = guardsolve.simplify(guardsolve.trace(m, torch.randint(0, 100, (2, 16))))
    n = m.config.n_positions
    assert gs.check(torch.randint(0, 100, (1, n))) and not gs.check(torch.randint(0, 100, (1, n + 1)))
    assert _raises(m, torch.randint(0, 100, (1, n + 1)))
    assert "self.wpe(position_ids)" in gs.explain_failure(torch.randint(0, 100, (1, n + 1)))


def test_a_saved_traces_probe_runs_eagers_kernels() -> None:
    """`interpolate` of no channels: its meta kernel passes, eager's raises ("Non-empty 4D data
    tensor expected"). The live probe ran eager; the saved text's replay did not, and accepted."""
    up = lambda x: F.interpolate(x, scale_factor=2, mode="nearest")  # noqa: E731
    live, saved = _sound(up, (torch.randn(1, 2, 4, 5),), [((1, 0, 4, 5),), ((0, 2, 4, 5),), ((1, 2, 0, 5),)])
    assert [c.text for c in saved] == [c.text for c in live]
    assert "eager raises at these sizes" in saved.explain_failure(torch.randn(1, 0, 4, 5))
