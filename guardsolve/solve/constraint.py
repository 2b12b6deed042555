"""Minimal constraints and how they print: each `str(c)` is a Python expression over dims.

>>> order = DimOrder(["a0", "b0", "x0"])
>>> print(render_eq(order, "b0", "a0", 3), render_order(order, "b0", "a0", -1), render_ne(order, Z, "a0", 1), sep=" | ")
b0 == a0 + 3 | a0 < b0 | a0 != 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from guardsolve.guards.expr import Atom, Formula, Or, Poly, Rel, Const
from guardsolve.solve.difference import Z

KIND_RANK = {"eq": 0, "order": 1, "ne": 2, "general": 3}


class DimOrder:
    """The canonical order of dims: input order, then dim index."""

    def __init__(self, dims: list[str]):
        self.rank = {d: i for i, d in enumerate(dims)}

    def key(self, a: Atom) -> tuple:
        if isinstance(a, str):
            return (0, self.rank.get(a, len(self.rank)), a)
        return (1, a.render(self.key))

    def first(self, x: str, y: str) -> bool:
        return self.key(x) <= self.key(y)


@dataclass(frozen=True, slots=True)
class Constraint:
    """One minimal guard: its kind, its formula over dims, its text and the nodes it stands for.

    Slotted: a large graph keeps hundreds of thousands.
    """

    kind: str  # eq | order | ne | general
    formula: Formula
    text: str
    prov: frozenset[int]
    dims: tuple[str, ...]
    # NOTE: how a report prints a disjunction of more routes than a person reads (`readable`:
    # the example's route and how many more); `text` stays the whole guard, as Python
    shown: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text

    def sort_key(self, order: DimOrder) -> tuple:
        return (KIND_RANK[self.kind], [order.key(d) for d in self.dims], self.text)

    def short(self, width: int = 100) -> str:
        """The text, or for a long `one of` guard (see `lines`) its first line and dims:
        `one of 42 routes over x0, x1, lo0` (where a message has one line for it)."""
        head = self.lines(width, full=True)
        if len(head) == 1:
            return self.text
        return f"{head[0].rstrip(':')} routes over {', '.join(self.dims)}"

    def lines(self, width: int = 100, full: bool = False) -> list[str]:
        """How a report prints it: the text, or a long `(route) or (route) or ...` (merged
        routes of many operands) one route to a line, its conjuncts joined by commas; past a
        reader's count of routes, the example's route and how many more (`shown`, set by
        `readable`), unless `full`.

        >>> from guardsolve.guards.expr import conj, disj, rel
        >>> x, y = Poly.var("x0"), Poly.var("y0")
        >>> f = disj([conj([rel("eq", x, Poly.const(k)), rel("ge", y, Poly.const(k))]) for k in range(3)])
        >>> print("\\n".join(Constraint("general", f, render_formula(f, DimOrder(["x0", "y0"])), frozenset(), ("x0", "y0")).lines(40)))
        one of 3:
            x0 == 0, y0 >= 0
            x0 == 1, y0 >= 1
            x0 == 2, y0 >= 2
        >>> Constraint("general", f, render_formula(f, DimOrder(["x0", "y0"])), frozenset(), ("x0", "y0")).short(40)
        'one of 3 routes over x0, y0'
        """
        f = self.formula
        if self.shown and not full:
            return list(self.shown)
        if len(self.text) <= width or not isinstance(f, Or) or len(f.args) < 3:
            return [self.text]
        order = DimOrder(list(self.dims))
        rows = sorted(row_text(getattr(a, "args", [a]), order) for a in f.args)
        return [f"one of {len(rows)}:"] + [f"    {r}" for r in rows]


def row_text(parts: Iterable[Formula], order: DimOrder) -> str:
    """One route of a `one of` guard: its equalities of dims as chains (`a0 == b0 == c0`, as
    Python reads it), then the rest, comma-separated."""
    parent: dict[str, str] = {}

    def find(d: str) -> str:
        while parent.get(d, d) != d:
            d = parent[d]
        return d

    rest = []
    for b in parts:
        lin = b.poly.nonconst() if isinstance(b, Rel) and b.op == "eq" and b.poly.constant == 0 else {}
        if len(lin) == 2 and sorted(lin.values()) == [-1, 1] and all(len(m) == 1 and isinstance(m[0], str) for m in lin):
            u, v = (m[0] for m in lin)
            parent.setdefault(u, u)
            parent.setdefault(v, v)
            parent[find(u)] = find(v)
        else:
            rest.append(render_formula(b, order))
    chains: dict[str, list[str]] = {}
    for d in parent:
        chains.setdefault(find(d), []).append(d)
    texts = [" == ".join(sorted(ds, key=order.key)) for ds in chains.values()]
    return ", ".join(sorted(texts, key=lambda t: order.key(t.split(" ")[0])) + sorted(rest))


def _plus(name: str, k: int) -> str:
    return name if k == 0 else (f"{name} + {k}" if k > 0 else f"{name} - {-k}")


def render_eq(order: DimOrder, x: str, r: str, k: int) -> str:
    """`x == r + k` with r the earlier dim (printed `r == x` when k is 0)."""
    return f"{r} == {x}" if k == 0 else f"{x} == {_plus(r, k)}"


def render_ne(order: DimOrder, u: str, v: str, k: int) -> str:
    """`v - u != k`."""
    if u == Z:
        return f"{v} != {k}"
    if v == Z:
        return f"{u} != {-k}"
    if k == 0:
        p, q = (u, v) if order.first(u, v) else (v, u)
        return f"{p} != {q}"
    if order.first(u, v):  # later v: v != u + k
        return f"{v} != {_plus(u, k)}"
    return f"{u} != {_plus(v, -k)}"


def render_order(order: DimOrder, u: str, v: str, w: int) -> str:
    """`v - u <= w`, the earlier dim on the left."""
    if u == Z:
        return f"{v} <= {w}"
    if v == Z:
        return f"{u} >= {-w}"
    if order.first(v, u):  # v <= u + w
        return f"{v} < {u}" if w == -1 else f"{v} <= {_plus(u, w)}"
    # u >= v - w
    return f"{u} > {v}" if w == -1 else f"{u} >= {_plus(v, -w)}"


def render_formula(f: Formula, order: DimOrder) -> str:
    """Any normalized formula as Python source: `a0*a1 == b0`, `x0 % 8 == 0`, `(a) or (b)`."""
    if isinstance(f, Const):
        return str(f.value)
    if isinstance(f, Rel):
        return _render_rel(f, order.key)
    parts = sorted(render_formula(a, order) for a in f.args)
    sep = " or " if isinstance(f, Or) else " and "
    return sep.join(f"({p})" for p in parts)


def _side(terms: dict, const: int, key: Callable[[Atom], tuple]) -> str:
    if const:
        terms = {**terms, (): const}
    if not terms:
        return "0"
    if len(terms) == 1:
        (m, c), = terms.items()
        if c == 1 and len(m) == 1 and not isinstance(m[0], str):
            return m[0].render(key)  # a lone division needs no parentheses
    return Poly.of(terms).render(key)


def _render_rel(r: Rel, key: Callable[[Atom], tuple]) -> str:
    p = r.poly
    pos = {m: c for m, c in p.nonconst().items() if c > 0}
    neg = {m: -c for m, c in p.nonconst().items() if c < 0}
    k = p.constant
    if r.op in ("eq", "ne"):
        sym = "==" if r.op == "eq" else "!="
        first = min((a for m in p.nonconst() for a in m), key=key, default=None)
        if not pos or (neg and any(first in m for m in neg)):
            pos, neg, k = neg, pos, -k
        return f"{_side(pos, 0, key)} {sym} {_side(neg, -k, key)}"
    if not pos:  # k <= N reads better as N >= k
        return f"{_side(neg, 0, key)} >= {k}"
    if k == 1:
        return f"{_side(pos, 0, key)} < {_side(neg, 0, key)}"
    if k > 0:
        return f"{_side(pos, k, key)} <= {_side(neg, 0, key)}"
    return f"{_side(pos, 0, key)} <= {_side(neg, -k, key)}"

