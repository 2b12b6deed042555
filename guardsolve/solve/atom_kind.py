"""Which layer owns a normalized atom (`classify`), and a formula's size for choosing between
equivalent guards (`complexity`).
"""

from __future__ import annotations

from typing import Any

from guardsolve.guards.expr import Formula, Rel
from guardsolve.solve.difference import Z


def complexity(f: Formula) -> int:
    """A size measure for choosing which of two equivalent guards to keep."""
    if isinstance(f, Rel):
        return sum(1 + 3 * len(m) + sum(5 + complexity(Rel("eq", a.num)) + complexity(Rel("eq", a.den))
                                         for a in m if not isinstance(a, str)) for m, _ in f.poly.terms)
    if hasattr(f, "args"):
        return 2 + sum(complexity(a) for a in f.args)  # type: ignore[union-attr]
    return 0


def classify(f: Formula) -> tuple[Any, ...]:
    """Which layer owns a normalized atom.

    ("eq", x, y, k): x == y + k      ("bind", x, c): x == c
    ("le", u, v, w): v - u <= w       ("ne", u, v, k): v - u != k      ("general",)
    (u may be the zero node Z.)
    """
    if not isinstance(f, Rel):
        return ("general",)
    lin = f.poly.nonconst()
    if not all(len(m) == 1 and isinstance(m[0], str) for m in lin) or len(lin) > 2:
        return ("general",)
    k = f.poly.constant
    coef = {m[0]: c for m, c in lin.items()}
    if len(coef) == 1:
        (x, c), = coef.items()
        if c not in (1, -1):
            return ("general",)
        if f.op == "eq":
            return ("bind", x, -k * c)
        if f.op == "ne":
            return ("ne", Z, x, -k * c)
        return ("le", Z, x, -k) if c == 1 else ("le", x, Z, -k)
    if sorted(coef.values()) != [-1, 1]:
        return ("general",)
    x = next(d for d, c in coef.items() if c == 1)
    y = next(d for d, c in coef.items() if c == -1)
    # x - y + k  op  0
    if f.op == "eq":
        return ("eq", x, y, -k)
    if f.op == "ne":
        return ("ne", y, x, -k)
    return ("le", y, x, -k)
