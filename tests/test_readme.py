"""README.md and docs/*.md cannot drift from the program: every command in them runs here.

Each page (README.md and every docs/*.md) is tested the same way:

- ```sh blocks: each `guardsolve ...` and `python examples/...` line runs, in order, in one scratch
  directory that links the repo's `examples/` (so printed paths read as on the page). The exit
  status must be 0, or what a trailing `# exit N` comment says; stderr must be empty, or one line
  for a documented error (exit 2).
- a ```text block right after a ```sh block is the output of its commands, compared line by line:
  times (`8.0 ms`) match any time, and a line `...` matches any run of lines.
- ```pycon blocks run as doctests, in one namespace per page, in order (a page sets up what its
  examples use).
- a `guardsolve ...` command in the prose is run by a ```sh block of some page.

README's set-up and test commands must be the ones `.ci/run` runs; benchmark commands are run by
tests/test_benchmarks.py. Every page is linked from README's map of docs/, and every link to a
`.md` file or a repository path resolves.
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
PAGES = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TIME = re.compile(r"\d+(?:\.\d+)? (?:ms|s)\b")


def text_of(page: str) -> str:
    return (ROOT / page).read_text()


@dataclass
class ShellBlock:
    line: int
    commands: list[tuple[str, int]]  # (command, expected exit status)
    output: str | None = None
    ran: list[str] = field(default_factory=list)


def blocks(page: str) -> list[tuple[str, str, int]]:
    """(language, body, line number) of every fenced block of a page."""
    text = text_of(page)
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def shell_blocks(page: str) -> list[ShellBlock]:
    """Each ```sh block, with the ```text block that follows it (at most 3 lines of prose between)."""
    out: list[ShellBlock] = []
    found = blocks(page)
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
    sh = [c for b in shell_blocks("README.md") for c, _ in b.commands]
    assert any(c.startswith("pip install torch==2.13.0") for c in sh)
    assert "python -m pytest -q" in sh and any(c.startswith("guardsolve report examples/") for c in sh)
    assert "python -m pytest -q" in _ci_commands()


@pytest.mark.parametrize("page", [p for p in PAGES if shell_blocks(p)])
def test_every_shell_command_runs(page: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    # NOTE: the console script as installed (it has no working directory on sys.path by itself)
    exe = pathlib.Path(sys.executable).parent / "guardsolve"
    failures = []
    for block in shell_blocks(page):
        stdout = ""
        for cmd, status in block.commands:
            if _runs_elsewhere(cmd):
                continue
            argv = shlex.split(cmd)
            assert argv[0] in ("guardsolve", "python"), f"{page} line {block.line}: nobody runs {cmd!r}"
            if argv[0] == "guardsolve":
                argv[:1] = [str(exe)] if exe.exists() else [sys.executable, "-m", "guardsolve"]
            else:
                argv[0] = sys.executable
            done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            # NOTE: normal use prints nothing on stderr; a documented error prints exactly one line
            if done.returncode != status or done.stderr.count("\n") != (status == 2):
                failures.append(f"{page} line {block.line}: `{cmd}` exited {done.returncode} (want {status}), "
                                f"stderr: {done.stderr.strip()[-500:]!r}")
            stdout += done.stdout
            block.ran.append(cmd)
        if block.output is not None and block.ran and not matches(block.output, stdout):
            failures.append(f"{page} line {block.line}: output differs from the page:\n{stdout}")
    assert not failures, "\n".join(failures)


def test_files_the_pages_write_are_git_ignored() -> None:
    """Running the pages' commands in a clone leaves it clean: each `-o FILE` is git-ignored."""
    written = [(page, argv[argv.index("-o") + 1]) for page in PAGES for b in shell_blocks(page)
               for c, _ in b.commands if "-o" in (argv := shlex.split(c))]
    assert written
    for page, path in written:
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert done.returncode == 0, f"{page} writes {path}, which git does not ignore"


@pytest.mark.parametrize("page", [p for p in PAGES if any(lang == "pycon" for lang, _, _ in blocks(p))])
def test_library_examples_run(page: str) -> None:
    """A page's ```pycon blocks, as doctests, in order, in one namespace of the page's own."""
    text = "\n".join(body for lang, body, _ in blocks(page) if lang == "pycon")
    if page == "README.md":
        assert ">>> import torch, guardsolve" in text
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, page, str(ROOT / page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        runner.run(test)
    finally:
        os.chdir(cwd)
    assert runner.failures == 0 and runner.tries > 1


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
    """A `guardsolve ...` in any page's prose is either run by a ```sh block of some page or a
    template (TARGET, FILE)."""
    run = {c for page in PAGES for b in shell_blocks(page) for c, _ in b.commands}
    inline = [(page, c) for page in PAGES for c in re.findall(r"`(guardsolve [^`]+)`", FENCE.sub("", text_of(page)))]
    assert inline
    loose = [f"{page}: {c}" for page, c in inline if c not in run and not re.search(r"\b[A-Z]{3,}\b", c)
             and not any(r.startswith(c) for r in run)]
    assert not loose, f"commands in the prose that no test runs: {loose}"


# -- the map of docs/ and the links between pages ---------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _section(page: str, heading: str) -> str:
    text = text_of(page)
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_every_docs_page_is_in_the_readme_map() -> None:
    """README's "Documentation" table links every docs/*.md page, each in a row of its own."""
    linked = set(LINK.findall(_section("README.md", "Documentation")))
    missing = [p for p in PAGES[1:] if p not in linked]
    assert PAGES[1:] and not missing, f"docs pages missing from README's map: {missing}"


def test_links_resolve() -> None:
    """Every link in README and docs/ to a `.md` file or a path in the repository names a file
    that exists (relative to the page, as a code host reads it)."""
    broken = []
    for page in PAGES:
        for target in LINK.findall(FENCE.sub("", text_of(page))):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, or an anchor of the page itself
            path = target.split("#", 1)[0]
            if not (ROOT / page).parent.joinpath(path).resolve().exists():
                broken.append(f"{page}: {target}")
    assert not broken, f"links that resolve to nothing: {broken}"


STAGES = ("ir", "guards", "trace", "solve", "pytorch", "jit", "cli")
PATH = re.compile(r"`((?:guardsolve|examples|benchmarks|tests)/[\w./-]*|(?:%s)/[\w/-]+\.py)`" % "|".join(STAGES))


def test_path_pattern() -> None:
    assert PATH.findall("`solve/readable.py` and `guardsolve/jit/` and `examples/cnn.py:SmallCNN`") == [
        "solve/readable.py", "guardsolve/jit/"]


def test_paths_named_exist() -> None:
    """Every repository path a page names in backquotes exists: `guardsolve/...`, `examples/...`,
    `benchmarks/...`, `tests/...`, and a stage's short path (`solve/readable.py` is
    `guardsolve/solve/readable.py`)."""
    missing = []
    for page in PAGES:
        for path in PATH.findall(text_of(page)):
            full = ROOT / path if path.split("/")[0] not in STAGES else ROOT / "guardsolve" / path
            if not full.exists():
                missing.append(f"{page}: {path}")
    assert not missing, f"paths that name no file: {missing}"
