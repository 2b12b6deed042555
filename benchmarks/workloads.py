"""Benchmark workloads: the mixed comparison set, chains of adds, and a scalable mixed generator.

Every workload records bailouts with the truth values seen at a fixed assignment, as a trace would.
"""

from __future__ import annotations

import operator
import random
from typing import Any, Callable, Iterator

from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op

CMP: dict[str, Callable[[int, int], bool]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}


def mixed_comparisons(n: int, seed: int = 0) -> tuple[list[int], list[tuple[str, int, Any]]]:
    """The `mixed-N` workload: (values, [(op, i, j-or-('const', c))]) in recording order."""
    rng = random.Random(seed)
    vals = [2 + i // 4 for i in range(n)]
    out: list[tuple[str, int, Any]] = [("eq", i, i + 1) for i in range(n - 1)]
    out += [("lt", rng.randrange(n), rng.randrange(n)) for _ in range(n)]
    out += [("ne", rng.randrange(n), rng.randrange(n)) for _ in range(n)]
    out += [("ge", i, ("const", 2)) for i in range(n)]
    out += [("eq" if vals[i] == vals[i + 2] else "lt", i, i + 2) for i in range(n - 2)]
    return vals, out


def mixed_guard_graph(n: int, seed: int = 0) -> Graph:
    """`mixed-N` as a guard graph over dims x0..x{n-1}."""
    vals, comps = mixed_comparisons(n, seed)
    g = Graph()
    names = [g.emit(Op.INT_PLACEHOLDER, (), name=f"x{i}") for i in range(n)]
    g.meta["example"] = dict(zip(names, vals))  # NOTE: as a trace records its example sizes
    consts: dict[int, str] = {}
    for op, i, j in comps:
        if isinstance(j, tuple):
            c = j[1]
            if c not in consts:
                consts[c] = g.emit(Op.INT_CONST, (), val=c)
            rhs, rv = consts[c], c
        else:
            rhs, rv = names[j], vals[j]
        b = g.emit(Op(f"int_{op}"), (names[i], rhs))
        g.emit(Op.BOOL_BAILOUT, (b,), expect=CMP[op](vals[i], rv))
    return g


def scale_guard_graph(n_bailouts: int, seed: int = 0, group: int = 8) -> Graph:
    """About `n_bailouts` bailouts mixing every constraint kind, over groups of `group` dims.

    Per group: equalities, `!= 1`, orderings with offsets, bounds, a divisibility and a product,
    plus redundant repeats, like the guards of many small tensors.
    """
    rng = random.Random(seed)
    g = Graph()
    count = 0
    k = 0
    while count < n_bailouts:
        base = [rng.choice([2, 3, 4, 8, 16]) for _ in range(group)]
        vals = [base[i] if i % 3 else base[max(0, i - 1)] for i in range(group)]
        names = [g.emit(Op.INT_PLACEHOLDER, (), name=f"g{k}_{i}") for i in range(group)]
        g.meta.setdefault("example", {}).update(zip(names, vals))  # NOTE: as a trace records them
        k += 1
        for expr, value in _group_guards(rng, g, names, vals):
            g.emit(Op.BOOL_BAILOUT, (expr,), expect=value)
            count += 1
    return g


def _group_guards(rng: random.Random, g: Graph, names: list[str], vals: list[int]) -> Iterator[tuple[str, bool]]:
    def const(c: int) -> str:
        return g.emit(Op.INT_CONST, (), val=c)

    def cmp(op: str, a: str, av: int, b: str, bv: int) -> tuple[str, bool]:
        return g.emit(Op(f"int_{op}"), (a, b)), CMP[op](av, bv)

    n = len(names)
    for i in range(1, n):  # equalities / disequalities between neighbours
        yield cmp("eq", names[i - 1], vals[i - 1], names[i], vals[i])
    for i in range(n):  # broadcasting-style `== 1` tests, twice (redundant repeat)
        for _ in range(2):
            yield cmp("eq", names[i], vals[i], const(1), 1)
    for _ in range(n // 2):  # orderings, some with offsets
        i, j = rng.randrange(n), rng.randrange(n)
        off = rng.choice([0, 0, 3])
        s = g.emit(Op.INT_ADD, (names[j], const(off)))
        yield cmp("le", names[i], vals[i], s, vals[j] + off)
    yield cmp("ge", names[0], vals[0], const(2), 2)  # bounds
    yield cmp("le", names[1], vals[1], const(64), 64)
    m = g.emit(Op.INT_MOD, (names[2], const(2)))  # divisibility
    yield cmp("eq", m, vals[2] % 2, const(0), 0)
    p = g.emit(Op.INT_MUL, (names[3], names[4]))  # a product, as reshape makes
    yield cmp("eq", p, vals[3] * vals[4], names[5], vals[5])
