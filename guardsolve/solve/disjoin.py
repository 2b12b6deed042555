"""The disjunction of several paths' minimal guards, as a small conjunction (CNF) of clauses.

Each path is a conjunction of constraints. A constraint on one dim (`x0 >= 2`, `x0 == 1`,
`x0 != 3`) is a set of values (`IntSet`); the others are kept as formulas. Paths that differ
in one dim's set alone merge into one (`x0 >= 2` and `x0 == 1` give `x0 >= 1`), a path that
another contains is dropped, and what is left is distributed into clauses, one disjunct per
path, with sets on the same dim joined and clauses that another implies dropped. The result
is exactly the disjunction (distribution is an identity); `simplify` then makes it minimal.

>>> p0 = {"sets": {"x0": IntSet.at_least(2), "x1": IntSet.at_least(2)}, "rest": {}}
>>> p1 = {"sets": {"x0": IntSet.point(1), "x1": IntSet.at_least(2)}, "rest": {}}
>>> p2 = {"sets": {"x0": IntSet.point(0)}, "rest": {}}
>>> [str(f) for f in clauses_text([p0, p1, p2], {"x0", "x1"})]
['x0 == 0 or x1 >= 2']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from guardsolve.guards.expr import FALSE, TRUE, Formula, Poly, conj, disj, rel

MAX_CLAUSES = 4096


@dataclass(frozen=True)
class IntSet:
    """A set of integers: sorted, disjoint, non-adjacent closed intervals (None: unbounded).

    >>> s = IntSet.at_least(2).union(IntSet.point(0))
    >>> s, s.contains(1), s.subset(IntSet.at_least(0))
    (IntSet(parts=((0, 0), (2, None))), False, True)
    """

    parts: tuple[tuple[int | None, int | None], ...]

    @staticmethod
    def of(parts: Iterable[tuple[int | None, int | None]]) -> "IntSet":
        lo_key = lambda p: float("-inf") if p[0] is None else p[0]  # noqa: E731
        out: list[list[int | None]] = []
        for lo, hi in sorted((p for p in parts if p[0] is None or p[1] is None or p[0] <= p[1]), key=lo_key):
            if out and (out[-1][1] is None or lo is None or lo <= out[-1][1] + 1):
                if out[-1][1] is not None and (hi is None or hi > out[-1][1]):
                    out[-1][1] = hi
                continue
            out.append([lo, hi])
        return IntSet(tuple((lo, hi) for lo, hi in out))

    @staticmethod
    def point(v: int) -> "IntSet":
        return IntSet(((v, v),))

    @staticmethod
    def at_least(v: int) -> "IntSet":
        return IntSet(((v, None),))

    @staticmethod
    def at_most(v: int) -> "IntSet":
        return IntSet(((None, v),))

    @staticmethod
    def full() -> "IntSet":
        return IntSet(((None, None),))

    @staticmethod
    def empty() -> "IntSet":
        return IntSet(())

    def union(self, o: "IntSet") -> "IntSet":
        return IntSet.of(self.parts + o.parts)

    def inter(self, o: "IntSet") -> "IntSet":
        out = []
        for a, b in self.parts:
            for c, d in o.parts:
                lo = c if a is None else a if c is None else max(a, c)
                hi = d if b is None else b if d is None else min(b, d)
                out.append((lo, hi))
        return IntSet.of(out)

    def minus_point(self, v: int) -> "IntSet":
        return self.inter(IntSet.of([(None, v - 1), (v + 1, None)]))

    def contains(self, v: int) -> bool:
        return any((lo is None or lo <= v) and (hi is None or v <= hi) for lo, hi in self.parts)

    def subset(self, o: "IntSet") -> bool:
        return self.inter(o) == self

    def formula(self, dim: "str | Poly", domain: "IntSet") -> Formula:
        """`dim in self` as a formula, given `dim in domain` (bounds the domain has are left out):
        one interval as its bounds, a few holes as `!=`, else a disjunction of intervals."""
        s = self.inter(domain)
        if s == domain:
            return TRUE
        if not s.parts:
            return FALSE
        x = Poly.var(dim) if isinstance(dim, str) else dim

        dom_lo = domain.parts[0][0] if domain.parts else None

        def bounds(lo: int | None, hi: int | None) -> Formula:
            if lo is not None and lo == hi:
                return rel("eq", x, Poly.const(lo))
            out = []
            if lo is not None and (dom_lo is None or lo > dom_lo):
                out.append(rel("ge", x, Poly.const(lo)))
            if hi is not None:
                out.append(rel("le", x, Poly.const(hi)))
            return conj(out)

        points = [v for lo, hi in s.parts if lo is not None and hi is not None and hi - lo < 3
                  for v in range(lo, hi + 1)]
        if len(s.parts) > 1 and all(lo is not None and hi is not None and hi - lo < 3 for lo, hi in s.parts) \
                and len(points) <= 3:
            return disj(rel("eq", x, Poly.const(v)) for v in points)  # NOTE: `x0 == 1 or x0 == 3`
        if len(s.parts) == 1:
            return bounds(*s.parts[0])
        gaps = [(a + 1, b - 1) for (_, a), (b, _) in zip(s.parts, s.parts[1:])]  # type: ignore[operator]
        if sum(hi - lo + 1 for lo, hi in gaps) <= 2:
            holes = [h for lo, hi in gaps for h in range(lo, hi + 1)]
            return conj([bounds(s.parts[0][0], s.parts[-1][1])] + [rel("ne", x, Poly.const(h)) for h in holes])
        return disj(bounds(lo, hi) for lo, hi in s.parts)


SIZES = IntSet.at_least(0)


def one_term_set(f: Formula) -> tuple[Poly, IntSet] | None:
    """The (term, set) of a constraint on one term alone, linear in it with coefficient 1:
    `x0*x1 <= 1` is `x0*x1` in `(-inf, 1]`; a dim is a term too. None otherwise.

    >>> term, s = one_term_set(rel("le", Poly.var("x0") * Poly.var("x1"), Poly.const(1)))
    >>> str(term), s
    ('x0*x1', IntSet(parts=((None, 1),)))
    """
    from guardsolve.guards.expr import Rel

    if not isinstance(f, Rel):
        return None
    lin = f.poly.nonconst()
    if len(lin) != 1:
        return None
    (m, c), = lin.items()
    if c not in (1, -1):
        return None
    k = f.poly.constant
    term = Poly.of({m: 1})
    if f.op == "eq":
        return term, IntSet.point(-k * c)
    if f.op == "ne":
        return term, IntSet.full().minus_point(-k * c)
    return (term, IntSet.at_most(-k)) if c == 1 else (term, IntSet.at_least(k))


def one_dim_set(f: Formula) -> tuple[str, IntSet] | None:
    """The (dim, set) a one-dim linear constraint `f` stands for (`x0 >= 2`, `x0 != 1`), or None.

    >>> one_dim_set(rel("ge", Poly.var("x0"), Poly.const(2)))
    ('x0', IntSet(parts=((2, None),)))
    """
    got = one_term_set(f)
    if got is None:
        return None
    term, s = got
    (m, _), = term.terms
    return (m[0], s) if len(m) == 1 and isinstance(m[0], str) else None


@dataclass
class _Path:
    sets: dict[str, tuple[IntSet, frozenset[int]]]
    rest: dict[str, tuple[Formula, frozenset[int]]]

    def get(self, d: str, domain: IntSet) -> IntSet:
        return self.sets[d][0] if d in self.sets else domain


def _subsumes(a: _Path, b: _Path, domains: Mapping[str, IntSet]) -> bool:
    """Does path `a` accept every input path `b` accepts (syntactically)?"""
    return set(a.rest) <= set(b.rest) and all(b.get(d, domains[d]).subset(s) for d, (s, _) in a.sets.items())


def _merge_one(a: _Path, b: _Path, domains: Mapping[str, IntSet]) -> _Path | None:
    """`a or b` as one path, when they differ in one dim's set alone."""
    if set(a.rest) != set(b.rest):
        return None
    dims = set(a.sets) | set(b.sets)
    differ = [d for d in dims if a.get(d, domains[d]) != b.get(d, domains[d])]
    if len(differ) > 1:
        return None
    sets = dict(a.sets)
    for d in differ:
        s = a.get(d, domains[d]).union(b.get(d, domains[d])).inter(domains[d])
        prov = a.sets.get(d, (None, frozenset()))[1] | b.sets.get(d, (None, frozenset()))[1]
        if s == domains[d]:
            sets.pop(d, None)
        else:
            sets[d] = (s, prov)
    for d, (s, p) in b.sets.items():
        if d in sets and d not in differ:
            sets[d] = (sets[d][0], sets[d][1] | p)
    rest = {k: (f, p | b.rest[k][1]) for k, (f, p) in a.rest.items()}
    return _Path(sets, rest)


def _reduce_paths(paths: list[_Path], domains: Mapping[str, IntSet]) -> list[_Path]:
    changed = True
    while changed and len(paths) > 1:
        changed = False
        for i in range(len(paths)):
            for j in range(len(paths)):
                if i == j:
                    continue
                if _subsumes(paths[i], paths[j], domains):
                    # NOTE: the dropped path's provenance stays with the one that contains it
                    keep = paths[i]
                    for d, (s, p) in paths[j].sets.items():
                        if d in keep.sets:
                            keep.sets[d] = (keep.sets[d][0], keep.sets[d][1] | p)
                    del paths[j]
                    changed = True
                    break
                m = _merge_one(paths[i], paths[j], domains)
                if m is not None:
                    paths[i] = m
                    del paths[j]
                    changed = True
                    break
            if changed:
                break
    return paths


@dataclass(frozen=True)
class _Clause:
    sets: tuple[tuple[str, IntSet], ...]
    rest: frozenset[str]

    def implies(self, o: "_Clause") -> bool:
        theirs = dict(o.sets)
        return self.rest <= o.rest and all(s.subset(theirs.get(d, IntSet.empty())) for d, s in self.sets)


def _prepared(paths: Sequence[Mapping[str, Any]], dims: Iterable[str], sizes: Iterable[str],
              terms: Mapping[str, Poly] | None) -> tuple[list[_Path], dict[str, IntSet], dict[str, Poly]]:
    """The paths as `_Path`s with each set cut to its key's domain (sizes and products of
    sizes from 0), the domains, and the terms."""
    sized = set(sizes)
    terms = dict(terms or {})
    domains = {d: SIZES if d in sized else IntSet.full() for d in dims}
    for key, term in terms.items():
        nonneg = all(isinstance(a, str) and a in sized for m, _ in term.terms for a in m)
        domains[key] = SIZES if nonneg else IntSet.full()

    def pair(v: Any) -> tuple[Any, frozenset[int]]:
        return v if isinstance(v, tuple) else (v, frozenset())

    work = []
    for p in paths:
        sets = {}
        for d, v in p["sets"].items():
            s, prov = pair(v)
            domains.setdefault(d, IntSet.full())
            s = s.inter(domains[d])
            if s != domains[d]:
                sets[d] = (s, prov)
        work.append(_Path(sets, {k: pair(v) for k, v in p["rest"].items()}))
    return work, domains, terms


def disjoin(paths: Sequence[Mapping[str, Any]], dims: Iterable[str], sizes: Iterable[str],
            terms: Mapping[str, Poly] | None = None, max_clauses: int = MAX_CLAUSES
            ) -> list[tuple[Formula, frozenset[int]]] | None:
    """CNF clauses, each with its provenance, equivalent to the disjunction of `paths`.

    Each path is `{"sets": {key: IntSet or (IntSet, prov)}, "rest": {text: Formula or (Formula, prov)}}`;
    a key is a dim, or names a term in `terms` (a product of dims: `x0*x1`, >= 0 when its dims
    are sizes). None when the clauses would be more than `max_clauses` (at any step).
    """
    work, domains, terms = _prepared(paths, dims, sizes, terms)

    def var(key: str) -> "str | Poly":
        return terms.get(key, key)

    if any(not p.sets and not p.rest for p in work):
        return []  # NOTE: one path accepts everything
    work = _reduce_paths(work, domains)
    if len(work) == 1:
        (p,) = work
        return ([(s.formula(var(d), domains[d]), prov) for d, (s, prov) in p.sets.items()]
                + [(f, prov) for f, prov in p.rest.values()])
    formulas = {k: f for p in work for k, (f, _) in p.rest.items()}
    clauses: dict[_Clause, frozenset[int]] = {_Clause((), frozenset()): frozenset()}
    for p in work:
        literals = [("set", d, s, prov) for d, (s, prov) in p.sets.items()] + \
                   [("f", k, None, prov) for k, (_, prov) in p.rest.items()]
        grown: dict[_Clause, frozenset[int]] = {}
        if len(clauses) * len(literals) > 64 * max_clauses:
            return None  # NOTE: the product alone is past any budget
        for c, prov in clauses.items():
            for kind, key, s, lprov in literals:
                if kind == "set":
                    have = dict(c.sets)
                    joined = have.get(key, IntSet.empty()).union(s).inter(domains[key])
                    if joined == domains[key]:
                        continue  # NOTE: a tautology
                    have[key] = joined
                    new = _Clause(tuple(sorted(have.items())), c.rest)
                else:
                    new = _Clause(c.sets, c.rest | {key})
                grown[new] = grown.get(new, frozenset()) | prov | lprov
        clauses = _minimal(grown)
        if len(clauses) > max_clauses:
            return None
    return [(disj([s.formula(var(d), domains[d]) for d, s in c.sets] + [formulas[k] for k in sorted(c.rest)]), prov)
            for c, prov in clauses.items()]


def routes(paths: Sequence[Mapping[str, Any]], dims: Iterable[str], sizes: Iterable[str],
           terms: Mapping[str, Poly] | None = None) -> list[tuple[Formula, frozenset[int]]]:
    """The disjunction of `paths` as a few conjunctions (DNF), each with its provenance: paths
    another contains dropped, paths that differ in one dim's set alone joined, as `disjoin`
    does before it distributes. Used where the CNF of many routes is past a reader's budget
    (a broadcast of three operands has a route per operand and dim at size 1). An empty list
    is no route; a route of no literal (TRUE) accepts everything.

    >>> p0 = {"sets": {"x0": IntSet.at_least(2), "y0": IntSet.at_least(2)}, "rest": {}}
    >>> p1 = {"sets": {"x0": IntSet.point(1), "y0": IntSet.at_least(2)}, "rest": {}}
    >>> p2 = {"sets": {"x0": IntSet.point(0), "y0": IntSet.point(0)}, "rest": {}}
    >>> from guardsolve.solve.constraint import DimOrder, render_formula
    >>> [render_formula(f, DimOrder(["x0", "y0"])) for f, _ in routes([p0, p1, p2], {"x0", "y0"}, {"x0", "y0"})]
    ['(x0 >= 1) and (y0 >= 2)', '(x0 == 0) and (y0 == 0)']
    """
    work, domains, terms = _prepared(paths, dims, sizes, terms)
    out = []
    for p in _reduce_paths(work, domains):
        parts = [(s.formula(terms.get(d, d), domains[d]), prov) for d, (s, prov) in sorted(p.sets.items())]
        parts += [(f, prov) for _, (f, prov) in sorted(p.rest.items())]
        out.append((conj(f for f, _ in parts), frozenset().union(*(pr for _, pr in parts))))
    return out


def _minimal(clauses: dict[_Clause, frozenset[int]]) -> dict[_Clause, frozenset[int]]:
    """The clauses no other implies (a stronger clause makes a weaker one redundant)."""
    items = sorted(clauses.items(), key=lambda kv: (len(kv[0].sets) + len(kv[0].rest), repr(kv[0])))
    kept: list[tuple[_Clause, frozenset[int]]] = []
    for c, prov in items:
        if not any(k.implies(c) for k, _ in kept):
            kept.append((c, prov))
    return dict(kept)


def clauses_text(paths: Sequence[Mapping[str, Any]], sizes: Iterable[str]) -> list[str]:
    """The clauses of `disjoin`, printed (for examples and tests)."""
    from guardsolve.solve.constraint import DimOrder, render_formula

    sized = sorted(set(sizes))
    dims = sorted({d for p in paths for d in p["sets"]} | set(sized))
    order = DimOrder(dims)
    return [render_formula(f, order).replace("(", "").replace(")", "")
            for f, _ in disjoin(paths, dims, sized)]
