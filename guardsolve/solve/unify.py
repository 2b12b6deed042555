"""Stage 2 of simplify: a union-find unifier for `x == y + k` and `x == c`, with no solver.

Classes of dims are kept with integer offsets (`val(x) = val(root) + off(x)`) and an optional
constant. Each `union`/`bind` remembers the atom that asked for it, so a contradiction names
the chain of constraints that conflict.

>>> uf = UnionFind(["a0", "b0", "c0"])
>>> uf.union("b0", "a0", 0, 1); uf.union("c0", "b0", 3, 2)
>>> uf.find("c0")[1] - uf.find("a0")[1]
3
>>> uf.bind("a0", 4, 5); uf.value("c0")
7
"""

from __future__ import annotations

from collections import deque
from typing import Hashable, Iterable


class Conflict(Exception):
    """Two facts about one class disagree; `ids` are the atoms on the conflicting chain."""

    def __init__(self, ids: list[Hashable]):
        super().__init__(ids)
        self.ids = ids


class UnionFind:
    """Weighted union-find with path compression and union by size."""

    def __init__(self, items: Iterable[str]):
        self.parent: dict[str, str] = {}
        self.off: dict[str, int] = {}
        self.size: dict[str, int] = {}
        self.const: dict[str, int] = {}  # root -> value of the root
        self._edges: dict[str, list[tuple[str, Hashable]]] = {}
        self._bound_by: dict[str, Hashable] = {}  # dim -> atom id that bound it
        for x in items:
            self.add(x)

    def add(self, x: str) -> None:
        if x not in self.parent:
            self.parent[x], self.off[x], self.size[x] = x, 0, 1
            self._edges[x] = []

    def find(self, x: str) -> tuple[str, int]:
        """The root of x and `off` with `val(x) == val(root) + off`."""
        path = []
        while self.parent[x] != x:
            path.append(x)
            x = self.parent[x]
        root, acc = x, 0
        for y in reversed(path):  # compress, nearest to the root first
            acc += self.off[y]
            self.off[y], self.parent[y] = acc, root
        return root, (self.off[path[0]] if path else 0)

    def value(self, x: str) -> int | None:
        root, off = self.find(x)
        return self.const[root] + off if root in self.const else None

    def union(self, x: str, y: str, k: int, why: Hashable) -> None:
        """Record `x == y + k`."""
        rx, ox = self.find(x)
        ry, oy = self.find(y)
        if rx == ry:
            if ox - oy != k:
                raise Conflict(self._path(x, y) + [why])
            return
        self._edges[x].append((y, why))
        self._edges[y].append((x, why))
        # val(rx) = val(ry) + oy + k - ox
        d = oy + k - ox
        if self.size[rx] > self.size[ry]:
            rx, ry, d = ry, rx, -d
        # attach rx under ry: val(rx) = val(ry) + d
        if rx in self.const and ry in self.const and self.const[rx] != self.const[ry] + d:
            raise Conflict(self._path_to_bound(x) + self._path_to_bound(y) + [why])
        if rx in self.const and ry not in self.const:
            self.const[ry] = self.const[rx] - d
        self.const.pop(rx, None)
        self.parent[rx], self.off[rx] = ry, d
        self.size[ry] += self.size[rx]

    def bind(self, x: str, c: int, why: Hashable) -> None:
        """Record `x == c`."""
        root, off = self.find(x)
        if root in self.const:
            if self.const[root] + off != c:
                raise Conflict(self._path_to_bound(x) + [why])
            return
        self.const[root] = c - off
        self._bound_by[x] = why

    def classes(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for x in self.parent:
            out.setdefault(self.find(x)[0], []).append(x)
        return out

    # -- explaining conflicts -------------------------------------------------------------

    def _bfs(self, start: str, goal: set[str]) -> list[Hashable]:
        prev: dict[str, tuple[str, Hashable] | None] = {start: None}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            if x in goal:
                ids: list[Hashable] = []
                while prev[x] is not None:
                    x, why = prev[x]  # type: ignore[misc]
                    ids.append(why)
                return ids
            for y, why in self._edges[x]:
                if y not in prev:
                    prev[y] = (x, why)
                    queue.append(y)
        return []

    def _path(self, x: str, y: str) -> list[Hashable]:
        return self._bfs(x, {y})

    def _path_to_bound(self, x: str) -> list[Hashable]:
        ids = self._bfs(x, set(self._bound_by))
        reached = [d for d in self._bound_by if self.find(d)[0] == self.find(x)[0]]
        # NOTE: the BFS stops at the nearest bound dim; add the atom that bound it.
        near = [d for d in reached if self._bfs(x, {d}) == ids]
        return ids + ([self._bound_by[near[0]]] if near else [])
