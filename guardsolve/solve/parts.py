"""Independent parts: atoms grouped by shared dims (transitively), each part simplified alone."""

from __future__ import annotations

from typing import Sequence

from guardsolve.guards.normalize import Normalized


def parts(norm: Normalized) -> list[Normalized]:
    """The atoms split into independent parts (no dim shared between parts), in the order of
    their first atoms; each part's dims in input order. Dims no atom mentions are in none.

    Every stage keeps to the dims an atom mentions (substitution by representatives of a
    class, whose equalities are atoms of the same part; orderings; z3 components), so each
    part simplifies alone to what the whole graph gives it; `simplify_graph` merges them.
    """
    rank = {d: i for i, d in enumerate(norm.dims)}
    out = []
    for idx in shared_dims_components([list(a.formula.dims()) for a in norm.atoms]):
        atoms = [norm.atoms[i] for i in idx]
        dims = sorted(set().union(*(a.formula.dims() for a in atoms)), key=rank.__getitem__)
        out.append(Normalized(atoms, dims, norm.sizes.intersection(dims), [], []))
    return out


def shared_dims_components(dims: Sequence[Sequence[str]]) -> list[list[int]]:
    """Indices of items grouped by shared dims (transitively), each group sorted, the groups
    ordered by their first item.

    >>> shared_dims_components([["a"], ["b"], ["a", "c"], [], ["c"]])
    [[0, 2, 4], [1], [3]]
    """
    parent = list(range(len(dims)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, ds in enumerate(dims):
        for d in ds:
            j = owner.setdefault(d, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)  # NOTE: the root is the group's first item
    groups: dict[int, list[int]] = {}
    for i in range(len(dims)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())
