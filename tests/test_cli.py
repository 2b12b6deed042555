"""The CLI through main(argv) and a real subprocess."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch

import guardsolve
from guardsolve.cli import main

ROOT = pathlib.Path(__file__).parent.parent


def test_report_on_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / "examples/notebook.py") + ":add", "--shape", "a=4", "--shape", "b=4",
                 "--verify"]) == 0
    out = capsys.readouterr().out
    assert "guards: 5 bailouts -> 2 minimal constraints (irredundant: yes; z3-verified: yes)" in out
    assert "\na0 == b0\n" in out and "\na0 != 1\n" in out and "notebook.py:14  return a + b" in out


def test_report_on_saved_trace(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4, 1), torch.randn(1, 3))
    path = tmp_path / "trace.gs"
    path.write_text(str(t.graph))
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "a1 == 1\n" in out and "b1 != 1" in out and "trace line 9: bool_bailout(i3, expect=True)" in out


@pytest.mark.parametrize("argv, fragment", [
    (["report", "missing.gs"], "no such file: missing.gs"),
    (["report", "examples/notebook.py:add", "--shape", "a=4,x"], "malformed --shape"),
    (["report", "examples/notebook.py:add", "--shape", "a=4"], "no example input for parameter 'b'"),
    (["report", "examples/notebook.py:nope", "--shape", "a=4"], "has no attribute 'nope'"),
    (["report", "no_such_module_xyz:f"], "cannot import module"),
])
def test_bad_input_one_line_exit_2(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_parse_error_and_contradiction(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.gs"
    bad.write_text("a0 = int_placeholder(name=a0)\ni0 = int_eq(a0 a0)\n")
    assert main(["report", str(bad)]) == 2
    assert "line 2, column 16" in capsys.readouterr().err
    unsat = tmp_path / "unsat.gs"
    unsat.write_text("a0 = int_placeholder(name=a0)\ni0 = int_const(val=1)\ni1 = int_eq(a0, i0)\n"
                     "bool_bailout(i1, expect=True)\ni2 = int_const(val=2)\ni3 = int_eq(a0, i2)\n"
                     "bool_bailout(i3, expect=True)\n")
    assert main(["report", str(unsat)]) == 2
    err = capsys.readouterr().err
    assert "unsatisfiable guards" in err and "line 4" in err and "line 7" in err


def test_user_exception_while_tracing(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "boom.py"
    script.write_text("def f(x):\n    y = x + x\n    raise ValueError('boom')\n")
    assert main(["report", f"{script}:f", "--shape", "x=3"]) == 2
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and "boom.py:3" in err


def test_subprocess_and_python_m() -> None:
    for cmd in (["guardsolve"], [sys.executable, "-m", "guardsolve"]):
        out = subprocess.run(cmd + ["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "examples/notebook.py:14  return a + b" in out.stdout
    out = subprocess.run([sys.executable, "-m", "guardsolve", "report", "nope.gs"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == "guardsolve: error: no such file: nope.gs"
