"""Stage 1 of simplify: turn a guard graph into normalized atomic constraints with provenance.

The symbolic rule table evaluates int nodes to polynomials and bool nodes to formulas; each
bailout contributes `formula` (or its negation when `expect=False`), split at `and`; each
division contributes `divisor != 0` (the graph would raise otherwise). Tautologies such as
`a0 == a0` fold away, and `b0 == a0` and `a0 == b0` become one atom:

    bool_bailout(int_eq(a0, 1), expect=False)   ->  Rel(ne, a0 - 1)
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Sequence

from guardsolve.errors import UnsatisfiableGuardsError
from guardsolve.guards.expr import (
    FALSE, TRUE, Const, Formula, Poly, Rel, conj, conjuncts, disj, divide, negate, normal, rel,
)
from guardsolve.guards.shape import value_bailouts
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op


@dataclass(frozen=True, slots=True)
class Atom:
    """One normalized constraint and the graph nodes (indices) it stands for."""

    formula: Formula
    prov: frozenset[int]


@dataclass
class Normalized:
    """The atoms of a guard graph plus its dims (in canonical order) and which are sizes."""

    atoms: list[Atom]
    dims: list[str]
    sizes: frozenset[str]
    tautologies: list[int]
    value_guards: list[int]


DIVISIONS = frozenset({Op.INT_FLOORDIV, Op.INT_MOD})
_OPAQUE = frozenset({Op.BOOL_OPAQUE, Op.VAR_TO_BOOL})


@dataclass
class Found:
    """What `symbolic_rules` meets on its walk, in node order: each bailout's formula (as
    expected: negated for `expect=False`), each division's divisor, the input dims."""

    bailouts: list[Formula] = field(default_factory=list)
    divisors: list[Poly] = field(default_factory=list)
    dims: list[str] = field(default_factory=list)
    sizes: set[str] = field(default_factory=set)


def symbolic_rules(found: Found | None = None) -> RuleTable:
    """Rules over polynomials and formulas; `found` collects bailouts, divisors and dims.

    NOTE: hash-consed: equal inputs give one shared result (a graph repeats `== 1` tests and
    constants), so the repeats cost a lookup here and an identity test downstream; a repeated
    `expect=False` bailout negates its formula once.
    """
    found = found if found is not None else Found()
    consts: dict[int, Poly] = {}
    compared: dict[tuple[str, Poly, Poly], Formula] = {}
    negated: dict[Formula, Formula] = {}

    def const(*, val: int) -> Poly:
        p = consts.get(val)
        if p is None:
            p = consts[val] = Poly.const(val)
        return p

    def cmp(name: str):  # type: ignore[no-untyped-def]
        def rule(a: Poly, b: Poly) -> Formula:
            key = (name, a, b)
            f = compared.get(key)
            if f is None:
                f = compared[key] = rel(name, a, b)
            return f
        return rule

    def bailout(b: Formula, *, expect: bool) -> Formula:
        if not expect:
            n = negated.get(b)
            if n is None:
                n = negated[b] = negate(b)
            b = n
        found.bailouts.append(b)
        return b

    def division(kind: str):  # type: ignore[no-untyped-def]
        def rule(a: Poly, b: Poly) -> Poly:
            found.divisors.append(b)
            return divide(kind, a, b)
        return rule

    def placeholder(*, name: str) -> Poly:
        found.dims.append(name)
        found.sizes.add(name)
        return Poly.var(name)

    def arg(*, name: str, val: int | None = None) -> Poly:  # NOTE: `val`, the traced value, is not a guard
        found.dims.append(name)
        return Poly.var(name)

    return RuleTable("symbolic", {
        Op.INT_CONST: const,
        Op.BOOL_CONST: lambda *, val: Const(val),
        Op.INT_PLACEHOLDER: placeholder,
        Op.INT_ARG: arg,
        Op.INT_ADD: lambda a, b: a + b,
        Op.INT_SUB: lambda a, b: a - b,
        Op.INT_MUL: lambda a, b: a * b,
        Op.INT_FLOORDIV: division("floordiv"),
        Op.INT_MOD: division("mod"),
        **{op: cmp(op.value[4:]) for op in (Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE)},
        Op.BOOL_NOT: negate,
        Op.BOOL_AND: lambda a, b: conj([a, b]),
        Op.BOOL_OR: lambda a, b: disj([a, b]),
        Op.BOOL_BAILOUT: bailout,
        # NOTE: data-dependent bailouts are set aside by `normalize`; this value is never used.
        Op.BOOL_OPAQUE: lambda *, name: TRUE,
    })


def normalize(graph: Graph, *, validate: bool = True, nodes: Sequence[int] | None = None,
              values: set[int] | None = None) -> Normalized:
    """Atoms of a guard graph; raises `UnsatisfiableGuardsError` on a bailout that is always false.

    `validate=False` skips re-checking a graph that `guard_graph` has just checked or built.
    `nodes`: only these nodes (in order, closed under inputs: one of `outline`'s components);
    then `values` must be the whole graph's data-dependent bailouts (`Outline.values`).
    """
    found = Found()
    interpret(graph, symbolic_rules(found), {}, validate=validate, nodes=nodes)
    every = graph.nodes
    walked: Sequence[int] = range(len(every)) if nodes is None else nodes
    if values is None:
        # NOTE: a graph without data-dependent bools (the usual case) needs no taint scan
        values = value_bailouts(graph) if any(n.op in _OPAQUE for n in every) else set()
    bailouts = [i for i in walked if every[i].op is Op.BOOL_BAILOUT]
    divisions = [i for i in walked if every[i].op in DIVISIONS] if found.divisors else []
    # each division's `divisor != 0` first, then the bailouts, each in node order
    raw: list[tuple[Formula, int]] = [(normal(Rel("ne", d)), i) for d, i in zip(found.divisors, divisions)]
    raw += [(f, i) for f, i in zip(found.bailouts, bailouts) if i not in values] if values else \
        list(zip(found.bailouts, bailouts))
    atoms: dict[Formula, set[int]] = {}
    tautologies: list[int] = []
    for f, i in raw:
        if type(f) is Const:
            if not f.value:
                raise UnsatisfiableGuardsError([describe(graph, i)], "this guard can never hold")
            tautologies.append(i)
            continue
        for c in conjuncts(f):
            s = atoms.get(c)
            if s is None:
                atoms[c] = {i}
            else:
                s.add(i)
    return Normalized([Atom(f, frozenset(p)) for f, p in atoms.items()], found.dims, frozenset(found.sizes),
                      tautologies, sorted(values) if nodes is None else sorted(values.intersection(bailouts)))


_CONSTS = frozenset({Op.INT_CONST, Op.BOOL_CONST})


@dataclass
class Outline:
    """What one pass over a guard graph finds before any node is normalized.

    `components`: node indices that share no value but constants, each in node order with the
    constants it reads, ordered by first node; `dims`/`sizes` as `normalize` gives them;
    `values`: the data-dependent bailouts; `bailouts`: how many bailouts there are.
    """

    components: list[Sequence[int]]
    dims: list[str]
    sizes: frozenset[str]
    values: set[int]
    bailouts: int


def outline(graph: Graph) -> Outline:
    """Split a (validated) guard graph into components that normalize and simplify alone: no
    node of one reads a value of another, constants aside. Each atom of a component mentions
    only its dims, so the atom-level `parts` never cross components.

    >>> g = Graph.parse("a0 = int_placeholder(name=a0)\\nb0 = int_placeholder(name=b0)\\n"
    ...                 "i0 = int_const(val=1)\\ni1 = int_eq(a0, i0)\\nbool_bailout(i1, expect=False)\\n"
    ...                 "i2 = int_eq(b0, i0)\\nbool_bailout(i2, expect=True)")
    >>> [list(c) for c in outline(g).components]
    [[0, 2, 3, 4], [1, 2, 5, 6]]
    """
    nodes = graph.nodes
    parent: dict[int, int] = {}  # union-find over components, each named by its first node
    groups: dict[int, list[int]] = {}  # a root's nodes, unsorted, with the constants they read
    of: dict[str, int] = {}  # value name -> its component when made; ~index for a constant
    of_get = of.get
    dims: list[str] = []
    sizes: set[str] = set()
    opaque = False
    count = 0
    for i, n in enumerate(nodes):
        op = n.op
        if op in _CONSTS:
            of[n.outputs[0]] = ~i
            continue
        c = -1
        read: list[int] | None = None
        for x in n.inputs:
            k = of_get(x)
            if k is None:
                continue  # NOTE: undefined: validate names it; the walk that needs it fails there
            if k < 0:
                if read is None:
                    read = [~k]
                else:
                    read.append(~k)
                continue
            p = parent[k]
            if p != k:
                while p != parent[p]:
                    p = parent[p]
                parent[k] = k = p
            if c < 0:
                c = k
            elif k != c:
                c, k = (c, k) if c < k else (k, c)
                parent[k] = c  # NOTE: the root stays the first node; the longer list takes the other
                first, later = groups[c], groups.pop(k)
                if len(first) < len(later):
                    later += first
                    groups[c] = later
                else:
                    first += later
        if c < 0:
            c = parent[i] = i
            group = groups[i] = [i]
        else:
            group = groups[c]
            group.append(i)
        if read is not None:
            group += read
        for o in n.outputs:
            of[o] = c
        if op is Op.BOOL_BAILOUT:
            count += 1
        elif op is Op.INT_PLACEHOLDER:
            dims.append(n.params["name"])
            sizes.add(n.params["name"])
        elif op is Op.INT_ARG:
            dims.append(n.params["name"])
        elif op in _OPAQUE:
            opaque = True
    del of, parent
    ordered = sorted(groups.items())  # NOTE: a group's key is the smallest of its non-constant nodes
    components: list[Sequence[int]] = [array("q", sorted(set(g))) for _, g in ordered]
    return Outline(components, dims, frozenset(sizes), value_bailouts(graph) if opaque else set(), count)


def describe(graph: Graph, i: int) -> str:
    """A node with its source location, for messages."""
    n = graph.nodes[i]
    loc = n.meta.get("loc")
    line = n.meta.get("line")
    where = f" at {loc}" if loc is not None else (f" (line {line})" if line is not None else "")
    return f"`{n}`{where}"
