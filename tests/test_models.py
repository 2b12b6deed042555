"""Real models: each traces, equals eager, and has exact guards; the CLI reports them.

transformers' models need the `[models]` extra (CI installs it); the torch.nn ones always run.
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import pytest
import torch

import guardsolve
from guardsolve.cli import main
from guardsolve.testing import exactness_failures

ROOT = pathlib.Path(__file__).parent.parent


def _models() -> Any:
    spec = importlib.util.spec_from_file_location("example_models", ROOT / "examples" / "models.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


MODELS = _models().MODELS
NEEDS_TRANSFORMERS = {"gpt2", "bert"}


def _hidden(out: Any) -> Any:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


@pytest.mark.parametrize("name, expected", [
    # NOTE: batch 1 skips identity ops only (tests/test_identity.py); `wpe(position_ids)` bounds the sequence
    ("gpt2", ["input_ids0 >= 1", "input_ids1 <= 64", "input_ids1 >= 2"]),
    ("bert", ["input_ids0 >= 1", "input_ids1 <= 64", "input_ids1 >= 2"]),
    ("transformer_layer", ["src2 == 16"]),
    ("lstm", ["input2 == 8", "input1 >= 1"]),
    ("self_attention", ["x2 == 16", "x0 >= 2", "x1 >= 2"]),
    ("conv_net", None),
])
def test_model_traces_equals_eager_with_exact_guards(name: str, expected: list[str] | None) -> None:
    if name in NEEDS_TRANSFORMERS:
        pytest.importorskip("transformers")
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    model, args = make(), inputs()
    with torch.no_grad():
        t = guardsolve.trace(model, *args)
        torch.testing.assert_close(_hidden(t.output), _hidden(model(*args)))
        gs = guardsolve.simplify(t)
        if expected is not None:
            assert [str(c) for c in gs] == expected
        assert gs.check(*args)
        assert exactness_failures(model, tuple(args), count=4) == []  # the example's path: exact
        assert exactness_failures(model, tuple(args), count=4, explore=True) == []  # merged: sound


def test_conv_net_guards_come_from_its_pooling() -> None:
    make, inputs = MODELS["conv_net"]
    with torch.no_grad():
        gs = guardsolve.simplify(guardsolve.trace(make(), *inputs()))
    text = [str(c) for c in gs]
    assert "x1 == 3" in text  # the first conv's in_channels
    assert gs.check(torch.randn(5, 3, 32, 20))
    # NOTE: a height of 3 pools to 1 and records the same trace (a route on the far side of the
    # example's `x2 >= 4`); a height of 1 pools to 0, where max_pool2d raises
    assert gs.check(torch.randn(5, 3, 3, 20)) and not gs.check(torch.randn(5, 3, 1, 20))


def test_bert_report_names_the_position_bound_and_its_line(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/models.py:bert", "--shape", "input_ids=2,16", "--dtype", "int64"]) == 0
    out = capsys.readouterr().out
    assert "\ninput_ids1 <= 64\n" in out
    bound = out.split("\ninput_ids1 <= 64\n", 1)[1].splitlines()[0]
    assert "modeling_bert.py" in bound and "position_ids" in bound


def test_lstm_report_pins_the_feature_size(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/models.py:lstm", "--shape", "input=2,5,8"]) == 0
    out = capsys.readouterr().out
    assert "\ninput2 == 8\n" in out and "trace: " in out


def test_fused_attention_ops_check_what_eager_checks() -> None:
    """PyTorch's meta kernels of the fused inference kernels skip the embed_dim check eager makes;
    the guards must still reject the widths eager rejects."""
    layer = MODELS["transformer_layer"][0]()
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    proj = (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)

    def fused_mha(x: torch.Tensor) -> torch.Tensor:
        return torch._native_multi_head_attention(x, x, x, 16, 2, *proj, need_weights=False)[0]

    for fn in (layer, fused_mha):
        with torch.no_grad():
            gs = guardsolve.simplify(guardsolve.trace(fn, torch.randn(2, 6, 16)))
            assert gs.check(torch.randn(3, 5, 16)) and not gs.check(torch.randn(2, 6, 17))
            with pytest.raises(RuntimeError, match="embed_dim"):
                fn(torch.randn(2, 6, 17))
