"""Calls that miss while another thread traces: are they served compiled on the second pass?

4 threads call an MLP under `guarded(backend="inductor")` over 8 shapes (each thread in its
own order), twice. On the first pass one thread traces and compiles while the others run
eagerly; their calls are copied and traced in the background. The second pass should trace
and compile nothing. Prints both passes' counts and times.

    OMP_NUM_THREADS=1 python benchmarks/threads.py
"""

from __future__ import annotations

import threading
import time

import torch

import guardsolve

SHAPES = [(b, s, 16) for b in (1, 2, 3) for s in (5, 9)] + [(b, 16) for b in (1, 4)]


def one_pass(f: guardsolve.GuardedFunction, threads: int = 4) -> float:
    def worker(i: int) -> None:
        with torch.no_grad():
            for k in range(len(SHAPES)):
                f(torch.randn(*SHAPES[(i + k) % len(SHAPES)]))

    start = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    f = guardsolve.guarded(net, backend="inductor")
    first = one_pass(f)
    start = time.perf_counter()
    f.wait_background()
    waited = time.perf_counter() - start
    a = f.cache_info()
    second = one_pass(f)
    b = f.cache_info()
    print(f"first pass: {first:.2f} s (background done {waited:.2f} s later): traces {a.traces}, compiles {a.compiles}, "
          f"eager {a.eager_calls}")
    print(f"second pass: {second * 1000:.1f} ms: traces {b.traces - a.traces}, compiles {b.compiles - a.compiles}, "
          f"eager {b.eager_calls - a.eager_calls}, hits {b.hits - a.hits}")


if __name__ == "__main__":
    main()
