"""Flattening an op's arguments and results: PyTorch's pytree semantics, on the hot path.

`torch.utils._pytree.tree_flatten` defines a recursive closure on every call, a reference
cycle (function, cells, annotations) that only the cyclic collector frees: ~5 per traced op,
most of the garbage a long trace leaves. Arguments and results are nearly always tuples,
lists and dicts of leaves, which `flatten` takes with plain recursion; any other pytree
container (a `torch.return_types` structseq, a namedtuple, an OrderedDict) takes pytree itself,
whose spec `unflatten` also accepts.

>>> leaves, spec = flatten(((1, None), {"dim": [2, 3]}))
>>> leaves
[1, None, 2, 3]
>>> unflatten([4, 5, 6, 7], spec)
((4, 5), {'dim': [6, 7]})
"""

from __future__ import annotations

from typing import Any

from torch.utils._pytree import SUPPORTED_NODES, TreeSpec, tree_flatten

# A spec: None for a leaf, else (container type, dict keys or None, child specs).
Spec = Any


class _Other(Exception):
    """A container the fast path does not take: pytree flattens the whole tree."""


def flatten(tree: Any) -> tuple[list[Any], Spec]:
    """The leaves of `tree` in pytree's order, and a spec `unflatten` rebuilds it from."""
    leaves: list[Any] = []
    try:
        return leaves, _flat(tree, leaves)
    except _Other:
        return tree_flatten(tree)


def _flat(x: Any, leaves: list[Any]) -> Spec:
    t = type(x)
    if t is tuple or t is list:
        return (t, None, tuple([_flat(v, leaves) for v in x]))
    if t is dict:
        return (dict, tuple(x), tuple([_flat(v, leaves) for v in x.values()]))
    if t in SUPPORTED_NODES or isinstance(x, tuple):  # NOTE: structseqs and namedtuples are tuples
        raise _Other
    leaves.append(x)
    return None


def unflatten(leaves: list[Any], spec: Spec) -> Any:
    """The tree `spec` describes, with `leaves` in its leaves' places."""
    if isinstance(spec, TreeSpec):
        return spec.unflatten(leaves)
    it = iter(leaves)
    out = _build(it, spec)
    if next(it, it) is not it:
        raise ValueError("unflatten: more leaves than the spec holds")
    return out


def _build(it: Any, spec: Spec) -> Any:
    if spec is None:
        return next(it)
    t, keys, children = spec
    values = [_build(it, c) for c in children]
    if t is dict:
        return dict(zip(keys, values))
    return t(values) if t is tuple else values
