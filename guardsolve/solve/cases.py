"""Many routes' guards read as cases of one dim: a disjunction split where each case is short."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence
from guardsolve.guards.expr import TRUE, And, Formula, Or, Poly, conj, disj, rel
from guardsolve.solve.constraint import Constraint, DimOrder, row_text, render_formula
from guardsolve.solve.one_dim import holds
from guardsolve.solve.proving import TIMEOUT_MS, readable_proves, solver_kind


MAX_DISJUNCTS = 8  # routes one printed guard may join; past it, its cases by a dim, or its example's route


MAX_CASES = 4  # guards one disjunction may be split into, one per case of a dim


def many_routes(constraints: Sequence[Constraint], sizes: set[str], dims: Sequence[str],
                example: Mapping[str, int] | None, timeout_ms: int = TIMEOUT_MS) -> list[Constraint]:
    """Each disjunction of more than `MAX_DISJUNCTS` routes (merged routes of many operands: each
    at size 0 or 1 in each dim) as a person reads it. The conjuncts every route shares become
    guards of their own; where one dim splits the routes into at most `MAX_CASES` cases of at
    most `MAX_DISJUNCTS` routes, each case is a guard (`(x0 != 1) or (route) or ...`); each
    rewrite is proven equivalent by z3 under the other guards. A disjunction still past a
    reader's count stays whole (its check is exact) and prints as the route of the `example`
    and how many more (`Constraint.shown`; `explain(verbose=True)` lists every route).

    >>> from guardsolve.guards.expr import Poly, conj, disj, rel
    >>> x, y, K = Poly.var("x0"), Poly.var("y0"), Poly.const
    >>> f = disj(conj([rel("ge", x, K(2)), rel("eq", y, K(k))]) for k in range(12))
    >>> c = Constraint("general", f, render_formula(f, DimOrder(["x0", "y0"])), frozenset(), ("x0", "y0"))
    >>> [g.text for g in many_routes([c], {"x0", "y0"}, ["x0", "y0"], None)]
    ['x0 >= 2', 'y0 <= 11']
    >>> f = disj(conj([rel("eq", x, K(k)), rel("eq", y, K(k * k))]) for k in range(12))
    >>> c = Constraint("general", f, render_formula(f, DimOrder(["x0", "y0"])), frozenset(), ("x0", "y0"))
    >>> print("\\n".join(many_routes([c], {"x0", "y0"}, ["x0", "y0"], {"x0": 3, "y0": 9})[0].lines()))
    one of 12 routes over x0, y0; the example's:
        x0 == 3, y0 == 9
        (or one of 11 more: explain(verbose=True) lists them)
    """
    out: list[Constraint] = []
    for i, c in enumerate(constraints):
        rows = _route_rows(c.formula) if c.kind == "general" else None
        if rows is None:
            out.append(c)
            continue
        others = [o.formula for j, o in enumerate(constraints) if j != i and set(o.dims) & set(c.dims)]
        out += _read_routes(c, rows, sizes, dims, others, example, timeout_ms)
    return out


def _route_rows(f: Formula) -> list[list[Formula]] | None:
    """The routes of a disjunction past a reader's count, each as its conjuncts; else None."""
    if not isinstance(f, Or) or len(f.args) <= MAX_DISJUNCTS:
        return None
    return [list(a.args) if isinstance(a, And) else [a] for a in f.args]


def _read_routes(c: Constraint, rows: list[list[Formula]], sizes: set[str], dims: Sequence[str],
                 others: Sequence[Formula], example: Mapping[str, int] | None, timeout_ms: int) -> list[Constraint]:
    """`c`, a disjunction of `rows`, as its shared conjuncts and its cases by a dim (proven
    equivalent), or whole, printed as the example's route and how many more."""
    order = DimOrder(list(dims))
    common = set(rows[0]).intersection(*rows[1:])
    rows = [[f for f in r if f not in common] for r in rows]
    parts = sorted(common, key=lambda f: render_formula(f, order))
    rest = disj(conj(r) for r in rows)
    cases = _cases(rows, sizes, order) if rest != TRUE else None
    texts = {f: render_formula(f, order) for f in parts}
    for f, text in cases or ():
        parts.append(f)
        texts[f] = text
    if cases is None:
        parts.append(rest)
        texts[rest] = render_formula(rest, order)
    if parts != [c.formula] and not readable_proves(c.formula, conj(parts), sizes, dims, others, timeout_ms):
        parts, rest, texts = [c.formula], c.formula, {c.formula: c.text}
    out = [Constraint(solver_kind(f), f, texts[f], c.prov, tuple(sorted(f.dims(), key=order.key)))
           for f in parts if f != TRUE]
    if cases is None and isinstance(rest, Or) and len(rest.args) > MAX_DISJUNCTS:
        i = next(i for i, f in enumerate(parts) if f is rest)
        out[i] = _shown(out[i], example, order)
    return out


def _cases(rows: list[list[Formula]], sizes: set[str], order: DimOrder) -> list[tuple[Formula, str]] | None:
    """The disjunction of `rows` as one guard per case of the dim that splits it best (with its
    text): where the dim lies in a case's set, the routes that allow it there, `(x0 != 1) or
    (y0 == 1 and z0 >= 2) or ...`; None where no dim gives at most `MAX_CASES` guards of at
    most `MAX_DISJUNCTS` routes."""
    from guardsolve.solve.disjoin import SIZES, IntSet, one_dim_set

    sets: list[dict[str, IntSet]] = []
    for r in rows:
        have: dict[str, IntSet] = {}
        for f in r:
            got = one_dim_set(f)
            if got is not None:
                have[got[0]] = have.get(got[0], IntSet.full()).inter(got[1])
        sets.append(have)
    best: tuple[tuple[int, int], list[tuple[Formula, str]]] | None = None
    for d in sorted({d for s in sets for d in s}, key=order.key):
        domain = SIZES if d in sizes else IntSet.full()
        groups: dict[frozenset[Formula], IntSet] = {}
        for cell in _cells([s.get(d, domain) for s in sets], domain):
            allowed = frozenset(conj(f for f in r if (one_dim_set(f) or ("",))[0] != d)
                                for r, s in zip(rows, sets) if cell.subset(s.get(d, domain)))
            groups[allowed] = groups.get(allowed, IntSet.empty()).union(cell)
        guards = [_case(d, where, domain, allowed, order) for allowed, where in groups.items() if TRUE not in allowed]
        if len(guards) > MAX_CASES or any(isinstance(f, Or) and len(f.args) > MAX_DISJUNCTS for f, _ in guards):
            continue
        score = (len(guards), sum(len(a) for a in groups))
        if best is None or score < best[0]:
            best = (score, guards)
    return best[1] if best is not None else None


def _case(d: str, where: Any, domain: Any, allowed: Iterable[Formula], order: DimOrder) -> tuple[Formula, str]:
    """`d` outside IntSet `where`, or one of the `allowed` routes: the guard of one case, its
    text led by the case (`x0 != 1`, a point's; else the complement's bounds)."""
    point = where.parts[0][0] if len(where.parts) == 1 and where.parts[0][0] == where.parts[0][1] else None
    other = (rel("ne", Poly.var(d), Poly.const(point)) if point is not None
             else _complement(where, domain).formula(d, domain))

    def text(f: Formula) -> str:
        parts = f.args if isinstance(f, And) else [f]
        return " and ".join(sorted(render_formula(p, order) if not isinstance(p, Or) else f"({render_formula(p, order)})"
                                   for p in parts))

    routes = sorted(text(f) for f in allowed)
    if not routes:
        return other, render_formula(other, order)
    return disj([other, *allowed]), " or ".join([f"({render_formula(other, order)})", *(f"({t})" for t in routes)])


def _cells(sets: Sequence[Any], domain: Any) -> list[Any]:
    """The intervals of `domain` that no set's bound cuts: each lies inside or outside every set."""
    from guardsolve.solve.disjoin import IntSet

    cuts = sorted({b for s in sets for lo, hi in s.parts for b in (lo, None if hi is None else hi + 1)
                   if b is not None})
    edges: list[int | None] = [None, *cuts, None]
    cells = [IntSet.of([(lo, None if hi is None else hi - 1)]).inter(domain) for lo, hi in zip(edges, edges[1:])]
    return [c for c in cells if c.parts]


def _complement(s: Any, domain: Any) -> Any:
    """The values of `domain` outside IntSet `s`."""
    from guardsolve.solve.disjoin import IntSet

    out: list[tuple[int | None, int | None]] = []
    start: int | None = None
    for lo, hi in s.parts:
        if lo is not None:
            out.append((start, lo - 1))
        if hi is None:
            return IntSet.of(out).inter(domain)
        start = hi + 1
    return IntSet.of([*out, (start, None)]).inter(domain)


def _shown(c: Constraint, example: Mapping[str, int] | None, order: DimOrder) -> Constraint:
    """`c`, a disjunction past a reader's count, printed as its route that holds at `example`
    (else its shortest) and how many more."""
    from dataclasses import replace

    assert isinstance(c.formula, Or)
    routes = sorted(c.formula.args, key=lambda a: (len(getattr(a, "args", [a])), render_formula(a, order)))
    at = [a for a in routes if example is not None and set(a.dims()) <= set(example) and holds(a, dict(example))]
    first = (at or routes)[0]
    head = f"one of {len(routes)} routes over {', '.join(c.dims)}; " + ("the example's:" if at else "the shortest:")
    return replace(c, shown=(head, f"    {row_text(getattr(first, 'args', [first]), order)}",
                             f"    (or one of {len(routes) - 1} more: explain(verbose=True) lists them)"))
