"""torch.compile's guards, Dynamo's count vs guardsolve's minimal count, and what explaining costs.

    python benchmarks/compile.py [--fast] [-o FILE]

Per case (compiled with `dynamic=True`, `backend="eager"`, one call): the shape guards Dynamo
installs (over input sizes, and on strides and other values), the minimal size guards
`explain_compile` proves equivalent, the time of the compile itself and the time explaining adds
beyond it, and what one entry check costs: Dynamo's whole guard tree (`guard_manager.check`)
against guardsolve's compiled check (size and static guards), measured back to back.
A full run writes benchmarks/COMPILE.md; `--fast` (the small functions only) prints.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from guardsolve.pytorch.explain.compile import explain_compile  # noqa: E402

def cases(fast: bool) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    from examples.attention import AttentionBlock
    from examples.compiled import graph_break, route, view_mm
    from examples.cat_reshape import merge_pairs
    from examples.cnn import SmallCNN
    from examples.mlp import MLP

    torch.manual_seed(0)
    out: dict[str, tuple[Any, tuple[Any, ...]]] = {
        "view_mm": (view_mm, (torch.randn(3, 2, 4), torch.randn(3, 2, 4))),
        "branches": (route, (torch.randn(12), torch.randn(13))),
        "graph_break": (graph_break, (torch.randn(5, 3), torch.randn(4))),
    }
    if fast:
        return out
    import examples.models as M

    out.update({
        "mlp": (MLP().eval(), (torch.randn(32, 64),)),
        "cat_reshape": (merge_pairs, (torch.randn(4, 6), torch.randn(4, 10))),
        "attention": (AttentionBlock().eval(), (torch.randn(2, 16, 64),)),
        "cnn": (SmallCNN().eval(), (torch.randn(2, 3, 16, 16),)),
    })
    out.update(M.built(("gpt2", "bert", "transformer_layer", "lstm", "self_attention", "conv_net")))
    return out


def median_us(fn: Any, n: int = 2000) -> float:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def measure(name: str, fn: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    # NOTE: the checks run in the state the call compiled in (grad mode is one of Dynamo's guards)
    with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=True):
        r = explain_compile(fn, *args, dynamic=True)
        f = r.frames[0]
        sizes = sum(g.kind in ("shape", "static size") for g in f.dynamo_guards)
        cert = f.guards.verify()
        entry = next(e for e in _debug_get_cache_entry_list(f.code) if str(e.compile_id) == f.compile_id)
        check_args = f.arguments(f.f_locals)
        assert entry.guard_manager.check(f.f_locals) and f.guards.check(*check_args), name
        dynamo_us = median_us(lambda: entry.guard_manager.check(f.f_locals))
        ours_us = median_us(lambda: f.guards.check(*check_args))
    return {
        "case": name, "frames": len(r.frames), "dynamo": len(f.dynamo_guards), "dynamo_sizes": sizes,
        "minimal": len(f.guards), "equivalent": cert.equivalent and cert.irredundant,
        "compile_s": r.compile_seconds, "explain_s": r.explain_seconds,
        "dynamo_check_us": dynamo_us, "guardsolve_check_us": ours_us,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="the small functions only; print, do not write")
    ap.add_argument("-o", "--output", help="write the report here (default: benchmarks/COMPILE.md on a full run)")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = [measure(name, fn, args) for name, (fn, args) in cases(a.fast).items()]
    lines = [
        "# torch.compile's guards: Dynamo's vs guardsolve's minimal", "",
        f"`python benchmarks/compile.py` on {datetime.date.today()}, torch {torch.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cores. Each case is compiled with `dynamic=True`, "
        "`backend=\"eager\"`, and called once; the outermost frame is shown. Dynamo's shape guards are "
        "its SHAPE_ENV lambdas and the static sizes its TENSOR_MATCH checks: those over input sizes, "
        "and those on strides and other values (floats, identities), which guardsolve keeps as static "
        "guards. The minimal set is proven equivalent to Dynamo's size guards and irredundant by z3. "
        "`explain` is the time explain_compile adds after the compile. A check is one entry check of "
        "the same call: Dynamo's whole guard tree (all its guards, from C++) against guardsolve's "
        "compiled Python check (size guards and static guards: dtype, device, strides, state).", "",
        "| case | frames | Dynamo shape guards (over sizes) | minimal | proven | compile | explain "
        "| explain / compile | Dynamo check | guardsolve check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['frames']} | {r['dynamo']} ({r['dynamo_sizes']}) | {r['minimal']} | "
            f"{'yes' if r['equivalent'] else 'NO'} | {r['compile_s']:.2f} s | {r['explain_s'] * 1000:.0f} ms | "
            f"{r['explain_s'] / r['compile_s']:.2f} | {r['dynamo_check_us']:.1f} µs | {r['guardsolve_check_us']:.1f} µs |")
    total_d = sum(r["dynamo"] for r in rows)
    total_m = sum(r["minimal"] for r in rows)
    lines += ["", f"In all: {total_d} Dynamo shape guards ({sum(r['dynamo_sizes'] for r in rows)} over sizes) -> "
              f"{total_m} minimal size guards; explaining added "
              f"{sum(r['explain_s'] for r in rows) / sum(r['compile_s'] for r in rows):.0%} to the compile time."]
    text = "\n".join(lines)
    print(text)
    out = a.output or (None if a.fast else os.path.join(HERE, "COMPILE.md"))
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
