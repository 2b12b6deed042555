"""Guards a person reads at a glance: each constraint in the simplest equivalent form found,
proven equivalent by z3 before it replaces the solver's form.

Two rewrites; the forms they print divide by positive constants only (no division by zero):

* **One dim.** A constraint over one size whose only non-linearity is `//` or `%` by constants
  is periodic-linear: its truth at `x` is fixed by `x` modulo the lcm of its divisors once `x`
  passes its constants. It is read off at the sizes up to a few periods and printed as what it
  means: a range (`x2 >= 33`, `4 <= x2 <= 65`, `x2 == 7`), an exclusion (`x2 != 1`) or a residue
  (`x2 % 4 == 0`, with a bound where it needs one). Inside an `or`/`and`, each part on its own.
* **Several dims.** Nested divisions are flattened (`((x // 2) - 1) // 2` is `(x + 2) // 4 - 1`,
  `(x // a) // b` is `x // (a*b)`), offsets inside a division brought to `[0, divisor)`, and the
  polynomial over the division terms expanded and factored (sympy); the shortest text wins.

>>> from guardsolve.guards.expr import Div, Poly, rel
>>> x = Poly.var("x2")
>>> d = lambda p, k: Poly.var(Div("floordiv", p, Poly.const(k)))
>>> f = rel("ne", d(d(d(d(d(x - Poly.const(1), 2), 2), 2), 2), 2), Poly.const(0))
>>> readable_formula(f, {"x2"}, ["x2"], background=[rel("ge", x, Poly.const(1))])[1]  # the other guards: x2 >= 1
'x2 >= 33'
>>> a = d(x - Poly.const(2), 2)
>>> y = Poly.var("x3")
>>> b = d(y - Poly.const(2), 2)
>>> readable_formula(rel("eq", a + a * b + b, Poly.const(63)), {"x2", "x3"}, ["x2", "x3"])[1]
'(x2 // 2)*(x3 // 2) == 64'
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence
import z3
from guardsolve.guards.expr import TRUE, And, Formula, Or, Rel, conj, disj
from guardsolve.solve.constraint import Constraint, DimOrder, render_formula
from guardsolve.solve.smt import formula_to_z3, limit, z3_vars
from guardsolve.solve.cases import many_routes
from guardsolve.solve.flatten import factored_rel, flat_formula
from guardsolve.solve.one_dim import constant_divisors, divisions_of, has_divisions, one_dim_forms, periodic_equal
from guardsolve.solve.proving import TIMEOUT_MS, Work, readable_proves


MAX_REWRITES = 64  # general constraints with divisions a set may have for the pass to run


def _candidates(f: Formula, sizes: set[str], order: DimOrder,
                prove: Callable[[Formula, Formula], bool]) -> list[tuple[Formula, str]]:
    """Candidate forms; each uses constant divisors only (so the check it prints never divides
    by zero). A constraint with a divisor that varies (`x2 % (x2 // 2)`) is read off one dim by
    its values too, and z3 proves the form under the other guards, which hold its divisors
    non-zero (the divisions' own guards are among them, kept or implied)."""
    divisors = constant_divisors(f)
    out: list[tuple[Formula, str]] = []
    dims = sorted(f.dims(), key=order.key)
    if len(dims) == 1 and dims[0] in sizes:
        out += one_dim_forms(f, dims[0], divisors if divisors is not None else _variable_divisors(f))
    if divisors is None and not isinstance(f, (Or, And)):
        return out
    if isinstance(f, (Or, And)):
        # NOTE: part by part, each rewrite proven on the whole (a part may differ where another
        # part decides: `(x0 == 0) or (x2 % (x2 // 2) == 0)` is `(x0 == 0) or (x2 % 2 == 0)`
        # where the other guards hold x2 >= 6 unless x0 == 0)
        join, sep = (disj, " or ") if isinstance(f, Or) else (conj, " and ")
        parts = [(a, render_formula(a, order)) for a in sorted(f.args, key=repr)]
        for i, (a, text) in enumerate(parts):
            for g, t in sorted(_candidates(a, sizes, order, prove), key=lambda ft: len(ft[1])):
                if len(t) >= len(text):
                    break
                trial = parts[:i] + [(g, t)] + parts[i + 1:]
                if prove(f, join(p for p, _ in trial)):
                    parts = trial
                    break
        out.append((join(p for p, _ in parts), sep.join(f"({t})" for t in sorted(t for _, t in parts))))
    elif isinstance(f, Rel) and divisors:
        flat = flat_formula(f)
        if isinstance(flat, Rel):
            out.append((flat, render_formula(flat, order)))
            fac = factored_rel(flat, order)
            if fac is not None:
                out.append(fac)
    return out


def _variable_divisors(f: Formula) -> list[int]:
    """For reading a one-dim constraint with a varying divisor: its constant divisors (the
    varying ones have no period; the sizes read cover its constants, and z3 decides)."""
    return [d.den.constant for d in divisions_of(f) if d.den.is_const() and d.den.constant > 0]


def _best(f: Formula, sizes: set[str], order: DimOrder, prove: Callable[[Formula, Formula], bool]) -> tuple[Formula, str] | None:
    """The shortest candidate form of `f` that `prove` shows equivalent to it."""
    original = render_formula(f, order)
    for g, text in sorted(_candidates(f, sizes, order, prove), key=lambda ft: len(ft[1])):
        if len(text) >= len(original):
            break
        if prove(f, g):
            return g, text
    return None


def readable_formula(f: Formula, sizes: Iterable[str], dims: Sequence[str], background: Sequence[Formula] = (),
                     timeout_ms: int = TIMEOUT_MS, work: Work | None = None) -> tuple[Formula, str] | None:
    """The simplest form of `f` found, proven equivalent by z3 under the `background` (the other
    guards) and sizes >= 0; None if none is shorter than the solver's own text, or none is proven."""
    sizes, order = set(sizes), DimOrder(list(dims))

    def prove(a: Formula, b: Formula) -> bool:
        return readable_proves(a, b, sizes, dims, background, timeout_ms, work=work)

    return _best(f, sizes, order, prove)


def readable(constraints: Sequence[Constraint], sizes: Iterable[str], dims: Sequence[str],
             timeout_ms: int = TIMEOUT_MS, example: Mapping[str, int] | None = None) -> list[Constraint]:
    """Each constraint in its simplest form, proven equivalent under the others (so the set is
    unchanged); its kind, provenance and dims kept. A disjunction of more than `MAX_DISJUNCTS`
    routes reads as its cases by one dim, or prints the route of the `example` (`many_routes`)."""
    sizes = set(sizes)
    work = Work()
    out = many_routes(list(constraints), sizes, dims, example, timeout_ms)
    todo = [i for i, c in enumerate(out) if c.kind == "general" and has_divisions(c.formula)]
    if len(todo) > MAX_REWRITES:
        return out  # NOTE: a large generated guard set: its forms are the solver's (read by programs)
    constraints = list(out)
    for i in todo:
        if work.over():
            break
        c = constraints[i]
        # NOTE: the background is the other guards over the same dims (the rest cannot change c's truth)
        others = [o.formula for j, o in enumerate(out) if j != i and set(o.dims) & set(c.dims)]
        found = readable_formula(c.formula, sizes, dims, others, timeout_ms, work)
        if found is not None:
            out[i] = Constraint(c.kind, found[0], found[1], c.prov, c.dims)
    return _one_per_dim(out, sizes, dims, timeout_ms, work)


def _one_per_dim(constraints: list[Constraint], sizes: set[str], dims: Sequence[str], timeout_ms: int,
                 work: Work) -> list[Constraint]:
    """The constraints over one size read together, when together they say one thing:
    `20 <= x <= 35`, `x % 16 <= 3` and `x % 4 == 0` are `x == 32`."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(constraints):
        if len(c.dims) == 1 and c.dims[0] in sizes and constant_divisors(c.formula) is not None:
            groups.setdefault(c.dims[0], []).append(i)
    out: list[Constraint | None] = list(constraints)
    for d, members in groups.items():
        # NOTE: only where a non-linear guard joins in: two bounds of the ordering layer stay two
        if len(members) < 2 or work.over() or all(constraints[i].kind != "general" for i in members):
            continue
        together = conj(constraints[i].formula for i in members)
        divisors = constant_divisors(together) or []
        others = [c.formula for j, c in enumerate(constraints) if j not in members and d in c.dims]
        found = None
        for g, text in sorted(one_dim_forms(together, d, divisors), key=lambda ft: len(ft[1])):
            # NOTE: equal at every size is equal under the others too: decided without z3 where
            # both are linear in d's divisions (`periodic_equal`)
            if periodic_equal(together, g, d) or readable_proves(together, g, sizes, dims, others, timeout_ms,
                                                                 work=work):
                found = (g, text)
                break
        # NOTE: one guard for several is worth a few more characters (`5 <= x <= 8` for two bounds)
        if found is None or len(found[1]) > sum(len(constraints[i].text) for i in members) + 4 * (len(members) - 1):
            continue
        prov = frozenset().union(*(constraints[i].prov for i in members))
        kind = "eq" if found[1].startswith(f"{d} == ") else "general"
        out[members[0]] = Constraint(kind, found[0], found[1], prov, (d,))
        for i in members[1:]:
            out[i] = None
    return [c for c in out if c is not None]


def irredundant(constraints: Sequence[Constraint], before: Sequence[Constraint], sizes: Iterable[str],
                timeout_ms: int = TIMEOUT_MS) -> tuple[list[Constraint], frozenset[int], list[str]]:
    """The rewritten set with every constraint the others now imply dropped (z3, sizes >= 0),
    only among those sharing a dim with a rewritten one; with the dropped provenance and the
    checks z3 left undecided (those constraints are kept)."""
    sizes = set(sizes)
    changed = {d for c, b in zip(constraints, before) if c is not b for d in c.dims}
    out = list(constraints)
    dropped: set[int] = set()
    undecided: list[str] = []
    ctx: z3.Context | None = None
    work = Work()
    for c in list(out):
        if not set(c.dims) & changed or len(out) < 2:
            continue
        if work.over():
            undecided.append(f"is `{c.text}` implied by the rest, read as printed? not asked (work budget spent)")
            continue
        others = [o for o in out if o is not c]
        if len(c.dims) == 1 and c.dims[0] in sizes and not any(c.dims[0] in o.dims for o in others):
            # NOTE: alone on its size (the set is satisfiable, so the others cannot imply it):
            # redundant only if it holds at every size, decided exactly where it is linear
            always = periodic_equal(c.formula, TRUE, c.dims[0])
            if always is not None:
                if always:
                    out = others
                    dropped |= c.prov
                continue
        if ctx is None:
            ctx = z3.Context()
            var = z3_vars(ctx)
        s = z3.Solver(ctx=ctx)
        limit(s, timeout_ms)
        s.add(*(var(d) >= 0 for o in out for d in o.dims if d in sizes))
        s.add(*(formula_to_z3(o.formula, var) for o in others), z3.Not(formula_to_z3(c.formula, var)))
        verdict = work.check(s)
        if verdict == z3.unsat:
            out = others
            dropped |= c.prov
        elif verdict == z3.unknown:
            undecided.append(f"is `{c.text}` implied by the rest, read as printed? solver said unknown")
    return out, frozenset(dropped), undecided
