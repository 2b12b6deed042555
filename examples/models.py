"""Real models nobody here wrote: transformers GPT-2 and BERT (small configs, random weights),
torch.nn's TransformerEncoderLayer, LSTM and MultiheadAttention, and a conv net with BatchNorm.

Each factory takes no arguments, so each is a CLI target, e.g.
    guardsolve report examples/models.py:bert --shape input_ids=2,16 --dtype int64
    guardsolve report examples/models.py:conv_net --shape x=2,3,16,16

Run: python examples/models.py          (the transformers ones need `pip install -e '.[models]'`)
"""

from __future__ import annotations

import torch
import torch.nn as nn

import guardsolve
from guardsolve.cli.report import trace_summary


def gpt2() -> nn.Module:
    """GPT-2, 2 layers, 32 wide; no KV cache (a trace has no state across calls)."""
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    return GPT2Model(cfg).eval()


def bert() -> nn.Module:
    """BERT, 2 layers, 32 wide, 64 positions."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                     vocab_size=100, max_position_embeddings=64)
    return BertModel(cfg).eval()


def transformer_layer() -> nn.Module:
    return nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()


def lstm() -> nn.Module:
    return nn.LSTM(8, 16, batch_first=True).eval()


class SelfAttention(nn.Module):
    """`nn.MultiheadAttention` used as self-attention (one input)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def self_attention() -> nn.Module:
    return SelfAttention().eval()


class ConvNet(nn.Module):
    """Conv, BatchNorm, ReLU, MaxPool, then adaptive average pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).flatten(1))


def conv_net() -> nn.Module:
    return ConvNet().eval()


# factory, example inputs
MODELS = {
    "gpt2": (gpt2, lambda: (torch.randint(0, 100, (2, 16)),)),
    "bert": (bert, lambda: (torch.randint(0, 100, (2, 16)),)),
    "transformer_layer": (transformer_layer, lambda: (torch.randn(2, 6, 16),)),
    "lstm": (lstm, lambda: (torch.randn(2, 5, 8),)),
    "self_attention": (self_attention, lambda: (torch.randn(2, 5, 16),)),
    "conv_net": (conv_net, lambda: (torch.randn(2, 3, 16, 16),)),
}



def built(names: list[str] | tuple[str, ...] = tuple(MODELS)) -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """Each named model with its example inputs; those that need a package not installed are left out."""
    out = {}
    for name in names:
        make, inputs = MODELS[name]
        try:
            out[name] = (make(), inputs())
        except ImportError:
            continue
    return out

def main() -> None:
    torch.manual_seed(0)
    for name, (make, inputs) in MODELS.items():
        try:
            model = make()
        except ImportError:
            print(f"## {name}: skipped (transformers is not installed)\n")
            continue
        args = inputs()
        with torch.no_grad():
            t = guardsolve.trace(model, *args)
            out = model(*args)
        expected = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
        got = t.output.last_hidden_state if hasattr(t.output, "last_hidden_state") else t.output
        torch.testing.assert_close(got, expected)
        print(f"## {name} {[list(a.shape) for a in args]}")
        print(trace_summary(t, guardsolve.simplify(t)))
        print()


if __name__ == "__main__":
    main()
