"""Lower constraints back into a guard graph (each one a bailout expecting True).

Used to re-simplify a GuardSet (idempotence), and to save minimal guards as graph text.

>>> from guardsolve.guards.expr import Poly, rel
>>> g = Graph()
>>> for d in ("a0", "b0"): _ = g.emit(Op.INT_PLACEHOLDER, (), name=d)
>>> emit_bailout(g, rel("le", Poly.var("a0"), Poly.var("b0")))
>>> print(g)
a0 = int_placeholder(name=a0)
b0 = int_placeholder(name=b0)
i0 = int_sub(a0, b0)
i1 = int_const(val=0)
i2 = int_le(i0, i1)
bool_bailout(i2, expect=True)
"""

from __future__ import annotations

from guardsolve.guards.expr import Const, Div, Formula, Or, Poly, Rel, atom_key
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op


def _atom(g: Graph, a: object) -> str:
    if isinstance(a, str):
        return a
    assert isinstance(a, Div)
    op = Op.INT_FLOORDIV if a.kind == "floordiv" else Op.INT_MOD
    return g.emit(op, (emit_poly(g, a.num), emit_poly(g, a.den)))


def emit_poly(g: Graph, p: Poly) -> str:
    """Int nodes computing `p`; returns the name of the result."""
    acc: str | None = None
    for m, c in p.sorted_terms(atom_key):
        if not m:
            term = g.emit(Op.INT_CONST, (), val=abs(c) if acc is not None else c)
        else:
            term = _atom(g, m[0])
            for a in m[1:]:
                term = g.emit(Op.INT_MUL, (term, _atom(g, a)))
            if abs(c) != 1 or (acc is None and c < 0):
                term = g.emit(Op.INT_MUL, (g.emit(Op.INT_CONST, (), val=c if acc is None else abs(c)), term))
        if acc is None:
            acc = term
        else:
            acc = g.emit(Op.INT_ADD if c > 0 else Op.INT_SUB, (acc, term))
    return acc if acc is not None else g.emit(Op.INT_CONST, (), val=0)


def emit_formula(g: Graph, f: Formula) -> str:
    if isinstance(f, Const):
        return g.emit(Op.BOOL_CONST, (), val=f.value)
    if isinstance(f, Rel):
        lhs = emit_poly(g, f.poly)
        zero = g.emit(Op.INT_CONST, (), val=0)
        op = {"eq": Op.INT_EQ, "ne": Op.INT_NE, "le": Op.INT_LE}[f.op]
        return g.emit(op, (lhs, zero))
    parts = [emit_formula(g, a) for a in sorted(f.args, key=repr)]
    acc = parts[0]
    for p in parts[1:]:
        acc = g.emit(Op.BOOL_OR if isinstance(f, Or) else Op.BOOL_AND, (acc, p))
    return acc


def emit_bailout(g: Graph, f: Formula) -> None:
    g.emit(Op.BOOL_BAILOUT, (emit_formula(g, f),), expect=True)
