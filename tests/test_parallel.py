"""Independent parts on forked processes (`solve.parallel`): the same guard set as one process."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import sys
import threading
from pathlib import Path

from typing import Any

import pytest

import guardsolve
from guardsolve.cli import main
from guardsolve.errors import GuardsolveError, UnsatisfiableGuardsError
from guardsolve.ir.ops import Op
from guardsolve.solve import partwise
from guardsolve.solve.parallel import _child, available_jobs, can_fork, default_jobs, map_forked
from guardsolve.testing import accepts, pieces_guard_graph

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from workloads import mixed_guard_graph, scale_guard_graph  # noqa: E402

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs the fork start method")


def _summary(gs: guardsolve.GuardSet) -> tuple:
    return ([(c.text, sorted(c.prov)) for c in gs.constraints], sorted(gs.implied), list(gs.undecided))


@pytest.mark.parametrize("make", [lambda: scale_guard_graph(3000, seed=3), lambda: mixed_guard_graph(600, seed=1)],
                         ids=["scale", "mixed"])
@pytest.mark.parametrize("jobs", [2, 3])
def test_forked_parts_give_the_sequential_result(make, jobs: int) -> None:
    one = guardsolve.simplify(make(), jobs=1)
    many = guardsolve.simplify(make(), jobs=jobs)
    assert _summary(many) == _summary(one)
    assert many.minimal


def test_a_contradiction_in_a_forked_part_names_the_same_bailouts() -> None:
    tests: list[str] = []

    def contradictory():
        g = scale_guard_graph(1000, seed=2)
        # NOTE: in a part far from the first, so a child process meets it
        five, six = g.emit(Op.INT_CONST, (), val=5), g.emit(Op.INT_CONST, (), val=6)
        tests[:] = [g.emit(Op.INT_LE, ("g21_3", five)), g.emit(Op.INT_GE, ("g21_3", six))]
        for t in tests:
            g.emit(Op.BOOL_BAILOUT, (t,), expect=True)
        return g

    messages = []
    for jobs in (1, 2):
        with pytest.raises(UnsatisfiableGuardsError) as e:
            guardsolve.simplify(contradictory(), jobs=jobs)
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert all(f"bool_bailout({t}, expect=True)" in messages[0] for t in tests)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(parts, jobs) of each `map_forked` call simplify makes from here on."""
    calls: list[tuple[int, int]] = []
    real = partwise.map_forked

    def spy(fn, items, jobs):
        calls.append((len(items), jobs))
        return real(fn, items, jobs)

    monkeypatch.setattr(partwise, "map_forked", spy)
    return calls


def test_small_graphs_stay_in_this_process(asked: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    guardsolve.simplify(scale_guard_graph(300))
    assert [j for _, j in asked] == [1]
    monkeypatch.setenv("GUARDSOLVE_JOBS", "2")
    big = scale_guard_graph(partwise.PARALLEL_MIN_BAILOUTS * 2)
    guardsolve.simplify(big)
    assert asked[-1][1] == default_jobs()
    if threading.active_count() == 1:  # NOTE: a thread left by another test keeps it at 1
        assert asked[-1][1] == min(2, available_jobs())


def test_jobs_from_the_environment_and_bad_counts(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(Path(__file__).parents[1])
    monkeypatch.setenv("GUARDSOLVE_JOBS", "1")
    assert available_jobs() == 1
    monkeypatch.setenv("GUARDSOLVE_JOBS", "many")
    with pytest.raises(GuardsolveError, match="GUARDSOLVE_JOBS='many'"):
        guardsolve.simplify(scale_guard_graph(30))  # NOTE: named on a graph too small to fork for
    assert main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GUARDSOLVE_JOBS='many'" in err
    monkeypatch.delenv("GUARDSOLVE_JOBS")
    for bad in (0, -2, 1.5):
        with pytest.raises(GuardsolveError, match=f"jobs={bad}"):
            guardsolve.simplify(scale_guard_graph(30), jobs=bad)  # type: ignore[arg-type]
    assert main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--jobs", "0"]) == 2
    assert "jobs=0" in capsys.readouterr().err
    assert main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--jobs", "2"]) == 0
    assert "a0 == b0" in capsys.readouterr().out


def _in_child(event: Any) -> bool:
    """In a forked child: say so and return True. In the parent: wait until a child has
    taken an item (so the children's path is exercised whatever the machine's load), False."""
    if multiprocessing.parent_process() is not None:
        event.set()
        return True
    assert event.wait(30), "no child process took an item"
    return False


def test_results_come_back_in_item_order_and_errors_in_place() -> None:
    event = multiprocessing.get_context("fork").Event()
    got = map_forked(lambda x: (x, _in_child(event)), list(range(7)), 3, chunk=1)
    assert [x for x, _ in got] == list(range(7))
    assert any(child for _, child in got)
    assert map_forked(lambda x: x + 1, list(range(100)), 2) == list(range(1, 101))  # NOTE: default chunks

    def fails_at(x: int) -> int:
        if x in (4, 5):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 4"):  # NOTE: the first in item order, whoever met it
        map_forked(fails_at, list(range(7)), 3, chunk=1)


def test_a_worker_that_dies_is_named() -> None:
    event = multiprocessing.get_context("fork").Event()

    def dies_in_child(x: int) -> int:
        if _in_child(event):
            os._exit(3)
        return x

    with pytest.raises(GuardsolveError, match=r"worker process died \(exit code 3\)"):
        map_forked(dies_in_child, [0, 1, 2, 3], 2, chunk=1)


def test_an_unpicklable_error_or_result_comes_back_as_its_text() -> None:
    class Local(Exception):  # NOTE: a local class does not pickle
        pass

    def odd(x: int) -> object:
        if x == 3:
            raise Local("met at 3")
        return (lambda: x) if x == 5 else x

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    _child(send, odd, list(range(7)), ctx.Value("q", 0), 2)  # NOTE: a child's path, in this process
    done = dict(pickle.loads(recv.recv_bytes()))
    assert sorted(done) == [0, 2, 4, 6]
    assert done[0] == [0, 1] and done[6] == [6]
    failed = done[2][1], done[4][1]
    assert [type(f.error).__name__ for f in failed] == ["GuardsolveError", "GuardsolveError"]
    assert str(failed[0].error) == "Local: met at 3"
    assert "could not send its result back" in str(failed[1].error)


@pytest.mark.parametrize("seed", range(4))
def test_forked_parts_of_random_graphs_agree_with_the_oracle(seed: int, asked: list[tuple[int, int]]) -> None:
    g = pieces_guard_graph(random.Random(seed), 10)
    one = guardsolve.simplify(g, jobs=1)
    many = guardsolve.simplify(g, jobs=2)
    assert asked[-1][0] >= 8 and asked[-1][1] == 2  # NOTE: the forked path, with parts to share
    assert _summary(many) == _summary(one)
    rng = random.Random(seed)
    base = g.meta["trace_dims"]
    envs = [dict(base)] + [{d: (v if rng.random() < 0.7 else rng.randint(0, 7)) if not d.split("_")[1].startswith("n")
                            else rng.randint(-6, 6) for d, v in base.items()} for _ in range(150)]
    verdicts = [accepts(g, env) for env in envs]
    assert [many.check_dims(env) for env in envs] == verdicts
    assert verdicts[0] and not all(verdicts)
    if seed < 2:
        cert = many.verify()
        assert cert.equivalent and cert.irredundant


def test_off_linux_or_in_a_daemon_the_items_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    here = os.getpid()
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not can_fork()
    assert map_forked(lambda x: (x, os.getpid()), list(range(6)), 3, chunk=1) == [(x, here) for x in range(6)]
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    assert not can_fork()


def test_other_threads_keep_the_default_in_this_process(asked: list[tuple[int, int]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDSOLVE_JOBS", "2")
    big = scale_guard_graph(partwise.PARALLEL_MIN_BAILOUTS * 2)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        guardsolve.simplify(big)
        assert [j for _, j in asked] == [1]  # NOTE: a fork now could copy a lock the other thread holds
        guardsolve.simplify(big, jobs=2)  # NOTE: asked for explicitly: the caller's choice
        assert [j for _, j in asked] == [1, 2]
    finally:
        stop.set()
        other.join()
