"""README.md cannot drift from the program: every command in it runs here.

- ```sh blocks: each `guardsolve ...` and `python examples/...` line runs, in order, in one scratch
  directory that links the repo's `examples/` (so printed paths read as in the README). The exit
  status must be 0, or what a trailing `# exit N` comment says; stderr must be empty, or one line
  for a documented error (exit 2).
- a ```text block right after a ```sh block is the output of its commands, compared line by line:
  times (`8.0 ms`) match any time, and a line `...` matches any run of lines.
- ```pycon blocks run as doctests, in one namespace, in order.
- the set-up and test commands must be the ones `.ci/run` runs; benchmark commands are run by
  tests/test_benchmarks.py.
"""

from __future__ import annotations

import doctest
import os
import pathlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

ROOT = pathlib.Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TIME = re.compile(r"\d+(?:\.\d+)? (?:ms|s)\b")


@dataclass
class ShellBlock:
    line: int
    commands: list[tuple[str, int]]  # (command, expected exit status)
    output: str | None = None
    ran: list[str] = field(default_factory=list)


def blocks() -> list[tuple[str, str, int]]:
    """(language, body, line number) of every fenced block."""
    return [(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(README)]


def shell_blocks() -> list[ShellBlock]:
    """Each ```sh block, with the ```text block that follows it (at most 3 lines of prose between)."""
    out: list[ShellBlock] = []
    found = blocks()
    for k, (lang, body, line) in enumerate(found):
        if lang != "sh":
            continue
        commands = []
        for cmd in body.splitlines():
            cmd, _, comment = cmd.partition("  #")
            status = re.search(r"exit (\d+)", comment)
            commands.append((cmd.strip(), int(status.group(1)) if status else 0))
        nxt = found[k + 1] if k + 1 < len(found) else None
        close = nxt is not None and nxt[0] == "text" and nxt[2] - (line + body.count("\n") + 1) <= 4
        out.append(ShellBlock(line, commands, nxt[1] if close and nxt else None))
    return out


# Commands that other machinery runs: the CI script, or tests/test_benchmarks.py.
def _ci_commands() -> list[str]:
    lines = (ROOT / ".ci/run").read_text().splitlines()
    return [re.sub(r"^python -m pip install --quiet ", "pip install ", ln) for ln in lines
            if ln.startswith("python -m ")]


def _runs_elsewhere(cmd: str) -> bool:
    if cmd.startswith("python benchmarks/"):
        return True  # tests/test_benchmarks.py runs the runner (a smoke run; --quick is a slow test)
    ci = _ci_commands()
    if cmd.startswith("pip install"):
        return all(part.strip() in ci for part in cmd.split("&&"))
    return cmd in ci or cmd == "python -m pytest -m slow"


def matches(expected: str, actual: str) -> bool:
    """Line-by-line equality, with times normalized and `...` lines matching any run of lines."""
    pattern = []
    for line in expected.rstrip("\n").splitlines():
        if line.strip() == "...":
            pattern.append(r"(?:.*\n)*?")
        else:
            pattern.append(re.escape(TIME.sub("<time>", line)).replace("<time>", r"\d+(?:\.\d+)? (?:ms|s)") + r"\n")
    return re.fullmatch("".join(pattern), actual.rstrip("\n") + "\n") is not None


def test_readme_has_its_three_commands() -> None:
    """Set-up, the main job, the test command: each one command, and CI runs the same ones."""
    sh = [c for b in shell_blocks() for c, _ in b.commands]
    assert any(c.startswith("pip install torch==2.13.0") for c in sh)
    assert "python -m pytest -q" in sh and any(c.startswith("guardsolve report examples/") for c in sh)
    assert "python -m pytest -q" in _ci_commands()


def test_every_shell_command_runs(tmp_path: pathlib.Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    # NOTE: the console script as installed (it has no working directory on sys.path by itself)
    exe = pathlib.Path(sys.executable).parent / "guardsolve"
    failures = []
    for block in shell_blocks():
        stdout = ""
        for cmd, status in block.commands:
            if _runs_elsewhere(cmd):
                continue
            argv = shlex.split(cmd)
            assert argv[0] in ("guardsolve", "python"), f"README line {block.line}: nobody runs {cmd!r}"
            if argv[0] == "guardsolve":
                argv[:1] = [str(exe)] if exe.exists() else [sys.executable, "-m", "guardsolve"]
            else:
                argv[0] = sys.executable
            done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            # NOTE: normal use prints nothing on stderr; a documented error prints exactly one line
            if done.returncode != status or done.stderr.count("\n") != (status == 2):
                failures.append(f"README line {block.line}: `{cmd}` exited {done.returncode} (want {status}), "
                                f"stderr: {done.stderr.strip()[-500:]!r}")
            stdout += done.stdout
            block.ran.append(cmd)
        if block.output is not None and block.ran and not matches(block.output, stdout):
            failures.append(f"README line {block.line}: output differs from the README:\n{stdout}")
    assert not failures, "\n".join(failures)


def test_files_the_readme_writes_are_git_ignored() -> None:
    """Running the README's commands in a clone leaves it clean: each `-o FILE` is git-ignored."""
    written = [argv[argv.index("-o") + 1] for b in shell_blocks() for c, _ in b.commands
               if "-o" in (argv := shlex.split(c))]
    assert written
    for path in written:
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert done.returncode == 0, f"README writes {path}, which git does not ignore"


def test_readme_library_examples_run() -> None:
    """The ```pycon blocks, as doctests, in order, in one namespace."""
    text = "\n".join(body for lang, body, _ in blocks() if lang == "pycon")
    assert ">>> import torch, guardsolve" in text
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(ROOT / "README.md"), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        runner.run(test)
    finally:
        os.chdir(cwd)
    assert runner.failures == 0 and runner.tries > 5


@pytest.mark.parametrize("expected, actual, ok", [
    ("a\n...\nd\n", "a\nb\nc\nd\n", True),
    ("a\n...\nd\n", "a\nd\n", True),
    ("took 8.0 ms\n", "took 123.4 ms\n", True),
    ("a0 == b0\n", "a0 != b0\n", False),
    ("a\nb\n", "a\nb\nc\n", False),
])
def test_output_matching(expected: str, actual: str, ok: bool) -> None:
    assert matches(expected, actual) is ok


def test_inline_commands_are_run_or_templates() -> None:
    """A `guardsolve ...` in the prose is either run by a ```sh block or a template (TARGET, FILE)."""
    run = {c for b in shell_blocks() for c, _ in b.commands}
    inline = re.findall(r"`(guardsolve [^`]+)`", FENCE.sub("", README))
    assert inline
    loose = [c for c in inline if c not in run and not re.search(r"\b[A-Z]{3,}\b", c)
             and not any(r.startswith(c) for r in run)]
    assert not loose, f"README commands that no test runs: {loose}"
