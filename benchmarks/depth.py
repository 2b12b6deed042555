"""A real-model depth sweep: transformers' GPT-2 (random weights) at several depths, traced and simplified.

    python benchmarks/depth.py [--depths 2,6,12,24] [--repeat 3] [--no-make-fx] [--quick] [-o FILE]

Per depth, in this one process: trace time and simplify time (medians of `--repeat`), the bailouts
the tracer saw and the ones it recorded, the minimal guards, and make_fx symbolic side by side.
A full run writes benchmarks/DEPTH.md; `--quick` (depths 1,2, once, no make_fx) only prints unless
`-o FILE` names where to write. Target: simplify time grows no faster than linearly with depth.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import gc
import io
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import z3  # noqa: E402

import guardsolve  # noqa: E402
from guardsolve.ir.ops import Op  # noqa: E402
from run import fmt, guardsolve_version, pytorch_make_fx, table  # noqa: E402

# NOTE: per-layer simplify time at the deepest depth may exceed the shallowest by this much and
# still count as linear: the machine is shared, and a 50 ms median moves by 10-20% run to run
TOLERANCE = 1.25
PROFILE_TOP = 10


def gpt2(depth: int) -> torch.nn.Module:
    """examples/models.py's GPT-2 (32 wide, 2 heads, no KV cache) with `depth` layers."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=depth, n_embd=32, n_head=2, vocab_size=100, n_positions=64, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    return GPT2Model(cfg).eval()


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0)),)


@contextlib.contextmanager
def counted_bailouts() -> Iterator[list[int]]:
    """Counts every bailout the tracer is asked to record, before it drops repeats.

    NOTE: the recorder keeps a bailout once per (guard, expect, user line); a layer repeated N
    times asks N times from the same lines. Wrapped only around an untimed trace.
    """
    from guardsolve.guards.recorder import Recorder

    count = [0]
    original = Recorder.g_bailout

    def g_bailout(self: Any, g: str, expect: bool, loc: Any) -> None:
        count[0] += not self.muted
        original(self, g, expect, loc)

    Recorder.g_bailout = g_bailout  # type: ignore[method-assign]
    try:
        yield count
    finally:
        Recorder.g_bailout = original  # type: ignore[method-assign]


def timed(fn: Any, repeat: int) -> tuple[list[float], Any]:
    """Every run's wall time, sorted, and the last result (run.py's `timed` keeps only the median)."""
    times, out = [], None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return sorted(times), out


def spread(times: list[float]) -> str:
    """The median, and the range when there is one: the machine is shared."""
    med = fmt(statistics.median(times))
    return med if len(times) == 1 else f"{med} ({fmt(times[0])}–{fmt(times[-1])})"


def measure(depth: int, repeat: int, make_fx: bool) -> dict[str, Any]:
    model, args = gpt2(depth), inputs()
    with torch.no_grad():
        with counted_bailouts() as asked:
            t = guardsolve.trace(model, *args)
        trace_runs, t = timed(lambda: guardsolve.trace(model, *args), repeat)
        simplify_runs, gs = timed(lambda: guardsolve.simplify(t), repeat)
        fx_runs = timed(lambda: pytorch_make_fx(model, args), repeat)[0] if make_fx else [float("nan")]
    bailouts = t.guard_graph().bailouts()
    return {"depth": depth, "ops": sum(1 for n in t.graph if n.op is Op.ATEN), "asked": asked[0],
            "bailouts": len(bailouts), "distinct": len({(n.inputs[0], n.params["expect"]) for n in bailouts}),
            "guards": len(gs), "trace_runs": trace_runs, "simplify_runs": simplify_runs,
            "t_trace": statistics.median(trace_runs), "t_simplify": statistics.median(simplify_runs),
            "t_fx": statistics.median(fx_runs), "trace": t}


def profile_simplify(trace: Any) -> list[str]:
    """The top entries of one simplify under cProfile, by own time."""
    prof = cProfile.Profile()
    prof.runcall(guardsolve.simplify, trace)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(PROFILE_TOP)
    text = out.getvalue().strip().splitlines()
    start = next(i for i, line in enumerate(text) if line.lstrip().startswith("ncalls"))
    return [text[0].strip()] + text[start:]


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    def per(t: float, n: int) -> str:
        return fmt(t / n) if n else "—"

    out = []
    for prev, r in zip([None] + rows[:-1], rows):
        growth = "—" if prev is None else (
            f"{(r['t_simplify'] / prev['t_simplify']) / (r['depth'] / prev['depth']):.2f}")
        out.append([r["depth"], r["ops"], r["asked"], r["bailouts"], r["distinct"], r["guards"], spread(r["trace_runs"]),
                    spread(r["simplify_runs"]), per(r["t_trace"], r["depth"]), per(r["t_simplify"], r["depth"]),
                    fmt(r["t_simplify"] * 1000 / r["bailouts"]) if r["bailouts"] else "—", growth, fmt(r["t_fx"]),
                    "—" if r["t_fx"] != r["t_fx"] else f"{r['t_fx'] / (r['t_trace'] + r['t_simplify']):.1f}×"])
    return table("GPT-2 depth sweep: 32 wide, 2 heads, input_ids [2, 16], random weights",
                 ["layers", "aten ops", "bailouts asked", "raw bailouts (recorded)", "distinct (guard, expect)",
                  "minimal guards", "trace (min–max)", "simplify (min–max)", "trace / layer", "simplify / layer",
                  "simplify / 1000 bailouts", "simplify growth ÷ depth growth", "make_fx symbolic",
                  "make_fx / (trace + simplify)"], out)


def exponent(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope k of log y against log x: y ~ x^k."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


def targets(rows: list[dict[str, Any]]) -> list[str]:
    first, last = rows[0], rows[-1]
    per_first, per_last = first["t_simplify"] / first["depth"], last["t_simplify"] / last["depth"]
    depths = [r["depth"] for r in rows]
    ok = per_last <= TOLERANCE * per_first
    out = [f"{'MET' if ok else 'MISSED'}: simplify time grows no faster than linearly with depth: simplify / layer "
           f"at {last['depth']} layers is {per_last / per_first:.2f}× that at {first['depth']} "
           f"({fmt(per_last)} vs {fmt(per_first)}; tolerance {TOLERANCE}× for noise)"]
    if len(rows) > 1:
        out.append(f"fit: simplify ~ depth^{exponent(depths, [r['t_simplify'] for r in rows]):.2f}, "
                   f"trace ~ depth^{exponent(depths, [r['t_trace'] for r in rows]):.2f}, "
                   f"bailouts asked ~ depth^{exponent(depths, [max(1, r['asked']) for r in rows]):.2f}, "
                   f"raw bailouts ~ depth^{exponent(depths, [max(1, r['bailouts']) for r in rows]):.2f}")
    return out


def git_rev() -> str:
    root = os.path.dirname(HERE)
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "guardsolve"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" with uncommitted changes in guardsolve/" if dirty else "")


def header(argv: list[str], repeat: int) -> list[str]:
    return [
        "# guardsolve depth sweep", "",
        f"Command: `{' '.join(['python benchmarks/depth.py', *argv])}`  ",
        f"Date: {datetime.date.today().isoformat()}  ",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, z3 {z3.get_version_string()}, guardsolve {guardsolve_version()} "
        f"(git {git_rev()})  ",
        f"Times are medians of {repeat} runs in one process, after one warm-up trace and simplify. "
        "\"bailouts asked\" counts every bailout the tracer was asked to record; \"raw bailouts\" are the ones "
        "in the guard graph (as benchmarks/run.py counts them): the recorder keeps one per guard, expectation "
        "and user line, and repeated layers run the same lines.",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--depths", default="2,6,12,24", help="comma-separated layer counts (default 2,6,12,24)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per depth; medians are reported (default 3)")
    p.add_argument("--no-make-fx", action="store_true", help="skip make_fx symbolic (the slowest part)")
    p.add_argument("--quick", action="store_true", help="depths 1,2, one run, no make_fx; prints only unless -o")
    p.add_argument("-o", "--output", help="where to write the report (a full run: benchmarks/DEPTH.md)")
    args = p.parse_args(argv)
    try:
        depths = [int(d) for d in ("1,2" if args.quick else args.depths).split(",")]
    except ValueError:
        p.error(f"--depths: expected comma-separated integers, found {args.depths!r}")
    if not depths or min(depths) < 1 or args.repeat < 1:
        p.error("depths and --repeat must be at least 1")
    repeat = 1 if args.quick else args.repeat
    make_fx = not (args.quick or args.no_make_fx)
    try:
        gpt2(1)
    except ImportError:
        print("depth.py: transformers is not installed (pip install -e '.[models]')", file=sys.stderr)
        return 2

    started = time.perf_counter()
    with torch.no_grad():  # NOTE: warm up once (imports, lazy inits): the sweep times steady state
        warm = gpt2(depths[0])
        guardsolve.simplify(guardsolve.trace(warm, *inputs()))
        if make_fx:
            pytorch_make_fx(warm, inputs())
    rows = []
    for d in depths:
        rows.append(measure(d, repeat, make_fx))
        print(f"  {d} layers: done", file=sys.stderr, flush=True)
    deepest = max(rows, key=lambda r: r["depth"])
    lines = header(argv, repeat) + [""] + sweep_table(rows)
    lines += ["", "## targets", ""] + [f"- {t}" for t in targets(rows)]
    lines += ["", f"## simplify at {deepest['depth']} layers under cProfile: top {PROFILE_TOP} by own time", "",
              "```", *profile_simplify(deepest["trace"]), "```"]
    lines += ["", f"Whole run: {fmt(time.perf_counter() - started)}."]
    print("\n".join(lines), flush=True)
    path = args.output or (None if args.quick else os.path.join(HERE, "DEPTH.md"))
    if path:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"\nwrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
