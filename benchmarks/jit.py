"""`guarded(fn, backend="inductor")` against torch.compile on workloads whose shapes change.

    python benchmarks/jit.py [--quick] [--write] [--restart] [--reach [--only NAME]]

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
replace that part of JIT.md). `--reach` runs, alone, the programs of issue 48: a U-Net with
bilinear interpolate skips, a ViT whose position table is resized by bicubic interpolate, GPT-2
over decode-sized calls (seq 1) mixed with prompts, an `.item()` branch, top-2 MoE routing and
transformers' OLMoE with its eager expert loop,
each against eager, torch.compile by default and torch.compile with Dynamo's
`capture_scalar_outputs` and `capture_dynamic_output_shape_ops`; it reports compiles, calls run
eagerly, wall, repeated calls (medians) and outputs that differ from eager's; with `--write` it
replaces its own section of JIT.md (the other writes keep that section).
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
import types
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
from torch._inductor.utils import fresh_cache  # noqa: E402

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
            old, reach = _split_reach(f.read().splitlines())
        cut = next((i for i, line in enumerate(old) if line.startswith(_RESTART_MARKS)), len(old))
        with open(path, "w") as f:
            f.write("\n".join([*old[:cut], *lines, *([""] + reach if reach else [])]).rstrip("\n") + "\n")


# -- programs issue 48 reaches (`--reach`) --------------------------------------------------------


class UNetInterp(torch.nn.Module):
    """A small U-Net: conv, pool, conv, the features resized back to the skip's own size by
    `F.interpolate(size=skip.shape[-2:], mode="bilinear")`, concatenated, conv."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.out = torch.nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = torch.relu(self.down(x))
        h = torch.relu(self.mid(torch.nn.functional.max_pool2d(skip, 2)))
        h = torch.nn.functional.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.out(torch.cat([h, skip], dim=1))


class ViTInterp(torch.nn.Module):
    """A one-block ViT: 4x4 patches embedded by a strided conv, a learned 4x4 position table
    resized by bicubic `F.interpolate` to the image's patch grid, one attention block, mean pool."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(3, d, 4, stride=4)
        self.pos = torch.nn.Parameter(torch.randn(1, d, 4, 4) * 0.1)
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        pos = torch.nn.functional.interpolate(self.pos, size=h.shape[-2:], mode="bicubic", align_corners=False)
        t = (h + pos).flatten(2).transpose(1, 2)  # (batch, tokens, d)
        q, k, v = self.qkv(self.norm(t)).unflatten(-1, (3, 2, -1)).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        t = t + self.proj(a.transpose(1, 2).flatten(2))
        return self.head(t.mean(1))


def item_branch(x: torch.Tensor) -> torch.Tensor:
    """A branch on a value: `.item()` decides which side runs."""
    if x.mean().item() > 0:
        return (x.sin() * 2).sum(-1)
    return (x.cos() + 1).amax(-1)


def make_moe(d: int = 16, experts: int = 4) -> Callable[[torch.Tensor], torch.Tensor]:
    """Top-2 mixture-of-experts routing over tokens (rows of x): per expert, the tokens routed to
    it (`nonzero`), gathered (`index_select`), run through the expert's MLP, weighted, and added
    back (`index_add`); an expert no token chose is skipped."""
    router = torch.randn(d, experts)
    w1, w2 = torch.randn(experts, d, 2 * d) * 0.3, torch.randn(experts, 2 * d, d) * 0.3

    def moe(x: torch.Tensor) -> torch.Tensor:
        weight, idx = (x @ router).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e in range(experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            h = torch.relu(x.index_select(0, tok) @ w1[e]) @ w2[e]
            out = out.index_add(0, tok, h * weight[tok, slot].unsqueeze(-1))
        return out

    return moe


class OlmoeHidden(torch.nn.Module):
    """transformers' OLMoE (1 layer, 32 wide, 4 experts, top-2; random weights) with its eager
    experts (`experts_implementation="eager"`: per expert hit, `for expert_idx in expert_hit`
    over a `nonzero`, `torch.where`, `index_add_`), called on input ids alone: its last hidden
    state. transformers' default experts (`grouped_mm`) decide nothing on data."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import OlmoeConfig, OlmoeModel

        cfg = OlmoeConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=32, num_attention_heads=2,
                          num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, vocab_size=100,
                          max_position_embeddings=64, use_cache=False, experts_implementation="eager",
                          eos_token_id=0, bos_token_id=0, pad_token_id=0)
        self.model = OlmoeModel(cfg).eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).last_hidden_state


def _signed(shape: tuple[int, ...], sign: float) -> torch.Tensor:
    return torch.randn(shape) + sign


@dataclass
class ReachWorkload:
    """One program of issue 48 and its calls: `make` builds the program (a module or a function;
    seeded by the caller), `calls` the inputs of the workload in order, `small` and `large` the
    two inputs timed as repeated calls."""
    name: str
    make: Callable[[], Any]
    calls: Callable[[], list[torch.Tensor]]
    small: Callable[[], torch.Tensor]
    large: Callable[[], torch.Tensor]
    note: str = ""
    value_guards: bool = False  # NOTE: a program that decides on data: guarded(..., value_guards=True)


def reach_workloads() -> list[ReachWorkload]:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import models

    def ids(*shape: int) -> torch.Tensor:
        return torch.randint(0, 100, shape)

    unet_shapes = [(2, 3, 16, 16), (4, 3, 24, 24), (1, 3, 16, 16), (2, 3, 32, 20), (17, 3, 17, 15), (3, 3, 40, 40)]
    vit_shapes = [(2, 3, 16, 16), (2, 3, 32, 24), (1, 3, 20, 36), (2, 3, 12, 8), (3, 3, 28, 28), (2, 3, 24, 40)]
    gpt_seqs = [12, 1, 1, 1, 20, 1, 1, 5, 1, 1, 30, 1]
    item_calls = [((8, 64), 1.0), ((12, 64), -1.0), ((20, 64), 1.0), ((8, 64), -1.0), ((32, 64), -1.0), ((5, 64), 1.0)]
    moe_tokens = [8, 1, 3, 16, 2, 9, 1, 32]
    return [
        ReachWorkload("U-Net, bilinear interpolate(size=skip) + cat", UNetInterp,
                      lambda: [torch.randn(s) for s in unet_shapes],
                      lambda: torch.randn(2, 3, 16, 16), lambda: torch.randn(8, 3, 64, 64),
                      "batch (1 to 17) and image size vary"),
        ReachWorkload("ViT, bicubic position table to the patch grid", ViTInterp,
                      lambda: [torch.randn(s) for s in vit_shapes],
                      lambda: torch.randn(2, 3, 16, 16), lambda: torch.randn(4, 3, 64, 64),
                      "grids 4x4, 8x6, 5x9, 3x2, 7x7, 6x10"),
        ReachWorkload("GPT-2 (2 layers), decode seq 1 mixed with prompts", models.gpt2,
                      lambda: [ids(1, s) for s in gpt_seqs], lambda: ids(1, 1), lambda: ids(1, 30),
                      f"sequence lengths {gpt_seqs}"),
        ReachWorkload("`.item()` branch", lambda: item_branch,
                      lambda: [_signed(s, sign) for s, sign in item_calls],
                      lambda: _signed((8, 64), 1.0), lambda: _signed((4096, 64), 1.0),
                      "mean > 0 on 3 calls, < 0 on 3; timed calls take the > 0 side; guarded(..., value_guards=True)",
                      value_guards=True),
        ReachWorkload("top-2 MoE routing (4 experts)", make_moe,
                      lambda: [torch.randn(t, 16) for t in moe_tokens],
                      lambda: torch.randn(4, 16), lambda: torch.randn(512, 16),
                      f"tokens {moe_tokens}; at 1 token two experts get none (`continue`); "
                      "guarded(..., value_guards=True)", value_guards=True),
        ReachWorkload("OLMoE (transformers, 1 layer, 4 experts, top-2), its eager expert loop", OlmoeHidden,
                      lambda: [ids(1, s) for s in gpt_seqs], lambda: ids(1, 1), lambda: ids(1, 30),
                      f"sequence lengths {gpt_seqs}; `for expert_idx in expert_hit` (a `nonzero`), "
                      "`torch.where` per expert; guarded(..., value_guards=True)", value_guards=True),
    ]


def _fresh_entry(fn: Any) -> Callable[[torch.Tensor], Any]:
    """`fn` with its own code object (a function copied, a module called from a new function):
    Dynamo keeps its cache and its automatic dynamic state per code object, so the two
    torch.compile systems of a row do not share them."""
    if not isinstance(fn, torch.nn.Module):
        f = fn
    else:
        def f(x: torch.Tensor) -> Any:
            return fn(x)

    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


_CAPTURE = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")


class CaptureFlags:
    """Sets Dynamo's capture flags to `on` inside the block and restores their previous values.

    >>> with CaptureFlags(True):
    ...     torch._dynamo.config.capture_scalar_outputs
    True
    """

    def __init__(self, on: bool) -> None:
        self.on = on
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        if self.on:
            self.saved = {k: getattr(torch._dynamo.config, k) for k in _CAPTURE}
            for k in _CAPTURE:
                setattr(torch._dynamo.config, k, True)

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            setattr(torch._dynamo.config, k, v)


def _leaves(out: Any) -> list[Any]:
    if hasattr(out, "to_tuple"):  # a transformers ModelOutput
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


def same(a: Any, b: Any) -> bool:
    """Whether two outputs agree: every tensor of the same shape and dtype, floats within
    rtol 1e-4 / atol 1e-5, others equal.

    >>> same(torch.ones(2), (torch.ones(2) + 1e-7,)), same(torch.ones(2), torch.ones(3))
    (True, False)
    """
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
        elif x.shape != y.shape or x.dtype != y.dtype:
            return False
        elif x.is_floating_point() and not torch.allclose(x, y, rtol=1e-4, atol=1e-5):
            return False
        elif not x.is_floating_point() and not torch.equal(x, y):
            return False
    return True


def per_call_median(fns: dict[str, Callable[[], Any]], flags: dict[str, bool], rounds: int,
                    budget_s: float = 0.02) -> dict[str, float]:
    """Seconds per call of each, the median of `rounds` interleaved rounds (each round times every
    function in turn, a batch of calls sized to about `budget_s`); `flags[k]` sets the capture
    flags around k's batches, outside the timed loop."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    reps = {}
    for k, f in fns.items():
        with CaptureFlags(flags.get(k, False)):
            f()
            t0 = time.perf_counter()
            f()
            reps[k] = max(1, min(2000, int(budget_s / max(time.perf_counter() - t0, 1e-7))))
    for _ in range(rounds):
        for k, f in fns.items():
            n = reps[k]
            with CaptureFlags(flags.get(k, False)):
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                times[k].append((time.perf_counter() - t0) / n)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


REACH_SYSTEMS = ("guardsolve", "torch.compile", "torch.compile + capture flags")


def run_reach(w: ReachWorkload, rounds: int) -> dict[str, Any]:
    """Eager, torch.compile (default, then with the capture flags; Dynamo reset before the row) and
    guardsolve over `w`'s calls: compiles, eager calls, wall, wrong outputs, then the repeated
    small and large calls, interleaved."""
    torch._dynamo.reset()
    torch._dynamo.config.cache_size_limit = 64
    torch.manual_seed(0)
    base = w.make()
    calls = w.calls()
    small, large = w.small(), w.large()
    with torch.no_grad():
        expected = [base(x) for x in calls]
    row: dict[str, Any] = {"workload": w.name, "calls": len(calls), "note": w.note, "systems": {},
                           "small": list(small.shape), "large": list(large.shape)}
    served: dict[str, Callable[[torch.Tensor], Any]] = {}
    flags = {"torch.compile + capture flags": True}
    for name in ("torch.compile", "torch.compile + capture flags", "guardsolve"):
        fn = copy.deepcopy(base) if isinstance(base, torch.nn.Module) else base
        counter: list[int] = [0]
        g = None
        if name == "guardsolve":
            g = guardsolve.guarded(fn, backend="inductor", value_guards=w.value_guards)
            s: Callable[[torch.Tensor], Any] = g
        else:
            from torch._inductor.compile_fx import compile_fx

            def backend(gm: Any, example: Any, counter: list[int] = counter) -> Any:
                counter[0] += 1
                return compile_fx(gm, example)

            s = torch.compile(_fresh_entry(fn), backend=backend)
        torch._dynamo.utils.counters.clear()
        # NOTE: each system compiles into an empty Inductor cache, on disk and in memory: the one
        # before it compiled the same kernels
        with torch.no_grad(), CaptureFlags(flags.get(name, False)), fresh_cache():
            t0 = time.perf_counter()
            outs = [s(x) for x in calls]
            wall = time.perf_counter() - t0
        wrong = sum(not same(o, e) for o, e in zip(outs, expected))
        r: dict[str, Any] = {"wall_s": wall, "wrong": wrong}
        if g is not None:
            i = g.cache_info()
            r.update(compiles=i.compiles, eager=i.eager_calls, reasons=list(i.eager_reasons), traces=i.traces,
                     variants=list(i.variants))
        else:
            r.update(compiles=counter[0], eager=None, counter=counter, breaks=dynamo_breaks())
        row["systems"][name] = r
        served[name] = s
        print(f"  {name}: {r['compiles']} compiles, {wall:.1f} s, {wrong} wrong", file=sys.stderr, flush=True)
    with torch.no_grad():
        for label, x in (("small", small), ("large", large)):
            fns = {k: (lambda s=s, x=x: s(x)) for k, s in served.items()}
            fns["eager"] = lambda x=x: base(x)
            for k, v in per_call_median(fns, flags, rounds).items():
                row["systems"].setdefault(k, {})[label] = v
    for name, r in row["systems"].items():
        if "counter" in r:
            r["timing_compiles"] = r.pop("counter")[0] - r["compiles"]
    torch._dynamo.reset()
    return row


def dynamo_breaks() -> list[tuple[str, int]]:
    """Dynamo's graph breaks since its counters were cleared (those it resumed after, then those
    that stopped a frame's compile): each reason's first line (and the first line of a graph break
    met while handling it, such as a skipped frame), with its count."""
    out = []
    counters = torch._dynamo.utils.counters
    for why, n in [*counters["graph_break"].items(), *counters["unimplemented"].items()]:
        parts = why.split("*** While handling this graph break, another graph break occurred: ***")
        lines = [next((ln.strip() for ln in p.splitlines() if ln.strip()), "") for p in parts]
        skipped = "frame skipped" in why or "Skipping the frame" in why
        out.append((" → ".join(lines) + (" (frame skipped: runs eagerly)" if skipped else ""), n))
    return out


def _reasons(r: dict[str, Any]) -> str:
    if not r.get("reasons"):
        return ""
    return "; ".join(f"{n}× {why if len(why) <= 240 else why[:239] + '…'}" for why, n in r["reasons"])


def reach_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| program | system | compiles | eager calls | wall (incl. compiles) | small call | large call | wrong | notes |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"{r['workload']} ({r['calls']} calls; small {r['small']}, large {r['large']})"
        for n in REACH_SYSTEMS:
            s = r["systems"][n]
            if n == "guardsolve":
                eager = str(s["eager"])
                notes = f"{s['traces']} traces, variants {s['variants']}" + (f"; eager: {_reasons(s)}" if s["reasons"] else "")
            else:
                eager = "–"
                notes = "; ".join([*(f"graph break {n}×: {why}" for why, n in s["breaks"]),
                                   *([f"{s['timing_compiles']} more compiles at the timed shapes"]
                                     if s["timing_compiles"] else [])])
            out.append(f"| {head} | {n} | {s['compiles']} | {eager} | {s['wall_s']:.2f} s | {fmt_us(s['small'])} | "
                       f"{fmt_us(s['large'])} | {s['wrong']} | {notes.replace('|', '/')} |")
        e = r["systems"]["eager"]
        out.append(f"| {r['workload']} | eager | – | – | – | {fmt_us(e['small'])} | {fmt_us(e['large'])} | – | {r['note']} |")
    return out


def reach_verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 48's acceptance, per program, from guardsolve's row: at most one eager call; the
    repeated calls served compiled (taken as: it compiled and no workload call ran eagerly) or
    within 1.5x eager + 50 µs; for the data-dependent programs, compiled segments,
    fewer compiles than torch.compile's default, repeated calls no slower than torch.compile with
    the capture flags."""
    out = ["| program | eager calls ≤ 1 | small / large call: compiled, or ≤ 1.5× eager + 50 µs | "
           "compiles vs torch.compile default / + capture flags | small / large call vs torch.compile + capture flags |",
           "|---|---|---|---|---|"]
    for r in rows:
        g, e, d, c = (r["systems"][n] for n in ("guardsolve", "eager", "torch.compile", "torch.compile + capture flags"))
        served = g["compiles"] > 0 and g["eager"] == 0
        cost = " / ".join(f"{g[k] / e[k]:.2f}× eager" + ("" if served or g[k] <= 1.5 * e[k] + 50e-6 else " (over)")
                          for k in ("small", "large"))
        fast = all(g[k] <= c[k] for k in ("small", "large"))
        out.append(f"| {r['workload']} | {g['eager']}: {'MET' if g['eager'] <= 1 else 'MISSED'} | "
                   f"{'compiled' if served else 'not compiled'}, {cost}: "
                   f"{'MET' if served or all(g[k] <= 1.5 * e[k] + 50e-6 for k in ('small', 'large')) else 'MISSED'} | "
                   f"{g['compiles']} vs {d['compiles']} / {c['compiles']} | "
                   f"{g['small'] / c['small']:.2f}× / {g['large'] / c['large']:.2f}×: {'MET' if fast else 'MISSED'} |")
    return out


# NOTE: the first line of the `--reach` section of JIT.md (`--reach --write` replaces it; the other writes keep it)
_REACH_MARK = "## Programs of issue 48"


def _split_reach(lines: list[str]) -> tuple[list[str], list[str]]:
    """JIT.md's lines without the reach section, and the section (from its mark to the next `## `)."""
    start = next((i for i, line in enumerate(lines) if line.startswith(_REACH_MARK)), None)
    if start is None:
        return lines, []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[:start] + lines[end:], lines[start:end]


def reach_only(write: bool, only: str | None, rounds: int = 7) -> None:
    import logging

    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # NOTE: its graph-break warnings, once per program
    warm_up()
    rows = []
    for w in reach_workloads():
        if only and only.lower() not in w.name.lower():
            continue
        print(f"{w.name}:", file=sys.stderr, flush=True)
        rows.append(run_reach(w, rounds))
    lines = [_REACH_MARK + ": interpolate, decode-sized calls, data-dependent programs", "",
             f"`python benchmarks/jit.py --reach{' --write' if write else ''}` on {datetime.date.today()}, torch "
             f"{torch.__version__}, one thread, a fresh Inductor cache. Per program, in one process: torch.compile "
             "(Inductor) by default, then with `torch._dynamo.config.capture_scalar_outputs` and "
             "`capture_dynamic_output_shape_ops` on (set for its calls only, restored after; Dynamo reset before each program, each system on its own code object), then "
             "`guarded(fn, backend=\"inductor\")`. Compiles: guardsolve's `cache_info().compiles`; torch.compile's "
             "counted by a backend wrapping `compile_fx` (one per graph, so graph breaks count). Eager calls: "
             "guardsolve's `cache_info().eager_calls`, with its `eager_reasons`. Wall: the workload's calls, every "
             "trace and compile included, each system compiling into an empty Inductor cache. Small and large call: one input called repeatedly, the median of "
             f"{rounds} interleaved rounds (its first call, before the rounds, may compile). Wrong: the workload's "
             "outputs that differ from eager's (floats beyond rtol 1e-4, atol 1e-5).", "",
             *reach_table(rows), "", "Issue 48's targets, from these rows (guardsolve's repeated calls against eager "
             "and against torch.compile with the capture flags):", "", *reach_verdicts(rows), ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        path = os.path.join(HERE, "JIT.md")
        with open(path) as f:
            rest, _ = _split_reach(f.read().splitlines())
        with open(path, "w") as f:
            f.write("\n".join([*rest, "", *lines]).rstrip("\n") + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small workloads, fewer rounds (a smoke run)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/JIT.md")
    ap.add_argument("--restart", action="store_true",
                    help="the restart rows alone (guardsolve compiles the MLP and GPT-2 workloads, then new processes "
                         "load them); with --write, they replace that part of benchmarks/JIT.md")
    ap.add_argument("--reach", action="store_true",
                    help="the rows of issue 48's programs alone (U-Net and ViT interpolate, GPT-2 at seq 1, an "
                         ".item() branch, MoE routing, OLMoE) against torch.compile with and without its capture flags; "
                         "with --write, they replace that section of benchmarks/JIT.md")
    ap.add_argument("--only", help="with --reach: the programs whose name contains this")
    args = ap.parse_args()
    if args.reach:
        reach_only(args.write, args.only, rounds=3 if args.quick else 7)
        return
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
        path = os.path.join(HERE, "JIT.md")
        reach: list[str] = []
        if os.path.exists(path):
            with open(path) as f:
                _, reach = _split_reach(f.read().splitlines())
        with open(path, "w") as f:
            f.write(text + ("\n" + "\n".join(reach).rstrip("\n") + "\n" if reach else ""))


if __name__ == "__main__":
    main()
