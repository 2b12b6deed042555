"""Graph algorithms of the ordering layer: tight-edge reachability, topological order, transitive
closure, and whether a set of edges and disequalities needs the solver at all.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable
from guardsolve.solve.difference import Diseq, Edge, Z


def root_of(parent: dict[str, str], x: str) -> str:
    """The representative of `x` in a union-find forest kept as a parent map (path halving)."""
    while parent.setdefault(x, x) != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


class TightEdges:
    """Which nodes each node reaches by a path of tight edges (reduced weight 0), Z aside.

    A tight path from s to t weighs exactly h[t] - h[s], the least any path can weigh, so
    one bit test answers a distance question that would otherwise be a search. With no
    zero-weight cycle the tight edges form a DAG; reach sets are bitsets indexed within
    each weakly connected component. A component over `limit` nodes (its sets would take
    quadratic memory) and a graph whose tight edges do form a cycle get no sets: callers
    then search as before.

    >>> h = {"a": 0, "b": -1, "c": -2}
    >>> adj = {"a": [Edge("a", "b", -1), Edge("a", "c", -2)], "b": [Edge("b", "c", -1)]}
    >>> t = TightEdges(adj, h)
    >>> t.reaches("a", "c"), t.reaches("c", "a"), sorted(t.redundant)
    (True, False, [('a', 'c')])
    """

    def __init__(self, adj: dict[str, list[Edge]], h: dict[str, int], limit: int = 1 << 14) -> None:
        succ: dict[str, list[str]] = {}
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            return root_of(parent, x)

        for u, es in adj.items():
            if u == Z:
                continue
            out = [e.v for e in es if e.v != Z and e.w + h[u] - h[e.v] == 0]
            succ[u] = out
            for v in out:
                ru, rv = find(u), find(v)
                if ru != rv:
                    parent[ru] = rv
        members: dict[str, list[str]] = defaultdict(list)
        for x in list(parent):
            members[find(x)].append(x)
        self.comp: dict[str, str] = {}
        self.bit: dict[str, int] = {}
        self.reach: dict[str, int] = {}
        self.redundant: set[tuple[str, str]] = set()  # tight edges another tight path implies
        for root, xs in members.items():
            if len(xs) > limit:
                continue
            order = topological_order(succ, set(xs), lambda v: v)
            index = {x: i for i, x in enumerate(order)}
            if any(index[v] <= index[u] for u in xs for v in succ.get(u, ())):
                continue  # NOTE: a tight cycle; solve() unifies those first, so never expected
            for x in xs:
                self.comp[x] = root
                self.bit[x] = 1 << index[x]
            for x in reversed(order):
                acc = 0
                # NOTE: in topological order a successor reachable from another comes after it
                for v in sorted(succ.get(x, ()), key=index.__getitem__):
                    if acc & self.bit[v]:
                        self.redundant.add((x, v))
                    else:
                        acc |= self.bit[v] | self.reach[v]
                self.reach[x] = acc

    def known(self, x: str) -> bool:
        return x in self.reach

    def reaches(self, s: str, t: str) -> bool:
        """Is there a non-empty tight path from s to t (both known)?"""
        return self.comp.get(s) == self.comp.get(t) and bool(self.reach[s] & self.bit[t])


def topological_order(adj: dict[str, list[Any]], nodes: set[str], head: Callable[[Any], str] = lambda e: e.v) -> list[str]:
    """Reverse DFS postorder: a topological order when the graph has no cycle, a good guess
    otherwise. `adj` maps a node to its out-edges; `head` gives an edge's target."""
    seen: set[str] = set()
    post: list[str] = []
    for root in sorted(nodes):
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(adj.get(root, ())))]
        while stack:
            x, it = stack[-1]
            for e in it:
                y = head(e)
                if y not in seen:
                    seen.add(y)
                    stack.append((y, iter(adj.get(y, ()))))
                    break
            else:
                stack.pop()
                post.append(x)
    return post[::-1]


def needs_solver(edges: Iterable[Edge], diseqs: list[Diseq]) -> bool:
    """Can a disequality change what is implied in this component? Then z3 must decide it.

    `edges` are all of the component's edges (kept, bounds through Z and background ones).
    A constraint c is redundant when no integer point satisfies the others and violates c.
    Without disequalities the shortest paths decide that exactly. A disequality `b - a != k`
    whose difference is unbounded on the region where c fails can always be dodged: move far
    along a direction in which every such difference changes (a finite union of hyperplanes
    never covers a convex cone), which leaves the bounded differences alone. So only a
    disequality bounded on that region can matter. The region adds to the graph the
    reverse of a failing edge (`v -> u` for `u -> v`), or both edges of a failing
    disequality's equality. Reachability is taken on the whole graph plus those edges (the
    failing edge is not removed), which over-approximates boundedness: at worst z3 runs
    where it was not needed.

    Below, `x >= 6` is implied by the rest (x == 5 would force y == z == 0), which the
    shortest paths alone cannot see; without that bound nothing makes `y - z` bounded:

    >>> sizes = [Edge(d, Z, 0, background=True) for d in "xyz"]
    >>> es = [Edge("x", "y", -5), Edge("x", "z", -5)]          # x >= y + 5, x >= z + 5
    >>> needs_solver(es + [Edge("x", Z, -6)] + sizes, [Diseq("y", "z", 0, frozenset())])
    True
    >>> needs_solver(es + sizes, [Diseq("y", "z", 0, frozenset())])
    False
    """
    edges = list(edges)
    if not diseqs:
        return False
    # each constraint that may fail: the edges its failure adds, and the disequality it is (if one)
    failing: list[tuple[list[tuple[str, str]], Diseq | None]] = [([(e.v, e.u)], None) for e in edges if not e.background]
    failing += [([(d.u, d.v), (d.v, d.u)], d) for d in diseqs]
    if len(failing) < 2:
        return False
    reach = reach_closure(edges)

    def r(a: str, b: str, extra: list[tuple[str, str]]) -> bool:
        return a == b or b in reach.get(a, ()) or any(
            (x == a or x in reach.get(a, ())) and (b == y or b in reach.get(y, ())) for x, y in extra)

    return any(d is not own and r(d.u, d.v, extra) and r(d.v, d.u, extra)
               for extra, own in failing for d in diseqs)


def reach_closure(edges: list[Edge]) -> dict[str, set[str]]:
    """Every node's set of nodes reachable by a non-empty path (SCCs, then reverse topological order)."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from((e.u, e.v) for e in edges)
    dag = nx.condensation(g)
    members = dag.graph["mapping"]
    below: dict[int, set[str]] = {}
    for c in reversed(list(nx.topological_sort(dag))):
        out: set[str] = set()
        for succ in dag.successors(c):
            out |= dag.nodes[succ]["members"] | below[succ]
        if len(dag.nodes[c]["members"]) > 1:
            out |= dag.nodes[c]["members"]
        below[c] = out
    return {x: below[c] for x, c in members.items()}
