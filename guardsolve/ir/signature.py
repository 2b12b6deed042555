"""The input signature of a trace: which parameters are tensors (and their rank) or ints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One traced parameter; `dims` are the guard-graph names of its sizes (or its own name)."""

    name: str
    kind: str  # "tensor" or "int"
    rank: int = 0
    dims: tuple[str, ...] = ()


def dim_names(params: list[tuple[str, str, int]]) -> tuple[Param, ...]:
    """Name every input dim: `a0`, `b0`; `{name}_{d}` when the name ends in a digit.

    Names never collide, with each other or with a parameter's name (the compiled check binds
    both): a clash falls back to the `{name}_{d}` form, then adds underscores.

    >>> [p.dims for p in dim_names([("a", "tensor", 2), ("x1", "tensor", 1), ("n", "int", 0)])]
    [('a0', 'a1'), ('x1_0',), ('n',)]
    >>> [p.dims for p in dim_names([("x", "tensor", 1), ("x0", "tensor", 1)])]
    [('x_0',), ('x0_0',)]
    """
    used = {name for name, _, _ in params}
    out: list[Param] = []
    for name, kind, rank in params:
        if kind == "int":
            out.append(Param(name, kind, 0, (name,)))
            continue
        sep = "_" if name[-1].isdigit() else ""
        dims = [f"{name}{sep}{d}" for d in range(rank)]
        if any(d in used for d in dims):
            sep = "_"
            while True:
                dims = [f"{name}{sep}{d}" for d in range(rank)]
                if not any(d in used for d in dims):
                    break
                sep += "_"
        used.update(dims)
        out.append(Param(name, kind, rank, tuple(dims)))
    return tuple(out)
