"""The tracer's flatten/unflatten against PyTorch's pytree, whose semantics it must keep."""

from __future__ import annotations

import collections
import gc
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from guardsolve.ir.aten import Ref, refs
from guardsolve.ir.flat import flatten, unflatten

Point = collections.namedtuple("Point", "x y")

TREES: list[Any] = [
    1, None, (), [], {},
    ((torch.ones(2), 3), {"dim": [1, 2], "keepdim": False}),
    ([None, (1.5, "s")], {"b": 1, "a": {"c": (torch.float32,)}}),
    (torch.Size([2, 3]), [torch.Size([])]),            # NOTE: a pytree node of its own
    torch.ones(3, 2).max(dim=0),                        # a structseq: pytree's own path
    (Point(1, [2, 3]), collections.OrderedDict(a=1)),   # namedtuple, OrderedDict
]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: type(t).__name__)
def test_same_leaves_and_round_trip_as_pytree(tree: Any) -> None:
    leaves, spec = flatten(tree)
    want, want_spec = tree_flatten(tree)
    assert len(leaves) == len(want) and all(a is b for a, b in zip(leaves, want))
    marks = [object() for _ in leaves]
    rebuilt = unflatten(marks, spec)
    expected = tree_unflatten(marks, want_spec)
    assert type(rebuilt) is type(expected)
    assert tree_flatten(rebuilt)[0] == marks and tree_flatten(rebuilt)[1] == tree_flatten(expected)[1]


def test_leaf_count_is_checked() -> None:
    _, spec = flatten((1, [2]))
    with pytest.raises(ValueError):
        unflatten([1, 2, 3], spec)


def test_no_cyclic_garbage_per_call() -> None:
    """The point of the module: pytree's tree_flatten leaves a reference cycle per call."""
    tree = ((torch.ones(2), 3), {"dim": [1, 2]})
    for _ in range(5):  # NOTE: earlier tests' garbage (a failed trace's frames) may take several passes
        if gc.collect() == 0:
            break
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(100):
            unflatten(*flatten(tree))
            refs(((Ref("a"), [Ref("b"), Ref("a")]), {"x": Ref("c")}))
        assert gc.collect() < 10
    finally:
        if was:
            gc.enable()


def test_refs_in_first_appearance_order() -> None:
    assert refs(((Ref("b"), [Ref("a"), Ref("b")]), {"k": (Ref("c"), 1)})) == ["b", "a", "c"]
