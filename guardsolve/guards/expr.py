"""Symbolic normal form of guards: integer polynomials over dims and opaque `//`, `%` terms,
and formulas `P == 0`, `P != 0`, `P <= 0` combined with `or`/`and`.

>>> x, y = Poly.var("x"), Poly.var("y")
>>> rel("lt", x, y)          # x < y  is  x - y + 1 <= 0
Rel(op='le', poly=x - y + 1)
>>> negate(rel("eq", x * Poly.const(2), y))
Rel(op='ne', poly=2*x - y)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce
from typing import Callable, Iterable, Mapping, Union

# An atom is a dim name or an opaque division term.
Atom = Union[str, "Div"]
Monomial = tuple  # sorted tuple of atoms; () is the constant monomial


def atom_key(a: Atom) -> tuple[int, str]:
    return (0, a) if isinstance(a, str) else (1, str(a))


@dataclass(frozen=True, slots=True)
class Poly:
    """An integer polynomial: a frozen mapping from monomials to non-zero coefficients."""

    terms: frozenset  # of (Monomial, int)
    # NOTE: slotted (a large trace holds millions), with the dims it mentions cached in a slot
    _dims_seen: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    @staticmethod
    def of(d: Mapping[Monomial, int]) -> "Poly":
        return Poly(frozenset([t for t in d.items() if t[1] != 0]))

    @staticmethod
    def const(c: int) -> "Poly":
        return Poly(frozenset([((), c)]) if c != 0 else frozenset())

    @staticmethod
    def var(a: Atom) -> "Poly":
        return Poly(frozenset([((a,), 1)]))

    def as_dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __add__(self, o: "Poly") -> "Poly":
        d = dict(self.terms)
        get = d.get
        for m, c in o.terms:
            d[m] = get(m, 0) + c
        return Poly.of(d)

    def scale(self, k: int) -> "Poly":
        return Poly.of({m: c * k for m, c in self.terms})

    def __neg__(self) -> "Poly":
        return self.scale(-1)

    def __sub__(self, o: "Poly") -> "Poly":
        d = dict(self.terms)
        get = d.get
        for m, c in o.terms:
            d[m] = get(m, 0) - c
        return Poly.of(d)

    def __mul__(self, o: "Poly") -> "Poly":
        d: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = tuple(sorted(m1 + m2, key=atom_key))
                d[m] = d.get(m, 0) + c1 * c2
        return Poly.of(d)

    @property
    def constant(self) -> int:
        for m, c in self.terms:
            if not m:
                return c
        return 0

    def is_const(self) -> bool:
        return all(not m for m, _ in self.terms)

    def nonconst(self) -> dict[Monomial, int]:
        return {m: c for m, c in self.terms if m != ()}

    def atoms(self) -> set[Atom]:
        return {a for m, _ in self.terms for a in m}

    def dims(self) -> set[str]:
        """Every dim mentioned, also inside opaque terms."""
        return set(self._dims)

    @property
    def _dims(self) -> tuple[str, ...]:
        # NOTE: cached (a tuple: a third of a frozenset's memory): every stage asks which dims
        # an atom mentions, some several times
        seen = self._dims_seen
        if seen is None:
            out: set[str] = set()
            for a in self.atoms():
                if isinstance(a, str):
                    out.add(a)
                else:
                    out |= a.dims()
            seen = tuple(out)
            object.__setattr__(self, "_dims_seen", seen)
        return seen

    def substitute(self, f: Callable[[str], "Poly"], memo: dict | None = None) -> "Poly":
        return Poly.of(self._substituted(f, memo))

    def _substituted(self, f: Callable[[str], "Poly"], memo: dict | None = None) -> dict[Monomial, int]:
        """The terms of `substitute(f)`, as a dict (zero coefficients dropped). `memo` (one
        per `f`) keeps each division's result: nested rules repeat the same division terms."""
        d: dict[Monomial, int] = {}
        get = d.get
        for m, c in self.terms:
            if not m:
                d[m] = get(m, 0) + c
                continue
            if len(m) == 1 and isinstance(m[0], str):  # NOTE: the common linear term, without products
                p = f(m[0])
            else:
                p = Poly.const(1)
                for a in m:
                    if isinstance(a, str):
                        p = p * f(a)
                        continue
                    done = memo.get(a) if memo is not None else None
                    if done is None:
                        done = a.substitute(f, memo)
                        if memo is not None:
                            memo[a] = done
                    p = p * done
            for m2, c2 in p.terms:
                d[m2] = get(m2, 0) + c * c2
        return {m: c for m, c in d.items() if c != 0}

    def sorted_terms(self, key: Callable[[Atom], tuple] = atom_key) -> list[tuple[Monomial, int]]:
        return sorted(self.terms, key=lambda t: (len(t[0]) == 0, [key(a) for a in t[0]]))

    def render(self, key: Callable[[Atom], tuple] = atom_key) -> str:
        """Python source; `x - y + 1`."""
        out = ""
        for m, c in self.sorted_terms(key):
            body = "*".join(render_atom(a, key) for a in m)
            mag = abs(c)
            term = str(mag) if not m else (body if mag == 1 else f"{mag}*{body}")
            out += (("-" if c < 0 else "") + term) if not out else ((" - " if c < 0 else " + ") + term)
        return out or "0"

    def __repr__(self) -> str:
        return self.render()


def render_atom(a: Atom, key: Callable[[Atom], tuple] = atom_key) -> str:
    """A dim bare, a division in parentheses (safe inside any product or sum)."""
    return a if isinstance(a, str) else f"({a.render(key)})"


@dataclass(frozen=True, slots=True)
class Div:
    """Opaque `num // den` (kind 'floordiv') or `num % den` (kind 'mod'), Python semantics."""

    kind: str
    num: Poly
    den: Poly
    _rendered: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def dims(self) -> set[str]:
        return self.num.dims() | self.den.dims()

    def substitute(self, f: Callable[[str], Poly], memo: dict | None = None) -> Poly:
        return divide(self.kind, self.num.substitute(f, memo), self.den.substitute(f, memo))

    def render(self, key: Callable[[Atom], tuple] = atom_key) -> str:
        sym = "//" if self.kind == "floordiv" else "%"
        return f"{_paren(self.num, key)} {sym} {_paren(self.den, key)}"

    @property
    def _text(self) -> str:
        text = self._rendered
        if text is None:
            text = self.render()
            object.__setattr__(self, "_rendered", text)
        return text

    def __str__(self) -> str:
        # NOTE: cached: atom_key orders terms by this text, and PyTorch's view rules nest
        # divisions deeply (`(n*m // m)*m // m`), so rendering it afresh each time is quadratic
        return self._text


def _paren(p: Poly, key: Callable[[Atom], tuple]) -> str:
    s = p.render(key)
    simple = len(p.terms) == 1 and (p.is_const() and p.constant >= 0 or
                                   not p.is_const() and next(iter(p.terms))[1] == 1 and len(next(iter(p.terms))[0]) == 1)
    return s if simple else f"({s})"


def divide(kind: str, num: Poly, den: Poly) -> Poly:
    """`num // den` or `num % den`, folded where exact; the caller guards `den != 0`."""
    if den.is_const() and den.constant != 0:
        c = den.constant
        rest = num.nonconst()
        if all(v % c == 0 for v in rest.values()):
            k = num.constant
            if kind == "floordiv":
                return Poly.of({m: v // c for m, v in rest.items()}) + Poly.const(k // c)
            return Poly.const(k % c)
        if c == 1:
            return num if kind == "floordiv" else Poly.const(0)
    return Poly.var(Div(kind, num, den))


# -- formulas -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rel:
    """`poly op 0` with op in eq, ne, le."""

    op: str
    poly: Poly

    def dims(self) -> set[str]:
        return self.poly.dims()


@dataclass(frozen=True, slots=True)
class Or:
    args: frozenset

    def dims(self) -> set[str]:
        return set().union(*(a.dims() for a in self.args))


@dataclass(frozen=True, slots=True)
class And:
    args: frozenset

    def dims(self) -> set[str]:
        return set().union(*(a.dims() for a in self.args))


@dataclass(frozen=True, slots=True)
class Const:
    value: bool

    def dims(self) -> set[str]:
        return set()


TRUE, FALSE = Const(True), Const(False)
Formula = Union[Rel, Or, And, Const]


# comparison -> (relation, sign of a - b, constant added): `a < b` is `a - b + 1 <= 0`
_COMPARE = {"eq": ("eq", 1, 0), "ne": ("ne", 1, 0), "lt": ("le", 1, 1), "le": ("le", 1, 0),
            "gt": ("le", -1, 1), "ge": ("le", -1, 0)}


def rel(op: str, a: Poly, b: Poly) -> Formula:
    """The comparison `a op b` (op: eq ne lt le gt ge) in normal form."""
    try:
        r, sign, k = _COMPARE[op]
    except KeyError:
        raise ValueError(f"unknown comparison {op!r}") from None
    d = dict(a.terms)
    get = d.get
    for m, c in b.terms:
        d[m] = get(m, 0) - c
    if sign < 0:
        d = {m: -c for m, c in d.items()}
    if k:
        d[()] = d.get((), 0) + k
    return _normal(r, {m: c for m, c in d.items() if c != 0})


def normal(r: Rel, key: Callable[[Atom], tuple] = atom_key) -> Formula:
    """Fold constants, divide by the gcd of coefficients, make the leading coefficient positive."""
    return _normal(r.op, dict(r.poly.terms), key)


def _normal(op: str, terms: dict[Monomial, int], key: Callable[[Atom], tuple] = atom_key) -> Formula:
    """`normal` of `sum(terms) op 0`, the terms a dict with no zero coefficient."""
    k = terms.pop((), 0)
    if not terms:
        return Const({"eq": k == 0, "ne": k != 0, "le": k <= 0}[op])
    g = reduce(math.gcd, terms.values())
    g = abs(g)
    if op == "eq" or op == "ne":
        if k % g != 0:
            return Const(op == "ne")
        if len(terms) == 1:
            lead = next(iter(terms))
        else:
            lead = min(terms, key=lambda m: [key(a) for a in m])
        div = -g if terms[lead] < 0 else g
        q = {m: v // div for m, v in terms.items()}
        if k:
            q[()] = k // div
        return Rel(op, Poly(frozenset(q.items())))
    # le: g*Q + k <= 0  <=>  Q + ceil(k/g) <= 0
    q = {m: v // g for m, v in terms.items()} if g != 1 else terms
    c = -((-k) // g)
    if c:
        q[()] = c
    return Rel("le", Poly(frozenset(q.items())))


def negate(f: Formula) -> Formula:
    if isinstance(f, Const):
        return Const(not f.value)
    if isinstance(f, Rel):
        if f.op == "eq":
            return Rel("ne", f.poly)
        if f.op == "ne":
            return Rel("eq", f.poly)
        d = {m: -c for m, c in f.poly.terms}
        d[()] = d.get((), 0) + 1
        return _normal("le", {m: c for m, c in d.items() if c != 0})
    if isinstance(f, Or):
        return conj(negate(a) for a in f.args)
    return disj(negate(a) for a in f.args)


def disj(args: Iterable[Formula]) -> Formula:
    out: set[Formula] = set()
    for a in args:
        if a == TRUE:
            return TRUE
        if a == FALSE:
            continue
        out |= set(a.args) if isinstance(a, Or) else {a}
    if not out:
        return FALSE
    return next(iter(out)) if len(out) == 1 else Or(frozenset(out))


def conj(args: Iterable[Formula]) -> Formula:
    out: set[Formula] = set()
    for a in args:
        if a == FALSE:
            return FALSE
        if a == TRUE:
            continue
        out |= set(a.args) if isinstance(a, And) else {a}
    if not out:
        return TRUE
    return next(iter(out)) if len(out) == 1 else And(frozenset(out))


def conjuncts(f: Formula) -> list[Formula]:
    """Top-level conjuncts (an `And` splits into separate constraints)."""
    if isinstance(f, And):
        return list(f.args)
    return [] if f == TRUE else [f]


def substitute(f: Formula, s: Callable[[str], Poly], memo: dict | None = None) -> Formula:
    """Replace dims by polynomials and renormalize. Pass one `memo` dict for many formulas
    substituted with the same `s`: each division term is then rewritten once."""
    if isinstance(f, Const):
        return f
    if isinstance(f, Rel):
        return _normal(f.op, f.poly._substituted(s, memo))
    parts = [substitute(a, s, memo) for a in f.args]
    return disj(parts) if isinstance(f, Or) else conj(parts)


def divisors(p: Poly) -> list[Poly]:
    """Denominators of every opaque division in `p` (they must be non-zero)."""
    out: list[Poly] = []
    for a in p.atoms():
        if isinstance(a, Div):
            out += divisors(a.num) + divisors(a.den) + [a.den]
    return out


def formula_divisors(f: Formula) -> list[Poly]:
    if isinstance(f, Const):
        return []
    if isinstance(f, Rel):
        return divisors(f.poly)
    return [d for a in f.args for d in formula_divisors(a)]


# -- cancelling common positive factors ----------------------------------------------------


def _common_dim(polys: list[Poly], positive: Callable[[Atom], bool]) -> Atom | None:
    """An atom (a dim, or a division term), known positive, that divides every term of every
    poly: `(u*v) // u` is `v` where the bounds make `u >= 1`."""
    common: set | None = None
    for p in polys:
        for m, _ in p.terms:
            dims = set(m)
            common = dims if common is None else common & dims
    for d in sorted(common or (), key=atom_key):
        if positive(d):
            return d
    return None


def _divide_out(p: Poly, d: Atom) -> Poly:
    out: dict[Monomial, int] = {}
    for m, c in p.terms:
        rest = list(m)
        rest.remove(d)
        out[tuple(rest)] = c
    return Poly.of(out)


def _leading(p: Poly) -> tuple[Monomial, int]:
    return max(p.terms, key=lambda t: (len(t[0]), [atom_key(a) for a in t[0]]))


def exact_quotient(num: Poly, den: Poly) -> Poly | None:
    """`q` with `num == den * q` as polynomials over the atoms, or None: multivariate division
    by leading terms (graded by degree, then by atom), which leaves no remainder exactly when
    `den` divides `num`.

    >>> a, b = Poly.var("a"), Poly.var("b")
    >>> exact_quotient(a * b + a + b + Poly.const(1), a + Poly.const(1))
    b + 1
    >>> exact_quotient(a * b + b + Poly.const(1), a + Poly.const(1)) is None
    True
    """
    if not den.terms:
        return None
    lm, lc = _leading(den)
    rest, q = num, Poly.const(0)
    for _ in range(4 * len(num.terms) + 4):  # NOTE: each step removes the leading term; bounded anyway
        if not rest.terms:
            return q
        m, c = _leading(rest)
        if c % lc:
            return None
        left = list(m)
        for a in lm:
            if a not in left:
                return None
            left.remove(a)
        t = Poly.of({tuple(left): c // lc})
        q, rest = q + t, rest - den * t
    return None


def cancel(f: Formula, positive: Callable[[str], bool], memo: dict[Div, Poly] | None = None) -> Formula:
    """Divide out factors known to be positive: `(x*a) % (x*b) == 0` -> `a % b == 0` when x >= 1.

    Exact when `positive(d)` holds for every dim it cancels (the caller keeps those bounds).
    `memo` shares the cancelled form of each division between calls with the same `positive`.
    """
    memo = {} if memo is None else memo
    if isinstance(f, Const):
        return f
    if isinstance(f, Rel):
        p = _cancel_divs(f.poly, positive, memo)
        d = _common_dim([p], positive)
        while d is not None and not p.is_const():
            p = _divide_out(p, d)
            d = _common_dim([p], positive)
        return normal(Rel(f.op, p))
    parts = [cancel(a, positive, memo) for a in f.args]
    return disj(parts) if isinstance(f, Or) else conj(parts)


def _cancel_divs(p: Poly, positive: Callable[[str], bool], memo: dict[Div, Poly]) -> Poly:
    total = Poly.const(0)
    for m, c in p.terms:
        t = Poly.const(c)
        for a in m:
            if isinstance(a, str):
                t = t * Poly.var(a)
                continue
            done = memo.get(a)
            if done is None:
                done = memo[a] = _cancel_div(a, positive, memo)
            t = t * done
        total = total + t
    return total


def _cancel_div(d: Div, positive: Callable[[str], bool], memo: dict[Div, Poly]) -> Poly:
    num, den = _cancel_divs(d.num, positive, memo), _cancel_divs(d.den, positive, memo)
    scale = Poly.const(1)
    g = _common_dim([num, den], positive)
    while g is not None and not den.is_const():
        num, den = _divide_out(num, g), _divide_out(den, g)
        if d.kind == "mod":  # (g*a) % (g*b) == g * (a % b) for g > 0
            scale = scale * Poly.var(g)
        g = _common_dim([num, den], positive)
    if not den.is_const() and positive(den):
        # NOTE: a polynomial factor: `(a*b + a + b + 1) // (a + 1)` is `b + 1` where a + 1 >= 1
        q = exact_quotient(num, den)
        if q is not None:
            return scale * (q if d.kind == "floordiv" else Poly.const(0))
        if positive(num):
            q = exact_quotient(den, num)  # (g*1) % (g*q) == g * (1 % q) and 1 // q for g >= 1
            if q is not None:
                if d.kind == "mod":
                    scale = scale * num
                num, den = Poly.const(1), q
    # (k*a) // (k*b) == a // b and (k*a) % (k*b) == k * (a % b) for any integer k != 0
    k = reduce(math.gcd, [abs(c) for _, c in num.terms] + [abs(c) for _, c in den.terms], 0)
    if k > 1:
        num, den = Poly.of({m: c // k for m, c in num.terms}), Poly.of({m: c // k for m, c in den.terms})
        if d.kind == "mod":
            scale = scale.scale(k)
    return scale * divide(d.kind, num, den)
