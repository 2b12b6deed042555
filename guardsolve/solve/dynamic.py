"""Declared-dynamic dims: which minimal guards constrain them, fixes in torch.export's words,
and a `dynamic_shapes` spec for `torch.export.export` that satisfies the guards. A guard that
torch.export's own convention implies (dynamic dims are at least 2, e.g. `a0 != 1`) needs no fix.

>>> import torch, guardsolve
>>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)))
>>> for v in gs.violations(dynamic=["a0", "b0"]): print(v)
a0 == b0: a0 and b0 must be equal: use one Dim for both
>>> print(export_spec(gs, ["a0", "b0"]).source)
from torch.export import Dim
a0 = Dim("a0", min=2)
dynamic_shapes = {"a": {0: a0}, "b": {0: a0}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from guardsolve.errors import InputMismatchError
from guardsolve.guards.expr import Div, Rel
from guardsolve.solve.constraint import Constraint


@dataclass(frozen=True)
class Violation:
    """A minimal guard that constrains a declared-dynamic dim, with a suggested fix."""

    constraint: Constraint
    dim: str
    kind: str  # static | equal | bound | divisible | excluded | general
    suggestion: str

    def __str__(self) -> str:
        return f"{self.constraint.text}: {self.suggestion}"


def _mod_of(c: Constraint) -> tuple[str, int] | None:
    """`x % m == 0` -> (x, m)."""
    f = c.formula
    if not (isinstance(f, Rel) and f.op == "eq" and len(f.poly.terms) == 1):
        return None
    (m, coef), = f.poly.terms
    if len(m) != 1 or not isinstance(m[0], Div) or m[0].kind != "mod":
        return None
    d = m[0]
    num = d.num.nonconst()
    if d.num.constant or len(num) != 1 or not d.den.is_const():
        return None
    (mono, k), = num.items()
    if k != 1 or len(mono) != 1 or not isinstance(mono[0], str):
        return None
    return mono[0], d.den.constant


def _bound(c: Constraint) -> tuple[str, str, int] | None:
    """An order constraint against a constant -> (dim, "min"|"max", value)."""
    if c.kind != "order" or len(c.dims) != 1:
        return None
    p = c.formula.poly  # type: ignore[union-attr]
    coef = p.nonconst()[(c.dims[0],)]
    return (c.dims[0], "max", -p.constant) if coef == 1 else (c.dims[0], "min", p.constant)


def classify(c: Constraint, d: str) -> tuple[str, str]:
    """(kind, suggestion) for constraint `c` as it bears on dynamic dim `d`."""
    if c.kind == "eq" and len(c.dims) == 1:
        value = -c.formula.poly.constant  # type: ignore[union-attr]
        return "static", f"{d} is pinned to {value}: mark it static (drop it from dynamic_shapes)"
    if c.kind == "eq":
        other = next(x for x in c.dims if x != d)
        if " + " in c.text or " - " in c.text:
            return "equal", f"{c.text} relates them by an offset: use a derived Dim ({c.text.split(' == ')[1]})"
        return "equal", f"{d} and {other} must be equal: use one Dim for both"
    b = _bound(c)
    if b is not None:
        _, side, value = b
        return "bound", f"{d} needs {side}={value}: Dim(\"{d}\", {side}={value})"
    mod = _mod_of(c)
    if mod is not None:
        return "divisible", f"{d} must be a multiple of {mod[1]}: a derived dim {mod[1]}*k (k = Dim(\"k\"))"
    if c.kind == "ne" and len(c.dims) == 1:
        value = int(c.text.split(" != ")[1])
        hint = f"Dim(\"{d}\", min={value + 1}) satisfies it" + (" (and also excludes 0)" if value == 1 else "")
        return "excluded", f"{d} != {value} excludes one size: torch.export cannot say \"!= {value}\"; {hint}"
    return "general", f"a relation too general for torch.export's Dim (it cannot express `{c.text}`)"


def _by_convention(c: Constraint, dynamic: set[str]) -> bool:
    """Does torch.export's own convention imply the guard? It assumes every dynamic dim is at
    least 2 (its 0/1 specialization), so `x0 >= 2` or `x0 != 1` on a dynamic size need no fix.
    """
    import z3

    from guardsolve.solve.smt import formula_to_z3, z3_vars

    var = z3_vars(z3.Context())
    s = z3.Solver(ctx=var.ctx)
    s.set("timeout", 1000)
    for d in c.dims:
        s.add(var(d) >= (2 if d in dynamic else 0))
    s.add(z3.Not(formula_to_z3(c.formula, var)))
    return s.check() == z3.unsat


def violations(constraints: Iterable[Constraint], known: Iterable[str], dynamic: Iterable[str]) -> list[Violation]:
    dims = list(known)
    want = list(dynamic)
    bad = [d for d in want if d not in dims]
    if bad:
        raise InputMismatchError(f"unknown dim {bad[0]!r} in dynamic (known: {', '.join(dims)})")
    out = []
    for c in constraints:
        if any(d in c.dims for d in want) and _by_convention(c, set(want)):
            continue
        for d in want:
            if d in c.dims:
                kind, text = classify(c, d)
                out.append(Violation(c, d, kind, text))
                break
    return out


@dataclass
class ExportSpec:
    """A `dynamic_shapes` spec as source code, and as live `torch.export.Dim` objects."""

    source: str
    spec: dict[str, Any] = field(default_factory=dict)


def export_spec(gs: Any, dynamic: Iterable[str]) -> ExportSpec:
    """A spec satisfying the minimal guards: shared Dims for equal dims, bounds, multiples.

    Pinned dims stay static; relations a Dim cannot express keep the dim static too.
    """
    import torch.export

    want = set(dynamic)
    if gs.signature is None:
        raise InputMismatchError("a dynamic_shapes spec needs the traced signature (trace a function, not a guard file)")
    known = [d for p in gs.signature for d in p.dims if p.kind == "tensor"]
    bad = [d for d in want if d not in known]
    if bad:
        raise InputMismatchError(f"unknown dim {bad[0]!r} in dynamic (known: {', '.join(known)})")
    static: set[str] = set()
    alias: dict[str, tuple[str, int]] = {}  # member -> (rep, offset)
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    mult: dict[str, int] = {}
    for c in gs:
        if c.kind == "eq" and len(c.dims) == 1:
            static.add(c.dims[0])
        elif c.kind == "eq":
            rep, member = c.dims
            k = -c.formula.poly.constant if c.formula.poly.nonconst().get((member,)) == 1 else c.formula.poly.constant
            alias[member] = (rep, k)
        elif _bound(c) is not None:
            d, side, v = _bound(c)  # type: ignore[misc]
            (lo if side == "min" else hi)[d] = v
        elif _mod_of(c) is not None:
            d, m = _mod_of(c)  # type: ignore[misc]
            mult[d] = m
        elif c.kind == "ne" and len(c.dims) == 1 and int(c.text.split(" != ")[1]) >= 0:
            # NOTE: Dim cannot skip one value; a min above it is stricter but satisfies the guard.
            lo[c.dims[0]] = max(lo.get(c.dims[0], 0), int(c.text.split(" != ")[1]) + 1)
        else:
            static.update(c.dims)  # NOTE: Dim cannot express it; keep these dims static
    classes: dict[str, dict[str, int]] = {}
    for d in known:
        rep, k = alias.get(d, (d, 0))
        classes.setdefault(rep, {})[d] = k
    lines = ["from torch.export import Dim"]
    exprs: dict[str, str] = {}
    for rep, members in classes.items():
        if rep in static or not (set(members) & want):
            continue
        # NOTE: name the class after its smallest member, so every other one is `base + k` with
        # k > 0 (torch.export needs a max on the root of a negative offset).
        base_k = min(members.values()) if rep not in mult else 0
        base = next(m for m, k in members.items() if k == base_k)
        bounds = {"min": lo[rep] + base_k if rep in lo else None, "max": hi[rep] + base_k if rep in hi else None}
        if rep in mult:
            m = mult[rep]
            kb = {"min": -(-bounds["min"] // m) if bounds["min"] is not None else None,
                  "max": bounds["max"] // m if bounds["max"] is not None else None}
            lines.append(f"_{base}_k = Dim(\"_{base}_k\"" + "".join(f", {s}={v}" for s, v in kb.items() if v is not None) + ")")
            lines.append(f"{base} = {m} * _{base}_k")
        else:
            lines.append(f"{base} = Dim(\"{base}\"" + "".join(f", {s}={v}" for s, v in bounds.items() if v is not None) + ")")
        for member, k in members.items():
            off = k - base_k
            if off < 0:
                continue  # NOTE: only with a multiple-of root; that member stays static
            exprs[member] = base if off == 0 else f"{base} + {off}"

    entries = []
    for p in gs.signature:
        if p.kind != "tensor":
            continue
        dims = {i: exprs[d] for i, d in enumerate(p.dims) if d in exprs}
        entries.append(f"\"{p.name}\": {{" + ", ".join(f"{i}: {e}" for i, e in dims.items()) + "}" if dims
                       else f"\"{p.name}\": None")
    lines.append("dynamic_shapes = {" + ", ".join(entries) + "}")
    source = "\n".join(lines)
    ns: dict[str, Any] = {"Dim": torch.export.Dim}
    exec(source.split("\n", 1)[1], ns)
    return ExportSpec(source, ns["dynamic_shapes"])
