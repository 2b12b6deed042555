"""Every script in examples/ runs and prints what it promises."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import tempfile

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
    assert "i6 = int_eq(b0, a0)\nbool_bailout(i6, expect=True)" in out
    assert "assert (b0 == a0)" in out
    assert "GuardFailure: guard failed: `bool_bailout(i4, expect=True)`" in out
    assert "# minimal guards (5 bailouts -> 2 constraints)\na0 == b0\na0 != 1" in out
    assert "v0 = aten.add.Tensor(a, b)" in out
    assert "# minimal guards of the example's path (4 bailouts -> 2 constraints)\na0 == b0\na0 != 1" in out
    assert "# minimal guards exact to the trace (3 more routes record it)\n(a0 == 1) or (a0 == b0) or (b0 == 1)" in out
    assert "check([4], [1]) = True" in out
    assert "equivalent to the original bailouts (z3, both directions): True" in out


def _load(name: str):  # type: ignore[no-untyped-def]
    import importlib.util

    path = next(p for p in EXAMPLES if p.stem == name)
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("name, factory, shapes, guards", [
    ("mlp", "MLP", [(32, 64)], ["x1 == 64"]),
    ("attention", "AttentionBlock", [(2, 16, 64)], ["x2 == 64", "x0 >= 2", "x1 >= 2"]),
    ("cnn", "SmallCNN", [(4, 3, 16, 16)], None),
    ("cat_reshape", "merge_pairs", [(4, 6), (4, 10)], None),
    ("branching", "route", [(32, 8), (8, 4)], ["x1 == y0", "x0 >= 17"]),
])
def test_example_programs_against_eager_and_exact(name: str, factory: str, shapes: list, guards: list | None) -> None:
    import random

    import torch

    import guardsolve
    from guardsolve.trace.divergence import difference

    module = _load(name)
    target = getattr(module, factory)
    fn = target().eval() if isinstance(target, type) else target
    inputs = [torch.randn(s) for s in shapes]
    t = guardsolve.trace(fn, *inputs)
    with torch.no_grad():
        assert torch.allclose(t.output, fn(*inputs), atol=1e-5)
    gs = guardsolve.simplify(t)
    if guards is not None:
        assert [str(c) for c in gs] == guards
    path = guardsolve.simplify(t, explore=False)
    original = guardsolve.print_guards(t.guard_graph())
    rng = random.Random(1)
    for _ in range(25):
        new = [torch.randn([rng.choice([d, d, 1, 0, rng.randint(0, 2 * d)]) for d in s]) for s in shapes]
        try:
            again = guardsolve.trace(fn, *new)
            route = guardsolve.print_guards(again.guard_graph()) == original
            same = difference(t, again) is None
        except Exception:  # eager (or the user's own assert) fails: the trace is not reusable
            route = same = False
        assert path.check(*new) == route, [tuple(x.shape) for x in new]  # the example's path: exact
        assert not gs.check(*new) or same, [tuple(x.shape) for x in new]  # merged routes: sound
        assert gs.check(*new) or not path.check(*new), [tuple(x.shape) for x in new]  # and wider


NOTEBOOK = pathlib.Path(__file__).parent.parent / "examples/tracing_guards.ipynb"


def _cell_outputs(nb: dict) -> list[str]:  # type: ignore[type-arg]
    """Each code cell's text outputs, with what changes from run to run (times, the kernel's
    cell file names, object addresses) normalized."""
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        text = "".join("".join(o.get("text") or o.get("data", {}).get("text/plain", "")) for o in cell["outputs"])
        text = re.sub(r"\d+(?:\.\d+)? (?:ms|s)\b", "<time>", text)
        text = re.sub(r"/\S*ipykernel_\d+/\d+\.py", "<cell>", text)
        out.append(re.sub(r" at 0x[0-9a-f]+", " at 0x...", text))
    return out


def test_notebook_is_committed_with_current_outputs() -> None:
    """A code host shows the notebook's outputs (issue 37, 9): every code cell ran, and the
    guards it shows are what guardsolve computes now."""
    import torch

    import guardsolve

    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] and c["execution_count"] for c in code)
    text = "\n".join(_cell_outputs(nb))
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4))
    assert "\n".join(guardsolve.print_guards(t.guard_graph())) in text
    assert f"{guardsolve.simplify(t, explore=False)}\n" in text and str(guardsolve.simplify(t)) in text


@pytest.mark.slow
def test_notebook_reexecuted_shows_the_committed_guards() -> None:
    """`jupyter nbconvert --execute` (the [notebook] extra) runs it; each cell's outputs, times and
    the kernel's file names aside, are the committed ones (refresh them with `--inplace`)."""
    pytest.importorskip("nbconvert")
    root = pathlib.Path(__file__).parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                               str(NOTEBOOK), "--output-dir", tmp], cwd=root, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        fresh = json.loads((pathlib.Path(tmp) / NOTEBOOK.name).read_text())
    assert _cell_outputs(fresh) == _cell_outputs(json.loads(NOTEBOOK.read_text()))


@pytest.mark.slow
def test_notebook_executes() -> None:
    """examples/tracing_guards.ipynb: the seed's story on PyTorch's rules, run cell by cell
    (`pip install -e '.[notebook]'`)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    root = pathlib.Path(__file__).parent.parent
    nb = nbformat.read(root / "examples/tracing_guards.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(root)}}).execute()
    text = "\n".join(str(o.get("text") or o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    html = "\n".join(o.get("data", {}).get("text/html", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "<Trace of add at a=[4], b=[4]: 3 nodes, 4 bailouts>" in text
    assert "a0 == b0\na0 != 1" in text and "(a0 == 1) or (a0 == b0) or (b0 == 1)" in text
    assert "equivalent to the original bailouts (z3, both directions): True" in text
    assert "<th>guard</th><th>kind</th><th>sources</th>" in html
    assert "<th>Dynamo's guards and their sources</th>" in html  # the torch.compile report renders too
    assert "Dynamo's shape guards: 2 -> 2 minimal" in text


def test_guardset_renders_in_jupyter() -> None:
    import torch

    import guardsolve

    gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)), explore=False)
    html = gs._repr_html_()
    assert html.startswith("<div><b>GuardSet</b>: 2 guards over a0, b0 (minimal)")
    assert "<tr><td><code>a0 == b0</code></td><td>eq</td>" in html and "aten.add.Tensor" not in html
    assert "8 static guards (checked first)" in html and "<code>a.dtype == torch.float32</code>" in html


def test_train_example_trains_as_eager_with_one_compile() -> None:
    script = next(p for p in EXAMPLES if p.name == "train.py")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    steps = [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 5 and "traced" in steps[0] and all("compiled" in s for s in steps[1:])
    for s in steps:
        loss, eager = re.search(r"loss (\S+) \(eager (\S+)\)", s).groups()
        assert abs(float(loss) - float(eager)) <= 1e-5 * max(1.0, abs(float(eager)))
        assert float(re.search(r"within (\S+) of eager", s).group(1)) < 1e-4
    assert "traces 1, compiles 1, calls run eagerly 0" in out.stdout
