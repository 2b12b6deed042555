"""The most dynamic spec that holds, written as torch.export's `dynamic_shapes` with its `Dim`s."""

from __future__ import annotations

from typing import Any, Mapping, Sequence
from guardsolve.pytorch.judgement import DimClass, ExportSpec, MIN_DYNAMIC, Member, dim_order


def spec_layout(k: DimClass, taken: set[str]) -> tuple[str, int | None, int | None, dict[str, tuple[int, int]]]:
    """The class as torch.export writes it: (root Dim name, its min, its max, member -> (coef, offset)).

    The root is `t` with `k.root = stride*t + residue`, shifted so that every offset is >= 0.
    """
    members = {m: (a * k.stride, a * k.residue + b) for m, (a, b) in k.members.items()}
    shift = min(b // a for a, b in members.values())
    members = {m: (a, b - a * shift) for m, (a, b) in members.items()}
    lo = -((k.residue - k.lo) // k.stride) + shift
    hi = (k.hi - k.residue) // k.stride + shift if k.hi is not None else None
    named = [m for m, ab in members.items() if ab == (1, 0)]
    if named:
        return named[0], (lo if lo > MIN_DYNAMIC else None), hi, members
    name = f"_{next(iter(k.members))}"
    while name in taken:
        name = "_" + name
    return name, lo, hi, members


def _dim_line(name: str, lo: int | None, hi: int | None) -> str:
    return f"{name} = Dim(\"{name}\"" + (f", min={lo}" if lo is not None else "") + (f", max={hi}" if hi is not None else "") + ")"


def class_lines(k: DimClass) -> list[str]:
    """torch.export's words for a class: its root `Dim` line (when not the default) and members."""
    name, lo, hi, members = spec_layout(k, set())
    lines = [_dim_line(name, lo, hi)] if (lo is not None or hi is not None or name not in members) else []
    return lines + [f"{m} = {Member(name, a, b).render()}" for m, (a, b) in members.items() if m != name]


def member_line(k: DimClass, d: str) -> str:
    name, _, _, members = spec_layout(k, set())
    a, b = members[d]
    return f"{d} = {Member(name, a, b).render()}"


def spec_of(gs: Any, dynamic: Sequence[str], classes: Mapping[str, DimClass], e: Mapping[str, int]) -> ExportSpec:
    dims: dict[str, Member] = {}
    roots: dict[str, tuple[int | None, int | None]] = {}
    taken = set(gs.dims)
    order = dim_order(gs)
    for k in sorted(classes.values(), key=lambda k: order.key(k.root)):
        name, lo, hi, members = spec_layout(k, taken)
        taken.add(name)
        roots[name] = (lo, hi)
        dims.update((m, Member(name, *ab)) for m, ab in members.items())
    for d in dynamic:
        dims.setdefault(d, Member(None, 1, e[d]))
    return render_spec(gs, {d: dims[d] for d in dynamic}, roots)


def render_spec(gs: Any, dims: Mapping[str, Member], roots: Mapping[str, tuple[int | None, int | None]]) -> ExportSpec:
    """The spec of each declared dim as a `Member` of a root `Dim` (roots in the order given,
    members in signature order), as source and as live `torch.export.Dim` objects."""
    import torch.export

    order = dim_order(gs)
    lines = ["from torch.export import Dim"]
    used = {m.root for m in dims.values()}
    for name, (lo, hi) in roots.items():
        if name not in used:
            continue
        lines.append(_dim_line(name, lo, hi))
        lines += [f"{m} = {dims[m].render()}" for m in sorted(dims, key=order.key) if dims[m].root == name and m != name]
    entries = []
    for p in gs.signature:
        free = {i: d for i, d in enumerate(p.dims) if p.kind == "tensor" and d in dims and dims[d].root is not None}
        entries.append(f"\"{p.name}\": {{" + ", ".join(f"{i}: {d}" for i, d in free.items()) + "}" if free
                       else f"\"{p.name}\": None")
    lines.append("dynamic_shapes = {" + ", ".join(entries) + "}")
    source = "\n".join(lines)
    ns: dict[str, Any] = {"Dim": torch.export.Dim}
    exec(source.split("\n", 1)[1], ns)
    return ExportSpec(source, ns["dynamic_shapes"], dict(dims), {r: roots[r] for r in roots if r in used})
