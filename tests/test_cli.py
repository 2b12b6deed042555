"""The CLI through main(argv) and a real subprocess."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Callable

import pytest
import torch

import guardsolve
from guardsolve.cli import main

ROOT = pathlib.Path(__file__).parent.parent


def test_report_on_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / "examples/notebook.py") + ":add", "--shape", "a=4", "--shape", "b=4",
                 "--verify"]) == 0
    out = capsys.readouterr().out
    assert "trace: 3 nodes; 4 bailouts -> 1 minimal guard" in out
    assert "minimal (irredundant): proved; equivalence and minimality verified by z3" in out
    assert "\n(a0 == 1) or (a0 == b0) or (b0 == 1)\n" in out and "notebook.py:47  return a + b" in out
    assert "\nother routes: tried 10 points (sizes 0 and 1, each decision's other side) in " in out and ": 3 merged, 7 rejected; " in out
    assert "same trace at" not in out and "rejected at" not in out
    assert main(["report", str(ROOT / "examples/notebook.py") + ":add", "--shape", "a=4", "--shape", "b=4",
                 "--verbose"]) == 0
    assert "same trace at a0=1: a0 != 1 answered otherwise" in capsys.readouterr().out


RESMLP = """\
import torch
from torch import nn


class ResMLP(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc1(x).relu()
        return torch.nn.functional.layer_norm(x + self.fc2(h), (32,))
"""


def test_other_routes_one_line_and_verbose_lines_agree(tmp_path: pathlib.Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 37 (7): the other routes are one summary line; `--verbose` lists them, as many as it
    counts, each line with its own point's sizes."""
    script = tmp_path / "resmlp.py"
    script.write_text(RESMLP)
    argv = ["report", f"{script}:ResMLP", "--shape", "x=4,10,32"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    routes = [ln for ln in out.splitlines() if ln.startswith("other routes:")]
    assert len(routes) == 1 and "(--verbose lists them)" in routes[0]
    assert "rejected at" not in out and "same trace at" not in out
    counts = re.search(r"tried (\d+) points .*: (\d+) merged, (\d+) rejected", routes[0])
    tried, merged, rejected = map(int, counts.groups())  # type: ignore[union-attr]
    assert tried == merged + rejected and merged and rejected
    assert main(argv + ["--verbose"]) == 0
    lines = capsys.readouterr().out.splitlines()
    same = [ln for ln in lines if ln.startswith("    same trace at ")]
    rej = [ln for ln in lines if ln.startswith("    rejected at ")]
    assert (len(same), len(rej)) == (merged, rejected)
    for ln in rej:  # each message's numbers are its own point's
        at = dict(re.findall(r"(x\d)=(\d+)", ln.split(":")[0]))
        x = {d: int(at.get(d, v)) for d, v in (("x0", 4), ("x1", 10), ("x2", 32))}
        m = re.search(r"\((\d+)x(\d+) and 32x32\)", ln)
        if m:
            assert (int(m[1]), int(m[2])) == (x["x0"] * x["x1"], x["x2"]), ln
    # the library says the same
    from guardsolve.cli.targets import load_callable

    gs = guardsolve.simplify(guardsolve.trace(load_callable(f"{script}:ResMLP"), torch.randn(4, 10, 32)))
    short = gs.explain()
    assert sum(ln.startswith("other routes:") for ln in short.splitlines()) == 1 and "rejected):" not in short
    assert f": {merged} merged, {rejected} rejected" in short
    long = gs.explain(verbose=True).splitlines()
    start = long.index("another trace at these sizes (rejected):")
    assert sum(ln.startswith("    ") for ln in long[start + 1:]) >= rejected


def test_report_on_saved_trace(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4, 1), torch.randn(1, 3))
    path = tmp_path / "trace.gs"
    path.write_text(str(t.graph))
    assert main(["report", str(path), "--no-explore"]) == 0
    out = capsys.readouterr().out
    # NOTE: a saved trace's user lines are its own: `trace.gs:3  v0 = ...`
    assert "a1 == 1\n" in out and "b1 >= 2" in out and f"{path}:3  v0 = aten.add.Tensor(a, b)" in out


@pytest.mark.parametrize("argv, fragment", [
    (["report", "missing.gs"], "no such file: missing.gs"),
    (["report", "examples/notebook.py:add", "--shape", "a=4,x"], "malformed --shape"),
    (["report", "examples/notebook.py:add", "--shape", "a=4"], "no example input for parameter 'b'"),
    (["report", "examples/notebook.py:nope", "--shape", "a=4"], "has no attribute 'nope'"),
    (["report", "examples/mlp.py:mlp", "--shape", "x=2,64"], "no attribute 'mlp'; did you mean examples/mlp.py:MLP?"),
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


def test_an_input_defined_twice_or_a_shape_not_of_its_rank_is_one_line(tmp_path: pathlib.Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    x = "x = var_placeholder(name=x, rank=2, shape=[3, 64], dtype=float32)\n"
    twice = tmp_path / "twice.gs"
    twice.write_text(x + x.replace("x =", "y =") + "v0 = aten.add.Tensor(x, y)\n")
    assert main(["report", str(twice)]) == 2
    assert "input tensor 'x' is already defined by node 0" in capsys.readouterr().err
    rank = tmp_path / "rank.gs"
    rank.write_text(x.replace("rank=2", "rank=3") + "v0 = aten.relu.default(x)\n")
    assert main(["report", str(rank)]) == 2
    assert "shape=[3, 64] has 2 sizes where rank=3" in capsys.readouterr().err


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
        assert "examples/notebook.py:47  return a + b" in out.stdout
    out = subprocess.run([sys.executable, "-m", "guardsolve", "report", "nope.gs"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        "guardsolve: error: no such file: nope.gs (a target is path/to/file.py:NAME, package.module:NAME, "
        "or a saved graph file)")


EXAMPLE_TARGETS = [
    ("examples/notebook.py:add", ["--shape", "a=4", "--shape", "b=4"], "(a0 == 1) or (a0 == b0) or (b0 == 1)"),
    ("examples/mlp.py:MLP", ["--shape", "x=32,64"], "x1 == 64"),
    ("examples/attention.py:AttentionBlock", ["--shape", "x=2,16,64"], "x2 == 64"),
    ("examples/cnn.py:SmallCNN", ["--shape", "x=4,3,16,16"], "x1 == 3"),
    ("examples/cat_reshape.py:merge_pairs", ["--shape", "a=4,6", "--shape", "b=4,10"], "(a1 + b1) % 2 == 0"),
    ("examples/branching.py:route", ["--shape", "x=32,8", "--shape", "y=8,4"], "x0 >= 17"),
]


@pytest.mark.parametrize("target, shapes, guard", EXAMPLE_TARGETS, ids=[t[0] for t in EXAMPLE_TARGETS])
def test_every_example_is_a_target(target: str, shapes: list[str], guard: str, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["report", target, *shapes]) == 0
    assert f"\n{guard}\n" in capsys.readouterr().out


def test_json_format(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--format", "json",
                 "--dynamic", "a0", "--no-explore"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 2 and doc["bailouts"] == 4 and doc["trace_nodes"] == 3
    assert doc["inputs"] == {"a": {"shape": [4], "dtype": "float32"}, "b": {"shape": [4], "dtype": "float32"}}
    assert [g["guard"] for g in doc["guards"]] == ["a0 == b0", "a0 != 1"]
    src = doc["guards"][0]["sources"][0]
    assert src == {"bailout": "a0 == b0", "bailout_raw": "assert (a0 == b0)", "file": "examples/notebook.py",
                   "line": 47, "code": "return a + b"}
    assert doc["minimal"] is True
    assert [x["bailout"] for x in doc["implied"]] == ["a0 >= 0"] and doc["implied"][0]["bailout_raw"] == "assert (a0 >= 0)"
    # NOTE: b0 is static (not declared), so a0 == b0 pins a0 to b0's example value
    (v,) = doc["dynamic"]["violations"]
    assert (v["kind"], v["fixes"], v["witness"], doc["dynamic"]["example"]) == ("static", ["a0 = 4"], {"a0": 2}, {"a0": 4, "b0": 4})
    assert doc["dynamic"]["dynamic_shapes"].endswith('dynamic_shapes = {"a": None, "b": None}')


def test_python_and_dot_formats(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    args = ["report", "examples/branching.py:route", "--shape", "x=32,8", "--shape", "y=8,4"]
    assert main(args + ["--format", "python"]) == 0
    src = capsys.readouterr().out
    ns: dict = {}  # NOTE: a self-contained module: it imports what it uses
    exec(src, ns)
    assert ns["check"](torch.randn(20, 3), torch.randn(3, 1)) and not ns["check"](torch.randn(2, 3), torch.randn(3, 1))
    assert main(args + ["--format", "dot", "-o", str(tmp_path / "g.dot")]) == 0
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith("digraph guards {") and 'subgraph cluster_0 { label="x1 class"' in dot
    assert '"x0" -> "c17" [label=">="];' in dot


def test_dot_rendering(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.chdir(ROOT)
    out = tmp_path / "g.svg"
    rc = main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--format", "dot",
               "-o", str(out)])
    if shutil.which("dot"):
        assert rc == 0 and out.read_text().lstrip().startswith("<?xml")
    else:
        assert rc == 2 and "needs Graphviz's `dot` on PATH" in capsys.readouterr().err


def test_trace_then_report_gives_the_same_guards(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for target, shapes, _ in EXAMPLE_TARGETS:
        saved = tmp_path / "t.gs"
        assert main(["trace", target, *shapes, "-o", str(saved)]) == 0
        got = {}
        for what, src in (("direct", [target, *shapes]), ("saved", [str(saved)])):
            for mode, flag in (("path", ["--no-explore"]), ("merged", [])):
                assert main(["report", *src, "--format", "json", *flag]) == 0
                got[what, mode] = [g["guard"] for g in json.loads(capsys.readouterr().out)["guards"]]
        # NOTE: the example's path is the same either way; the merged routes of a saved trace
        # replay its own ops, the function's trace it again, and each only widens the path
        assert got["direct", "path"] == got["saved", "path"], target
        for what in ("direct", "saved"):
            assert _implies(got["direct", "path"], got[what, "merged"]), (target, what)


def _implies(premise: list[str], goal: list[str]) -> bool:
    """Do the printed guards `premise` imply the printed guards `goal` (z3, sizes >= 0)?"""
    import ast
    import operator

    import z3

    from guardsolve.guards import semantics

    env: dict[str, z3.ArithRef] = {}
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: semantics.floordiv, ast.Mod: semantics.mod}
    cmp = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}

    def z(n: ast.AST) -> z3.ExprRef:
        match n:
            case ast.BoolOp(op=ast.Or(), values=vs):
                return z3.Or([z(v) for v in vs])
            case ast.BoolOp(op=ast.And(), values=vs):
                return z3.And([z(v) for v in vs])
            case ast.Compare(left=left, ops=[op], comparators=[right]):
                return cmp[type(op)](z(left), z(right))
            case ast.BinOp(left=left, op=op, right=right):
                return ops[type(op)](z(left), z(right))
            case ast.Name(id=name):
                return env.setdefault(name, z3.Int(name))
            case ast.Constant(value=v):
                return z3.IntVal(v)
        raise AssertionError(ast.dump(n))

    facts = [z(ast.parse(g, mode="eval").body) for g in premise]
    goals = [z(ast.parse(g, mode="eval").body) for g in goal]
    s = z3.Solver()
    s.add(*[v >= 0 for v in env.values()], *facts, z3.Not(z3.And(goals)))
    return s.check() == z3.unsat


def test_check_exit_codes(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    saved = tmp_path / "add.gs"
    assert main(["trace", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "-o", str(saved)]) == 0
    assert main(["check", str(saved), "--shape", "a=7", "--shape", "b=7"]) == 0
    assert main(["check", str(saved), "--dims", "a0=4,b0=8"]) == 1
    out = capsys.readouterr().out
    assert "guard failed: (a0 == 1) or (a0 == b0) or (b0 == 1) (a0=4, b0=8)" in out
    assert main(["check", str(saved), "--shape", "a=7", "--shape", "b=1"]) == 0  # a merged route: broadcast
    assert main(["check", str(saved), "--shape", "a=7", "--shape", "b=1", "--no-explore"]) == 1
    capsys.readouterr()
    assert main(["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--at", "a=0", "--at",
                 "b=4"]) == 1
    out = capsys.readouterr().out
    assert "guard failed: (a0 == 1) or (a0 == b0) or (b0 == 1) (a0=0, b0=4) (aten.add.Tensor's shape rule) — " \
           "examples/notebook.py:47  return a + b" in out
    assert "a fresh trace at these sizes stops at examples/notebook.py:47  return a + b: aten.add.Tensor, as the " \
           "trace at a0=5 does" in out
    assert main(["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--at", "a=1", "--at",
                 "b=1", "--no-explore"]) == 1
    assert "guard failed: a0 != 1 (a0=1) (aten.add.Tensor's shape rule) — examples/notebook.py:47  return a + b" \
        in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "guardsolve", "check", str(saved), "--dims", "a0=3,b0=3"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "ok: the 1 guard holds" in proc.stdout


@pytest.mark.parametrize("argv, fragment", [
    (["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dims", "a0=1,c0=2"],
     "--dims c0: no such dim"),
    (["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dims", "a0=-2,b0=-2"],
     "--dims a0=-2: a size is >= 0"),
    (["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dynamic", "z9"],
     "--dynamic z9: no such dim"),
    (["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dims"], None),
    (["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--timeout-ms", "0"], None),
])
def test_unknown_dims(argv: list[str], fragment: str | None, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    if fragment is None:
        with pytest.raises(SystemExit) as info:  # argparse: unknown option
            main(argv)
        assert info.value.code == 2
        return
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_unsupported_op_and_debug(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "cum.py"
    script.write_text("import torch\n\ndef f(x):\n    return x.to_sparse()\n")
    assert main(["report", f"{script}:f", "--shape", "x=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("guardsolve: error: aten._to_sparse.default: PyTorch's shape rule fails") and err.count("\n") == 1
    assert err.rstrip().endswith("cum.py:4  return x.to_sparse()")
    assert main(["--debug", "report", f"{script}:f", "--shape", "x=3"]) == 2
    assert "Traceback" in capsys.readouterr().err
    assert main(["report", f"{script}:f", "--shape", "x=3", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_module_factory_target(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "factory.py"
    script.write_text("import torch.nn as nn\n\ndef make():\n    return nn.Sequential(nn.Linear(6, 3), nn.ReLU())\n")
    assert main(["report", f"{script}:make", "--shape", "input=5,6"]) == 0
    assert "\ninput1 == 6\n" in capsys.readouterr().out


# --- a new user's first minutes (issue 12) ---------------------------------------------------

def _run(argv: list[str], cwd: pathlib.Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    exe = pathlib.Path(sys.executable).parent / "guardsolve"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "guardsolve"]
    return subprocess.run(cmd + argv, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_help_and_version_load_neither_torch_nor_z3() -> None:
    code = ("import sys, contextlib, io\n"
            "from guardsolve.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    for argv in (['--help'], ['--version'], ['report', '--nope']):\n"
            "        with contextlib.suppress(SystemExit):\n"
            "            main(argv)\n"
            "import guardsolve\n"
            "print(sorted(m for m in ('torch', 'z3') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    version = _run(["--version"])
    assert version.returncode == 0 and version.stdout.startswith("guardsolve ") and not version.stderr


def test_lazy_package_still_exports_the_library() -> None:
    import guardsolve.trace.tracer  # noqa: F401  (importing the subpackage must not shadow trace())

    assert callable(guardsolve.trace) and guardsolve.trace.__name__ == "trace"
    assert set(guardsolve.__all__) <= set(dir(guardsolve))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        guardsolve.nope  # noqa: B018


def test_every_export_resolves() -> None:
    """Each name of the lazy table imports from the module it names (the names users meet)."""
    missing = [n for n in guardsolve._EXPORTS if getattr(guardsolve, n, None) is None]
    assert missing == []
    assert {"EagerError", "CompileFailure", "CompileExplainError", "trace_summary", "Entry", "Variant"} <= set(
        guardsolve.__all__)


def test_python_format_is_a_self_contained_module(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--format", "python"]) == 0
    src = capsys.readouterr().out
    assert "import" in src and src.startswith("# minimal guards of examples/notebook.py:add")
    ns: dict = {}
    exec(compile(src, "printed.py", "exec"), ns)
    gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)))
    for a, b in [(3, 3), (1, 1), (5, 1), (0, 0), (6, 7), (1, 4)]:
        x, y = torch.randn(a), torch.randn(b)
        assert ns["check"](x, y) == gs.check(x, y) == (a == b or a == 1 or b == 1)


def test_module_target_from_the_working_directory(tmp_path: pathlib.Path) -> None:
    """The console script, like `python -m`, finds `pkg.module:fn` under the working directory."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "ops.py").write_text("def double(x):\n    return x.view(2, -1)\n")
    out = _run(["report", "mypkg.ops:double", "--shape", "x=6"], cwd=tmp_path)
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert "mypkg/ops.py:2  return x.view(2, -1)" in out.stdout


def test_source_paths_print_as_written(tmp_path: pathlib.Path) -> None:
    work = tmp_path / "out"
    work.mkdir()
    rel = os.path.relpath(ROOT / "examples" / "notebook.py", work)
    out = _run(["report", f"{rel}:add", "--shape", "a=4", "--shape", "b=4"], cwd=work)
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert f"    {rel}:47  return a + b" in out.stdout and str(work) not in out.stdout


@pytest.mark.parametrize("argv, fragment", [
    (["report", "examples/notebook.py:add", "--shape", "a=1000000000000", "--shape", "b=4"],
     "--shape a=1000000000000: the example tensor needs 3725.3 GiB"),
    (["report", "torch.nn:Linear", "--shape", "input=4,4"],
     "cannot construct torch.nn:Linear with no arguments: TypeError"),
    (["report", "examples/notebook.py", "--shape", "a=4"],
     "examples/notebook.py is a Python file: name what to trace, as examples/notebook.py:NAME (it defines add,"),
    (["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "a=5", "--shape", "b=4"],
     "--shape 'a=5': 'a' is already given by --shape 'a=4'"),
    (["report", "examples/branching.py:route", "--shape", "x=4,8", "--shape", "y=8,4", "--int", "x=3"],
     "--int 'x=3': 'x' is already given by --shape 'x=4,8'"),
])
def test_more_bad_input_one_line_exit_2(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err, err


def test_module_classes_that_cannot_be_built(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "mods.py"
    script.write_text("import torch\n"
                      "class NeedsArgs(torch.nn.Module):\n"
                      "    def __init__(self, n):\n"
                      "        super().__init__()\n"
                      "class Raises(torch.nn.Module):\n"
                      "    def __init__(self):\n"
                      "        super().__init__()\n"
                      "        raise RuntimeError('no weights here')\n")
    assert main(["report", f"{script}:NeedsArgs", "--shape", "x=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing 1 required positional argument: 'n'" in err
    assert "def make(): return NeedsArgs(...)" in err
    assert main(["report", f"{script}:Raises", "--shape", "x=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: no weights here" in err and "mods.py:8" in err


def test_shape_errors_while_tracing_name_the_users_line(tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "shapes.py"
    script.write_text("def bad_view(x):\n    y = x * 2\n    return y.view(3, -1)\n\n"
                      "def bad_mm(a, b):\n    h = a + 1\n    return h @ b\n")
    assert main(["report", f"{script}:bad_view", "--shape", "x=4,5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shape '[3, -1]' is invalid for input of size 20" in err
    assert "shapes.py:3  return y.view(3, -1)" in err
    assert main(["report", f"{script}:bad_mm", "--shape", "a=2,3", "--shape", "b=4,5"]) == 2
    err = capsys.readouterr().err
    assert "cannot be multiplied" in err and "shapes.py:7  return h @ b" in err


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: t.replace("name=a,", "name=lambda,", 1), "line 1, column 26: name 'lambda' is a Python keyword"),
    (lambda t: t.replace("name=a,", "name=None,", 1), "line 1, column 26: name 'None' is a Python keyword"),
    (lambda t: t.replace("a = ", "None = ", 1), "line 1, column 1: output name 'None' is a Python keyword"),
    (lambda t: t.replace("v0 = ", "lambda = ", 1), "line 3, column 1: expected an output name that is not"),
    (lambda t: "", "holds no graph (no nodes): an empty file is not a trace"),
    (lambda t: "# only a comment\n\n", "holds no graph"),
])
def test_bad_graph_files(edit: Callable[[str], str], fragment: str, tmp_path: pathlib.Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4))
    path = tmp_path / "t.gs"
    path.write_text(edit(str(t.graph)))
    for argv in (["report", str(path)], ["check", str(path), "--shape", "a=3", "--shape", "b=3"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


def test_repeated_dims_and_shapes_in_check(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.gs"
    path.write_text(str(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)).graph))
    assert main(["check", str(path), "--dims", "a0=4", "--dims", "a0=5,b0=5"]) == 2
    assert "'a0' is given twice" in capsys.readouterr().err
    assert main(["check", str(path), "--shape", "a=4", "--shape", "a=5", "--shape", "b=5"]) == 2
    assert "'a0' is given twice" in capsys.readouterr().err
    assert main(["report", str(path), "--shape", "a=4"]) == 2
    assert "is a saved graph, already traced at its shapes" in capsys.readouterr().err


def test_value_guards_flag(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "data.py"
    script.write_text("def f(x):\n    if x.sum() > 0:\n        return x + 1\n    return x - 1\n")
    assert main(["report", f"{script}:f", "--shape", "x=4"]) == 2
    err = capsys.readouterr().err
    assert "data.py:2" in err and "--value-guards on the command line" in err
    assert main(["report", f"{script}:f", "--shape", "x=4", "--value-guards"]) == 0
    assert "not checkable from shapes alone" in capsys.readouterr().out


def test_plurals_and_json_file_of_a_saved_trace(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.gs"
    path.write_text(str(guardsolve.trace(lambda x: x + torch.ones(3), torch.randn(3)).graph))
    assert main(["report", str(path), "--no-explore"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"trace: \d+ nodes; \d+ bailouts -> 1 minimal guard\n", out), out
    assert main(["check", str(path), "--shape", "x=3", "--no-explore"]) == 0
    assert capsys.readouterr().out == "ok: the 1 guard holds\n"
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {s["file"] for g in doc["guards"] for s in g["sources"]} == {str(path)}


def test_internal_errors_are_one_line_exit_3(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import guardsolve.cli as cli

    def broken(args: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(cli, "_trace", broken)
    monkeypatch.chdir(ROOT)
    assert main(["trace", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: KeyError: 'oops'" in err


def test_export_check_prints_the_spec_torch_export_accepts(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = ["report", "examples/models.py:lstm", "--shape", "input=2,5,8", "--dynamic", "input0", "--dynamic", "input1",
            "--export-check"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith("\n# export check: torch.export accepts the spec with its pins (2 exports)\n"
                        "note: torch.export pins input1 = 5; guardsolve's guards accept any input1 (witness: "
                        "input=[2, 6, 8] passes the guards and eager runs)\n\n"
                        "# dynamic_shapes for torch.export.export (checked by torch.export)\n"
                        'from torch.export import Dim\ninput0 = Dim("input0")\ndynamic_shapes = {"input": {0: input0}}\n')
    assert main(argv + ["--format", "json"]) == 0
    check = json.loads(capsys.readouterr().out)["dynamic"]["export_check"]
    assert check["exports"] == 2 and check["dynamic_shapes"].endswith('{"input": {0: input0}}')
    (pin,) = check["pins"]
    assert (pin["fix"], pin["dims"], pin["witness"], pin["eager"]) == ("input1 = 5", ["input1"], {"input1": 6}, "runs")


def test_export_check_errors_are_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    saved = tmp_path / "add.gs"
    saved.write_text(str(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)).graph))
    script = tmp_path / "data.py"
    script.write_text("def f(x):\n    return x * 2 if x.sum() > 0 else x\n")
    for argv, fragment in [
        (["report", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--export-check"],
         "--export-check checks the --dynamic spec: give --dynamic DIM"),
        (["report", str(saved), "--dynamic", "a0", "--export-check"], "--export-check needs a function target"),
        (["report", f"{script}:f", "--shape", "x=4", "--value-guards", "--dynamic", "x0", "--export-check"],
         "torch.export cannot export f: GuardOnDataDependentSymNode"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


def test_check_takes_new_int_arguments(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`--int` gives a saved trace's new int arguments, as `--shape` its new shapes; `--at k=V`
    a function target's."""
    (tmp_path / "dd.py").write_text("def h(x, k: int):\n    return x.reshape(k, -1)\n")
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "dd.py:h", "--shape", "x=4,6", "--int", "k=2", "-o", "h.gs"]) == 0
    assert main(["check", "h.gs", "--shape", "x=6,4", "--int", "k=3"]) == 0
    assert main(["check", "h.gs", "--shape", "x=6,4", "--int", "k=5", "--no-explore"]) == 1
    assert "guard failed: x0 % k == 0 (x0=6, k=5)" in capsys.readouterr().out
    assert main(["check", "dd.py:h", "--shape", "x=4,6", "--int", "k=2", "--at", "x=6,4", "--at", "k=-3"]) == 1
    assert "k=-3)" in capsys.readouterr().out
    assert main(["check", "dd.py:h", "--shape", "x=4,6", "--int", "k=2", "--at", "y=6,4"]) == 2
    assert "(tensors: x)" in capsys.readouterr().err


def test_a_reader_that_stops_early_is_no_error(tmp_path: pathlib.Path) -> None:
    """`guardsolve report big.gg | head`: exit 141 (as a shell's tools do), nothing on stderr."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from workloads import scale_guard_graph

    big = tmp_path / "big.gg"
    big.write_text(str(scale_guard_graph(3000)))
    proc = subprocess.Popen([sys.executable, "-m", "guardsolve", "report", str(big), "--jobs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"target:")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and err == ""


# -- report --via torch.compile ---------------------------------------------------------------

COMPILED = str(ROOT / "examples/compiled.py") + ":route"


def test_report_via_torch_compile_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", COMPILED, "--shape", "x=12", "--shape", "y=13", "--via", "torch.compile", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "Dynamo checks 3 shape guards (3 over input sizes, 0 on strides and other values) -> 2 minimal" in out
    assert "  x0 >= 11\n      Dynamo: 11 <= L['x'].size()[0]  <- " in out and "if x.shape[0] > 10:" in out
    assert "implied by the above (dropped):\n      y0 >= 12  <- " in out
    assert "equivalence and minimality verified by z3" in out


def test_report_via_torch_compile_shape_error_is_eagers(tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 37 (1): a program eager rejects gets eager's message and the user's line under
    --via torch.compile too, as without it (not Dynamo's fake-tensor wrapper)."""
    script = tmp_path / "norm.py"
    script.write_text("import torch\n\n\ndef f(x):\n    h = torch.relu(x)\n"
                      "    return torch.nn.functional.layer_norm(h, (32,))\n")
    argv = ["report", f"{script}:f", "--shape", "x=4,10,16"]
    assert main(argv) == 2
    plain = capsys.readouterr().err
    assert main(argv + ["--via", "torch.compile"]) == 2
    via = capsys.readouterr().err
    assert via == plain and via.count("\n") == 1
    assert "expected input with shape [*, 32], but got input of size[4, 10, 16]" in via
    assert via.rstrip().endswith("norm.py:6  return torch.nn.functional.layer_norm(h, (32,))")


CHUNK = """\
import torch


def chunk(x):
    n = x.shape[-1]
    x = torch.nn.functional.pad(x, (0, (-n) % 4))
    return x.view(x.shape[0], -1, 4)
"""


def test_report_via_torch_compile_reads_as_guardsolve_does(tmp_path: pathlib.Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 37 (4): the grad mode once, in the header; no empty section; the dropped Dynamo
    guards over the dims, as the kept ones print (a count per line, each one with --verbose)."""
    script = tmp_path / "chunk.py"
    script.write_text(CHUNK)
    argv = ["report", f"{script}:chunk", "--shape", "x=4,10", "--via", "torch.compile"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"target: {script}:chunk at x=[4, 10] (torch.compile, under torch.no_grad())\n")
    assert "is_grad_enabled" not in out
    lines = out.splitlines()
    for k, ln in enumerate(lines):  # every heading has lines under it
        if ln.rstrip().endswith(":"):
            indent = len(ln) - len(ln.lstrip())
            assert k + 1 < len(lines) and len(lines[k + 1]) - len(lines[k + 1].lstrip()) > indent, ln
    dropped = lines[lines.index("  implied by the above (dropped):") + 1:]
    dropped = dropped[:next(i for i, ln in enumerate(dropped) if not ln.startswith("      "))]
    assert dropped and all("L['x']" not in ln for ln in dropped)
    assert any(re.search(r"chunk.py:7  return x.view\(x.shape\[0\], -1, 4\)  \(\d+ guards, e.g. x1 >= 1\)", ln)
               for ln in dropped), dropped
    assert main(argv + ["--verbose"]) == 0
    out = capsys.readouterr().out
    assert "      x1 >= 1  <- " in out and "L['x'].size()[1] + " not in out


def test_report_via_torch_compile_json_and_python(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", COMPILED, "--shape", "x=12", "--shape", "y=13", "--via", "torch.compile",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["via"] == "torch.compile" and doc["counts"] == {"frames": 1, "dynamo_guards": 3, "minimal_guards": 2}
    assert [g["guard"] for g in doc["guards"]] == ["x0 >= 11", "x0 < y0"]
    assert all(s["line"] and s["code"] for g in doc["guards"] for s in g["sources"])
    assert [g["code"] for g in doc["dynamo_guards"]][2] == "12 <= L['y'].size()[0]"
    assert main(["report", COMPILED, "--shape", "x=12", "--shape", "y=13", "--via", "torch.compile",
                 "--format", "python"]) == 0
    src = capsys.readouterr().out
    space: dict[str, object] = {}
    exec(src, space)  # NOTE: standalone: plain Python, no guardsolve or torch import
    check = space["check_dims_route"]
    assert check(11, 12) and not check(10, 12) and not check(11, 11)  # type: ignore[operator]
    assert "import" not in src


def test_report_via_torch_compile_marks_dynamic_dims(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / "examples/mlp.py") + ":MLP", "--shape", "x=32,64", "--via", "torch.compile",
                 "--dynamic", "x0"]) == 0
    out = capsys.readouterr().out
    assert "  x1 == 64\n" in out and "  x0 >= 2\n" in out


@pytest.mark.parametrize("extra, message", [
    (["--format", "dot"], "--format dot does not apply to --via torch.compile (its guards are Dynamo's, not a trace's)"),
    (["--dynamic", "z9"], "--dynamic z9: no such dim: no input named z (dims: x0, y0; x0 is x.shape[0])"),
])
def test_report_via_torch_compile_errors(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", COMPILED, "--shape", "x=12", "--shape", "y=13", "--via", "torch.compile", *extra]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"guardsolve: error: {message}"


# -- arguments answered before torch loads ------------------------------------------------------

MISTAKES = [
    (["report", "mynet.TinyNet", "--shape", "x=2,3"], "did you mean mynet:TinyNet?"),
    (["report", "examples/mlp.MLP", "--shape", "x=2,3"], "did you mean examples/mlp.py:MLP?"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=(2,3,16,16)"], "write --shape x=2,3,16,16"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2x3x16x16"], "write --shape x=2,3,16,16"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--dtype", "flaot32"], "did you mean float32?"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--dtype", "x=fp17"], "valid: float32, float64"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--values", "x=randint:5,1"], "x=randint:0,100"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--values", "x=gauss"], "valid: randint:LO,HI"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--export-check"], "give --dynamic DIM"),
    (["report", "examples/nope.py:f", "--shape", "x=2"], "no such file: examples/nope.py"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=2,64", "--format", "dot", "-o", "g.jpg"], "renders .svg, .png or .pdf"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=4,10,16", "--dynamic", "x5"],
     "--dynamic x5: no such dim: x has rank 3 (dims: x0, x1, x2; x0 is x.shape[0]); did you mean x2?"),
    (["report", "examples/mlp.py:MLP", "--shape", "x=4,10,16", "--dynamic", "x"], "its dims are named by index"),
    (["report", "examples/compiled.py:route", "--shape", "x=12", "--shape", "y=13", "--dynamic", "X0", "--via",
      "torch.compile"], "did you mean x0?"),
    (["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dims", "c0=5"],
     "--dims c0: no such dim: no input named c (dims: a0, b0; a0 is a.shape[0])"),
]


@pytest.mark.parametrize("argv, fix", MISTAKES, ids=[" ".join(a[1:]) for a, _ in MISTAKES])
def test_argument_mistakes_are_answered_at_once(argv: list[str], fix: str) -> None:
    import time

    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "guardsolve", *argv], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    wall = time.perf_counter() - t0
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("guardsolve: error: ") and fix in out.stderr
    assert wall < 0.5, f"{wall:.2f} s: the mistake was answered after heavy imports (torch alone takes seconds)"


def test_help_explains_dim_names() -> None:
    from guardsolve.cli import _parser

    sub = _parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "x0 is x.shape[0]" in " ".join(sub["report"].format_help().split())
    assert "a0 is a.shape[0]" in " ".join(sub["check"].format_help().split())


def test_rendering_without_graphviz_is_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from guardsolve.cli.args import ArgumentError, check_output

    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ArgumentError, match=r"-o g.svg: rendering .svg needs Graphviz's `dot` on PATH.*-o g.dot"):
        check_output("g.svg", "dot")


def test_dtype_aliases() -> None:
    from guardsolve.cli.args import parse_dtype

    assert [parse_dtype(t) for t in ("fp16", "torch.float16", "half", "bf16", "torch.int64", "double")] == [
        "float16", "float16", "float16", "bfloat16", "int64", "float64"]


def test_per_input_dtype_and_values(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "emb.py"
    script.write_text("import torch\n"
                      "def embed(ids, weights, mask):\n"
                      "    return torch.nn.functional.embedding(ids, weights) * mask.unsqueeze(-1)\n")
    assert main(["report", f"{script}:embed", "--shape", "ids=2,5", "--shape", "weights=10,4", "--shape", "mask=2,5",
                 "--dtype", "ids=int64", "--dtype", "mask=int64", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["ids"] == {"shape": [2, 5], "dtype": "int64"}
    assert doc["inputs"]["weights"] == {"shape": [10, 4], "dtype": "float32"}
    assert main(["report", f"{script}:embed", "--shape", "ids=2,5", "--shape", "weights=10,4", "--shape", "mask=2,5",
                 "--dtype", "int64", "--dtype", "weights=float32", "--values", "ids=randint:0,10"]) == 0
    capsys.readouterr()
    from guardsolve.cli.targets import load_args

    _, names, args = load_args(f"{script}:embed", ["ids=2,5", "weights=10,4", "mask=2,5"], [], ["int64", "weights=float32"])
    ids, weights, mask = args
    assert names == ["ids", "weights", "mask"] and ids.dtype == torch.int64 and weights.dtype == torch.float32
    assert bool(mask.eq(1).all()) and 0 <= int(ids.min()) and int(ids.max()) < 2  # the default fills
    _, _, (ids, _, _) = load_args(f"{script}:embed", ["ids=2,5", "weights=10,4", "mask=2,5"], [], ["int64"],
                                  ["ids=arange"])
    assert ids.flatten().tolist() == list(range(10))
    # an int64 input traced as float32: the failure names the fix
    assert main(["report", f"{script}:embed", "--shape", "ids=2,5", "--shape", "weights=10,4",
                 "--shape", "mask=2,5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dtype ids=int64" in err


def test_train_mode_is_a_flag(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "drop.py"
    script.write_text("import torch\n"
                      "class Net(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        return x * 2 if self.training else x * 3\n")
    assert main(["report", f"{script}:Net", "--shape", "x=3", "--format", "json"]) == 0
    eval_trace = json.loads(capsys.readouterr().out)
    assert main(["report", f"{script}:Net", "--shape", "x=3", "--train", "--format", "json"]) == 0
    train_trace = json.loads(capsys.readouterr().out)
    assert eval_trace["static"] != train_trace["static"] or eval_trace != train_trace


CLASSIFIER = """\
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
        self.out = nn.Linear(16, 4)

    def forward(self, tokens):
        return self.out(self.layer(self.emb(tokens)).mean(1))
"""


def test_grad_mode_is_said_and_chosen(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49 (7): a classifier traced with grad on gets `tokens0 >= 2` (multi_head_attention's
    contiguity branches at batch 1); served under no_grad it runs one fused kernel and batch 1
    is the same trace. The report says which mode ran; --no-grad chooses no_grad."""
    script = tmp_path / "cls.py"
    script.write_text(CLASSIFIER)
    argv = [f"{script}:Classifier", "--shape", "tokens=4,8", "--dtype", "int64"]
    assert main(["report", *argv]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == "mode: grad on, eval (--no-grad: as served under torch.no_grad())"
    assert "\ntokens0 >= 2\n" in out
    assert main(["check", *argv, "--at", "tokens=1,8"]) == 1
    assert "guard failed: tokens0 >= 2 (tokens0=1)" in capsys.readouterr().out
    assert main(["report", *argv, "--no-grad"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == "mode: no_grad, eval" and "tokens0 >= 2" not in out
    assert main(["check", *argv, "--no-grad", "--at", "tokens=1,8"]) == 0
    capsys.readouterr()
    assert main(["report", *argv, "--no-grad", "--train", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == {"grad": False, "module": "train"}
    assert torch.is_grad_enabled()  # NOTE: the command's mode ends with it


def test_mode_of_a_function_and_train_without_a_module(capsys: pytest.CaptureFixture[str]) -> None:
    add = str(ROOT / "examples/notebook.py") + ":add"
    assert main(["report", add, "--shape", "a=4", "--shape", "b=4", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == {"grad": True, "module": None}
    assert main(["report", add, "--shape", "a=4", "--shape", "b=4", "--train"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("guardsolve: error: --train: ") and "is a function, not an nn.Module" in err


DISTILBERT = """\
import torch
from transformers import DistilBertConfig, DistilBertModel


def build():
    torch.manual_seed(0)
    return DistilBertModel(DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                                            max_position_embeddings=64))
"""


def test_every_guard_of_distilbert_names_a_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49 (8): `attention_mask0 >= 2` printed with no source: a guard every route implies,
    found in a merged route, had no provenance in the example's trace; it names the example's
    bailouts it follows from there (the mask's batch indexed by the ids' batch, which is >= 2)."""
    pytest.importorskip("transformers")
    script = tmp_path / "dbert.py"
    script.write_text(DISTILBERT)
    assert main(["report", f"{script}:build", "--shape", "input_ids=2,16", "--shape", "attention_mask=2,16",
                 "--dtype", "int64", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["guards"] and all(g["sources"] and all(s["file"] and s["line"] for s in g["sources"])
                                 for g in doc["guards"]), [g["guard"] for g in doc["guards"] if not g["sources"]]
    (mask,) = [g for g in doc["guards"] if g["guard"] == "attention_mask0 >= 2"]
    assert {s["code"] for s in mask["sources"]} >= {"return padding_mask[batch_idx, kv_idx]"}


def test_builtin_torch_function_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "torch:relu", "--shape", "input=2,3"]) == 0
    assert "inputs: input=[2, 3]" in capsys.readouterr().out


def test_export_check_failure_keeps_the_report(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "out.py"
    script.write_text("import torch\n"
                      "class Box:\n"
                      "    def __init__(self, t):\n"
                      "        self.t = t\n"
                      "def boxed(x):\n"
                      "    return Box(x * 2)\n")
    assert main(["report", f"{script}:boxed", "--shape", "x=4,3", "--dynamic", "x0", "--export-check"]) == 2
    cap = capsys.readouterr()
    assert "minimal (irredundant): proved" in cap.out and "# dynamic_shapes for torch.export.export" in cap.out
    assert "# failed after the guards were computed:\n--export-check: torch.export cannot export" in cap.out
    assert cap.err.count("\n") == 1 and "--export-check failed after the guards were computed" in cap.err


def test_check_dims_default_to_the_example(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--dims", "a0=5",
                 "--no-explore"]) == 1  # b0 stays 4
    assert "guard failed: a0 == b0 (a0=5, b0=4)" in capsys.readouterr().out


def test_python_format_is_standalone(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A check over strides prints guardsolve's helper inline: the module needs torch only."""
    script = tmp_path / "strided.py"
    script.write_text("def f(x):\n    return x * x.stride()[0]\n")
    assert main(["report", f"{script}:f", "--shape", "x=3,4", "--format", "python"]) == 0
    src = capsys.readouterr().out
    assert "guardsolve." not in src and "import guardsolve" not in src
    proc = subprocess.run([sys.executable, "-I", "-c", src + "\nimport torch\n"
                           "print(check(torch.randn(3, 4)), check(torch.randn(4, 3).t()))"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.stdout.strip() == "True False", proc.stderr
    assert main(["report", f"{script}:f", "--shape", "x=3,4"]) == 0
    assert "x.stride() == torch.empty(x.shape).stride()" in capsys.readouterr().out
