"""Models whose guards nest divisions (window padding, strided convolutions), side by side with
torch.export: trace + simplify time, the minimal guards, and whether they are proved minimal.

    python benchmarks/nested.py [--skip-export] [-o FILE]

Small transformers configs with random weights: Swin (window attention that pads to a multiple
of the window), Segformer (overlapping patch embeddings), wav2vec2 (a strided conv feature
encoder). Issue 29's targets: Swin in under 5 s, minimal, every guard under 80 characters;
Segformer and wav2vec2 in under 0.5 s. A full run writes benchmarks/NESTED.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

import guardsolve  # noqa: E402


def models() -> dict[str, tuple[Any, torch.Tensor, float]]:
    """name -> (model, example input, target seconds for trace + simplify)."""
    from transformers import (SegformerConfig, SegformerModel, SwinConfig, SwinModel, Wav2Vec2Config,
                              Wav2Vec2Model)

    torch.manual_seed(0)
    swin = SwinModel(SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                window_size=4)).eval()
    seg = SegformerModel(SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                         num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                                         mlp_ratios=[2, 2], decoder_hidden_size=32)).eval()
    wav = Wav2Vec2Model(Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                       conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                       num_conv_pos_embedding_groups=2)).eval()
    return {"swin": (swin, torch.randn(2, 3, 32, 32), 5.0), "segformer": (seg, torch.randn(2, 3, 32, 32), 0.5),
            "wav2vec2": (wav, torch.randn(2, 400), 0.5)}


def export_seconds(model: Any, x: torch.Tensor) -> float | str:
    from torch.export import Dim, export

    dims = {i: Dim.AUTO for i in range(x.dim())}
    t0 = time.perf_counter()
    try:
        export(model, (x,), dynamic_shapes=({**dims},), strict=False)
    except Exception as e:  # NOTE: a measurement: an export that fails is reported, not raised
        return f"failed: {type(e).__name__}"
    return time.perf_counter() - t0


def measure(skip_export: bool = False) -> list[dict[str, Any]]:
    """One row per model: bailouts, the guards, minimal, the longest guard, guardsolve's trace +
    simplify time (`explore=False`) and torch.export's, and the target (benchmarks/run.py's
    `nested` section prints the same rows)."""
    rows = []
    for name, (model, x, target) in models().items():
        t0 = time.perf_counter()
        with torch.no_grad():
            t = guardsolve.trace(model, x)
            gs = guardsolve.simplify(t, explore=False)
        ours = time.perf_counter() - t0
        exp = "not run" if skip_export else export_seconds(model, x)
        longest = max((len(c.text) for c in gs), default=0)
        rows.append({"model": name, "bailouts": len(t.guard_graph().bailouts()), "guards": len(gs),
                     "minimal": gs.minimal, "longest": longest, "t_gs": ours, "target": target, "t_export": exp,
                     "met": ours < target and gs.minimal and (name != "swin" or longest < 80),
                     "shown": "; ".join(c.text if len(c.text) <= 60 else c.text[:57] + "..." for c in gs)})
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | bailouts | guards | minimal | longest guard | guardsolve | target | torch.export | guards |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        exp = r["t_export"]
        exp_text = f"{exp:.2f} s" if isinstance(exp, float) else exp
        out.append(f"| {r['model']} | {r['bailouts']} | {r['guards']} | {r['minimal']} | {r['longest']} | "
                   f"{r['t_gs']:.2f} s | < {r['target']} s: {'MET' if r['met'] else 'MISSED'} | {exp_text} | "
                   f"`{r['shown']}` |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-export", action="store_true", help="do not time torch.export (Swin's takes minutes)")
    ap.add_argument("-o", "--output", help="write the report here (default benchmarks/NESTED.md)")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = measure(a.skip_export)
    lines = ["# Nested divisions: guardsolve vs torch.export", "",
             f"`python benchmarks/nested.py` on {datetime.date.today()}, torch {torch.__version__}, "
             f"{platform.machine()}, {os.cpu_count()} cores; trace + simplify without path merging "
             "(`explore=False`), torch.export with `Dim.AUTO` on every dim. The same rows are the `nested` "
             "section of `benchmarks/run.py`.", ""] + table(rows)
    text = "\n".join(lines)
    print(text)
    with open(a.output or os.path.join(HERE, "NESTED.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
