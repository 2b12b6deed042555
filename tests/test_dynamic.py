"""Declared-dynamic dims: violations with torch.export fixes, and a dynamic_shapes spec that
torch.export.export accepts."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch

import guardsolve


def _module(fn: Callable[..., Any]) -> torch.nn.Module:
    """Wrap a function so torch.export sees its parameter names."""
    if isinstance(fn, torch.nn.Module):
        return fn
    names = list(inspect.signature(fn).parameters)
    ns: dict[str, Any] = {"f": fn}
    exec(f"def forward(self, {', '.join(names)}):\n    return f({', '.join(names)})", ns)
    return type("Wrapped", (torch.nn.Module,), {"forward": ns["forward"]})()


def _branch(x):
    if x.shape[0] > 16:
        return x * 2
    return x


CASES = [
    # a0 != 1 needs no fix: torch.export assumes dynamic dims are >= 2
    ("equal", lambda a, b: a + b, [(4,), (4,)], ["a0", "b0"], {"a0 == b0": "equal"}),
    ("offset", lambda a, b: a[1:] + b, [(5,), (4,)], ["a0", "b0"], {"b0 == a0 - 1": "equal", "a0 != 2": "excluded"}),
    ("bound", _branch, [(20,)], ["x0"], {"x0 >= 17": "bound"}),
    ("divisible", lambda x: x.view(-1, 8), [(32,)], ["x0"], {"x0 % 8 == 0": "divisible"}),
    ("static", torch.nn.Linear(8, 4), [(3, 8)], ["input0", "input1"], {"input1 == 8": "static"}),
    ("general", lambda a, b: a[: b.shape[0]] * 2 if a.shape[0] > b.shape[0] else a, [(6,), (2,)], ["a0", "b0"],
     {"a0 > b0": "general"}),
]


@pytest.mark.parametrize("name, fn, shapes, dynamic, expected", CASES, ids=[c[0] for c in CASES])
def test_violations_and_export(name: str, fn: Callable[..., Any], shapes: list, dynamic: list[str],
                               expected: dict[str, str]) -> None:
    args = [torch.randn(s) for s in shapes]
    gs = guardsolve.simplify(guardsolve.trace(fn, *args))
    found = {v.constraint.text: v.kind for v in gs.violations(dynamic)}
    assert found == expected, str(gs)
    spec = gs.export_spec(dynamic)
    assert spec.source.startswith("from torch.export import Dim\n") and "dynamic_shapes = {" in spec.source
    ep = torch.export.export(_module(fn), tuple(args), dynamic_shapes=spec.spec)
    assert ep is not None


def test_suggestions_in_torch_export_words() -> None:
    gs = guardsolve.simplify(guardsolve.trace(lambda x: x.view(-1, 8), torch.randn(32)))
    (v,) = gs.violations(["x0"])
    assert v.suggestion == 'x0 must be a multiple of 8: a derived dim 8*k (k = Dim("k"))'
    assert "_x0_k = Dim(\"_x0_k\", min=1)\nx0 = 8 * _x0_k" in gs.export_spec(["x0"]).source
    gs = guardsolve.simplify(guardsolve.trace(_branch, torch.randn(20)))
    assert str(gs.violations(["x0"])[0]) == 'x0 >= 17: x0 needs min=17: Dim("x0", min=17)'


def test_examples_export() -> None:
    import importlib.util
    import pathlib

    root = pathlib.Path(__file__).parent.parent / "examples"
    for name, attr, shapes, dynamic in [("mlp", "MLP", [(32, 64)], ["x0"]),
                                        ("attention", "AttentionBlock", [(2, 16, 64)], ["x0", "x1"]),
                                        ("branching", "route", [(32, 8), (8, 4)], ["x0", "x1", "y0", "y1"])]:
        spec = importlib.util.spec_from_file_location(f"ex_{name}", root / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        target = getattr(module, attr)
        fn = target().eval() if isinstance(target, type) else target
        args = [torch.randn(s) for s in shapes]
        gs = guardsolve.simplify(guardsolve.trace(fn, *args))
        torch.export.export(_module(fn), tuple(args), dynamic_shapes=gs.export_spec(dynamic).spec)
