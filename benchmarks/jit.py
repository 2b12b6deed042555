"""`guarded(fn, backend="inductor")` against torch.compile on workloads whose shapes change.

    python benchmarks/jit.py [--quick] [--write] [--restart]

Per workload, three systems run the same calls in one process, one after another (the same
model, copied): guardsolve's Inductor backend, torch.compile (Inductor) with `dynamic=None`
(the default) and with `dynamic=True`. Reported per system: compiles (Inductor compiles:
torch.compile's counted by a backend that wraps `compile_fx`), the workload's wall time
including every trace and compile, and the time of one call on a tiny input (the workload's
first shape) and on a larger one, measured side by side (rounds interleave the systems; the
best round counts). Eager's per-call time is given beside them. Then new processes read
guardsolve's cache directory and run the MLP and GPT-2 workloads again (a restart): their
traces and compiles, the first call's time (imports done, and from `import torch` on), and
the time each entry took to load against the time it took to compile.

One thread (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`, one Inductor compile thread).
The run uses a fresh Inductor cache directory (unless TORCHINDUCTOR_CACHE_DIR is set), so each
compile is a real one; its one-off C++ header build is warmed up before the first workload, so
no system pays it. Each restart runs twice: on that (now warm) Inductor cache directory, as a
server restarted on the same machine does, and on an empty one. `--write` writes
benchmarks/JIT.md with this command line; `--quick` runs two small workloads with fewer rounds
(a smoke run); `--restart` runs the restart rows alone (a minute or two; with `--write` they
replace that part of JIT.md).
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
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter() - t0
# NOTE: what a restart imports of guardsolve, first (the workloads' models import parts of it)
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
t0 = time.perf_counter()
import guardsolve.jit.cache, guardsolve.jit.kernels, guardsolve.jit.portable, guardsolve.jit.store
t_guardsolve = time.perf_counter() - t0
warnings.filterwarnings("ignore")
import guardsolve
from jit import workloads
torch.set_num_threads(1)
w = next(w for w in workloads(False) if w.name == sys.argv[2])
torch.manual_seed(0)
fn = w.make()  # NOTE: the model's own imports (transformers) are not counted
inputs = [w.input(s) for s in w.shapes]
t1 = time.perf_counter()
g = guardsolve.guarded(fn, backend="inductor", cache_dir=sys.argv[1])
with torch.no_grad():
    t2 = time.perf_counter()
    g(inputs[0])
    t3 = time.perf_counter()
    for x in inputs[1:]:
        g(x)
t4 = time.perf_counter()
i = g.cache_info()
compile_s = [v.compile_s for e in g.entries for v in e.variants]
print(json.dumps(dict(traces=i.traces, compiles=i.compiles, loaded=i.loaded, load_s=i.load_seconds,
                      compile_s=sum(compile_s), import_torch=t_torch, first=t3 - t2, after_torch=t_guardsolve + t3 - t1,
                      rest=t4 - t3, per_entry=g._store.load_seconds if g._store else [],
                      inductor=len(g._store.through_inductor) if g._store else 0,
                      compiler_imported="torch._inductor.compile_fx" in sys.modules)))
"""


def second_process(cache_dir: str, names: list[str]) -> list[dict[str, Any]]:
    """Each workload in a new process on the cache directory, with Inductor's cache directory
    warm (this run's) and empty (a new one): what a restarted server sees."""
    code = SECOND.format(root=ROOT, here=HERE)
    rows = []
    for name in names:
        for inductor_cache in ("warm", "empty"):
            env = dict(os.environ)
            with tempfile.TemporaryDirectory(prefix="guardsolve-inductor-empty-") as empty:
                if inductor_cache == "empty":
                    env["TORCHINDUCTOR_CACHE_DIR"] = empty
                out = subprocess.run([sys.executable, "-c", code, cache_dir, name], capture_output=True, text=True,
                                     timeout=1200, env=env)
            if out.returncode != 0:
                raise SystemExit(f"the second process failed:\n{out.stderr[-3000:]}")
            rows.append({"workload": name, "inductor_cache": inductor_cache,
                         **json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def restart_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["A new process on the same cache directory (as a restarted server): its first call loads the saved "
           "entries and runs Inductor's generated code and kernels without importing Inductor's compiler. "
           "`first call`: the call alone (imports done); `after import torch`: guardsolve's imports, `guarded(...)` "
           "and the first call (building the model and its own imports not counted; `import torch` itself is given "
           "apart). The other calls follow, then:", "",
           "| workload | Inductor's cache | traces | compiles | entries loaded (through Inductor's compiler) | "
           "first call | after import torch | import torch | load time per entry | compile time of those entries |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['workload']} | {r['inductor_cache']} | {r['traces']} | {r['compiles']} | {r['loaded']} "
                   f"({r['inductor']}) | {r['first']:.3f} s | {r['after_torch']:.2f} s | {r['import_torch']:.2f} s | "
                   f"{', '.join(f'{x:.3f}' for x in r['per_entry'])} s | {r['compile_s']:.2f} s |")
    return out


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


# NOTE: where the restart part of JIT.md starts (`--restart --write` replaces it)
_RESTART_MARKS = ("A new process on the same cache directory", "A second process with the same cache directory",
                  "(`python benchmarks/jit.py --restart")


def restart_only(write: bool) -> None:
    warm_up()
    names = [w.name for w in workloads(False) if w.name.startswith(("MLP", "GPT-2"))]
    with tempfile.TemporaryDirectory(prefix="guardsolve-jit-") as cache_dir:
        for w in workloads(False):
            if w.name in names:
                torch.manual_seed(0)
                g = guardsolve.guarded(w.make(), backend="inductor", cache_dir=cache_dir)
                with torch.no_grad():
                    for s in w.shapes:
                        g(w.input(s))
        rows = second_process(cache_dir, names)
    lines = [f"(`python benchmarks/jit.py --restart{' --write' if write else ''}` on {datetime.date.today()}: this part "
             "alone, its first process compiling with guardsolve only.)", "", *restart_table(rows)]
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        path = os.path.join(HERE, "JIT.md")
        with open(path) as f:
            old = f.read().splitlines()
        cut = next((i for i, line in enumerate(old) if line.startswith(_RESTART_MARKS)), len(old))
        with open(path, "w") as f:
            f.write("\n".join([*old[:cut], *lines]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small workloads, fewer rounds (a smoke run)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/JIT.md")
    ap.add_argument("--restart", action="store_true",
                    help="the restart rows alone (guardsolve compiles the MLP and GPT-2 workloads, then new processes "
                         "load them); with --write, they replace that part of benchmarks/JIT.md")
    args = ap.parse_args()
    if args.restart:
        restart_only(args.write)
        return
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
    lines += verdicts(rows) + [""] + restart_table(second)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        with open(os.path.join(HERE, "JIT.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
