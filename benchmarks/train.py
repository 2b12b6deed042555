"""Training loops served by `guarded(model, backend="inductor")` against eager and torch.compile.

    python benchmarks/train.py [--quick] [--only NAME] [--restart] [--write]

Issue 47's workloads, each an ordinary training loop over a seeded schedule of changing shapes
(24 steps; `--quick`: 6 steps of the token classifier alone):

    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

Four systems run each loop in one process, one after another, each on its own deepcopy of the
same model with its own optimizer (SGD with momentum for the token classifier and the conv
net, AdamW for GPT-2 and BERT; the optimizer step runs eagerly for every system): eager;
torch.compile(model) with `dynamic=None` (the default), then with `dynamic=True`; guardsolve,
`g = guarded(model, backend="inductor", cache_dir=...)` with the loss computed eagerly from
`g(x)` outside (`model(x)` is `g(x)` in the loop above). Reported per system: Inductor compiles
(torch.compile's counted by a backend wrapping `compile_fx`, one per Dynamo graph, each
compiling a forward and a backward graph; guardsolve's `cache_info().compiles`), the loop's wall
time including every trace and compile (each system compiling into its own empty Inductor
cache, whose one-off C++ header build is done before the loop), the time of one step at a
small and at a large shape (the median of interleaved rounds, after a warm-up step), the calls
guardsolve ran eagerly (`cache_info().eager_calls`, with `eager_reasons`), and how far each
step's loss and the parameters and buffers at the end are from eager's (max relative
difference). Then a second process with the same guardsolve `cache_dir` (and an empty Inductor
cache) runs the token classifier's loop again: its traces, compiles, loaded entries and losses,
against the first process's.

One thread (`OMP_NUM_THREADS=1`, `torch.set_num_threads(1)`, one Inductor compile thread), a
fresh Inductor cache directory per run (unless TORCHINDUCTOR_CACHE_DIR is set). `--only NAME`
runs the workloads whose key or name contains NAME (tokens, conv, gpt2, bert); `--restart`
runs the restart rows alone; `--write` writes benchmarks/TRAIN.md (with `--restart`, it
replaces that section of it).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import logging
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
if __name__ == "__main__" and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    # NOTE: a fresh Inductor cache for this run (and its second process): every compile is a real one
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="guardsolve-inductor-")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch._inductor.utils import fresh_cache  # noqa: E402

import guardsolve  # noqa: E402
from jit import _fresh_entry, dynamo_breaks, fmt_us, per_call_median, warm_up  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")

Batch = tuple[torch.Tensor, torch.Tensor]  # (x, y)
LOSS_RTOL = 1e-4  # NOTE: a step's loss "matches" eager's within this relative difference (jit.py's `same`)


# -- models -------------------------------------------------------------------------------------


class TokenClassifier(nn.Module):
    """Per-token classes: embedding, linear, ReLU, LayerNorm, linear; (batch, length) ids in,
    (batch, length, classes) logits out."""

    def __init__(self, vocab: int = 256, d: int = 32, hidden: int = 64, classes: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.fc1 = nn.Linear(d, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(torch.relu(self.fc1(self.embed(ids)))))


class ConvBN(nn.Module):
    """Two conv + BatchNorm2d + ReLU blocks (a max pool between), global average pool, linear:
    (batch, 3, h, w) images in, (batch, 10) logits out. Trained in train mode: BatchNorm uses
    the batch's statistics and updates its running ones."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        h = torch.relu(self.bn2(self.conv2(h)))
        return self.head(h.mean((2, 3)))


class Logits(nn.Module):
    """A transformers model called on input ids alone, its `.logits` returned (a tensor, so
    every system returns the same kind of output; the loss is computed outside)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids).logits


def gpt2_lm() -> nn.Module:
    """GPT-2 language model, 1 layer, 64 wide, 256 tokens, 128 positions, random weights, dropout
    0, SDPA attention."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=256, n_positions=128, use_cache=False,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "sdpa"
    return Logits(GPT2LMHeadModel(cfg)).train()


def bert_cls() -> nn.Module:
    """BERT for sequence classification, 2 layers, 64 wide, 256 tokens, 128 positions, 4 labels,
    random weights, dropout 0, SDPA attention."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                     max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     num_labels=4)
    cfg._attn_implementation = "sdpa"
    return Logits(BertForSequenceClassification(cfg)).train()


# -- losses ---------------------------------------------------------------------------------------


def token_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross entropy per token; padding is labelled -100 (ignored)."""
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)


def causal_lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy: position t predicts label t + 1; padding labelled -100."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), y[:, 1:].flatten(), ignore_index=-100)


def class_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y)


# -- schedules and batches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step's input: its shape, and for padded sequences each sample's own length (the rest
    of its row is padding)."""
    shape: tuple[int, ...]
    lengths: tuple[int, ...] | None = None


def padded_epochs(seed: int, samples: int, batch: int, steps: int, lo: int, hi: int) -> list[Step]:
    """Epochs over `samples` sequences of lengths drawn once in [lo, hi], shuffled per epoch,
    cut into batches of `batch` (an epoch's last batch is what is left), each padded to its
    longest sequence.

    >>> [s.shape for s in padded_epochs(0, 10, 4, 4, 2, 9)]
    [(4, 8), (4, 9), (2, 7), (4, 9)]
    """
    rng = random.Random(seed)
    lengths = [rng.randint(lo, hi) for _ in range(samples)]
    out: list[Step] = []
    while len(out) < steps:
        order = list(range(samples))
        rng.shuffle(order)
        for i in range(0, samples, batch):
            ls = tuple(lengths[j] for j in order[i:i + batch])
            out.append(Step((len(ls), max(ls)), ls))
    return out[:steps]


def grouped_epochs(seed: int, samples: int, batch: int, steps: int, sizes: list[int], image: bool) -> list[Step]:
    """Epochs over `samples` samples in batches of `batch` (an epoch's last batch is what is
    left); each batch draws one size from `sizes`: a sequence length (batches grouped by length,
    no padding) or, with `image`, a square image side (multi-scale training).

    >>> [s.shape for s in grouped_epochs(0, 10, 4, 4, [8, 16], image=True)]
    [(4, 3, 16, 16), (4, 3, 16, 16), (2, 3, 8, 8), (4, 3, 16, 16)]
    """
    rng = random.Random(seed)
    out: list[Step] = []
    while len(out) < steps:
        for i in range(0, samples, batch):
            b, s = min(batch, samples - i), rng.choice(sizes)
            out.append(Step((b, 3, s, s) if image else (b, s)))
    return out[:steps]


def ids_batch(vocab: int, classes: int, per_token: bool) -> Callable[[Step, torch.Generator], Batch]:
    """Random ids (0 on padding) and labels: per token (-100 on padding; `classes == 0`: the ids
    themselves, for a language model) or one per sequence."""
    def make(step: Step, gen: torch.Generator) -> Batch:
        b, n = step.shape
        x = torch.randint(1, vocab, (b, n), generator=gen)
        if not per_token:
            return x, torch.randint(0, classes, (b,), generator=gen)
        y = x.clone() if classes == 0 else torch.randint(0, classes, (b, n), generator=gen)
        if step.lengths is not None:
            pad = torch.arange(n) >= torch.tensor(step.lengths).unsqueeze(1)
            x, y = x.masked_fill(pad, 0), y.masked_fill(pad, -100)
        return x, y
    return make


def image_batch(classes: int) -> Callable[[Step, torch.Generator], Batch]:
    def make(step: Step, gen: torch.Generator) -> Batch:
        return torch.randn(step.shape, generator=gen), torch.randint(0, classes, step.shape[:1], generator=gen)
    return make


@dataclass
class TrainWorkload:
    """A model, its loss, its optimizer, the loop's schedule of shapes (`steps(n)`: the first n
    steps) and the two shapes timed as repeated steps."""
    key: str
    name: str
    make: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: str  # "sgd" or "adamw"
    steps: Callable[[int], list[Step]]
    batch: Callable[[Step, torch.Generator], Batch]
    small: tuple[int, ...]
    large: tuple[int, ...]
    schedule: str  # the schedule in words

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def optimizer_words(self) -> str:
        return "SGD lr 0.05, momentum 0.9" if self.optimizer == "sgd" else "AdamW lr 1e-3"


def train_workloads() -> list[TrainWorkload]:
    return [
        TrainWorkload("tokens", "token classifier (embedding, 2 linear, LayerNorm)", TokenClassifier, token_loss, "sgd",
                      lambda n: padded_epochs(0, 184, 16, n, 4, 64), ids_batch(256, 8, per_token=True),
                      (4, 8), (16, 64),
                      "epochs of 184 sequences of lengths 4–64, batches of 16 (each epoch's last: 8), padded to the "
                      "longest"),
        TrainWorkload("conv", "conv net with BatchNorm2d (train mode)", ConvBN, class_loss, "sgd",
                      lambda n: grouped_epochs(1, 184, 16, n, [24, 32, 40, 48], image=True), image_batch(10),
                      (4, 3, 16, 16), (16, 3, 48, 48),
                      "epochs of 184 images in batches of 16 (each epoch's last: 8), each batch at a side drawn "
                      "from 24, 32, 40, 48 (multi-scale training)"),
        TrainWorkload("gpt2", "GPT-2 LM (1 layer, 64 wide)", gpt2_lm, causal_lm_loss, "adamw",
                      lambda n: padded_epochs(2, 92, 8, n, 8, 128), ids_batch(256, 0, per_token=True),
                      (2, 16), (8, 128),
                      "epochs of 92 sequences of lengths 8–128, batches of 8 (each epoch's last: 4), padded to the "
                      "longest (padding labelled -100; causal, so no attention mask)"),
        TrainWorkload("bert", "BERT sequence classification (2 layers, 64 wide)", bert_cls, class_loss, "adamw",
                      lambda n: grouped_epochs(3, 92, 8, n, list(range(16, 129, 8)), image=False),
                      ids_batch(256, 4, per_token=False), (2, 16), (8, 128),
                      "epochs of 92 sequences in batches of 8 (each epoch's last: 4), batches grouped by length: "
                      "each at a length drawn from 16, 24, ..., 128 (no padding, no attention mask)"),
    ]


# -- systems --------------------------------------------------------------------------------------


class RecompileLog(logging.Handler):
    """Collects Dynamo's recompiles (its `recompiles` log) while active, instead of printing
    them: per recompile, the guard failure of the newest cache entry (the first listed), with
    its count."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: dict[str, int] = {}
        self.logger = logging.getLogger("torch._dynamo.guards.__recompiles")

    def emit(self, record: logging.LogRecord) -> None:
        failures = [ln.strip()[2:] for ln in record.getMessage().splitlines() if ln.strip().startswith("- ")]
        # NOTE: without its compile id ("0/3: "), so the same failure counts together
        why = re.sub(r"^\d+/\d+: ", "", failures[0]) if failures else record.getMessage().splitlines()[0]
        self.reasons[why] = self.reasons.get(why, 0) + 1

    def __enter__(self) -> RecompileLog:
        torch._logging.set_logs(recompiles=True)
        self.logger.addHandler(self)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.propagate = True
        torch._logging.set_logs()


@dataclass
class System:
    """One system's copy of the model, its optimizer and what calls the model (`forward`)."""
    name: str
    model: nn.Module
    opt: torch.optim.Optimizer
    forward: Callable[[torch.Tensor], torch.Tensor]
    g: Any = None  # guardsolve's GuardedFunction
    counts: list[int] = field(default_factory=lambda: [0, 0])  # torch.compile: Dynamo graphs, Inductor graphs
    recompiles: RecompileLog | None = None

    def step(self, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batch: Batch) -> torch.Tensor:
        x, y = batch
        loss = loss_fn(self.forward(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return loss.detach()

    def compiles(self) -> int | None:
        if self.g is not None:
            return self.g.cache_info().compiles
        return self.counts[0] if self.name.startswith("torch.compile") else None


def make_system(name: str, base: nn.Module, w: TrainWorkload, cache_dir: str | None) -> System:
    model = copy.deepcopy(base)
    opt = w.make_optimizer(model)
    if name == "eager":
        return System(name, model, opt, model)
    if name == "guardsolve":
        g = guardsolve.guarded(model, backend="inductor", cache_dir=cache_dir)
        return System(name, model, opt, g, g=g)
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    counts = [0, 0]

    def inner(*args: Any, **kwargs: Any) -> Any:
        counts[1] += 1
        return compile_fx_inner(*args, **kwargs)

    def backend(gm: Any, example: Any) -> Any:
        counts[0] += 1
        return compile_fx(gm, example, inner_compile=inner)

    dynamic = True if name.endswith("dynamic=True") else None
    return System(name, model, opt, torch.compile(_fresh_entry(model), backend=backend, dynamic=dynamic), counts=counts)


SYSTEMS = ("eager", "torch.compile dynamic=None", "torch.compile dynamic=True", "guardsolve")


def rel_diff(a: float, b: float) -> float:
    """|a - b| / |b| (0 where both are 0).

    >>> round(rel_diff(1.5, 2.0), 3), rel_diff(0.0, 0.0)
    (0.25, 0.0)
    """
    return abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))


def state_diff(model: nn.Module, ref: dict[str, torch.Tensor]) -> tuple[float, float, str]:
    """How far `model`'s parameters and buffers are from `ref`'s: over all of them, ‖a − b‖ / ‖b‖
    (the floating ones, flattened together); and the largest per tensor, max |a − b| / max |b|,
    with that tensor's name (an integer buffer, BatchNorm's step count, differs infinitely or
    not at all).

    >>> a = nn.Linear(2, 1); ref = {k: v.clone() for k, v in a.state_dict().items()}
    >>> state_diff(a, ref)
    (0.0, 0.0, '')
    """
    worst, name = 0.0, ""
    num = den = 0.0
    for k, v in model.state_dict().items():
        r = ref[k]
        if v.is_floating_point():
            num += (v - r).double().square().sum().item()
            den += r.double().square().sum().item()
            d = ((v - r).abs().max() / r.abs().max().clamp_min(1e-12)).item()
        else:
            d = 0.0 if torch.equal(v, r) else float("inf")
        if d > worst:
            worst, name = d, k
    return (num / den) ** 0.5 if den else 0.0, worst, name


def warm_cache() -> None:
    """Inductor's one-off C++ header build in the current (fresh) cache directory, without
    resetting Dynamo (the systems before keep their compiled code)."""
    f = torch.compile(lambda x: (x * 2).sin(), backend="inductor")
    f(torch.randn(3))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def run_loop(s: System, w: TrainWorkload, batches: list[Batch]) -> tuple[list[float], float]:
    """The training loop: each step's loss, and the loop's wall time."""
    t0 = time.perf_counter()
    losses = [s.step(w.loss, b) for b in batches]
    wall = time.perf_counter() - t0
    return [x.item() for x in losses], wall


def run_workload(w: TrainWorkload, steps: int, rounds: int, cache_dir: str | None) -> dict[str, Any]:
    """The four systems over `w`'s loop, one after another, then their steps at the small and
    the large shape, interleaved."""
    torch._dynamo.reset()
    torch._dynamo.config.cache_size_limit = 64
    torch.manual_seed(0)
    base = w.make()
    gen = torch.Generator().manual_seed(0)
    schedule = w.steps(steps)
    batches = [w.batch(s, gen) for s in schedule]
    small, large = w.batch(Step(w.small), gen), w.batch(Step(w.large), gen)
    row: dict[str, Any] = {"key": w.key, "workload": w.name, "steps": len(batches), "systems": {},
                           "shapes": [list(s.shape) for s in schedule], "small": list(w.small), "large": list(w.large),
                           "schedule": w.schedule, "optimizer": w.optimizer_words()}
    systems: list[System] = []
    ref_losses: list[float] = []
    ref_state: dict[str, torch.Tensor] = {}
    for name in SYSTEMS:
        s = make_system(name, base, w, cache_dir)
        torch._dynamo.utils.counters.clear()
        # NOTE: each system compiles into its own empty Inductor cache (on disk and in memory): the one
        # before it compiled the same kernels; the cache's one-off C++ header build is done first
        try:
            with fresh_cache(), RecompileLog() as log:
                if name != "eager":
                    warm_cache()
                losses, wall = run_loop(s, w, batches)
        except Exception as e:  # NOTE: a compiled system that fails is reported; the others' figures stand
            if name == "eager":
                raise
            row["systems"][name] = {"error": _first_line(e)}
            print(f"  {name}: failed: {_first_line(e)}", file=sys.stderr, flush=True)
            continue
        if name == "eager":
            ref_losses, ref_state = losses, {k: v.clone() for k, v in s.model.state_dict().items()}
        overall, tensor, worst = state_diff(s.model, ref_state)
        r: dict[str, Any] = {"wall_s": wall, "losses": losses, "compiles": s.compiles(),
                             "loss_diff": max(rel_diff(a, b) for a, b in zip(losses, ref_losses)),
                             "state_diff": overall, "tensor_diff": tensor, "state_worst": worst}
        if s.g is not None:
            i = s.g.cache_info()
            r.update(eager=i.eager_calls, reasons=list(i.eager_reasons), traces=i.traces, variants=list(i.variants),
                     loaded=i.loaded, load_s=i.load_seconds)
        elif name != "eager":
            r.update(graphs=s.counts[1], recompiles=sorted(log.reasons.items(), key=lambda kv: -kv[1]),
                     breaks=dynamo_breaks())
        row["systems"][name] = r
        systems.append(s)
        print(f"  {name}: {r['compiles']} compiles, {wall:.1f} s, losses within {r['loss_diff']:.1e}",
              file=sys.stderr, flush=True)
    before = {s.name: s.compiles() for s in systems}
    for label, batch in (("small", small), ("large", large)):
        fns = {s.name: (lambda s=s, batch=batch: s.step(w.loss, batch)) for s in systems}
        for k, v in per_call_median(fns, {}, rounds, budget_s=0.05).items():
            row["systems"][k][label] = v
    for s in systems:
        if s.name != "eager" and "error" not in row["systems"][s.name]:
            row["systems"][s.name]["timing_compiles"] = (s.compiles() or 0) - (before[s.name] or 0)
    torch._dynamo.reset()
    return row


# -- restart ----------------------------------------------------------------------------------------


def guardsolve_loop(w: TrainWorkload, steps: int, cache_dir: str) -> dict[str, Any]:
    """Eager, then guardsolve with `cache_dir`, over `w`'s loop from the same seed: guardsolve's
    traces, compiles, loaded entries, eager calls and wall, and both systems' losses."""
    torch.manual_seed(0)
    base = w.make()
    gen = torch.Generator().manual_seed(0)
    batches = [w.batch(s, gen) for s in w.steps(steps)]
    eager_losses, _ = run_loop(make_system("eager", base, w, None), w, batches)
    s = make_system("guardsolve", base, w, cache_dir)
    losses, wall = run_loop(s, w, batches)
    i = s.g.cache_info()
    return dict(traces=i.traces, compiles=i.compiles, loaded=i.loaded, load_s=i.load_seconds, eager=i.eager_calls,
                reasons=list(i.eager_reasons), wall_s=wall, losses=losses, eager_losses=eager_losses)


def second_process(cache_dir: str, key: str, steps: int) -> dict[str, Any]:
    """`w`'s loop in a new process on the same guardsolve `cache_dir`, with an empty Inductor
    cache directory (a restart on another machine)."""
    with tempfile.TemporaryDirectory(prefix="guardsolve-inductor-empty-") as empty:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=empty)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--second-process", cache_dir,
                              "--only", key, "--steps", str(steps)], capture_output=True, text=True, timeout=1800,
                             env=env)
    if out.returncode != 0:
        print(f"the second process failed:\n{out.stderr[-3000:]}", file=sys.stderr)
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def restart_table(first: dict[str, Any], second: dict[str, Any], name: str) -> list[str]:
    if "error" in first or "error" in second:
        return [_RESTART_MARK, "", f"Not measured: the {'first' if 'error' in first else 'second'} process failed "
                f"({(first if 'error' in first else second)['error']})."]
    same = second["losses"] == first["losses"]
    diff = max(rel_diff(a, b) for a, b in zip(second["losses"], first["losses"]))
    out = [_RESTART_MARK, "",
           f"A second process with the same guardsolve `cache_dir` and an empty Inductor cache runs the {name} loop "
           f"again ({len(first['losses'])} steps, the same seed): eager first, then `guarded(model, "
           "backend=\"inductor\", cache_dir=...)`.", "",
           "| process | traces | compiles | entries loaded (load time) | eager calls | wall (loop) | losses |",
           "|---|---|---|---|---|---|---|"]
    for label, r in (("first", first), ("second", second)):
        vs_eager = max(rel_diff(a, b) for a, b in zip(r["losses"], r["eager_losses"]))
        losses = (f"within {vs_eager:.1e} of eager's" +
                  ("" if label == "first" else f"; {'identical to' if same else f'within {diff:.1e} of'} the first "
                   "process's"))
        eager = f"{r['eager']}" + (f" ({_reasons(r['reasons'])})" if r["reasons"] else "")
        out.append(f"| {label} | {r['traces']} | {r['compiles']} | {r['loaded']} ({r['load_s']:.2f} s) | {eager} | "
                   f"{r['wall_s']:.2f} s | {losses} |")
    return out


# -- report ---------------------------------------------------------------------------------------


def _reasons(reasons: list[tuple[str, int]]) -> str:
    return "; ".join(f"{n}× {why if len(why) <= 160 else why[:159] + '…'}" for why, n in reasons)


def _notes(name: str, r: dict[str, Any]) -> str:
    parts: list[str] = []
    if name == "guardsolve":
        parts.append(f"{r['traces']} traces, variants {r['variants']}")
        if r["reasons"]:
            parts.append(f"eager: {_reasons(r['reasons'])}")
    elif name != "eager":
        parts.append(f"{r['graphs']} Inductor graphs compiled (forward and backward)")
        if r["recompiles"]:
            parts.append("recompiles: " + "; ".join(f"{n}× {why}" for why, n in r["recompiles"]))
        parts += [f"graph break {n}×: {why}" for why, n in r["breaks"]]
    if r.get("timing_compiles"):
        parts.append(f"{r['timing_compiles']} more compiles at the timed shapes")
    return "; ".join(parts).replace("|", "/")


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| workload | system | compiles | eager calls | wall (loop, incl. compiles) | small step | large step | "
           f"losses vs eager: max rel. diff (all ≤ {LOSS_RTOL:g}?) | parameters at the end vs eager: all (worst tensor) | "
           "notes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"{r['workload']} ({r['steps']} steps; small {r['small']}, large {r['large']})"
        for name in SYSTEMS:
            s = r["systems"][name]
            if "error" in s:
                out.append(f"| {head} | {name} | failed | | | | | | | {s['error'].replace('|', '/')} |")
                continue
            compiles = "–" if s["compiles"] is None else str(s["compiles"])
            eager = str(s["eager"]) if "eager" in s else "–"
            match = "–" if name == "eager" else f"{s['loss_diff']:.1e} ({'yes' if s['loss_diff'] <= LOSS_RTOL else 'no'})"
            state = ("–" if name == "eager" else f"{s['state_diff']:.1e}" +
                     (f" ({s['tensor_diff']:.1e}: {s['state_worst']})" if s["tensor_diff"] else ""))
            out.append(f"| {head} | {name} | {compiles} | {eager} | {s['wall_s']:.2f} s | {fmt_us(s['small'])} | "
                       f"{fmt_us(s['large'])} | {match} | {state} | {_notes(name, s)} |")
    return out


def schedules(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        shapes = [tuple(s) for s in r["shapes"]]
        dims = list(zip(*shapes))
        varying = ", ".join(f"dim {i}: {len(set(d))} values {min(d)}–{max(d)}" for i, d in enumerate(dims)
                            if len(set(d)) > 1)
        out.append(f"- {r['workload']} (`--only {r['key']}`; {r['optimizer']}): {r['schedule']}. {len(shapes)} steps, "
                   f"{len(set(shapes))} distinct shapes ({varying}): "
                   f"{', '.join('×'.join(map(str, s)) for s in shapes)}.")
    return out


_RESTART_MARK = "## Restart"


def report(rows: list[dict[str, Any]], restart: list[str], argv: list[str], rounds: int) -> list[str]:
    return ["# Training loops: guardsolve vs eager and torch.compile", "",
            f"`python benchmarks/train.py{''.join(' ' + a for a in argv)}` on {datetime.date.today()}, torch "
            f"{torch.__version__}, {platform.machine()}, {os.cpu_count()} cores, one thread. Per workload, in one "
            "process, each system on its own deepcopy of the model and optimizer: eager, torch.compile(model) "
            "by default and with dynamic=True (Dynamo reset before each workload, each system on its own code "
            "object), and `guarded(model, backend=\"inductor\", cache_dir=...)` with the loss computed eagerly from "
            "`g(x)`. The loss, `backward()`, the optimizer step and `zero_grad()` run eagerly for every system. "
            "Compiles: torch.compile's Dynamo graphs handed to Inductor (a backend wrapping `compile_fx`; graph "
            "breaks count; each compiles a forward and a backward graph: the graphs Inductor compiled, in notes, "
            "leave out those it found in its cache from this system's earlier compiles), guardsolve's "
            "`cache_info().compiles`. Eager calls: guardsolve's `cache_info().eager_calls` and `eager_reasons`. "
            "Wall: the whole loop, every trace and compile included, each system compiling into its own empty "
            "Inductor cache (its one-off C++ header build done before the loop). Small and large step: one "
            f"whole step (forward, loss, backward, optimizer step) at that shape, the median of {rounds} "
            "interleaved rounds after a warm-up step (which may compile). Losses: each step's loss against "
            "eager's; parameters: the parameters and buffers after the loop against eager's, ‖a − b‖ / ‖b‖ over "
            "all of them, and in brackets the largest max |a − b| / max |b| of one tensor (a parameter whose "
            "gradient is zero but for rounding, such as an attention key's bias, takes full AdamW steps on that "
            "rounding noise: there the figure says little about the compiled code).", "", *table(rows), "", "Schedules (seeded):", "", *schedules(rows), "", *restart]


def write(lines: list[str], restart_only: bool) -> None:
    path = os.path.join(HERE, "TRAIN.md")
    if restart_only and os.path.exists(path):
        with open(path) as f:
            old = f.read().splitlines()
        cut = next((i for i, line in enumerate(old) if line.startswith(_RESTART_MARK)), len(old))
        lines = [*old[:cut], *lines]
    with open(path, "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the token classifier alone, 6 steps, fewer rounds (a smoke run)")
    ap.add_argument("--only", help="the workloads whose key (tokens, conv, gpt2, bert) or name contains this")
    ap.add_argument("--restart", action="store_true",
                    help="the restart rows alone (a first and a second process over the token classifier's loop)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/TRAIN.md")
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--second-process", metavar="CACHE_DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (6 if args.quick else 24)
    rounds = 3 if args.quick else 7
    found = [w for w in train_workloads()
             if (args.only.lower() in (w.key + " " + w.name).lower() if args.only else not args.quick or w.key == "tokens")]
    if not found:
        raise SystemExit(f"no workload matches {args.only!r}")
    if args.second_process:
        print(json.dumps(guardsolve_loop(found[0], steps, args.second_process)))
        return
    tokens = next(w for w in train_workloads() if w.key == "tokens")
    argv = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="guardsolve-train-") as cache_dir:
        if args.restart:
            warm_up()
            first = guardsolve_loop(tokens, steps, cache_dir)
            lines = restart_table(first, second_process(cache_dir, tokens.key, steps), tokens.name)
            lines[1:1] = ["", f"(`python benchmarks/train.py {' '.join(argv)}` on {datetime.date.today()}: this part "
                              "alone.)"]
        else:
            warm_up()
            rows = []
            for w in found:
                print(f"{w.name}:", file=sys.stderr, flush=True)
                rows.append(run_workload(w, steps, rounds, cache_dir))
            restart: list[str] = []
            row = next((r for r in rows if r["key"] == tokens.key), None)
            if row is not None:
                g, e = row["systems"]["guardsolve"], row["systems"]["eager"]
                first = g if "error" in g else {**g, "eager_losses": e["losses"]}
                second = {} if "error" in g else second_process(cache_dir, tokens.key, steps)
                restart = restart_table(first, second, tokens.name)
            lines = report(rows, restart, argv, rounds)
    print("\n".join(lines))
    if args.write:
        write(lines, args.restart)


if __name__ == "__main__":
    main()
