"""Stage 3 of simplify: comparisons as a difference-constraint graph, with no solver.

An edge `u -> v` of weight `w` means `v - u <= w`; the node `Z` stands for the constant 0, so
`x <= 16` is `Z -> x (16)` and `x >= 17` is `x -> Z (-17)`. Shortest paths decide implication
exactly for this fragment. Disequalities `v - u != k` that touch a bound tighten it
(`x >= 0, x != 0, x != 1` gives `x >= 2`); zero-weight cycles are equalities handed back to the
unifier; the rest is a transitive reduction (every edge implied by the others goes).

>>> layer = OrderLayer()
>>> layer.add_edge(Z, "x", 16, {"x <= 16"}); layer.add_edge("x", Z, -17, {"x >= 17"})
>>> layer.solve()
Traceback (most recent call last):
...
guardsolve.unify.Conflict: ['x <= 16', 'x >= 17']
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

from guardsolve.unify import Conflict

Z = ""  # the zero node
INF = float("inf")


@dataclass
class Edge:
    u: str
    v: str
    w: int
    prov: set = field(default_factory=set)  # atom ids it stands for
    background: bool = False  # `x >= 0` for a size: never printed


@dataclass(frozen=True)
class Diseq:
    u: str
    v: str
    k: int  # v - u != k
    prov: frozenset


@dataclass
class OrderResult:
    edges: list[Edge]
    diseqs: list[tuple[Diseq, bool]]  # (diseq, bounded: the interval of v - u is finite)
    equalities: list[tuple[str, str, int, set]]  # v == u + k, with provenance
    implied: set  # atom ids implied by what is kept
    lower: Callable[[str], float] = lambda x: -INF  # the tightest implied lower bound of a dim


class OrderLayer:
    """Bounds, differences and disequalities over dims (plus the zero node `Z`)."""

    def __init__(self) -> None:
        self.edges: dict[tuple[str, str], Edge] = {}
        self.diseqs: dict[tuple[str, str, int], Diseq] = {}
        self.implied: set = set()

    def add_edge(self, u: str, v: str, w: int, prov: Iterable[Hashable] = (), background: bool = False) -> None:
        """Record `v - u <= w`; `prov` names the atoms it stands for."""
        prov = set(prov)
        old = self.edges.get((u, v))
        if old is None or w < old.w:
            if old is not None and not old.background:
                self.implied |= old.prov
            self.edges[(u, v)] = Edge(u, v, w, prov, background)
        elif w == old.w and not old.background:
            old.prov |= prov
        elif not background:
            self.implied |= prov

    def add_diseq(self, u: str, v: str, k: int, prov: Iterable[Hashable]) -> None:
        """Record `v - u != k`."""
        # NOTE: `v - u != k` and `u - v != -k` are one constraint; store one orientation.
        key = (v, u, -k) if v == Z or (u != Z and v < u) else (u, v, k)
        old = self.diseqs.get(key)
        self.diseqs[key] = Diseq(*key, frozenset(prov) | (old.prov if old else frozenset()))

    # -- shortest paths --------------------------------------------------------------------

    def _adjacency(self) -> dict[str, list[Edge]]:
        adj: dict[str, list[Edge]] = defaultdict(list)
        for e in self.edges.values():
            adj[e.u].append(e)
        return adj

    def _potentials(self, adj: dict[str, list[Edge]]) -> dict[str, int]:
        """Bellman-Ford (queue based) from a virtual source; raises Conflict on a negative cycle."""
        nodes = set(adj) | {e.v for e in self.edges.values()}
        h = {x: 0 for x in nodes}
        pred: dict[str, Edge] = {}
        count = {x: 0 for x in nodes}
        queue = list(nodes)
        inq = set(nodes)
        qi = 0
        while qi < len(queue):
            x = queue[qi]
            qi += 1
            inq.discard(x)
            for e in adj.get(x, ()):
                if h[x] + e.w < h[e.v]:
                    h[e.v] = h[x] + e.w
                    pred[e.v] = e
                    count[e.v] += 1
                    if count[e.v] > len(nodes):
                        raise Conflict(sorted(self._cycle(pred, e.v), key=str))
                    if e.v not in inq:
                        inq.add(e.v)
                        queue.append(e.v)
        return h

    @staticmethod
    def _cycle(pred: dict[str, Edge], start: str) -> set:
        x = start
        for _ in range(len(pred) + 1):
            x = pred[x].u
        ids: set = set()
        y = x
        while True:
            e = pred[y]
            ids |= e.prov
            y = e.u
            if y == x:
                return ids

    @staticmethod
    def _dijkstra(adj: dict[str, list[Edge]], h: dict[str, int], src: str,
                  skip: Edge | None = None, goal: str | None = None, limit: float = INF) -> dict[str, int]:
        """Exact distances from src (reduced by potentials h); stops early at `goal` or `limit`."""
        dist: dict[str, int] = {src: 0}
        heap = [(0, src)]
        done: set[str] = set()
        while heap:
            d, x = heapq.heappop(heap)
            if x in done:
                continue
            done.add(x)
            if x == goal:
                break
            if goal is not None and d > limit + h[src] - h[goal]:
                break
            for e in adj.get(x, ()):
                if e is skip:
                    continue
                nd = d + e.w + h[x] - h[e.v]
                if nd < dist.get(e.v, INF):
                    dist[e.v] = nd
                    heapq.heappush(heap, (nd, e.v))
        return {x: d - h[src] + h[x] for x, d in dist.items() if x in done or x == goal}

    # -- the layer -------------------------------------------------------------------------

    def solve(self) -> OrderResult:
        """Tighten, detect equalities and contradictions, and reduce transitively."""
        while True:
            adj = self._adjacency()
            h = self._potentials(adj)
            eqs = self._zero_cycles(adj, h)
            if eqs:
                return OrderResult([], [], eqs, self.implied)
            if not self._tighten(adj, h):
                break
        adj = self._adjacency()
        h = self._potentials(adj)
        kept = self._reduce(adj, h)
        adj = self._adjacency()
        diseqs = []
        cache: dict[str, dict[str, int]] = {}
        for d in self.diseqs.values():
            up = self._dist(adj, h, cache, d.u, d.v)
            lo = self._dist(adj, h, cache, d.v, d.u)
            diseqs.append((d, up < INF and lo < INF))
        return OrderResult(kept, diseqs, [], self.implied, lambda x: -self._dist(adj, h, cache, x, Z))

    def _dist(self, adj: dict[str, list[Edge]], h: dict[str, int], cache: dict[str, dict[str, int]],
              u: str, v: str) -> float:
        if u not in h or v not in h:
            return 0 if u == v else INF
        if u not in cache:
            cache[u] = self._dijkstra(adj, h, u)
        return cache[u].get(v, INF)

    def _zero_cycles(self, adj: dict[str, list[Edge]], h: dict[str, int]) -> list[tuple[str, str, int, set]]:
        """Nodes on a zero-weight cycle are equal up to an offset (SCCs of tight edges)."""
        import networkx as nx

        tight = nx.DiGraph()
        for e in self.edges.values():
            if e.w + h[e.u] - h[e.v] == 0:
                tight.add_edge(e.u, e.v)
        out = []
        for comp in nx.strongly_connected_components(tight):
            if len(comp) < 2:
                continue
            prov: set = set()
            for e in self.edges.values():
                if e.u in comp and e.v in comp and e.w + h[e.u] - h[e.v] == 0:
                    prov |= e.prov
            members = sorted(comp, key=lambda x: (x != Z, x))
            base = members[0]
            for x in members[1:]:
                out.append((x, base, h[x] - h[base], prov))
        return out

    def _tighten(self, adj: dict[str, list[Edge]], h: dict[str, int]) -> bool:
        """Apply disequalities at the boundary of their interval; drop implied ones."""
        changed = False
        cache: dict[str, dict[str, int]] = {}
        for key, d in list(self.diseqs.items()):
            up = self._dist(adj, h, cache, d.u, d.v)   # v - u <= up
            lo = -self._dist(adj, h, cache, d.v, d.u)  # v - u >= lo
            if d.k > up or d.k < lo:
                self.implied |= d.prov
                del self.diseqs[key]
            elif up == lo == d.k:
                raise Conflict(sorted(d.prov, key=str) + ["the bounds around it"])
            elif d.k == up:
                self.add_edge(d.u, d.v, d.k - 1, set(d.prov))
                del self.diseqs[key]
                changed = True
            elif d.k == lo:
                self.add_edge(d.v, d.u, -d.k - 1, set(d.prov))
                del self.diseqs[key]
                changed = True
        # NOTE: applying every tightening from one set of distances is sound: the graph only
        # gets tighter, so a stale bound can make an added edge redundant, never wrong.
        return changed

    def _reduce(self, adj: dict[str, list[Edge]], h: dict[str, int]) -> list[Edge]:
        """Remove, one at a time, each non-background edge implied by the remaining ones."""
        order = sorted((e for e in self.edges.values() if not e.background), key=lambda e: (-abs(e.w), e.u, e.v))
        for e in order:
            d = self._dijkstra(adj, h, e.u, skip=e, goal=e.v, limit=e.w).get(e.v, INF)
            if d <= e.w:
                self.implied |= e.prov
                adj[e.u] = [x for x in adj[e.u] if x is not e]
                del self.edges[(e.u, e.v)]
        return [e for e in self.edges.values() if not e.background]
