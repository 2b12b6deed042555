"""The entries' differential fuzzer (`benchmarks/fuzz_state.py`) at full size: slow.

    python -m pytest -m slow tests/test_state_fuzz.py

Random stateful programs, random changes to their state between calls, both backends; with
Inductor, a cold Inductor cache, then a second process with it warm and with the first one's
`cache_dir` (every program of one channel count shares a fingerprint, so entries are offered
to programs they were not compiled for, and their state checks must turn them away)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
FUZZ = str(ROOT / "benchmarks" / "fuzz_state.py")


def _run(args: list[str], env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, FUZZ, *args], capture_output=True, text=True, timeout=5400,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " 0 wrong, 0 crashes" in out.stdout
    return out.stdout


def test_fuzz_a_few_programs_quickly() -> None:
    """A smoke run of the fuzzer in the default suite: 4 programs, replay backend."""
    out = _run(["--programs", "4", "--steps", "4"])
    assert out.startswith("replay: 4 programs, 32 calls, 0 wrong, 0 crashes")


@pytest.mark.slow
def test_fuzz_replay_300_programs_and_models() -> None:
    _run(["--programs", "300", "--models"])


@pytest.mark.slow
def test_fuzz_inductor_cold_then_warm_in_a_second_process(tmp_path: pathlib.Path) -> None:
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    cache = str(tmp_path / "entries")
    _run(["--backend", "inductor", "--programs", "150", "--cache-dir", cache], env)
    _run(["--backend", "inductor", "--programs", "150", "--cache-dir", cache, "--models"], env)
