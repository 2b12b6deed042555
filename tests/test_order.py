"""The ordering layer against brute force: shortest paths by Bellman-Ford on small random
difference graphs, with long tight chains (where the layer answers by reach bitsets) and with
the bitsets switched off (`tight_limit=0`, every question a search)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardsolve.solve.difference import INF, Z
from guardsolve.solve.order import OrderLayer
from guardsolve.solve.unify import Conflict
from guardsolve.testing import examples


def _dist(edges: list[tuple[str, str, int]], nodes: list[str], src: str) -> dict[str, float]:
    d = {x: INF for x in nodes}
    d[src] = 0
    for _ in range(len(nodes)):
        for u, v, w in edges:
            if d[u] + w < d[v]:
                d[v] = d[u] + w
    return d


def _random_edges(rng: random.Random) -> tuple[list[str], list[tuple[str, str, int]]]:
    """Edges satisfied at a random point: chains of `<` along sorted values, offsets, bounds."""
    n = rng.randint(2, 14)
    point = {f"x{i}": rng.randint(0, 12) for i in range(n)}
    point[Z] = 0
    names = list(point)
    edges: dict[tuple[str, str], int] = {}
    for _ in range(rng.randint(1, 3 * n)):
        u, v = rng.sample(names, 2)
        slack = rng.choice([0, 0, 0, 1, 2])
        edges[(u, v)] = min(edges.get((u, v), INF), point[v] - point[u] + slack)  # v - u <= w holds
    return names, [(u, v, w) for (u, v), w in edges.items()]


@given(st.integers(0, 2**32), st.sampled_from([0, 1 << 14]))
@settings(max_examples=examples(300))
def test_reduce_keeps_exactly_the_edges_no_other_path_implies(seed: int, limit: int) -> None:
    rng = random.Random(seed)
    names, edges = _random_edges(rng)
    layer = OrderLayer(tight_limit=limit)
    for u, v, w in edges:
        layer.add_edge(u, v, w, {(u, v)})
    try:
        res = layer.solve()
    except Conflict:
        pytest.fail("edges satisfied at a point cannot conflict")
    if res.equalities:
        return  # zero-weight cycles go back to the unifier first
    kept = {(e.u, e.v) for e in res.edges}
    for k, (u, v, w) in enumerate(edges):
        others = edges[:k] + edges[k + 1:]
        implied = _dist(others, names, u)[v] <= w
        assert ((u, v) not in kept) == implied, (u, v, w, edges)
    # NOTE: dropping every implied edge at once loses nothing
    full = {x: _dist(edges, names, x) for x in names}
    left = [(e.u, e.v, e.w) for e in res.edges]
    assert all(_dist(left, names, x) == full[x] for x in names)


@given(st.integers(0, 2**32), st.sampled_from([0, 1 << 14]))
@settings(max_examples=examples(300))
def test_batched_distances_are_exact_up_to_each_limit(seed: int, limit: int) -> None:
    rng = random.Random(seed)
    names, edges = _random_edges(rng)
    layer = OrderLayer(tight_limit=limit)
    for u, v, w in edges:
        layer.add_edge(u, v, w)
    adj = layer._adjacency()
    h = layer._potentials(adj)
    adj = layer._sorted(adj, h)
    if layer._zero_cycles(adj, h):
        return
    queries = [(s, t, rng.randint(-12, 12)) for s in names for t in names if rng.random() < 0.5]
    got = layer._batched(adj, h, queries)
    for s, t, lim in queries:
        true = _dist(edges, names, s)[t] if s in h and t in h else (0 if s == t else INF)
        widest = max(q[2] for q in queries if q[:2] == (s, t))
        if true <= widest:
            assert got[(s, t)] == true, (s, t, lim, edges)
        else:
            assert got[(s, t)] in (INF, true), (s, t, lim, edges)
