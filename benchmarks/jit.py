"""`guarded(fn, backend="inductor")` against torch.compile on workloads whose shapes change.

    python benchmarks/jit.py [--quick] [--write]

Per workload, three systems run the same calls in one process, one after another (the same
model, copied): guardsolve's Inductor backend, torch.compile (Inductor) with `dynamic=None`
(the default) and with `dynamic=True`. Reported per system: compiles (Inductor compiles:
torch.compile's counted by a backend that wraps `compile_fx`), the workload's wall time
including every trace and compile, and the time of one call on a tiny input (the workload's
first shape) and on a larger one, measured side by side (rounds interleave the systems; the
best round counts). Eager's per-call time is given beside them. Then a second process reads
guardsolve's cache directory and runs the MLP and GPT-2 workloads again: its traces, its
compiles, and the time each entry took to load against the time it took to compile.

One thread (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`, one Inductor compile thread).
The run uses a fresh Inductor cache directory (unless TORCHINDUCTOR_CACHE_DIR is set), so each
compile is a real one; its one-off C++ header build is warmed up before the first workload, so
no system pays it. The second process shares that (now warm) directory, as a server restarted
on the same machine does, and imports Inductor before its timed loads. `--write` writes benchmarks/JIT.md with this command line; `--quick` runs two small
workloads with fewer rounds (a smoke run).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import timeit
import warnings
from dataclasses import dataclass
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
if __name__ == "__main__" and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    # NOTE: a fresh Inductor cache for this run (and its second process): every compile is a real one
    import tempfile as _tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _tempfile.mkdtemp(prefix="guardsolve-inductor-")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import guardsolve  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")


def branch(x: torch.Tensor) -> torch.Tensor:
    """A function that branches on a size."""
    if x.shape[0] > 16:
        return (x.sin() * 2).sum(-1)
    return (x.cos() + 1).amax(-1)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class Workload:
    name: str
    make: Callable[[], Any]
    shapes: list[tuple[int, ...]]
    large: tuple[int, ...]
    ints: bool = False

    def input(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randint(0, 100, shape) if self.ints else torch.randn(shape)


def workloads(quick: bool) -> list[Workload]:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models

    out = [
        Workload("MLP 16-32-8 over batches", lambda: MLP().eval(), [(8, 16), (4, 16), (1, 16), (3, 16), (16, 16), (1, 16), (7, 16)],
                 (2048, 16)),
        Workload("branch on a size", lambda: branch, [(8, 64), (12, 64), (20, 64), (32, 64), (1, 64), (17, 64)], (4096, 64)),
    ]
    if quick:
        return out
    gpt_shapes = [(2, 16), (4, 16), (1, 16), (2, 17), (1, 9), (3, 33)]
    out += [
        Workload("GPT-2 over (batch, seq)", models.gpt2, gpt_shapes, (8, 64), ints=True),
        Workload("BERT over (batch, seq)", models.bert, gpt_shapes, (8, 64), ints=True),
        Workload("conv net over image sizes", models.conv_net,
                 [(2, 3, 16, 16), (2, 3, 24, 24), (1, 3, 16, 16), (2, 3, 32, 32), (4, 3, 20, 20), (2, 3, 17, 15)],
                 (16, 3, 64, 64)),
        Workload("LSTM over sequence lengths", models.lstm, [(2, 5, 8), (2, 9, 8), (2, 17, 8), (1, 5, 8), (2, 33, 8)],
                 (16, 128, 8)),
    ]
    return out


# -- systems ------------------------------------------------------------------------------------


class System:
    name = ""

    def __init__(self, fn: Any):
        self.fn = fn

    def compiles(self) -> int:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> Any:
        return self.call(x)


class Guardsolve(System):
    name = "guardsolve"

    def __init__(self, fn: Any, cache_dir: str | None = None):
        super().__init__(fn)
        self.g = guardsolve.guarded(fn, backend="inductor", cache_dir=cache_dir)
        self.call = self.g

    def compiles(self) -> int:
        return self.g.cache_info().compiles

    def extra(self) -> str:
        i = self.g.cache_info()
        eager = f", {i.eager_calls} eager" if i.eager_calls else ""
        return f"{i.traces} traces, variants {list(i.variants)}{eager}{self.state_cost()}"

    def state_cost(self) -> str:
        """What the state check (`Entry.state`) adds to a hit: its checks and its time, measured
        apart (the best of 5 runs of 2,000 checks)."""
        state = next((e.state for e in self.g.entries if e.state is not None), None)
        if state is None:
            return ""
        best = min(timeit.timeit(state, number=2000) for _ in range(5)) / 2000
        return f"; state check: {len(state)} checks, {best * 1e6:.1f} µs"


class TorchCompile(System):
    def __init__(self, fn: Any, dynamic: bool | None):
        super().__init__(fn)
        from torch._inductor.compile_fx import compile_fx

        self.count = 0

        def backend(gm: Any, example: Any) -> Any:
            self.count += 1
            return compile_fx(gm, example)

        self.name = f"torch.compile dynamic={dynamic}"
        self.call = torch.compile(fn, backend=backend, dynamic=dynamic)

    def compiles(self) -> int:
        return self.count

    def extra(self) -> str:
        return ""


def per_call(fns: dict[str, Callable[[], Any]], rounds: int, budget_s: float = 0.05) -> dict[str, float]:
    """Seconds per call of each, side by side: each round times every function once, in turn."""
    best = {k: float("inf") for k in fns}
    reps = {}
    for k, f in fns.items():
        f()
        t0 = time.perf_counter()
        f()
        one = max(time.perf_counter() - t0, 1e-7)
        reps[k] = max(1, min(2000, int(budget_s / one)))
    for _ in range(rounds):
        for k, f in fns.items():
            n = reps[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            best[k] = min(best[k], (time.perf_counter() - t0) / n)
    return best


def warm_up() -> float:
    """Inductor's one-off build (its C++ headers) and imports, before any system runs."""
    t0 = time.perf_counter()
    f = torch.compile(lambda x: (x * 2).sin(), backend="inductor")
    f(torch.randn(3))
    torch._dynamo.reset()
    return time.perf_counter() - t0


def run_workload(w: Workload, rounds: int, cache_dir: str | None) -> dict[str, Any]:
    torch._dynamo.reset()
    torch._dynamo.config.cache_size_limit = 64
    torch.manual_seed(0)
    base = w.make()
    inputs = [w.input(s) for s in w.shapes]
    systems: list[Any] = []
    row: dict[str, Any] = {"workload": w.name, "calls": len(inputs), "systems": {}}
    # NOTE: torch.compile's default first: automatic dynamic keeps state per code object
    for make in (lambda fn: TorchCompile(fn, None), lambda fn: TorchCompile(fn, True),
                 lambda fn: Guardsolve(fn, cache_dir)):
        fn = copy.deepcopy(base) if isinstance(base, torch.nn.Module) else base
        s = make(fn)
        with torch.no_grad():
            t0 = time.perf_counter()
            for x in inputs:
                s(x)
            wall = time.perf_counter() - t0
        systems.append(s)
        row["systems"][s.name] = {"compiles": s.compiles(), "wall_s": wall, "extra": s.extra()}
    tiny, large = inputs[0], w.input(w.large)
    with torch.no_grad():
        for label, x in (("tiny", tiny), ("large", large)):
            fns = {s.name: (lambda s=s, x=x: s(x)) for s in systems}
            fns["eager"] = lambda x=x: base(x)
            for k, v in per_call(fns, rounds).items():
                row["systems"].setdefault(k, {})[label] = v
    row["tiny_shape"], row["large_shape"] = list(w.shapes[0]), list(w.large)
    return row


SECOND = """
import json, os, sys, time, warnings
os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import torch, guardsolve
from jit import workloads
torch.set_num_threads(1)
# NOTE: the process's one-off set-up for loading any artifact (imports, Inductor's runtime),
# measured by loading a trivial artifact the first process saved, apart from the entries' loads
t0 = time.perf_counter()
from guardsolve.jit.inductor import load_artifact
load_artifact(open(sys.argv[2], "rb").read())(torch.randn(3))
out = {{"_setup_s": time.perf_counter() - t0}}
for w in workloads(False):
    if w.name not in {names!r}:
        continue
    torch.manual_seed(0)
    fn = w.make()
    g = guardsolve.guarded(fn, backend="inductor", cache_dir=sys.argv[1])
    t0 = time.perf_counter()
    with torch.no_grad():
        for s in w.shapes:
            g(w.input(s))
    i = g.cache_info()
    compile_s = [v.compile_s for e in g.entries for v in e.variants]
    out[w.name] = dict(traces=i.traces, compiles=i.compiles, loaded=i.loaded, load_s=i.load_seconds,
                       compile_s=sum(compile_s), wall=time.perf_counter() - t0,
                       per_entry=g._store.load_seconds if g._store else [], entry_compile=compile_s)
print(json.dumps(out))
"""


def trivial_artifact(path: str) -> None:
    """A saved artifact of `x * 2 + 1`: the second process loads it first, to measure its one-off set-up."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(3)
    gm = make_fx(lambda x: (x * 2 + 1,))(x)
    art = torch._inductor.standalone_compile(gm, [x], dynamic_shapes="from_example_inputs")
    art.save(path=path, format="binary")


def second_process(cache_dir: str, names: list[str]) -> dict[str, Any]:
    code = SECOND.format(root=ROOT, here=HERE, names=names)
    warm = os.path.join(cache_dir, "trivial-artifact.bin")  # NOTE: beside the fingerprints' folders, never read by a store
    trivial_artifact(warm)
    out = subprocess.run([sys.executable, "-c", code, cache_dir, warm], capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(f"the second process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt_us(s: float) -> str:
    return f"{s * 1e6:.0f} µs" if s < 1e-2 else f"{s * 1e3:.1f} ms"


def table(rows: list[dict[str, Any]]) -> list[str]:
    names = ["guardsolve", "torch.compile dynamic=None", "torch.compile dynamic=True"]
    out = ["| workload | system | compiles | wall (incl. compiles) | tiny call | large call | notes |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        for n in names:
            s = r["systems"][n]
            out.append(f"| {r['workload']} ({r['calls']} calls; tiny {r['tiny_shape']}, large {r['large_shape']}) | {n} | "
                       f"{s['compiles']} | {s['wall_s']:.2f} s | {fmt_us(s['tiny'])} | {fmt_us(s['large'])} | {s['extra']} |")
        e = r["systems"]["eager"]
        out.append(f"| {r['workload']} | eager | – | – | {fmt_us(e['tiny'])} | {fmt_us(e['large'])} | |")
    return out


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| workload | compiles vs dynamic=True / default | wall vs default | tiny call / torch.compile's best | large call / torch.compile's best |",
           "|---|---|---|---|---|"]
    for r in rows:
        g, d, t = (r["systems"][n] for n in ("guardsolve", "torch.compile dynamic=None", "torch.compile dynamic=True"))
        comp = "MET" if g["compiles"] <= t["compiles"] and (g["compiles"] < d["compiles"] or d["compiles"] == 0) else "MISSED"
        wall = "MET" if g["wall_s"] <= d["wall_s"] else "MISSED"
        tiny = g["tiny"] / min(d["tiny"], t["tiny"])
        large = g["large"] / min(d["large"], t["large"])
        out.append(f"| {r['workload']} | {g['compiles']} vs {t['compiles']} / {d['compiles']}: {comp} | "
                   f"{g['wall_s']:.1f} s vs {d['wall_s']:.1f} s: {wall} | {tiny:.2f} ({'MET' if tiny <= 0.5 else 'MISSED'}) | "
                   f"{large:.2f} ({'MET' if large <= 1.1 else 'MISSED'}) |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small workloads, fewer rounds (a smoke run)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/JIT.md")
    args = ap.parse_args()
    warm = warm_up()
    rounds = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="guardsolve-jit-") as cache_dir:
        rows = []
        for w in workloads(args.quick):
            rows.append(run_workload(w, rounds, cache_dir))
            print(f"done: {w.name}", file=sys.stderr, flush=True)
        names = [w.name for w in workloads(args.quick) if w.name.startswith(("MLP", "GPT-2"))]
        second = second_process(cache_dir, names)
    lines = [f"# guardsolve's Inductor entries vs torch.compile", "",
             f"`python benchmarks/jit.py{' --quick' if args.quick else ''}{' --write' if args.write else ''}` on "
             f"{datetime.date.today()}, torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores, one thread. "
             f"A fresh Inductor cache, warmed up first ({warm:.1f} s). Per-call times: the best of {rounds} interleaved rounds. "
             "Tiny and large calls are hits for every system (each was called once at that shape first).", ""]
    lines += table(rows) + ["", "Targets (compiles ≤ dynamic=True and < default; wall ≤ default; tiny ≤ 0.5×; large ≤ 1.1×):", ""]
    setup = second.pop("_setup_s")
    lines += verdicts(rows) + ["", f"A second process with the same cache directory (its one-off set-up, imports and Inductor's "
                               f"runtime, measured by loading a trivial artifact first: {setup:.2f} s; the load times below "
                               "are each entry's own):", "",
                               "| workload | traces | compiles | entries loaded | load time | compile time of those entries | load / compile |",
                               "|---|---|---|---|---|---|---|"]
    for name, s in second.items():
        ratio = s["load_s"] / s["compile_s"] if s["compile_s"] else float("nan")
        lines.append(f"| {name} | {s['traces']} | {s['compiles']} | {s['loaded']} | {s['load_s']:.3f} s "
                     f"({', '.join(f'{x:.3f}' for x in s['per_entry'])}) | {s['compile_s']:.2f} s | {ratio:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        with open(os.path.join(HERE, "JIT.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
