"""Nested divisions flattened and the polynomial over them factored, proven equal by z3."""

from __future__ import annotations

import math
from typing import Any
from guardsolve.guards.expr import And, Div, Formula, Or, Poly, Rel, atom_key, conj, disj, rel
from guardsolve.solve.constraint import DimOrder


def _flat(a: Any) -> Any:
    """A division term with nested divisions and offsets flattened: `((p // a) + c) // b` is
    `(p + c*a) // (a*b)`; `(p + m*k + r) // k` is `(p + r) // k + m` (0 <= r < k). Returns a Poly."""
    if isinstance(a, str):
        return Poly.var(a)
    num = _flat_poly(a.num)
    k = a.den.constant
    if a.kind == "floordiv":
        inner = [(m, c) for m, c in num.terms if m and len(m) == 1 and isinstance(m[0], Div)
                 and m[0].kind == "floordiv" and c == 1]
        if len(inner) == 1 and all(not m or m == inner[0][0] for m, _ in num.terms):
            d = inner[0][0][0]
            j = d.den.constant
            return _flat(Div("floordiv", d.num + Poly.const(num.constant * j), Poly.const(j * k)))
    c = num.constant
    q, r = divmod(c, k)
    rest = num - Poly.const(c) + Poly.const(r)
    if a.kind == "floordiv":
        return Poly.var(Div("floordiv", rest, Poly.const(k))) + Poly.const(q) if rest.nonconst() else Poly.const(c // k)
    return Poly.var(Div("mod", rest, Poly.const(k))) if rest.nonconst() else Poly.const(c % k)


def _flat_poly(p: Poly) -> Poly:
    out = Poly.const(0)
    for m, c in p.terms:
        term = Poly.const(c)
        for a in m:
            term = term * _flat(a)
        out = out + term
    return out


def flat_formula(f: Formula) -> Formula:
    if isinstance(f, Rel):
        return rel({"eq": "eq", "ne": "ne", "le": "le"}[f.op], _flat_poly(f.poly), Poly.const(0))
    if isinstance(f, Or):
        return disj(flat_formula(a) for a in f.args)
    if isinstance(f, And):
        return conj(flat_formula(a) for a in f.args)
    return f


def factored_rel(r: Rel, order: DimOrder) -> tuple[Formula, str] | None:
    """`P op 0` with the non-constant part of P factored by sympy (`u*v - 64 == 0` -> `u*v == 64`)."""
    import sympy

    atoms = sorted(r.poly.atoms(), key=atom_key)
    if not atoms or len(atoms) > 6:
        return None
    syms = {a: sympy.Symbol(f"_a{i}") for i, a in enumerate(atoms)}
    expr = sum(c * math.prod((syms[a] for a in m), start=sympy.Integer(1)) for m, c in r.poly.terms)
    k = r.poly.constant
    body = sympy.factor(expr - k)
    if not isinstance(body, sympy.Mul) or len(body.args) < 2:
        return None
    coeff, factors = body.as_coeff_mul()
    if coeff < 0:
        coeff, k = -coeff, -k
        factors = tuple(-f if i == 0 else f for i, f in enumerate(factors))
    back = {v: a for a, v in syms.items()}
    rendered = []
    for fct in factors:
        p = _sympy_poly(fct, back)
        if p is None:
            return None
        text = p.render(order.key)
        rendered.append(text if len(p.terms) == 1 else f"({text})")
    sym = {"eq": "==", "ne": "!=", "le": "<="}[r.op]
    lhs = "*".join(([str(coeff)] if coeff != 1 else []) + rendered)
    return r, f"{lhs} {sym} {-k}"


def _sympy_poly(e: Any, back: dict[Any, Any]) -> Poly | None:
    import sympy

    e = sympy.expand(e)
    out = Poly.const(0)
    for term in sympy.Add.make_args(e):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return None
        mono = Poly.const(int(coeff))
        for f in sympy.Mul.make_args(rest):
            if f == 1:
                continue
            base, exp = f.as_base_exp()
            if base not in back or not exp.is_Integer or exp < 1:
                return None
            for _ in range(int(exp)):
                mono = mono * Poly.var(back[base])
        out = out + mono
    return out
