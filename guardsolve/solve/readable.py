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

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import z3

from guardsolve.guards.expr import TRUE, And, Const, Div, Formula, Or, Poly, Rel, atom_key, conj, disj, rel
from guardsolve.solve.constraint import Constraint, DimOrder, row_text, render_formula
from guardsolve.solve.smt import RLIMIT_PER_MS, formula_to_z3, limit, z3_vars
from guardsolve.solve.witness import poly_value

PERIODS = 4  # NOTE: sizes read off: past the constants, this many periods of the lcm of the divisors
MAX_SPAN = 8192  # the sizes a one-dim constraint is read at, at most
TIMEOUT_MS = 1000
MAX_REWRITES = 64  # general constraints with divisions a set may have for the pass to run
BUDGET_S = 2.0  # NOTE: the pass reads for people; past this much z3 work, the rest keep the solver's forms


@dataclass
class Work:
    """z3's own work count spent by one pass, against `BUDGET_S` seconds' worth of it on an
    idle core (`smt.RLIMIT_PER_MS`): a count, not a clock, so the forms printed do not depend
    on the machine's load.

    >>> w = Work()
    >>> x = z3.Int("x")
    >>> s = z3.Solver(); s.add(x * x == 4, x > 0)
    >>> w.check(s), w.spent > 0, w.over()
    (sat, True, False)
    """

    budget: int = int(BUDGET_S * 1000) * RLIMIT_PER_MS
    spent: int = 0

    def check(self, s: z3.Solver) -> z3.CheckSatResult:
        before = _rlimit_count(s)
        verdict = s.check()
        self.spent += max(_rlimit_count(s) - before, 0)
        return verdict

    def over(self) -> bool:
        return self.spent > self.budget


def _rlimit_count(s: z3.Solver) -> int:
    """z3's work count so far in `s`'s context (the statistic `rlimit count`; 0 before any)."""
    stats = s.statistics()
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in stats.keys() else 0
MAX_DISJUNCTS = 8  # routes one printed guard may join; past it, its cases by a dim, or its example's route
MAX_CASES = 4  # guards one disjunction may be split into, one per case of a dim


# -- which constraints qualify --------------------------------------------------------------


def _divs(f: Formula) -> Iterable[Div]:
    if isinstance(f, Rel):
        yield from _poly_divs(f.poly)
    elif isinstance(f, (Or, And)):
        for a in f.args:
            yield from _divs(a)


def _poly_divs(p: Poly) -> Iterable[Div]:
    for m, _ in p.terms:
        for a in m:
            if isinstance(a, Div):
                yield a
                yield from _poly_divs(a.num)
                yield from _poly_divs(a.den)


def constant_divisors(f: Formula) -> list[int] | None:
    """The divisors of `f`, when every one is a positive constant; else None."""
    out = []
    for d in _divs(f):
        if not d.den.is_const() or d.den.constant <= 0:
            return None
        out.append(d.den.constant)
    return out


def has_divisions(f: Formula) -> bool:
    return next(iter(_divs(f)), None) is not None


# -- evaluation -----------------------------------------------------------------------------


def holds(f: Formula, env: dict[str, int]) -> bool:
    """`f` at concrete dims, as the compiled check reads it (a zero divisor rejects)."""
    if isinstance(f, Const):
        return f.value
    if isinstance(f, Rel):
        try:
            v = poly_value(f.poly, env)
        except ZeroDivisionError:
            return False
        return {"eq": v == 0, "ne": v != 0, "le": v <= 0}[f.op]
    vals = (holds(a, env) for a in f.args)
    return any(vals) if isinstance(f, Or) else all(vals)


def truth_table(f: Formula, x: str, span: int) -> list[bool]:
    """`holds(f, {x: v})` for v in range(span), from one compiled function (Swin's nested
    divisions are a DAG that interpreting walks as a tree at every size).

    >>> from guardsolve.guards.expr import Div, Poly, rel
    >>> truth_table(rel("eq", Poly.var(Div("mod", Poly.var("x"), Poly.const(3))), Poly.const(0)), "x", 7)
    [True, False, False, True, False, False, True]
    """
    from guardsolve.solve.witness import formula_source

    if isinstance(f, Const):
        return [f.value] * span
    fn = eval(compile(f"lambda {x}: ({formula_source(f, {x: x})})", "<readable>", "eval"),  # noqa: S307 - our own source
              {"__builtins__": {}})
    out = []
    for v in range(span):
        try:
            out.append(bool(fn(v)))
        except ZeroDivisionError:
            out.append(False)
    return out


def _linear(p: Poly) -> bool:
    """Is `p` of degree at most 1 in its atoms, each division by a positive constant of a
    numerator that is itself linear? Then `p` is linear in k on each residue class
    `x = r + k*P` of its period P (a division by c of something that steps by s*c steps by s)."""
    for m, _ in p.terms:
        if len(m) > 1:
            return False
        for a in m:
            if isinstance(a, Div) and not (a.den.is_const() and a.den.constant > 0 and _linear(a.num)):
                return False
    return True


def _rels(f: Formula) -> Iterable[Rel]:
    if isinstance(f, Rel):
        yield f
    elif isinstance(f, (Or, And)):
        for a in f.args:
            yield from _rels(a)


def periodic_equal(f: Formula, g: Formula, x: str, most: int = 200_000) -> bool | None:
    """Decide `f(x) == g(x)` for every size x >= 0, exactly and without a solver, when both are
    over x alone and every comparison in them is linear in x's divisions by constants (None
    otherwise, or past `most` evaluations).

    Proof: on each residue class `x = r + k*P` (P a common period, `_period`), each compared
    polynomial is exactly `a + b*k` (`_linear`), so its sign, and whether it is zero, is the
    same for every k above |a| / |b| + 1. Past the largest such k on every class, f and g are
    constant in k, so they agree everywhere iff they agree at every x up to P times that k + 2.

    >>> from guardsolve.guards.expr import Poly, rel
    >>> q = Poly.var(Div("floordiv", Poly.var("x") - Poly.const(2), Poly.const(2)))
    >>> X, K = Poly.var("x"), Poly.const
    >>> periodic_equal(rel("ne", q, K(0)), disj([rel("le", X, K(1)), rel("ge", X, K(4))]), "x")  # (-2) // 2 == -1
    True
    >>> periodic_equal(rel("ne", q, K(0)), rel("ge", X, K(4)), "x")
    False
    """
    rels = list(_rels(f)) + list(_rels(g))
    if not all(r.dims() <= {x} and _linear(r.poly) for r in rels):
        return None
    period = math.lcm(_period(f), _period(g))
    if period > most:
        return None
    steps = 0
    for r in range(period):
        for rel_ in rels:
            a = poly_value(rel_.poly, {x: r})
            b = poly_value(rel_.poly, {x: r + period}) - a
            if b:
                steps = max(steps, abs(a) // abs(b) + 1)
    span = period * (steps + 2)
    if span > most:
        return None
    return truth_table(f, x, span) == truth_table(g, x, span)


# -- one dim --------------------------------------------------------------------------------


def _period(f: Formula) -> int:
    """A period of `f`'s divisions in their one dim: a division by k of something of period p
    has period k*p; a sum or product of parts, the lcm of theirs.

    >>> from guardsolve.guards.expr import Div, Poly, rel
    >>> u = Poly.var(Div("floordiv", Poly.var("x") + Poly.const(4), Poly.const(8)))
    >>> _period(rel("eq", Poly.var(Div("mod", u, Poly.const(4))), Poly.const(0)))
    32
    """
    def poly(p: Poly) -> int:
        return math.lcm(1, *(atom(a) for m, _ in p.terms for a in m))

    def atom(a: Any) -> int:
        if isinstance(a, str):
            return 1
        k = a.den.constant if a.den.is_const() and a.den.constant > 0 else 1  # NOTE: a varying divisor has no period
        return min(k * poly(a.num), 10 ** 9)

    if isinstance(f, Rel):
        return poly(f.poly)
    if isinstance(f, (Or, And)):
        return math.lcm(1, *(_period(a) for a in f.args))
    return 1


def _constants(f: Formula) -> int:
    """The largest constant in `f` (its offsets and coefficients)."""
    best = 0
    if isinstance(f, Rel):
        stack = [f.poly]
        while stack:
            p = stack.pop()
            for m, c in p.terms:
                best = max(best, abs(c))
                for a in m:
                    if isinstance(a, Div):
                        stack += [a.num, a.den]
    elif isinstance(f, (Or, And)):
        best = max((_constants(a) for a in f.args), default=0)
    return best


def one_dim_forms(f: Formula, x: str, divisors: Sequence[int]) -> list[tuple[Formula, str]]:
    """Candidate meanings of a one-dim constraint over a size `x`: ranges, an exclusion, a
    residue. Sizes the other guards exclude are not known here, so each candidate reads the
    truth from some size on; the caller proves which hold under the other guards."""
    # NOTE: nested divisions multiply their periods (`(x // 4) % 4` repeats every 16)
    period = math.lcm(_period(f), *divisors) if divisors else 1
    # NOTE: past `start` (beyond every constant, scaled by the period) the truth is periodic in
    # x with the period; a few periods show it. The window is capped: a form read off it is a
    # candidate only, and z3 proves each one after
    start = _constants(f) * period + period
    span = start + PERIODS * period
    if span > MAX_SPAN:
        span, start = MAX_SPAN, MAX_SPAN // 2
    truth = truth_table(f, x, span)
    tail = truth[start:]
    X = Poly.var(x)
    K = Poly.const
    out: list[tuple[Formula, str]] = []
    false_at = [v for v in range(span) if not truth[v]]
    true_at = [v for v in range(span) if truth[v]]
    if all(tail) and false_at:
        lo = false_at[-1] + 1
        out.append((rel("ge", X, K(lo)), f"{x} >= {lo}"))
        out += [(rel("ne", X, K(k)), f"{x} != {k}") for k in false_at[-2:]]
        first = false_at[0]
        if first > 0 and false_at == list(range(first, lo)):
            out.append((disj([rel("lt", X, K(first)), rel("ge", X, K(lo))]), f"({x} < {first}) or ({x} >= {lo})"))
    if not any(tail) and true_at:
        hi = true_at[-1]
        lo = next(v for v in range(hi, -1, -1) if v == 0 or not truth[v - 1])
        out.append((rel("eq", X, K(hi)), f"{x} == {hi}"))
        out.append((rel("le", X, K(hi)), f"{x} <= {hi}"))
        if lo > 0 and lo < hi:
            out.append((conj([rel("ge", X, K(lo)), rel("le", X, K(hi))]), f"{lo} <= {x} <= {hi}"))
    if period > 1 and any(tail) and not all(tail):
        for m in sorted(k for k in range(2, period + 1) if period % k == 0):
            residues = {v % m for v in range(start, span) if truth[v]}
            if any(truth[v] != (v % m in residues) for v in range(start, span)):
                continue
            lo_r, hi_r = min(residues), max(residues)
            if len(residues) > 1 and residues == set(range(lo_r, hi_r + 1)):
                # NOTE: a run of residues: `x % 16 <= 3` (the window padding of `(x // 4) % 4 == 0`)
                mod = Poly.var(Div("mod", X, K(m)))
                if lo_r == 0:
                    out.append((rel("le", mod, K(hi_r)), f"{x} % {m} <= {hi_r}"))
                else:
                    out.append((conj([rel("ge", mod, K(lo_r)), rel("le", mod, K(hi_r))]), f"{lo_r} <= {x} % {m} <= {hi_r}"))
                break
            if len(residues) != 1:
                continue
            (r,) = residues
            res = rel("eq", Poly.var(Div("mod", X, K(m))), K(r))
            out.append((res, f"{x} % {m} == {r}"))
            lo = next(v for v in range(start, -1, -1) if v == 0 or truth[v - 1] != ((v - 1) % m == r))
            if lo > 0:
                out.append((conj([res, rel("ge", X, K(lo))]), f"{x} >= {lo} and {x} % {m} == {r}"))
            break
    return out


# -- several dims ---------------------------------------------------------------------------


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


def _flat_formula(f: Formula) -> Formula:
    if isinstance(f, Rel):
        return rel({"eq": "eq", "ne": "ne", "le": "le"}[f.op], _flat_poly(f.poly), Poly.const(0))
    if isinstance(f, Or):
        return disj(_flat_formula(a) for a in f.args)
    if isinstance(f, And):
        return conj(_flat_formula(a) for a in f.args)
    return f


def _factored(r: Rel, order: DimOrder) -> tuple[Formula, str] | None:
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


# -- the pass -------------------------------------------------------------------------------


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
        flat = _flat_formula(f)
        if isinstance(flat, Rel):
            out.append((flat, render_formula(flat, order)))
            fac = _factored(flat, order)
            if fac is not None:
                out.append(fac)
    return out


def _variable_divisors(f: Formula) -> list[int]:
    """For reading a one-dim constraint with a varying divisor: its constant divisors (the
    varying ones have no period; the sizes read cover its constants, and z3 decides)."""
    return [d.den.constant for d in _divs(f) if d.den.is_const() and d.den.constant > 0]


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


# -- many routes ----------------------------------------------------------------------------


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
    out = [Constraint(_kind(f), f, texts[f], c.prov, tuple(sorted(f.dims(), key=order.key)))
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


def _kind(f: Formula) -> str:
    """A guard's kind as the solver names it: a relation of one or two dims, coefficients 1
    (`eq`, `ne`, `order`), else `general`."""
    if isinstance(f, Rel):
        lin = f.poly.nonconst()
        if len(lin) <= 2 and all(len(m) == 1 and isinstance(m[0], str) and abs(k) == 1 for m, k in lin.items()):
            return {"eq": "eq", "ne": "ne", "le": "order"}[f.op]
    return "general"


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


def readable_proves(a: Formula, b: Formula, sizes: set[str], dims: Sequence[str], background: Sequence[Formula],
                    timeout_ms: int, ctx: z3.Context | None = None, work: Work | None = None) -> bool:
    """z3: `a` and `b` agree wherever the `background` holds and sizes are >= 0 (in `ctx`, a
    fresh context by default: making one costs milliseconds, so a caller with many reuses one)."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)
    s = z3.Solver(ctx=ctx)
    limit(s, timeout_ms)
    s.add(*(var(d) >= 0 for d in dims if d in sizes), *(formula_to_z3(f, var) for f in background))
    s.add(formula_to_z3(a, var) != formula_to_z3(b, var))
    return (work.check(s) if work is not None else s.check()) == z3.unsat


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
