"""Declared-dynamic dims judged as torch.export judges them, with fixes in its vocabulary.

Dims not declared dynamic are static in torch.export: the judgement substitutes their example
values into the minimal guards, drops what is redundant given torch.export's own convention
(a dynamic size is at least 2), and asks z3 what the rest says about each declared dim: pinned,
tied to another dim (the same `Dim`, or a derived one such as `2*a0 + 1`), in a residue class
(a derived dim over a fresh `Dim`), within bounds (`Dim(min=, max=)`), or constrained in a way
torch.export has no words for. The spec it prints is the most dynamic one its vocabulary allows.

>>> import torch, guardsolve
>>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)))
>>> for v in violations(gs, ["a0", "b0"], example={"a0": 4, "b0": 4}): print(v)
a0 == b0: [equal] a0 and b0 must be equal: use one Dim for both (b0 = a0)
>>> print(export_spec(gs, ["a0", "b0"], example={"a0": 4, "b0": 4}).source)
from torch.export import Dim
a0 = Dim("a0")
b0 = a0
dynamic_shapes = {"a": {0: a0}, "b": {0: b0}}
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence
import z3
from guardsolve.errors import InputMismatchError
from guardsolve.guards.expr import FALSE, TRUE, Formula, Or, Poly, Rel, conjuncts, disj, substitute
from guardsolve.solve.constraint import Constraint, DimOrder, render_formula
from guardsolve.solve.smt import formula_to_z3, limit, reduce_component
from guardsolve.pytorch.dim_questions import Ask, UNKNOWN, example_point, highest, lowest
from guardsolve.pytorch.dynamic_spec import class_lines, member_line, spec_layout, spec_of
from guardsolve.pytorch.judgement import DimClass, ExportSpec, Judgement, MIN_DYNAMIC, TIMEOUT_MS, Violation, dim_order


def _linear(f: Formula) -> dict[str, int] | None:
    """`sum(c*d) + k == 0` over plain dims -> {d: c, "": k}; None otherwise."""
    if not isinstance(f, Rel) or f.op != "eq":
        return None
    out = {"": f.poly.constant}
    for m, c in f.poly.nonconst().items():
        if len(m) != 1 or not isinstance(m[0], str):
            return None
        out[m[0]] = c
    return out


def _kind(f: Formula) -> str:
    lin = _linear(f)
    if lin is not None and len(lin) <= 3:
        return "eq"
    if isinstance(f, Rel) and len(f.dims()) <= 2 and all(len(m) == 1 and isinstance(m[0], str) and abs(c) == 1
                                                         for m, c in f.poly.nonconst().items()):
        return "order" if f.op == "le" else "ne"
    return "general"


def _classes(formulas: Sequence[Formula], dyn: Sequence[str], order: DimOrder) -> tuple[dict[str, DimClass], dict[str, str], set[int]]:
    """Merge classes along two-dim linear equalities with a positive integer slope.

    Returns the classes by root, each dim's root, and the indices of the equalities merged.
    """
    of = {d: d for d in dyn}
    classes = {d: DimClass(d, {d: (1, 0)}) for d in dyn}
    merged: set[int] = set()
    for i, f in enumerate(formulas):
        lin = _linear(f)
        if lin is None or len(lin) != 3:
            continue
        x, y = (d for d in lin if d)
        cx, cy = classes[of[x]], classes[of[y]]
        if cx is cy:
            continue
        (ax, bx), (ay, by) = cx.members[x], cy.members[y]
        # lin[x]*(ax*rx + bx) + lin[y]*(ay*ry + by) + k == 0
        a, b, c = lin[x] * ax, lin[y] * ay, lin[x] * bx + lin[y] * by + lin[""]
        for keep, gone, p, q in ((cx, cy, a, b), (cy, cx, b, a)):
            # gone.root = (-p * keep.root - c) / q, an integer affine map with a positive slope
            if (-p) % q == 0 and (-c) % q == 0 and -p // q > 0:
                s, o = -p // q, -c // q
                for d, (k, off) in gone.members.items():
                    keep.members[d] = (k * s, k * o + off)
                    of[d] = keep.root
                del classes[gone.root]
                merged.add(i)
                break
    for k in classes.values():
        k.members = dict(sorted(k.members.items(), key=lambda kv: order.key(kv[0])))
    return classes, of, merged


def judge_dynamic(gs: Any, dynamic: Sequence[str], example: Any = None) -> Judgement:
    """torch.export's view of a GuardSet's declared-dynamic dims, static dims at their `example`
    values (a dim -> value mapping, or the example inputs; z3 picks one if None). Cached on the
    GuardSet: its z3 questions cost ~0.1-1 s."""
    key = (tuple(dynamic), None if example is None else tuple(sorted(
        (example if isinstance(example, Mapping) else gs.input_dims(*example) or {}).items())))
    cache = gs.__dict__.setdefault("_judgements", {})
    if key not in cache:
        cache[key] = judge(gs, dynamic, example)
    return cache[key]


def violations(gs: Any, dynamic: Sequence[str], example: Any = None) -> list[Violation]:
    """The minimal guards that constrain the declared-dynamic dims, with torch.export fixes."""
    return judge_dynamic(gs, dynamic, example).violations


def export_spec(gs: Any, dynamic: Sequence[str], example: Any = None) -> ExportSpec:
    """The most dynamic `dynamic_shapes` spec for `torch.export.export` a GuardSet allows."""
    if gs.signature is None:
        raise InputMismatchError("a dynamic_shapes spec needs the traced signature (trace a function, not a guard file)")
    spec = judge_dynamic(gs, dynamic, example).spec
    assert spec is not None
    return spec


def judge(gs: Any, dynamic: Sequence[str], example: Any = None, timeout_ms: int = TIMEOUT_MS) -> Judgement:
    """The judgement behind `judge_dynamic` (uncached)."""
    dynamic = tuple(dict.fromkeys(dynamic))
    bad = [d for d in dynamic if d not in gs.dims]
    if bad:
        raise InputMismatchError(f"unknown dim {bad[0]!r} in dynamic (known: {', '.join(gs.dims)})")
    ints = [d for d in dynamic if d not in gs.sizes]
    if ints:
        raise InputMismatchError(f"dynamic takes tensor dims; {ints[0]!r} is an int argument")
    e, from_z3 = example_point(gs, dynamic, example)
    order = dim_order(gs)
    out: list[Violation] = []
    undecided: list[str] = []
    for d in dynamic:
        if e[d] < MIN_DYNAMIC:
            c = Constraint("eq", Rel("eq", Poly.var(d) - Poly.const(e[d])), f"{d} == {e[d]}", frozenset(), (d,))
            out.append(Violation(c, d, "static", f"the example has {d} = {e[d]}, and torch.export specializes "
                                 "sizes 0 and 1: mark it static, or trace an example of at least 2", (f"{d} = {e[d]}",)))
    dyn = [d for d in dynamic if e[d] >= MIN_DYNAMIC]
    while True:
        formulas, provs = _substituted(gs, {d: v for d, v in e.items() if d not in dyn}, dyn, order, timeout_ms)
        ask = Ask(formulas, dyn, timeout_ms)
        classes, of, merged = _classes(formulas, dyn, order)
        pinned = [k for k in classes.values()
                  if ask.model(ask.var(k.root) != e[k.root], what=f"is {k.root} pinned?") is None]
        undecided += ask.undecided
        if not pinned:
            break
        for k in pinned:
            out += _pin_violations(gs, formulas, provs, k, e, order, ask, dyn)
            dyn = [d for d in dyn if d not in k.members]
    out += _judge_free(gs, formulas, provs, classes, merged, e, order, ask, dyn)
    undecided += ask.undecided
    spec = spec_of(gs, dynamic, classes, e) if gs.signature is not None else None
    return Judgement(dynamic, e, from_z3, out, spec, undecided, gs)


def _under_convention(f: Formula, dyn: Sequence[str]) -> Formula:
    """`f` read under torch.export's convention that a dynamic size is at least 2: of a
    disjunction (merged routes: `(a0 == 1) or (a0 == b0) or (b0 == 1)`), the disjuncts on one
    dynamic dim that no size >= 2 satisfies are dropped, and one every such size satisfies makes
    it true. So the routes at sizes 0 and 1 ask torch.export for nothing.

    >>> from guardsolve.guards.expr import disj, rel
    >>> a, b = Poly.var("a0"), Poly.var("b0")
    >>> _under_convention(disj([rel("eq", a, Poly.const(1)), rel("eq", a, b)]), ["a0", "b0"]) == rel("eq", a, b)
    True
    """
    from guardsolve.solve.disjoin import IntSet, one_dim_set

    if not isinstance(f, Or):
        return f
    kept = []
    for part in f.args:
        one = one_dim_set(part)
        if one is not None and one[0] in dyn:
            d, values = one
            if values.inter(IntSet.at_least(MIN_DYNAMIC)) == IntSet.empty():
                continue
            if IntSet.at_least(MIN_DYNAMIC).subset(values):
                return TRUE
        kept.append(part)
    return disj(kept)


def _substituted(gs: Any, static: dict[str, int], dyn: Sequence[str], order: DimOrder,
                 timeout_ms: int) -> tuple[list[Formula], list[frozenset[int]]]:
    """The guards with static dims replaced by their values, minus those the rest implies."""
    def s(d: str) -> Poly:
        return Poly.const(static[d]) if d in static else Poly.var(d)

    found: dict[Formula, set[int]] = {}
    for c in gs:
        f = substitute(c.formula, s) if set(c.dims) & set(static) else c.formula
        f = _under_convention(f, dyn)
        assert f != FALSE, "the example satisfies every guard"
        for part in conjuncts(f):
            if part != TRUE:
                found.setdefault(part, set()).update(c.prov)
    # NOTE: removal is tried on the longest texts first, so of two equivalent guards the
    # simpler one survives (as in simplify).
    items = sorted(found, key=lambda f: -len(render_formula(f, order)))
    mentioned = set().union(*(f.dims() for f in items)) if items else set()
    conv = [Rel("le", Poly.const(MIN_DYNAMIC) - Poly.var(d)) for d in dyn if d in mentioned]
    labels = [render_formula(f, order) for f in items]

    def unsat(idx: list[int]) -> Exception:
        return InputMismatchError(f"the guards contradict torch.export's sizes >= 2: {', '.join(labels[i] for i in idx)}")

    if not items:
        return [], []
    red = reduce_component(items, set(dyn), timeout_ms, labels, unsat, conv)
    kept = [items[i] for i in red.kept]
    return kept, [frozenset(found[f]) for f in kept]


def _constraint(f: Formula, prov: frozenset[int], order: DimOrder) -> Constraint:
    return Constraint(_kind(f), f, render_formula(f, order), prov, tuple(sorted(f.dims(), key=order.key)))


def _sources(gs: Any, prov: frozenset[int]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(gs._origin(i) for i in sorted(prov)))


def _witness(ask: Ask, formulas: Sequence[Formula], i: int, e: Mapping[str, int], dyn: Sequence[str]) -> dict[str, int] | None:
    """An input the other guards accept and guard `i` rejects: one dim off the example when possible."""
    s = z3.Solver(ctx=ask.ctx)
    limit(s, ask.timeout_ms)
    s.add(*[ask.z(f) for j, f in enumerate(formulas) if j != i], *[ask.var(d) >= MIN_DYNAMIC for d in dyn],
          z3.Not(ask.z(formulas[i])))
    own = sorted(formulas[i].dims())
    tries = [[d for d in dyn if d != x] for x in reversed(own)] + [[d for d in dyn if d not in own], []]
    for keep in tries:
        if s.check(*[ask.var(d) == e[d] for d in keep]) == z3.sat:
            m = s.model()
            return {d: m.eval(ask.var(d), model_completion=True).as_long() for d in dyn}
    return None


def _pin_violations(gs: Any, formulas: Sequence[Formula], provs: Sequence[frozenset[int]], k: DimClass,
                    e: Mapping[str, int], order: DimOrder, ask: Ask, dyn: Sequence[str]) -> list[Violation]:
    """The guards that pin class `k` (those over its members only, else all that mention it)."""
    members = set(k.members)
    idx = [i for i, f in enumerate(formulas) if f.dims() and f.dims() <= members] or \
          [i for i, f in enumerate(formulas) if f.dims() & members]
    out = []
    for i in idx:
        d = min(formulas[i].dims() & members, key=order.key)
        fixes = tuple(f"{m} = {e[m]}" for m in sorted(formulas[i].dims() & members, key=order.key))
        out.append(Violation(_constraint(formulas[i], provs[i], order), d, "static",
                             f"{d} is pinned to {e[d]}: mark it static ({', '.join(fixes)})", fixes,
                             _witness(ask, formulas, i, e, dyn), _sources(gs, provs[i])))
    return out


def _stride(ask: Ask, k: DimClass, e: Mapping[str, int]) -> int:
    """The greatest g with `root % g` the same on every accepted input: the gcd of the differences
    of accepted values from the example's, each new value found by z3 (1 when undecided)."""
    t, v, g = ask.var(k.root), e[k.root], 0
    while g != 1:
        m = ask.model(t != v if g == 0 else (t - v) % g != 0, what=f"the residues of {k.root}")
        if m is None:
            break
        if m is UNKNOWN:
            return 1
        g = math.gcd(g, abs(ask.value(t, m, v + 1) - v))
    return max(g, 1)


def _facts(ask: Ask, classes: Mapping[str, DimClass]) -> list[Any]:
    """What the spec says, as z3 facts: member relations, residues, ranges."""
    out = []
    for k in classes.values():
        r = ask.var(k.root)
        out += [ask.var(m) == a * r + b for m, (a, b) in k.members.items() if m != k.root]
        if k.stride > 1:
            out.append((r - k.residue) % k.stride == 0)
        out.append(r >= k.lo)
        if k.hi is not None:
            out.append(r <= k.hi)
    return out


def _narrow(sp: Ask, k: DimClass, bad: Any, e: Mapping[str, int]) -> None:
    """Shrink the range of `k` to the widest interval around the example where `bad` never holds."""
    r, v = sp.var(k.root), e[k.root]
    m = sp.model(r < v, bad)
    if m is not None:
        below = highest(sp, r, sp.value(r, m, k.lo), [r < v, bad])
        k.lo = v if below is None or m is UNKNOWN else below + 1
    m = sp.model(r > v, bad)
    if m is not None:
        k.hi = v if m is UNKNOWN else lowest(sp, r, sp.value(r, m, v + 1), v + 1, [bad]) - 1


def _judge_free(gs: Any, formulas: Sequence[Formula], provs: Sequence[frozenset[int]], classes: dict[str, DimClass],
                merged: set[int], e: Mapping[str, int], order: DimOrder, ask: Ask, dyn: Sequence[str]) -> list[Violation]:
    """Strides and ranges for each class (lossless: implied by the guards), then each guard
    judged by whether the spec implies it."""
    of = {m: k for k in classes.values() for m in k.members}
    for k in classes.values():
        k.stride = _stride(ask, k, e)
        k.residue = e[k.root] % k.stride
        r = ask.var(k.root)
        k.lo = lowest(ask, r, e[k.root], MIN_DYNAMIC)
        k.hi = highest(ask, r, e[k.root])

    def spec_solver() -> Ask:
        sp = Ask([], dyn, ask.timeout_ms, ask.ctx)
        sp.s.add(*_facts(sp, classes))
        return sp

    sp = spec_solver()
    expressed = [sp.implies(ask.z(f)) for f in formulas]
    for k in classes.values():
        left = [ask.z(f) for i, f in enumerate(formulas) if not expressed[i] and f.dims() <= set(k.members)]
        if left:
            # NOTE: torch.export has no words for a hole in a range; keep the example's interval.
            _narrow(sp, k, z3.Not(z3.And(left)), e)
    sp = spec_solver()
    out = []
    for i, f in enumerate(formulas):
        ks = {of[d].root: of[d] for d in sorted(f.dims(), key=order.key)}
        dims = sorted(f.dims(), key=order.key)
        c = _constraint(f, provs[i], order)
        wit = _witness(ask, formulas, i, e, dyn)
        src = _sources(gs, provs[i])
        if i in merged:
            k = next(iter(ks.values()))
            tied = [d for d in dims if d != spec_layout(k, set())[0]] or dims[1:]
            lines = tuple(member_line(k, d) for d in tied)
            slopes = {k.members[d][0] for d in dims}
            kind = "equal" if len(slopes) == 1 else "derived"
            text = (f"{' and '.join(dims)} must be equal: use one Dim for both" if kind == "equal" and
                    len({k.members[d][1] for d in dims}) == 1 else f"{dims[0]} and {dims[1]} are related: a derived dim")
            out.append(Violation(c, tied[0], kind, f"{text} ({'; '.join(lines)})", lines, wit, src))
            continue
        lines = tuple(line for k in ks.values() for line in class_lines(k))
        if len(ks) == 1 and expressed[i]:
            k = next(iter(ks.values()))
            plain = Ask([], dyn, ask.timeout_ms, ask.ctx)
            plain.s.add(*[x for x in _facts(plain, {k.root: k}) if not _is_residue(x, k)])
            kind = "bound" if plain.implies(ask.z(f)) else "divisible"
            what = (f"{dims[0]} must be {k.stride}*n + {k.residue}" if k.residue else f"{dims[0]} must be a multiple of {k.stride}") \
                if kind == "divisible" else f"{dims[0]} needs {_range_text(k)}"
            out.append(Violation(c, dims[0], kind, f"{what}: {'; '.join(lines)}", lines, wit, src))
        elif len(ks) > 1 and sp.implies(ask.z(f)):
            out.append(Violation(c, dims[0], "bound", f"the ranges imply it: {'; '.join(lines)}", lines, wit, src))
        elif len(ks) == 1:
            k = next(iter(ks.values()))
            out.append(Violation(c, dims[0], "excluded", f"torch.export cannot exclude values inside a range; "
                                 f"{_range_text(k)} keeps the example ({'; '.join(lines)}) and drops the rest", lines, wit, src))
        else:
            ranged = tuple(line for k in ks.values() if k.lo > MIN_DYNAMIC or k.hi is not None for line in class_lines(k))
            hint = f"; it implies {'; '.join(ranged)}" if ranged else ""
            change = _static_change(sp, f, dims, e, of)
            out.append(Violation(c, dims[0], "general", "no torch.export vocabulary for this relation; torch.export "
                                 f"checks it when the exported program runs{hint}{change}", ranged, wit, src))
    return sorted(out, key=lambda v: v.constraint.sort_key(order))


def _is_residue(x: Any, k: DimClass) -> bool:
    return k.stride > 1 and z3.is_eq(x) and z3.is_app_of(x.arg(0), z3.Z3_OP_MOD)


def _static_change(sp: Ask, f: Formula, dims: Sequence[str], e: Mapping[str, int], of: Mapping[str, DimClass]) -> str:
    """The first dim of `f` whose example value, made static, satisfies `f` or leaves one class."""
    for d in dims:
        if sp.model(sp.var(d) == e[d], z3.Not(formula_to_z3(f, sp.var))) is None:
            return f"; marking {d} static ({d} = {e[d]}) would satisfy it"
    for d in dims:
        rest = {of[x].root for x in dims if x != d and x not in of[d].members}
        if len(rest) == 1:
            return f"; marking {d} static ({d} = {e[d]}) leaves a condition on {', '.join(x for x in dims if x != d)} alone"
    return ""


def _range_text(k: DimClass) -> str:
    return f"{k.root} in [{k.lo}, {k.hi if k.hi is not None else 'oo'}]"
