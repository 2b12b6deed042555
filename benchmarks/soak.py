"""Soak test of `guarded()`: threads calling one guarded real model on random shapes and dtypes.

    python benchmarks/soak.py [--threads 8] [--calls 10000] [--model gpt2|lstm|conv_net] [--append-results]

Every call runs eagerly too, and ends as eager ends: outputs equal (torch.equal on every tensor),
or, where eager raises (the LSTM at sequence length 0, the conv net on images too small for its
pooling), an exception of eager's type whose message starts with eager's. Shapes include sizes
0 and 1 (`MODELS`). Any other exception or mismatch fails the run,
peak RSS is sampled at each tenth of the calls (flat: at most 10% growth from the 2nd tenth to
the last), and single-thread timings give the per-hit overhead over eager and the guard check
cost, next to `torch.compile(dynamic=True)`'s guard check on the same function where it works.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import sys
import threading
import time
from typing import Any, Callable

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

import guardsolve  # noqa: E402
import models  # noqa: E402

DTYPES = (torch.int64, torch.int32)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # NOTE: KiB on Linux


def _leaves(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]


def equal(a: Any, b: Any) -> bool:
    la, lb = _leaves(dict(a) if isinstance(a, dict) else a), _leaves(dict(b) if isinstance(b, dict) else b)
    return len(la) == len(lb) and all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(la, lb))


def gpt2_input(rng: random.Random) -> torch.Tensor:
    shape = (rng.randint(1, 4), rng.randint(1, 16))
    return torch.randint(0, 100, shape, dtype=rng.choice(DTYPES))


def lstm_input(rng: random.Random) -> torch.Tensor:
    return torch.randn(rng.choice((0, 1, 2, 3)), rng.choice((0, 1, 2, 5, 7)), 8)


def conv_input(rng: random.Random) -> torch.Tensor:
    return torch.randn(rng.choice((0, 1, 2, 3)), 3, rng.choice((0, 1, 2, 3, 8, 16)), rng.choice((1, 2, 16)))


# name -> (factory, random input, the fixed input of the timings, what the inputs are)
MODELS: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[random.Random], torch.Tensor], Callable[[], torch.Tensor], str]] = {
    "gpt2": (models.gpt2, gpt2_input, lambda: torch.randint(0, 100, (2, 8)),
             "examples/models.py:gpt2 (2 layers, 32 wide), `input_ids` of shape [1-4, 1-16], dtype int64 or int32"),
    "lstm": (models.lstm, lstm_input, lambda: torch.randn(2, 5, 8),
             "examples/models.py:lstm (nn.LSTM(8, 16)), input [0-3, {0, 1, 2, 5, 7}, 8]"),
    "conv_net": (models.conv_net, conv_input, lambda: torch.randn(2, 3, 16, 16),
                 "examples/models.py:conv_net, input [0-3, 3, {0, 1, 2, 3, 8, 16}, {1, 2, 16}]"),
}


def same_end(model: torch.nn.Module, fast: Any, x: torch.Tensor) -> tuple[str | None, bool]:
    """(why `fast(x)` ends otherwise than eager `model(x)`, or None; whether eager raised)."""
    try:
        expected, eager_error = model(x), None
    except Exception as e:  # noqa: BLE001 - eager's own error is the expected outcome
        expected, eager_error = None, e
    try:
        got = fast(x)
    except Exception as e:  # noqa: BLE001
        if eager_error is None:
            return f"raises {type(e).__name__}: {e} where eager returns", False
        if not isinstance(e, type(eager_error)) or not str(e).startswith(str(eager_error)):
            return f"raises {type(e).__name__}: {e}; eager {type(eager_error).__name__}: {eager_error}", True
        return None, True
    if eager_error is not None:
        return f"returns where eager raises {type(eager_error).__name__}: {eager_error}", True
    return (None if equal(got, expected) else "output differs from eager"), False


def soak(model: torch.nn.Module, make_input: Callable[[random.Random], torch.Tensor], threads: int, calls: int,
         max_seconds: float) -> dict[str, Any]:
    fast = guardsolve.guarded(model, max_entries=32)
    total = threads * calls
    done = [0]
    lock = threading.Lock()
    rss: list[tuple[int, float]] = []
    errors: list[str] = []
    mismatches = [0]
    raised = [0]
    first_mismatch: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with torch.no_grad():
                for _ in range(calls):
                    if time.perf_counter() > deadline:
                        return
                    x = make_input(rng)
                    why, eager_raised = same_end(model, fast, x)
                    if why is not None:
                        mismatches[0] += 1
                        first_mismatch[:] = first_mismatch or [f"{list(x.shape)} {x.dtype}: {why}"]
                    elif eager_raised:
                        raised[0] += 1
                    with lock:
                        done[0] += 1
                        if done[0] % 20 == 0:
                            rss.append((done[0], peak_rss_mib()))
        except BaseException as e:  # noqa: BLE001 - the run reports every exception
            errors.append(f"{type(e).__name__}: {e}")

    start = time.perf_counter()
    deadline = start + max_seconds
    ts = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    seconds = time.perf_counter() - start
    rss.append((done[0], peak_rss_mib()))  # NOTE: the end of the soak, before the timings below
    info = fast.cache_info()
    return {"fast": fast, "info": info, "seconds": seconds, "rss": rss, "errors": errors,
            "mismatches": mismatches[0], "total": done[0], "planned": total, "raised": raised[0],
            "first_mismatch": first_mismatch}


def _median_us(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def timings(model: torch.nn.Module, fast: Any, x: torch.Tensor, n: int) -> dict[str, float]:
    """Single-thread medians: eager, a guarded hit, the lookup (bind + checks up to the hit)."""
    out: dict[str, float] = {}
    with torch.no_grad():
        fast(x)
        out["eager_us"] = _median_us(lambda: model(x), n)
        out["hit_us"] = _median_us(lambda: fast(x), n)
        names, values = fast._bind((x,), {})
        entry = next(e for e in fast.entries if e.check(*values))
        out["check_us"] = _median_us(lambda: entry.check(*values), 20 * n)
        out["entries"] = len(fast.entries)
        out["position"] = fast.entries.index(entry)

        def lookup() -> None:
            names, values = fast._bind((x,), {})
            for e in fast.entries:
                if e.names is names and e.check(*values):
                    return

        out["lookup_us"] = _median_us(lookup, 20 * n)
    return out


_MODEL: Any = None


def fwd(x: torch.Tensor) -> Any:
    return _MODEL(x)


def dynamo_guard_check(model: torch.nn.Module, x: torch.Tensor, n: int) -> tuple[float | None, str]:
    """The median cost of `torch.compile(dynamic=True)`'s guard check on the same call (the
    eager backend: no code generation, the same guards)."""
    try:
        import torch._dynamo as dynamo
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        global _MODEL
        _MODEL = model
        dynamo.reset()
        compiled = torch.compile(fwd, dynamic=True, backend="eager")
        with torch.no_grad():
            compiled(x)
            entries = _debug_get_cache_entry_list(fwd.__code__)
            if not entries:
                return None, "no Dynamo cache entry"
            gm = entries[0].guard_manager
            f_locals = {"x": x}
            if not gm.check(f_locals):
                reason = gm.check_verbose(f_locals).verbose_code_parts[:1]
                return None, f"the guard manager rejects the call it was built for: {reason}"
            return _median_us(lambda: gm.check(f_locals), 20 * n), f"{len(entries)} cache entries"
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def report(args: argparse.Namespace, r: dict[str, Any], t: dict[str, float], dyn: tuple[float | None, str]) -> str:
    info = r["info"]
    # NOTE: peak RSS (sampled every 20 calls) at the end of each tenth of the calls made
    samples, n = r["rss"], r["total"]
    rss = [next((v for c, v in samples if c >= n * k / 10), samples[-1][1] if samples else 0.0) for k in range(1, 11)]
    rss[-1] = samples[-1][1] if samples else 0.0
    growth = (rss[-1] - rss[1]) / rss[1] * 100 if rss[1] else float("nan")
    calls = info.hits + info.misses
    lines = [
        "## Soak: guarded() under threads (benchmarks/soak.py)",
        "",
        f"Command: `python benchmarks/soak.py --model {args.model} --threads {args.threads} --calls {args.calls} "
        f"--max-seconds {args.max_seconds:g}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__}, torch threads {torch.get_num_threads()}",
        f"Model: {MODELS[args.model][3]}, under `torch.no_grad()`",
        "",
        "| measure | value |",
        "|---|---|",
        f"| calls | {r['total']} of {r['planned']} planned ({args.threads} threads x {args.calls}) in "
        f"{r['seconds']:.0f} s{' (stopped at --max-seconds)' if r['total'] < r['planned'] else ''} |",
        f"| calls that end as eager (equal outputs, or eager's error) | {r['total'] - r['mismatches']} / {r['total']} |",
        f"| of them, eager's error raised | {r['raised']} |",
        f"| exceptions | {len(r['errors'])} |",
        f"| hits / misses / eager calls / traces | {info.hits} / {info.misses} / {info.eager_calls} / {info.traces} |",
        f"| hit rate | {info.hits / calls * 100:.2f}% |",
        f"| entries | {info.entries} |",
        f"| miss reasons kept | {len(info.miss_reasons)} (last {r['fast'].miss_history} misses) |",
        f"| peak RSS at each tenth (MiB) | {', '.join(f'{v:.0f}' for v in rss)} |",
        f"| peak RSS growth, 2nd tenth to last | {growth:+.1f}% (target <= 10%) |",
        f"| eager call (1 thread, median) | {t['eager_us']:.0f} us |",
        f"| guarded hit (1 thread, median) | {t['hit_us']:.0f} us (overhead over eager {t['hit_us'] - t['eager_us']:+.0f} us) |",
        f"| guard check of the hit entry | {t['check_us']:.2f} us |",
        f"| lookup: bind + checks up to the hit (entry {t['position']} of {t['entries']}) | {t['lookup_us']:.2f} us |",
        f"| torch.compile(dynamic=True) guard check, same call | "
        + (f"{dyn[0]:.2f} us ({dyn[1]})" if dyn[0] is not None else f"n/a ({dyn[1]})") + " |",
    ]
    ok = not r["errors"] and not r["mismatches"] and growth <= 10
    lines += ["", f"Result: {'PASS' if ok else 'FAIL'}"
              + ("" if not r["errors"] else f"; first exception: {r['errors'][0]}")
              + ("" if not r["first_mismatch"] else f"; first mismatch: {r['first_mismatch'][0]}")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--calls", type=int, default=10_000, help="calls per thread")
    p.add_argument("--timing-calls", type=int, default=200)
    p.add_argument("--max-seconds", type=float, default=540, help="stop the threads after this long")
    p.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    p.add_argument("--append-results", action="store_true", help="append the section to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # NOTE: the threads are the parallelism; no oversubscription
    make, make_input, example, _ = MODELS[args.model]
    model = make()
    r = soak(model, make_input, args.threads, args.calls, args.max_seconds)
    t = timings(model, r["fast"], example(), args.timing_calls)
    dyn = dynamo_guard_check(model, example(), args.timing_calls)
    text = report(args, r, t, dyn)
    print(text)
    if args.append_results:
        with open(os.path.join(ROOT, "benchmarks", "RESULTS.md"), "a") as f:
            f.write("\n\n" + text + "\n")
    return 0 if "Result: PASS" in text else 1


if __name__ == "__main__":
    sys.exit(main())
