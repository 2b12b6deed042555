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
    from guardsolve.trace.tracer import difference

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
