"""Independent work on forked processes: `map_forked(fn, items, jobs)` is `[fn(x) for x in items]`.

simplify's parts share no dim, so each reduces alone (`partwise._run`). On a graph with
thousands of parts the reduction is most of the time, and it spreads over cores: the parent
forks `jobs - 1` children, which read the parts from the parent's memory (copy on write,
nothing pickled on the way in). Every process, the parent too, takes the next chunk of items
from a shared counter whenever it is free, so a slower process takes fewer; the children send
their results back through pipes.

    items  p0 p1 p2 p3 p4 p5 p6 p7    jobs=2, chunks of 2:  parent p0 p1 p4 p5 p6 p7
    result r0 r1 r2 r3 r4 r5 r6 r7                          child  p2 p3 (a slow part)
                                                            (merged back in item order)

Each item's exception comes back in place of its result and is raised where the sequential
loop would raise it: the first failing item in item order. Where forking is unavailable
(not Linux, a daemon process, one core) the loop runs sequentially: the same results.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import threading
from typing import Any, Callable, Sequence, TypeVar

from guardsolve.errors import GuardsolveError

T = TypeVar("T")
R = TypeVar("R")

Done = list[tuple[int, list[Any]]]  # (first item, results of its chunk) per chunk taken


def available_jobs() -> int:
    """The cores this process may run on; `GUARDSOLVE_JOBS` caps it (1 turns forking off)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # NOTE: not on every platform
        n = os.cpu_count() or 1
    cap = os.environ.get("GUARDSOLVE_JOBS", "").strip()
    if cap:
        try:
            n = min(n, max(1, int(cap)))
        except ValueError:
            raise GuardsolveError(f"GUARDSOLVE_JOBS={cap!r} should be a whole number of processes") from None
    return n


def default_jobs() -> int:
    """`available_jobs()`, or 1 while other Python threads run: a thread of this process that
    is inside z3 (or holds any other lock) at the fork would leave that lock held forever in
    the child. An explicit `jobs` is the caller's own choice."""
    n = available_jobs()
    return n if threading.active_count() == 1 else 1


def can_fork() -> bool:
    """Forking is safe here: Linux (macOS has `fork`, but its system frameworks may crash in a
    forked child, which is why Python spawns there) and not a daemon process (which may not
    have children)."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


class _Failed:
    """An item's exception, carried back in its result's place."""

    def __init__(self, error: BaseException):
        self.error = error


def _work(fn: Callable[[T], R], items: Sequence[T], counter: Any, chunk: int) -> Done:
    """Take chunks from the shared counter until none is left; each item's result or failure."""
    done: Done = []
    while True:
        with counter.get_lock():
            start = counter.value
            counter.value = start + chunk
        if start >= len(items):
            return done
        out: list[Any] = []
        for x in items[start:start + chunk]:
            try:
                out.append(fn(x))
            except Exception as e:  # NOTE: raised by the parent, in item order
                out.append(_Failed(e))
        done.append((start, out))


def _portable(r: object) -> object:
    """`r` if it pickles; else a `GuardsolveError` carrying its text (a z3 object in an
    exception's attributes, say)."""
    try:
        pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
        return r
    except Exception as e:
        if isinstance(r, _Failed):
            return _Failed(GuardsolveError(f"{type(r.error).__name__}: {r.error}"))
        return _Failed(GuardsolveError(f"a worker process could not send its result back: {type(e).__name__}: {e}"))


def _child(conn: "multiprocessing.connection.Connection", fn: Callable[[T], R], items: Sequence[T],
           counter: Any, chunk: int) -> None:
    done = _work(fn, items, counter, chunk)
    try:
        data = pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # NOTE: only the items that do not pickle lose their value
        done = [(start, [_portable(r) for r in out]) for start, out in done]
        data = pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)
    conn.close()


def map_forked(fn: Callable[[T], R], items: Sequence[T], jobs: int, chunk: int | None = None) -> list[R]:
    """`[fn(x) for x in items]`, on up to `jobs` processes (this one included), `chunk` items
    at a time (default: about 16 chunks per process, at most 32 items each).

    >>> map_forked(lambda x: x * x, [1, 2, 3, 4, 5], jobs=2, chunk=1)
    [1, 4, 9, 16, 25]
    >>> map_forked(lambda x: 10 // x, [1, 0, 2], jobs=2, chunk=1)
    Traceback (most recent call last):
    ...
    ZeroDivisionError: integer division or modulo by zero
    """
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1 or not can_fork():
        return [fn(x) for x in items]
    chunk = chunk if chunk is not None else max(1, min(32, len(items) // (16 * jobs)))
    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("q", 0)  # NOTE: the next item nobody has taken, in shared memory
    children = []
    for _ in range(1, jobs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(send, fn, items, counter, chunk), daemon=True)
        p.start()
        send.close()
        children.append((p, recv))
    done: Done = []
    try:
        done += _work(fn, items, counter, chunk)
        for p, recv in children:
            try:
                done += pickle.loads(recv.recv_bytes())
            except EOFError:
                p.join()
                raise GuardsolveError(f"a worker process died (exit code {p.exitcode}) before sending its "
                                      f"results; set GUARDSOLVE_JOBS=1 to simplify in this process") from None
    except BaseException:
        # NOTE: interrupted (or a child died): the others may be blocked on a full pipe
        for p, _ in children:
            p.terminate()
        raise
    finally:
        for p, recv in children:
            p.join()
            recv.close()
    results: list[Any] = [None] * len(items)
    for start, out in done:
        results[start:start + len(out)] = out
    for r in results:
        if isinstance(r, _Failed):
            raise r.error
    return results
