"""PyTorch's shape logic written over guarded ints: every decision it makes is a bailout.

These helpers take sizes whose items are `GuardedInt`s (from traced tensors) or plain ints
(literals in user code, which decide nothing). For example `broadcast_sizes` records, for each
right-aligned pair, `x == 1`, `y == 1` and finally `x == y`, exactly as the notebook does.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

from guardsolve.errors import TraceError
from guardsolve.trace.guarded import GuardedInt, GuardedSize, as_int
from guardsolve.trace.record import Recorder


def broadcast_sizes(rec: Recorder, lhs: Sequence[Any], rhs: Sequence[Any]) -> GuardedSize:
    """Right-aligned broadcasting of two sizes."""
    out: list[Any] = []
    for x, y in itertools.zip_longest(reversed(lhs), reversed(rhs), fillvalue=None):
        # NOTE: a missing dim, or a dim against itself, broadcasts to the other side whatever
        # its value: no decision, so no bailout.
        if y is None or (isinstance(x, GuardedInt) and x.same_as(y)):
            out.append(x)
        elif x is None:
            out.append(y)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            if not (x == y):
                raise TraceError(f"sizes {_show(lhs)} and {_show(rhs)} do not broadcast")
            out.append(x)
    return GuardedSize.make(rec, list(reversed(out)))


def _show(size: Sequence[Any]) -> str:
    return str([d.value if isinstance(d, GuardedInt) else d for d in size])


def product(rec: Recorder, items: Sequence[Any]) -> Any:
    """The product of sizes; plain ints fold, guarded ones record `int_mul`."""
    acc: Any = 1
    for d in items:
        if isinstance(acc, GuardedInt):
            acc = acc * d
        elif isinstance(d, GuardedInt):
            acc = d if acc == 1 else d * acc
        else:
            acc = acc * d
    return acc


def wrap_dim(d: Any, rank: int, what: str = "dim") -> int:
    """A static dim index in range(rank); negative counts from the end."""
    if isinstance(d, GuardedInt):
        d = d.specialize()
    if not -max(rank, 1) <= d < max(rank, 1):
        raise TraceError(f"{what} {d} out of range for a rank-{rank} tensor")
    return d % max(rank, 1)


def infer_size(rec: Recorder, numel: Any, sizes: Sequence[Any]) -> list[Any]:
    """`view`/`reshape` sizes with one `-1` inferred; records the checks PyTorch makes."""
    sizes = list(sizes)
    holes = [i for i, s in enumerate(sizes) if not isinstance(s, GuardedInt) and s == -1]
    if len(holes) > 1:
        raise TraceError("only one dimension can be inferred")
    for s in sizes:
        if not isinstance(s, GuardedInt) and s < -1:
            raise TraceError(f"invalid shape dimension {s}")
    known = product(rec, [s for i, s in enumerate(sizes) if i not in holes])
    if holes:
        if known == 0:
            raise TraceError("cannot infer a -1 dimension next to a zero-size dimension")
        if numel % known != 0:
            raise TraceError(f"shape {_show(sizes)} is invalid for input of size {_value(numel)}")
        sizes[holes[0]] = numel // known
    elif not (numel == known):
        raise TraceError(f"shape {_show(sizes)} is invalid for input of size {_value(numel)}")
    return sizes


def _value(v: Any) -> Any:
    return v.value if isinstance(v, GuardedInt) else v


def clamp_bound(v: Any, size: Any, default: Any) -> Any:
    """Python slice semantics for one bound: negative counts from the end, then clamp to [0, size]."""
    if v is None:
        return default
    if v < 0:
        v = v + size
        if v < 0:
            return 0
        return v
    if v > size:
        return size
    return v


def slice_bounds(rec: Recorder, start: Any, stop: Any, size: Any) -> tuple[GuardedInt, GuardedInt]:
    lo = clamp_bound(start, size, 0)
    hi = clamp_bound(stop, size, size)
    if hi < lo:
        hi = lo
    return as_int(rec, lo), as_int(rec, hi)


def wrap_index(rec: Recorder, i: Any, size: Any) -> GuardedInt:
    """An integer index into a dim of `size`, range-checked as PyTorch does."""
    if i < 0:
        if i + size < 0:
            raise TraceError(f"index {_value(i)} is out of bounds for size {_value(size)}")
        return as_int(rec, i + size)
    if not (i < size):
        raise TraceError(f"index {_value(i)} is out of bounds for size {_value(size)}")
    return as_int(rec, i)


def same_sizes(a: Sequence[Any], b: Sequence[Any], what: str) -> None:
    """Assert equal sizes dim by dim (one bailout per dim)."""
    if len(a) != len(b):
        raise TraceError(f"{what}: ranks differ ({len(a)} vs {len(b)})")
    for x, y in zip(a, b):
        if not (x == y):
            raise TraceError(f"{what}: sizes {_show(a)} and {_show(b)} differ")
