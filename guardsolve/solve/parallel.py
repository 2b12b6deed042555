"""Independent work on forked processes: `map_forked(fn, items, jobs)` is `[fn(x) for x in items]`.

simplify's parts share no dim, so each reduces alone (`simplify._run`). On a graph with
thousands of parts the reduction is most of the time, and it spreads over cores: the parent
forks `jobs - 1` children, which read the parts from the parent's memory (copy on write,
nothing pickled on the way in), each takes every `jobs`-th item, and sends its results back
through a pipe. The parent does its own share meanwhile.

    items  p0 p1 p2 p3 p4 p5          jobs=2:  parent p0 p2 p4,  child p1 p3 p5
    result r0 r1 r2 r3 r4 r5                   (merged back in item order)

Each item's exception comes back in place of its result and is raised where the sequential
loop would raise it: the first failing item in item order. Where forking is unavailable
(no `fork`, a daemon process, one core) the loop runs sequentially: the same results.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from typing import Callable, Sequence, TypeVar

from guardsolve.errors import GuardsolveError

T = TypeVar("T")
R = TypeVar("R")


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


def can_fork() -> bool:
    """Forking is available here: the platform has `fork` and this is not a daemon process
    (which may not have children)."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


class _Failed:
    """An item's exception, carried back in its result's place."""

    def __init__(self, error: BaseException):
        self.error = error


def _share(fn: Callable[[T], R], items: Sequence[T], k: int, jobs: int) -> list[R | _Failed]:
    out: list[R | _Failed] = []
    for x in items[k::jobs]:
        try:
            out.append(fn(x))
        except Exception as e:  # NOTE: raised by the parent, in item order
            out.append(_Failed(e))
    return out


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


def _child(conn: "multiprocessing.connection.Connection", fn: Callable[[T], R], items: Sequence[T], k: int,
           jobs: int) -> None:
    results: list = _share(fn, items, k, jobs)
    try:
        data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # NOTE: only the items that do not pickle lose their value
        data = pickle.dumps([_portable(r) for r in results], protocol=pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)
    conn.close()


def map_forked(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """`[fn(x) for x in items]`, on up to `jobs` processes (this one included).

    >>> map_forked(lambda x: x * x, [1, 2, 3, 4, 5], jobs=2)
    [1, 4, 9, 16, 25]
    >>> map_forked(lambda x: 10 // x, [1, 0, 2], jobs=2)
    Traceback (most recent call last):
    ...
    ZeroDivisionError: integer division or modulo by zero
    """
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1 or not can_fork():
        return [fn(x) for x in items]
    ctx = multiprocessing.get_context("fork")
    children = []
    for k in range(1, jobs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(send, fn, items, k, jobs), daemon=True)
        p.start()
        send.close()
        children.append((k, p, recv))
    shares: dict[int, list[R | _Failed]] = {}
    try:
        shares[0] = _share(fn, items, 0, jobs)
        for k, p, recv in children:
            try:
                shares[k] = pickle.loads(recv.recv_bytes())
            except EOFError:
                p.join()
                raise GuardsolveError(f"a worker process died (exit code {p.exitcode}) before sending its "
                                      f"results; set GUARDSOLVE_JOBS=1 to simplify in this process") from None
    except BaseException:
        # NOTE: interrupted (or a child died): the others may be blocked on a full pipe
        for _, p, _ in children:
            p.terminate()
        raise
    finally:
        for _, p, recv in children:
            p.join()
            recv.close()
    out: list[R] = []
    for i in range(len(items)):
        r = shares[i % jobs][i // jobs]
        if isinstance(r, _Failed):
            raise r.error
        out.append(r)
    return out
