"""Stage 4 of simplify: z3 for what the fast layers cannot decide.

Lowering of formulas and of whole guard graphs to z3 (a rule table over the same ops), and
`reduce_component`: one small solver per independent component, tracking literals, a work limit
on every call (`limit`: z3's own count, not a clock), and removal of each constraint implied
by the rest. `unknown` is a result: the constraint is kept and the reason recorded. A
component is handed to z3 as one SMT-LIB text (`formula_to_smtlib`); a constraint that a
nearby concrete point already shows irredundant (`guardsolve.solve.witness`) costs no solver
call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Callable, Mapping, Sequence

import z3

from guardsolve.guards import semantics
from guardsolve.guards.expr import Const, Div, Formula, Or, Poly, Rel
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op
from guardsolve.solve.bounded import Boxes
from guardsolve.solve.witness import Witnesses

# NOTE: z3 counts its own work (`rlimit`, resource units): a call bounded by that count answers
# the same on a busy machine as on an idle one, where a wall-clock timeout does not (guards, their
# proofs and their printed forms must not depend on the load). A `timeout_ms` the API takes is
# that many milliseconds of z3's work on one idle core, at RLIMIT_PER_MS units each: what this
# project's longest checks (division and product guards) spend, measured with `time.thread_time`
# (plain linear problems spend about 1,000 a ms, pure polynomial ones about 7,000). A wall clock
# of BACKSTOP times the budget stays behind it, for z3 steps the count misses.
RLIMIT_PER_MS = 4000
BACKSTOP = 10
_RLIMIT_MAX = 2**32 - 1  # NOTE: z3's parameter is an unsigned 32-bit int (0: no limit)


def limit(solver: z3.Solver | z3.Optimize, timeout_ms: int) -> None:
    """Bound each check of `solver` by `timeout_ms` ms of z3's own work count (deterministic),
    with a wall clock of `BACKSTOP` times that behind it.

    >>> x, y, z = z3.Ints("x y z")
    >>> s = z3.Solver()
    >>> limit(s, 50)
    >>> s.add(x > 0, y > 0, z > 0, x**3 + y**3 == z**3 + 11)
    >>> s.check(), why_unknown(s)
    (unknown, 'its work limit ran out (z3 rlimit)')
    """
    ms = max(int(timeout_ms), 1)
    solver.set("rlimit", min(ms * RLIMIT_PER_MS, _RLIMIT_MAX))
    solver.set("timeout", min(ms * BACKSTOP, _RLIMIT_MAX))


def why_unknown(solver: z3.Solver | z3.Optimize) -> str:
    """Why `solver` answered unknown, in words (z3 says "canceled" when its work count ran out)."""
    reason = solver.reason_unknown()
    return "its work limit ran out (z3 rlimit)" if reason in ("canceled", "max. resource limit exceeded") else reason


def poly_to_z3(p: Poly, var: Vars) -> z3.ArithRef:
    terms = []
    for m, c in p.terms:
        t: Any = z3.IntVal(c, var.ctx)
        for a in m:
            t = t * (var(a) if isinstance(a, str) else div_to_z3(a, var))
        terms.append(t)
    return z3.Sum(terms) if terms else z3.IntVal(0, var.ctx)


def div_to_z3(d: Div, var: Vars) -> z3.ArithRef:
    num, den = poly_to_z3(d.num, var), poly_to_z3(d.den, var)
    return semantics.floordiv(num, den) if d.kind == "floordiv" else semantics.mod(num, den)


def formula_to_z3(f: Formula, var: Vars) -> z3.BoolRef:
    if isinstance(f, Const):
        return z3.BoolVal(f.value, var.ctx)
    if isinstance(f, Rel):
        p = poly_to_z3(f.poly, var)
        return {"eq": p == 0, "ne": p != 0, "le": p <= 0}[f.op]
    args = [formula_to_z3(a, var) for a in sorted(f.args, key=repr)]
    return z3.Or(args) if isinstance(f, Or) else z3.And(args)


def _sym(name: str) -> str:
    return f"|{name}|"


def poly_to_smtlib(p: Poly) -> str:
    """SMT-LIB text of a polynomial: `(+ (* 2 |x|) (- 1))`, divisions via `semantics.SMTLIB_DEFS`."""
    terms = []
    for m, c in sorted(p.terms, key=repr):
        factors = [str(c) if c >= 0 else f"(- {-c})"] if c != 1 or not m else []
        for a in m:
            if isinstance(a, str):
                factors.append(_sym(a))
            else:
                fn = "py_floordiv" if a.kind == "floordiv" else "py_mod"
                factors.append(f"({fn} {poly_to_smtlib(a.num)} {poly_to_smtlib(a.den)})")
        terms.append(factors[0] if len(factors) == 1 else f"(* {' '.join(factors)})")
    if not terms:
        return "0"
    return terms[0] if len(terms) == 1 else f"(+ {' '.join(terms)})"


def formula_to_smtlib(f: Formula) -> str:
    """SMT-LIB text of a formula; the same meaning as `formula_to_z3`.

    >>> from guardsolve.guards.expr import rel
    >>> formula_to_smtlib(rel("lt", Poly.var("x"), Poly.var("y")))
    '(<= (+ |x| (* (- 1) |y|) 1) 0)'
    """
    if isinstance(f, Const):
        return "true" if f.value else "false"
    if isinstance(f, Rel):
        p = poly_to_smtlib(f.poly)
        return {"eq": f"(= {p} 0)", "ne": f"(not (= {p} 0))", "le": f"(<= {p} 0)"}[f.op]
    args = " ".join(formula_to_smtlib(a) for a in sorted(f.args, key=repr))
    return f"({'or' if isinstance(f, Or) else 'and'} {args})"


def z3_rules(var: Vars, facts: list[z3.BoolRef], skip: frozenset[int] = frozenset(),
             index: dict[int, int] | None = None) -> RuleTable:
    """Lower a guard graph node by node: bailouts and `divisor != 0` go to `facts`.

    Bailouts whose node index is in `skip` (data-dependent ones) are left out.
    """
    current = {"i": -1}

    def enter(node: Any) -> None:
        current["i"] = (index or {}).get(id(node), -1)

    def div(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def rule(a: Any, b: Any) -> Any:
            facts.append(b != 0)
            return fn(a, b)
        return rule

    def bailout(b: Any, *, expect: bool) -> None:
        if current["i"] not in skip:
            facts.append(b if expect else z3.Not(b))

    return RuleTable("z3", {
        Op.INT_CONST: lambda *, val: z3.IntVal(val, var.ctx),
        Op.BOOL_CONST: lambda *, val: z3.BoolVal(val, var.ctx),
        Op.INT_PLACEHOLDER: lambda *, name: var(name),
        Op.INT_ARG: lambda *, name, val=None: var(name),
        Op.INT_ADD: lambda a, b: a + b,
        Op.INT_SUB: lambda a, b: a - b,
        Op.INT_MUL: lambda a, b: a * b,
        Op.INT_FLOORDIV: div(semantics.floordiv),
        Op.INT_MOD: div(semantics.mod),
        Op.INT_EQ: lambda a, b: a == b,
        Op.INT_NE: lambda a, b: a != b,
        Op.INT_LT: lambda a, b: a < b,
        Op.INT_LE: lambda a, b: a <= b,
        Op.INT_GT: lambda a, b: a > b,
        Op.INT_GE: lambda a, b: a >= b,
        Op.BOOL_NOT: z3.Not,
        Op.BOOL_AND: lambda a, b: z3.And(a, b),
        Op.BOOL_OR: lambda a, b: z3.Or(a, b),
        Op.BOOL_BAILOUT: bailout,
        Op.BOOL_OPAQUE: lambda *, name: z3.Bool(f"__value_{name}", var.ctx),
    }, enter)


def graph_to_z3(graph: Graph, var: Vars, nodes: Sequence[int] | None = None,
                skip: frozenset[int] | None = None, index: dict[int, int] | None = None) -> z3.BoolRef:
    """The exact acceptance condition of a guard graph: all shape bailouts hold, no division by 0.

    `nodes`: of these nodes only (closed under inputs, as `outline`'s components); then pass
    the whole graph's data-dependent bailouts (`skip`) and `index` (id of a node -> its index).
    """
    from guardsolve.guards.shape import value_bailouts

    facts: list[z3.BoolRef] = []
    index = index if index is not None else {id(n): i for i, n in enumerate(graph.nodes)}
    skip = skip if skip is not None else frozenset(value_bailouts(graph))
    interpret(graph, z3_rules(var, facts, skip, index), validate=nodes is None, nodes=nodes)
    return z3.And(facts) if facts else z3.BoolVal(True, var.ctx)


class Vars:
    """z3 integer variables by dim name, all in one context."""

    def __init__(self, ctx: z3.Context | None = None):
        self.ctx = ctx if ctx is not None else z3.main_ctx()
        self._cache: dict[str, z3.ArithRef] = {}

    def __call__(self, name: str) -> z3.ArithRef:
        if name not in self._cache:
            self._cache[name] = z3.Int(name, self.ctx)
        return self._cache[name]


def z3_vars(ctx: z3.Context | None = None) -> Vars:
    return Vars(ctx)


@dataclass
class ReduceResult:
    kept: list[int]
    removed: list[int]
    undecided: list[str] = field(default_factory=list)


class Contexts:
    """One z3 solver shared by many components, each in its own push/pop scope, made only
    when a component needs it.

    Creating a context or a solver costs more than solving a small component (about 10 ms and
    3 ms); a scope costs about 0.3 ms. A fresh context every `per` components keeps the shared
    one from growing without bound (declarations outlive their scope).
    """

    def __init__(self, timeout_ms: int, per: int = 128):
        self.timeout_ms, self.per = int(timeout_ms), per
        self._s: z3.Solver | None = None
        self._declared: set[str] = set()
        self._uses = 0
        self.codes: dict[str, CodeType] = {}  # NOTE: the witness search's compiled formula shapes, shared too

    def scope(self, dims: set[str]) -> tuple[z3.Solver, str]:
        """The shared solver, pushed; and a tag that makes this scope's literal names unique."""
        if self._s is None or self._uses >= self.per or self._declared & dims:
            s = self._s = z3.Solver(ctx=z3.Context())
            limit(s, self.timeout_ms)
            s.from_string(semantics.SMTLIB_DEFS)
            self._declared, self._uses = set(), 0
        self._uses += 1
        self._declared |= dims
        self._s.push()
        return self._s, str(self._uses)


class _Lazy:
    """One component's scope of the shared solver, filled (as one SMT-LIB text) on the first
    question asked of it; `close()` pops it."""

    def __init__(self, formulas: Sequence[Formula], sizes: set[str], background: Sequence[Formula],
                 contexts: Contexts):
        self.formulas, self.sizes, self.background, self.contexts = formulas, sizes, background, contexts
        self._s: z3.Solver | None = None
        self._sort: z3.BoolSortRef | None = None

    def solver(self) -> z3.Solver:
        if self._s is not None:
            return self._s
        dims = sorted(set().union(*(f.dims() for f in self.formulas)) if self.formulas else set())
        s, tag = self.contexts.scope(set(dims))
        self._s = s
        # NOTE: one SMT-LIB text for the whole component: one parser call instead of thousands
        # of API calls, which cost more than solving a small component.
        text = [f"(declare-fun {_sym(d)} () Int)" for d in dims]
        text += [f"(assert (>= {_sym(d)} 0))" for d in dims if d in self.sizes]
        text += [f"(assert {formula_to_smtlib(f)})" for f in self.background]
        for i, f in enumerate(self.formulas):
            zf = formula_to_smtlib(f)
            text.append(f"(declare-fun |__keep_{tag}_{i}| () Bool)(declare-fun |__neg_{tag}_{i}| () Bool)"
                        f"(assert (=> |__keep_{tag}_{i}| {zf}))(assert (=> |__neg_{tag}_{i}| (not {zf})))")
        s.from_string("".join(text))
        self.track = [self._literal(f"__keep_{tag}_{i}") for i in range(len(self.formulas))]
        self._tag = tag
        return s

    def _literal(self, name: str) -> z3.BoolRef:
        """The declared Bool `name` (one sort for all: `z3.Bool` makes a sort per call)."""
        assert self._s is not None
        ctx = self._s.ctx
        if self._sort is None:
            self._sort = z3.BoolSort(ctx)
        return z3.BoolRef(z3.Z3_mk_const(ctx.ref(), z3.to_symbol(name, ctx), self._sort.ast), ctx)

    def neg(self, i: int) -> z3.BoolRef:
        """The literal that asserts `not formulas[i]` (made when a question needs it)."""
        return self._literal(f"__neg_{self._tag}_{i}")

    def close(self) -> None:
        if self._s is not None:
            self._s.pop()
            self._s = None
            self._sort = None


def reduce_component(formulas: Sequence[Formula], sizes: set[str], timeout_ms: int,
                     labels: Sequence[str], unsat_labels: Callable[[list[int]], Exception],
                     background: Sequence[Formula] = (), contexts: Contexts | None = None,
                     example: Mapping[str, int] | None = None) -> ReduceResult:
    """Greedily drop each formula implied by the others (plus `size >= 0` and `background`).

    The order of `formulas` is the order in which removal is tried. Pass one `Contexts` for
    many components. `example` (a trace's example sizes) replaces the first solver call when
    every formula holds there; a component whose every formula a nearby point shows
    irredundant then never reaches z3.
    """
    lazy = _Lazy(formulas, sizes, background, contexts if contexts is not None else Contexts(timeout_ms))
    try:
        return _reduce(formulas, sizes, labels, unsat_labels, background, lazy, example)
    finally:
        lazy.close()


def _reduce(formulas: Sequence[Formula], sizes: set[str], labels: Sequence[str],
            unsat_labels: Callable[[list[int]], Exception], background: Sequence[Formula], lazy: _Lazy,
            example: Mapping[str, int] | None) -> ReduceResult:
    dims = set().union(*(f.dims() for f in formulas)) if formulas else set()
    witnesses = None
    if example is not None and dims <= example.keys():
        witnesses = Witnesses.at(formulas, background, sizes, {d: example[d] for d in dims}, lazy.contexts.codes)
    undecided: list[str] = []
    if witnesses is None:
        s = lazy.solver()
        res = s.check(*lazy.track)
        if res == z3.unsat:
            core = {str(c) for c in s.unsat_core()}
            raise unsat_labels([i for i in range(len(formulas)) if str(lazy.track[i]) in core])
        if res == z3.unknown:
            undecided.append(f"satisfiability of {{{', '.join(labels)}}}: {why_unknown(s)}")
        else:
            m = s.model()
            var = z3_vars(s.ctx)
            point = {d: m.eval(var(d), model_completion=True).as_long() for d in dims}
            witnesses = Witnesses(formulas, background, sizes, point, codes=lazy.contexts.codes)
    active = set(range(len(formulas)))
    removed: list[int] = []
    boxes: Boxes | None = None
    for i in range(len(formulas)):
        if witnesses is not None and witnesses.find(i, active) is not None:
            continue  # NOTE: a concrete point proves `formulas[i]` irredundant; no solver call
        if boxes is None and witnesses is not None:
            boxes = Boxes(witnesses, background)  # NOTE: built on the first question points leave open
        verdict = boxes.decide(i, active) if boxes is not None else None
        if verdict is not None:
            if verdict:  # NOTE: no point of a small box breaks it: implied, no solver call
                active.discard(i)
                removed.append(i)
            continue
        s = lazy.solver()
        others = [lazy.track[j] for j in sorted(active) if j != i]
        r = s.check(*others, lazy.neg(i))
        if r == z3.unsat:
            active.discard(i)
            removed.append(i)
        elif r == z3.unknown:
            undecided.append(f"is `{labels[i]}` implied by the rest? solver said unknown ({why_unknown(s)})")
    return ReduceResult(sorted(active), removed, undecided)


def implies(premises: Sequence[z3.BoolRef], goal: z3.BoolRef, timeout_ms: int,
            ctx: z3.Context | None = None) -> tuple[z3.CheckSatResult, Mapping[str, int]]:
    """Does `premises` entail `goal`? Returns (unsat means yes, counterexample model)."""
    s = z3.Solver(ctx=ctx) if ctx is not None else z3.Solver()
    limit(s, timeout_ms)
    s.add(*premises)
    s.add(z3.Not(goal))
    r = s.check()
    model: dict[str, int] = {}
    if r == z3.sat:
        m = s.model()
        model = {d.name(): m[d].as_long() for d in m.decls() if z3.is_int_value(m[d])}
    return r, model

