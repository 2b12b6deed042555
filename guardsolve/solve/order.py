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
guardsolve.solve.unify.Conflict: ['x <= 16', 'x >= 17']
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Hashable, Iterable
from guardsolve.solve.unify import Conflict
from guardsolve.solve.difference import Diseq, Edge, INF, OrderResult, Z
from guardsolve.solve.tight import TightEdges, root_of, topological_order


class OrderLayer:
    """Bounds, differences and disequalities over dims (plus the zero node `Z`)."""

    def __init__(self, tight_limit: int = 1 << 14) -> None:
        self.tight_limit = tight_limit  # the largest component given reach bitsets (`TightEdges`)
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

    @staticmethod
    def _sorted(adj: dict[str, list[Edge]], h: dict[str, int]) -> dict[str, list[Edge]]:
        """Each node's out-edges by increasing reduced weight, so searches can stop early
        (Z's fan-out to every bounded dim would otherwise be scanned by every search)."""
        for u, es in adj.items():
            es.sort(key=lambda e: e.w + h[u] - h[e.v])
        return adj

    def _potentials(self, adj: dict[str, list[Edge]]) -> dict[str, int]:
        """Bellman-Ford (queue based) from a virtual source; raises Conflict on a negative cycle."""
        nodes = set(adj) | {e.v for e in self.edges.values()}
        h = {x: 0 for x in nodes}
        pred: dict[str, Edge] = {}
        count = {x: 0 for x in nodes}
        # NOTE: starting in topological order settles an acyclic graph in one pass (from an
        # arbitrary order, a long chain of `<` costs a pass per link).
        queue = topological_order(adj, nodes)
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
    def _search(adj: dict[str, list[Edge]], h: dict[str, int], src: str,
                targets: dict[str, float] | None = None, radius: float = INF, back: bool = False,
                avoid: str | None = None) -> dict[str, int]:
        """Exact distances from src (to src when `back`) of the nodes settled before stopping.

        Dijkstra on weights reduced by the potentials h (never negative). It stops past reduced
        distance `radius`, or once every node of `targets` (node -> its own radius) is settled
        or out of its radius. Among equal distances it goes depth first, so along a chain of
        tight edges it reaches the far end without first settling everything else at the same
        distance. `back` walks edges backwards, over an adjacency of in-edges (`_reverse`).
        `avoid`: a node the search never enters (the distances are then those of paths around it).
        """
        left = {t: r for t, r in targets.items() if t != src} if targets is not None else None
        if left is not None:
            radius = min(radius, max(left.values(), default=-1))
        dist: dict[str, int] = {src: 0}
        heap = [(0, 0, src)]
        done: dict[str, int] = {}
        tick = 0
        while heap:
            d, _, x = heapq.heappop(heap)
            if x in done:
                continue
            if d > radius:
                break
            done[x] = d - h[src] + h[x] if not back else d + h[src] - h[x]
            if left is not None:
                left.pop(x, None)
                if radius > d and any(r < d for r in left.values()):
                    # NOTE: targets out of their own radius are answered (not within): drop them
                    left = {t: r for t, r in left.items() if r >= d}
                    radius = max(left.values(), default=-1)
                if not left:
                    break
            for e in adj.get(x, ()):
                y = e.u if back else e.v
                nd = d + e.w + h[e.u] - h[e.v]
                if nd > radius:
                    break  # NOTE: adjacency is sorted by reduced weight (see _sorted)
                if y == avoid:
                    continue
                if nd < dist.get(y, INF):
                    dist[y] = nd
                    tick -= 1
                    heapq.heappush(heap, (nd, tick, y))
        return done

    @staticmethod
    def _reverse(adj: dict[str, list[Edge]], h: dict[str, int]) -> dict[str, list[Edge]]:
        """In-edges per node, sorted by reduced weight."""
        radj: dict[str, list[Edge]] = defaultdict(list)
        for es in adj.values():
            for e in es:
                radj[e.v].append(e)
        for es in radj.values():
            es.sort(key=lambda e: e.w + h[e.u] - h[e.v])
        return radj

    # -- the layer -------------------------------------------------------------------------

    def solve(self) -> OrderResult:
        """Tighten, detect equalities and contradictions, and reduce transitively."""
        only: set[str] | None = None
        while True:
            adj = self._adjacency()
            h = self._potentials(adj)
            adj = self._sorted(adj, h)
            eqs = self._zero_cycles(adj, h)
            if eqs:
                return OrderResult([], [], eqs, self.implied)
            touched = self._tighten(adj, h, only)
            if not touched:
                break
            only = self._affected(touched)
        adj = self._adjacency()
        h = self._potentials(adj)
        kept, to_z, from_z = self._reduce(self._sorted(adj, h), h)
        # x >= 1 is implied when a path x -> Z weighs at most -1
        return OrderResult(kept, list(self.diseqs.values()), [], self.implied, lambda x: to_z.get(x, INF) <= -1,
                           {x: -d for x, d in to_z.items()}, dict(from_z))

    def _batched(self, adj: dict[str, list[Edge]], h: dict[str, int],
                 queries: list[tuple[str, str, int]]) -> dict[tuple[str, str], float]:
        """dist(s, t) for each query (s, t, limit): exact when it is <= limit, else INF or exact.

        Most queries need no search: h[t] - h[s] is a lower bound on dist(s, t), exact when a
        tight path joins them (`TightEdges`), and paths through Z weigh at least
        dist(s, Z) + dist(Z, t), which two searches from Z give for every node at once.
        NOTE: keyed by (s, t) alone; queries differing only in limit share the widest.
        """
        widest: dict[tuple[str, str], int] = {}
        for s, t, limit in queries:
            widest[(s, t)] = max(widest.get((s, t), limit), limit)
        out: dict[tuple[str, str], float] = {}
        if not widest:
            return out
        from_z, to_z = self._from_to_z(adj, h)
        tight = TightEdges(adj, h, self.tight_limit)
        by_source: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for (s, t), limit in widest.items():
            if s == t:
                out[(s, t)] = 0
            elif s not in h or t not in h:
                out[(s, t)] = INF
            elif s == Z:
                out[(s, t)] = from_z.get(t, INF)
            elif t == Z:
                out[(s, t)] = to_z.get(s, INF)
            elif h[t] - h[s] > limit:
                out[(s, t)] = INF  # NOTE: above the limit: "INF or exact" allows INF
            elif tight.known(s) and tight.known(t) and tight.reaches(s, t):
                out[(s, t)] = h[t] - h[s]
            else:
                by_source[s].append((t, limit))
        for s, targets in by_source.items():
            # NOTE: a shortest path avoids Z or passes it once, weighing dist(s, Z) + dist(Z, t);
            # searching around Z keeps each search to s's own part of the graph, where through
            # Z's fan-out to every bounded node each search would cost as much as the graph.
            found = self._search(adj, h, s, {t: limit + h[s] - h[t] for t, limit in targets}, avoid=Z)
            for t, limit in targets:
                via = to_z.get(s, INF) + from_z.get(t, INF)
                # NOTE: t unsettled lies past the limit around Z; then only a light way via Z is exact
                out[(s, t)] = min(found[t], via) if t in found else (via if via <= limit else INF)
        return out

    def _from_to_z(self, adj: dict[str, list[Edge]], h: dict[str, int],
                   radj: dict[str, list[Edge]] | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """dist(Z, x) and dist(x, Z) for every x that has one (`radj`: the in-edges, if built)."""
        if Z not in h:
            return {}, {}
        return self._search(adj, h, Z), self._search(radj or self._reverse(adj, h), h, Z, back=True)

    def _zero_cycles(self, adj: dict[str, list[Edge]], h: dict[str, int]) -> list[tuple[str, str, int, set]]:
        """Nodes on a zero-weight cycle are equal up to an offset (SCCs of tight edges)."""
        import networkx as nx

        tight = nx.DiGraph()
        for e in self.edges.values():
            if e.w + h[e.u] - h[e.v] == 0:
                tight.add_edge(e.u, e.v)
        comps = [c for c in nx.strongly_connected_components(tight) if len(c) > 1]
        which = {x: k for k, c in enumerate(comps) for x in c}
        provs: list[set] = [set() for _ in comps]
        for e in self.edges.values():  # NOTE: one pass for all components, not one per component
            k = which.get(e.u)
            if k is not None and which.get(e.v) == k and e.w + h[e.u] - h[e.v] == 0:
                provs[k] |= e.prov
        out = []
        for comp, prov in zip(comps, provs):
            members = sorted(comp, key=lambda x: (x != Z, x))
            base = members[0]
            for x in members[1:]:
                out.append((x, base, h[x] - h[base], prov))
        return out

    def _affected(self, touched: set[str]) -> set[str]:
        """The nodes whose distances edges added at `touched` may have changed.

        A shortest path visits Z at most once, and apart from Z it runs inside one weakly
        connected component of the graph without Z at each end; so dist(s, t) can only change
        when s's or t's component (Z aside) holds a node an added edge touches.
        """
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            return root_of(parent, x)

        for u, v in self.edges:
            if u != Z and v != Z:
                ru, rv = find(u), find(v)
                if ru != rv:
                    parent[ru] = rv
        roots = {find(x) for x in touched if x != Z}
        return {x for x in parent if find(x) in roots} | {x for x in touched if x != Z}

    def _tighten(self, adj: dict[str, list[Edge]], h: dict[str, int], only: set[str] | None = None) -> set[str]:
        """Apply disequalities at the boundary of their interval; drop implied ones. Returns the
        nodes of the edges it added (empty: nothing changed).

        `only`: the nodes whose distances changed since the last call (`_affected`); a
        disequality elsewhere was left alone then and would be again.
        """
        touched: set[str] = set()
        # NOTE: only the comparison with k matters, so searches stop past k; one search per
        # source answers all of its queries.
        todo = [(key, d) for key, d in self.diseqs.items() if only is None or d.u in only or d.v in only]
        dist = self._batched(adj, h, [q for _, d in todo for q in ((d.u, d.v, d.k), (d.v, d.u, -d.k))])
        for key, d in todo:
            up = dist[(d.u, d.v)]     # v - u <= up
            lo = -dist[(d.v, d.u)]    # v - u >= lo
            if d.k > up or d.k < lo:
                self.implied |= d.prov
                del self.diseqs[key]
            elif up == lo == d.k:
                raise Conflict(sorted(d.prov, key=str) + ["the bounds around it"])
            elif d.k == up:
                self.add_edge(d.u, d.v, d.k - 1, set(d.prov))
                del self.diseqs[key]
                touched |= {d.u, d.v}
            elif d.k == lo:
                self.add_edge(d.v, d.u, -d.k - 1, set(d.prov))
                del self.diseqs[key]
                touched |= {d.u, d.v}
        # NOTE: applying every tightening from one set of distances is sound: the graph only
        # gets tighter, so a stale bound can make an added edge redundant, never wrong.
        return touched

    def _reduce(self, adj: dict[str, list[Edge]], h: dict[str, int]
                ) -> tuple[list[Edge], dict[str, int], dict[str, int]]:
        """Remove every non-background edge implied by the remaining ones; return the kept
        edges and each node's distances to and from Z (which removing implied edges does not
        change).

        `u -> v (w)` is implied when a path from u other than the edge itself reaches v with
        weight <= w. Bounds (edges from or to Z) are decided by one full search each way from
        Z. For the other edges, a path through Z weighs at least dist(u, Z) + dist(Z, v), and
        a path avoiding Z weighs at least h[v] - h[u], exactly that along tight edges
        (`TightEdges`): so a tight edge is implied exactly when another tight path joins its ends
        or the way through Z is as light, and any edge with a tight path beside it is
        implied. What is left is decided by one search per source node.
        NOTE: with no zero-weight cycle left (solve() unified them), a path back through the
        edge itself is strictly heavier, and two edges cannot each be the other's only
        alternative, so removing every implied edge at once is the same as one at a time.
        """
        radj = self._reverse(adj, h)
        from_z, to_z = self._from_to_z(adj, h, radj)
        tight = TightEdges(adj, h, self.tight_limit)
        by_source: dict[str, list[Edge]] = defaultdict(list)
        implied: list[Edge] = []
        for e in self.edges.values():
            if e.background:
                continue
            if e.v == Z:  # a lower bound: another way out of u down to Z
                alt = min((f.w + to_z[f.v] for f in adj.get(e.u, ()) if f is not e and f.v in to_z), default=INF)
                if alt <= e.w:
                    implied.append(e)
            elif e.u == Z:  # an upper bound: another way from Z into v
                alt = min((from_z[f.u] + f.w for f in radj.get(e.v, ()) if f is not e and f.u in from_z), default=INF)
                if alt <= e.w:
                    implied.append(e)
            elif to_z.get(e.u, INF) + from_z.get(e.v, INF) <= e.w:
                implied.append(e)  # NOTE: a walk this light cannot use e itself (it would close a cycle > 0)
            elif tight.known(e.u) and tight.known(e.v):
                if e.w + h[e.u] - h[e.v] == 0:
                    if (e.u, e.v) in tight.redundant:
                        implied.append(e)
                elif tight.reaches(e.u, e.v):
                    implied.append(e)
                else:
                    by_source[e.u].append(e)
            else:
                by_source[e.u].append(e)
        for u, out in by_source.items():
            implied += self._implied_out_edges(adj, h, u, out)
        for e in implied:
            self.implied |= e.prov
            del self.edges[(e.u, e.v)]
        return [e for e in self.edges.values() if not e.background], to_z, from_z

    @staticmethod
    def _implied_out_edges(adj: dict[str, list[Edge]], h: dict[str, int], u: str, out: list[Edge]) -> list[Edge]:
        """Which of u's out-edges another path from u makes redundant (Dijkstra on reduced weights).

        The search stops as soon as every out-edge is decided; among equal distances it goes
        depth first, so along a chain of tight edges it reaches the far end without first
        settling everything else at the same distance. It never enters Z: the caller has found
        every edge in `out` lighter than the way through Z (dist(u, Z) + dist(Z, v) > w).
        """
        pending = {e.v: e for e in out}
        cap = {e.v: e.w + h[u] - h[e.v] for e in out}  # reduced weight of each out-edge
        radius = max(cap.values())
        dist: dict[str, int] = {u: 0}
        heap = [(0, 0, u)]
        done: set[str] = set()
        found: list[Edge] = []
        tick = 0
        while heap and pending:
            d, _, x = heapq.heappop(heap)
            if x in done:
                continue
            if d > radius:
                break
            done.add(x)
            for f in adj.get(x, ()):
                nd = d + f.w + h[x] - h[f.v]
                if nd > radius:
                    break  # NOTE: adjacency is sorted by reduced weight (see _sorted)
                if f.v == Z:
                    continue  # NOTE: a way through Z weighs over each edge asked about (see _reduce)
                e = pending.get(f.v)
                if e is not None and f is not e and nd <= cap[f.v]:
                    found.append(pending.pop(f.v))
                    radius = max((cap[v] for v in pending), default=-1)
                if nd < dist.get(f.v, INF):
                    dist[f.v] = nd
                    tick -= 1
                    heapq.heappush(heap, (nd, tick, f.v))
        return found
