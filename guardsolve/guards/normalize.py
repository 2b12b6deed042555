"""Stage 1 of simplify: turn a guard graph into normalized atomic constraints with provenance.

The symbolic rule table evaluates int nodes to polynomials and bool nodes to formulas; each
bailout contributes `formula` (or its negation when `expect=False`), split at `and`; each
division contributes `divisor != 0` (the graph would raise otherwise). Tautologies such as
`a0 == a0` fold away, and `b0 == a0` and `a0 == b0` become one atom:

    bool_bailout(int_eq(a0, 1), expect=False)   ->  Rel(ne, a0 - 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


_DIVISIONS = frozenset({Op.INT_FLOORDIV, Op.INT_MOD})
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

    def arg(*, name: str) -> Poly:
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


def normalize(graph: Graph, *, validate: bool = True) -> Normalized:
    """Atoms of a guard graph; raises `UnsatisfiableGuardsError` on a bailout that is always false.

    `validate=False` skips re-checking a graph that `guard_graph` has just checked or built.
    """
    found = Found()
    interpret(graph, symbolic_rules(found), {}, validate=validate)
    nodes = graph.nodes
    # NOTE: a graph without data-dependent bools (the usual case) needs no taint scan
    values = value_bailouts(graph) if any(n.op in _OPAQUE for n in nodes) else set()
    bailouts = [i for i, n in enumerate(nodes) if n.op is Op.BOOL_BAILOUT]
    divisions = [i for i, n in enumerate(nodes) if n.op in _DIVISIONS] if found.divisors else []
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
                      tautologies, sorted(values))


def describe(graph: Graph, i: int) -> str:
    """A node with its source location, for messages."""
    n = graph.nodes[i]
    loc = n.meta.get("loc")
    line = n.meta.get("line")
    where = f" at {loc}" if loc is not None else (f" (line {line})" if line is not None else "")
    return f"`{n}`{where}"
