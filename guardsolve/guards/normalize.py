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
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op


@dataclass(frozen=True)
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


def symbolic_rules(defined: list[tuple[Poly, int]], index: dict[str, int]) -> RuleTable:
    """Rules over polynomials and formulas; divisions append `(divisor, node)` to `defined`."""
    current = {"node": -1}

    def enter(node: Node) -> None:
        current["node"] = index[id(node)]  # type: ignore[index]

    def div(kind: str):  # type: ignore[no-untyped-def]
        def rule(a: Poly, b: Poly) -> Poly:
            defined.append((b, current["node"]))
            return divide(kind, a, b)
        return rule

    def cmp(name: str):  # type: ignore[no-untyped-def]
        return lambda a, b: rel(name, a, b)

    return RuleTable("symbolic", {
        Op.INT_CONST: lambda *, val: Poly.const(val),
        Op.BOOL_CONST: lambda *, val: Const(val),
        Op.INT_PLACEHOLDER: lambda *, name: Poly.var(name),
        Op.INT_ARG: lambda *, name: Poly.var(name),
        Op.INT_ADD: lambda a, b: a + b,
        Op.INT_SUB: lambda a, b: a - b,
        Op.INT_MUL: lambda a, b: a * b,
        Op.INT_FLOORDIV: div("floordiv"),
        Op.INT_MOD: div("mod"),
        **{op: cmp(op.value[4:]) for op in (Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE)},
        Op.BOOL_NOT: negate,
        Op.BOOL_AND: lambda a, b: conj([a, b]),
        Op.BOOL_OR: lambda a, b: disj([a, b]),
        Op.BOOL_BAILOUT: lambda b, *, expect: b if expect else negate(b),
        # NOTE: data-dependent bailouts are set aside by `normalize`; this value is never used.
        Op.BOOL_OPAQUE: lambda *, name: TRUE,
    }, enter)


def normalize(graph: Graph, *, validate: bool = True) -> Normalized:
    """Atoms of a guard graph; raises `UnsatisfiableGuardsError` on a bailout that is always false.

    `validate=False` skips re-checking a graph that `guard_graph` has just checked or built.
    """
    defined: list[tuple[Poly, int]] = []
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    env: dict[str, Any] = {}
    interpret(graph, symbolic_rules(defined, index), env, validate=validate)  # type: ignore[arg-type]
    dims = [n.params["name"] for n in graph.nodes if n.op in (Op.INT_PLACEHOLDER, Op.INT_ARG)]
    sizes = frozenset(n.params["name"] for n in graph.nodes if n.op is Op.INT_PLACEHOLDER)
    raw: list[tuple[Formula, int]] = []
    for den, i in defined:
        raw.append((normal(Rel("ne", den)), i))
    values = value_bailouts(graph)
    for i, n in enumerate(graph.nodes):
        if n.op is Op.BOOL_BAILOUT and i not in values:
            f = env[n.inputs[0]]
            raw.append((f if n.params["expect"] else negate(f), i))
    atoms: dict[Formula, set[int]] = {}
    tautologies: list[int] = []
    for f, i in raw:
        if f == FALSE:
            raise UnsatisfiableGuardsError([describe(graph, i)], "this guard can never hold")
        if f == TRUE:
            tautologies.append(i)
        for c in conjuncts(f):
            atoms.setdefault(c, set()).add(i)
    return Normalized([Atom(f, frozenset(p)) for f, p in atoms.items()], dims, sizes, tautologies, sorted(values))


def describe(graph: Graph, i: int) -> str:
    """A node with its source location, for messages."""
    n = graph.nodes[i]
    loc = n.meta.get("loc")
    line = n.meta.get("line")
    where = f" at {loc}" if loc is not None else (f" (line {line})" if line is not None else "")
    return f"`{n}`{where}"
