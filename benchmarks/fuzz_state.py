"""The entries' differential fuzzer: random stateful programs, random changes between calls.

    python benchmarks/fuzz_state.py [--backend replay|inductor] [--programs N] [--seed S]
                                    [--steps K] [--cache-dir DIR] [--models]

Each program (`guardsolve.testing.random_stateful_program`: parameters, a buffer, a plain
tensor attribute, a submodule, floats, a flag, a dict entry, `training`, module globals, then
an op whose lowering specializes on sizes) is wrapped with `guarded`, and called K times; before
each call after the first, one piece of its state changes (`random_state_change`: a weight or
buffer replaced, `load_state_dict(assign=True)`, a submodule swapped, an attribute, a flag, a
dict entry or a global changed, train/eval, a weight written in place); some calls run with grad
mode on, and some flip `requires_grad` of a weight. Each call runs at two random input shapes
(two variants of one trace with Inductor). Every guarded outcome is compared with eager's at
that moment (values to 1e-4, or the same error type; and `grad_fn` present exactly where
eager's is). `--models` adds transformers' GPT-2 and BERT (small configs) with weight swaps and
config changes. Prints one summary line: programs, calls, wrong, crashes, and each failure.
Exit status 1 when any call is wrong or crashes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import guardsolve  # noqa: E402
from guardsolve.testing import SHARED, outcome, random_state_change, random_stateful_program, same_outcome  # noqa: E402


def _compare(m: Any, g: Any, x: tuple[Any, ...], grad: bool) -> str | None:
    with torch.enable_grad() if grad else torch.no_grad():
        want, got = outcome(m, x), outcome(g, x)
    diff = same_outcome(want, got)
    if diff is None and want[0] == "ok" and isinstance(want[1], torch.Tensor):
        if (want[1].grad_fn is None) != (got[1].grad_fn is None):
            diff = f"grad_fn {'missing' if got[1].grad_fn is None else 'present'} where eager's is not"
    return diff


def fuzz(backend: str, programs: int, seed: int, steps: int = 5, cache_dir: str | None = None
         ) -> tuple[int, list[str], list[str]]:
    """(calls, wrong, crashes) over `programs` random stateful programs."""
    rng = random.Random(seed)
    calls, wrong, crashes = 0, [], []
    saved = dict(SHARED)
    for p in range(programs):
        name, m, make = random_stateful_program(rng)
        g = guardsolve.guarded(m, backend=backend, max_entries=64, evict=True, cache_dir=cache_dir)
        what = "the first call"
        try:
            for step in range(steps):
                if step:
                    what = random_state_change(rng, m)
                grad = rng.random() < 0.2
                if rng.random() < 0.15:
                    m.proj.weight.requires_grad_(not m.proj.weight.requires_grad)
                    what += f"; proj.weight.requires_grad = {m.proj.weight.requires_grad}"
                for _ in range(2):
                    calls += 1
                    diff = _compare(m, g, make(), grad)
                    if diff is not None:
                        wrong.append(f"program {p} ({name}), after {what}{' (grad mode)' if grad else ''}: {diff}")
        except Exception as e:  # NOTE: a crash of the harness or of guardsolve outside a call's outcome
            crashes.append(f"program {p} ({name}), after {what}: {type(e).__name__}: {e}")
        finally:
            SHARED.clear()
            SHARED.update(saved)
    return calls, wrong, crashes


def fuzz_models(backend: str, seed: int) -> tuple[int, list[str], list[str]]:
    """GPT-2 and BERT from small configs: weight swaps, a config flag, a submodule swapped."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import models  # type: ignore[import-not-found]

    rng = random.Random(seed)
    calls, wrong, crashes = 0, [], []
    for name in ("gpt2", "bert"):
        m = getattr(models, name)().eval()
        g = guardsolve.guarded(m, backend=backend)
        what = "the first call"
        try:
            for step in range(5):
                if step == 1:
                    emb = m.get_input_embeddings()
                    emb.weight = torch.nn.Parameter(torch.randn_like(emb.weight))
                    what = "input embeddings replaced"
                elif step == 2:
                    sd = {k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v
                          for k, v in m.state_dict().items()}
                    m.load_state_dict(sd, assign=True)
                    what = "load_state_dict(assign=True)"
                elif step == 3:
                    m.config.output_hidden_states = True
                    what = "config.output_hidden_states = True"
                elif step == 4:
                    layer = next(mod for mod in m.modules() if isinstance(mod, torch.nn.LayerNorm))
                    layer.eps = 1e-2
                    what = "a LayerNorm's eps changed"
                x = (torch.randint(0, 50, (rng.choice([1, 2, 3]), rng.choice([8, 16]))),)
                calls += 1
                with torch.no_grad():
                    want, got = outcome(m, x), outcome(g, x)
                diff = same_outcome(want, got)
                if diff is not None:
                    wrong.append(f"{name}, after {what}: {diff}")
        except Exception as e:
            crashes.append(f"{name}, after {what}: {type(e).__name__}: {e}")
    return calls, wrong, crashes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="replay", choices=["replay", "inductor"])
    ap.add_argument("--programs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--models", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    calls, wrong, crashes = fuzz(args.backend, args.programs, args.seed, args.steps, args.cache_dir)
    if args.models:
        c, w, k = fuzz_models(args.backend, args.seed)
        calls, wrong, crashes = calls + c, wrong + w, crashes + k
    print(f"{args.backend}: {args.programs} programs{' + GPT-2, BERT' if args.models else ''}, {calls} calls, "
          f"{len(wrong)} wrong, {len(crashes)} crashes ({time.perf_counter() - start:.0f} s)")
    for line in wrong + crashes:
        print(f"  {line}")
    return 1 if wrong or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
