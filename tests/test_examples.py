"""Every script in examples/ runs and prints what it promises."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: pathlib.Path) -> None:
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


def test_notebook_example_output() -> None:
    script = next(p for p in EXAMPLES if p.name == "notebook.py")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300).stdout
    assert "i12 = int_eq(i10, i11)\nbool_bailout(i12, expect=True)\nv0 = var_add(a, b)" in out
    assert "i6 = int_eq(b0, a0)\nbool_bailout(i6, expect=True)" in out
    assert "assert (b0 == a0)" in out
    assert "GuardFailure: guard failed: `bool_bailout(i4, expect=True)`" in out
    assert "# minimal guards (5 bailouts -> 2 constraints)\na0 == b0\na0 != 1" in out
    assert "equivalent to the original bailouts (z3, both directions): True" in out
