"""Stage 1 of simplify: turn a guard graph into normalized atomic constraints with provenance.

The symbolic rule table evaluates int nodes to polynomials and bool nodes to formulas; each
bailout contributes `formula` (or its negation when `expect=False`), split at `and`; each
division contributes `divisor != 0` (the graph would raise otherwise). Tautologies such as
`a0 == a0` fold away, and `b0 == a0` and `a0 == b0` become one atom:

    bool_bailout(int_eq(a0, 1), expect=False)   ->  Rel(ne, a0 - 1)
"""

from __future__ import annotations

from dataclasses import dataclass
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


def symbolic_rules() -> RuleTable:
    """Rules over polynomials and formulas.

    NOTE: hash-consed: equal inputs give one shared result (a graph repeats `== 1` tests and
    constants), so the repeats cost a lookup here and an identity test downstream.
    """
    consts: dict[int, Poly] = {}
    compared: dict[tuple[str, Poly, Poly], Formula] = {}

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

    return RuleTable("symbolic", {
        Op.INT_CONST: const,
        Op.BOOL_CONST: lambda *, val: Const(val),
        Op.INT_PLACEHOLDER: lambda *, name: Poly.var(name),
        Op.INT_ARG: lambda *, name: Poly.var(name),
        Op.INT_ADD: lambda a, b: a + b,
        Op.INT_SUB: lambda a, b: a - b,
        Op.INT_MUL: lambda a, b: a * b,
        Op.INT_FLOORDIV: lambda a, b: divide("floordiv", a, b),
        Op.INT_MOD: lambda a, b: divide("mod", a, b),
        **{op: cmp(op.value[4:]) for op in (Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE)},
        Op.BOOL_NOT: negate,
        Op.BOOL_AND: lambda a, b: conj([a, b]),
        Op.BOOL_OR: lambda a, b: disj([a, b]),
        Op.BOOL_BAILOUT: lambda b, *, expect: b if expect else negate(b),
        # NOTE: data-dependent bailouts are set aside by `normalize`; this value is never used.
        Op.BOOL_OPAQUE: lambda *, name: TRUE,
    })


def normalize(graph: Graph, *, validate: bool = True) -> Normalized:
    """Atoms of a guard graph; raises `UnsatisfiableGuardsError` on a bailout that is always false.

    `validate=False` skips re-checking a graph that `guard_graph` has just checked or built.
    """
    env: dict[str, Any] = {}
    interpret(graph, symbolic_rules(), env, validate=validate)  # type: ignore[arg-type]
    nodes = graph.nodes
    # NOTE: a graph without data-dependent bools (the usual case) needs no taint scan
    values = value_bailouts(graph) if any(n.op in _OPAQUE for n in nodes) else set()
    dims: list[str] = []
    sizes: set[str] = set()
    defined: list[tuple[Formula, int]] = []  # each division's `divisor != 0`, first
    raw: list[tuple[Formula, int]] = []
    for i, n in enumerate(nodes):
        op = n.op
        if op is Op.BOOL_BAILOUT:
            if i not in values:
                f = env[n.inputs[0]]
                raw.append((f if n.params["expect"] else negate(f), i))
        elif op in _DIVISIONS:
            defined.append((normal(Rel("ne", env[n.inputs[1]])), i))
        elif op is Op.INT_PLACEHOLDER or op is Op.INT_ARG:
            dims.append(n.params["name"])
            if op is Op.INT_PLACEHOLDER:
                sizes.add(n.params["name"])
    atoms: dict[Formula, set[int]] = {}
    tautologies: list[int] = []
    for f, i in defined + raw:
        if f == FALSE:
            raise UnsatisfiableGuardsError([describe(graph, i)], "this guard can never hold")
        if f == TRUE:
            tautologies.append(i)
        for c in conjuncts(f):
            s = atoms.get(c)
            if s is None:
                atoms[c] = {i}
            else:
                s.add(i)
    return Normalized([Atom(f, frozenset(p)) for f, p in atoms.items()], dims, frozenset(sizes), tautologies,
                      sorted(values))


def describe(graph: Graph, i: int) -> str:
    """A node with its source location, for messages."""
    n = graph.nodes[i]
    loc = n.meta.get("loc")
    line = n.meta.get("line")
    where = f" at {loc}" if loc is not None else (f" (line {line})" if line is not None else "")
    return f"`{n}`{where}"
