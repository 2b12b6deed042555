"""Concrete witnesses of irredundancy: settle most of z3's per-constraint questions with one point.

A constraint is irredundant when some integer point satisfies all the others and violates it.
Starting from a model of the whole set, moving one dim to where the constraint's boundary lies
usually finds such a point, and each point found replaces a solver call. A point is checked with
Python's own arithmetic, which is the guards' semantics, so it proves irredundancy exactly; when
no point is found the caller asks z3.

>>> from guardsolve.guards.expr import Poly, rel
>>> x0, x1 = Poly.var("x0"), Poly.var("x1")
>>> fs = [rel("le", x0, x1), rel("le", x1, Poly.const(5)), rel("le", x0, Poly.const(5))]
>>> w = Witnesses(fs, [], {"x0", "x1"}, {"x0": 2, "x1": 2})
>>> p = w.find(0, {0, 1, 2}); p["x0"] > p["x1"] and p["x1"] <= 5 and p["x0"] <= 5
True
>>> w.find(2, {0, 1, 2}) is None     # x0 <= 5 follows from the others: no point exists
True
"""

from __future__ import annotations

from types import CodeType, FunctionType
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from guardsolve.guards.expr import And, Div, Formula, Or, Poly, Rel, negate, rel  # noqa: F401 - rel: doctest
from guardsolve.solve.constraint import DimOrder, render_formula


def holds_at(fn: Callable[[], object]) -> bool | None:
    """A compiled formula's truth at the current point; None where it divides by zero."""
    try:
        return bool(fn())
    except ZeroDivisionError:
        return None


def poly_value(p: Poly, point: Mapping[str, int]) -> int:
    """`p` at `point`, with Python's `//` and `%` (raises ZeroDivisionError like the guards)."""
    total = 0
    for m, c in p.terms:
        for a in m:
            if isinstance(a, str):
                c *= point[a]
            else:
                num, den = poly_value(a.num, point), poly_value(a.den, point)
                c *= num // den if a.kind == "floordiv" else num % den
        total += c
    return total


def coefficient_at(p: Poly, d: str, point: Mapping[str, int]) -> int | None:
    """c when `p` is `c*d + (terms without d)` at `point`; None when d occurs otherwise."""
    c = 0
    for m, k in p.terms:
        if d not in m:
            if any(isinstance(a, Div) and d in a.dims() for a in m):
                return None
            continue
        once = False
        for a in m:  # NOTE: the monomial's value without one d, evaluated in place
            if a == d and not once:
                once = True
            elif isinstance(a, str):
                if a == d:
                    return None  # NOTE: d squared
                k *= point[a]
            else:
                if d in a.dims():
                    return None
                num, den = poly_value(a.num, point), poly_value(a.den, point)
                k *= num // den if a.kind == "floordiv" else num % den
        c += k
    return c or None


def _boundary(f: Formula, d: str, point: Mapping[str, int]) -> Iterator[int]:
    """Values of `d` that make a linear `f` false, the others held at `point`; for `or` and
    `and`, each part's, nearest first (any false part makes an `and` false; an `or` is false
    between its parts' boundaries: `(x <= 3) or (x >= 8)` at 7 and at 4).

    >>> x = Poly.var("x")
    >>> list(_boundary(Or(frozenset({rel("le", x, Poly.const(3)), rel("le", Poly.const(8), x)})), "x", {"x": 16}))
    [7, 4]
    """
    if isinstance(f, (Or, And)):
        values = {v for part in f.args for v in _boundary(part, d, point)}
        yield from sorted(values, key=lambda v: (abs(v - point[d]), v))
        return
    if not isinstance(f, Rel):
        return
    try:
        c = coefficient_at(f.poly, d, point)
        if c is None:
            return
        r = poly_value(f.poly, point) - c * point[d]
    except ZeroDivisionError:
        return
    if f.op == "le":  # want c*x + r > 0
        yield (-r) // c + 1 if c > 0 else -((-r) // -c) - 1
    elif f.op == "ne" and r % c == 0:  # want c*x + r == 0
        yield -r // c


_REL_SOURCE = {"eq": " == 0", "ne": " != 0", "le": " <= 0"}


def _poly_source(p: Poly, name: Mapping[str, str]) -> str:
    """Python source of `p`, each dim d written `name[d]`, terms in sorted order (integers: the
    order does not change a value)."""
    terms = []
    for m, c in p.terms:
        factors = [f"({c})"]
        for a in m:
            if isinstance(a, str):
                factors.append(name[a])
            else:
                sym = "//" if a.kind == "floordiv" else "%"
                factors.append(f"(({_poly_source(a.num, name)}) {sym} ({_poly_source(a.den, name)}))")
        terms.append("*".join(factors))
    return " + ".join(sorted(terms)) or "0"


def formula_source(f: Formula, name: Mapping[str, str]) -> str:
    """Python source of a formula, for `eval`: a comparison built directly (a sum evaluates every
    term, so the order of terms cannot change a result or a ZeroDivisionError), with dims renamed
    by `name`; `and`/`or`, whose operands short-circuit, as `render_formula` orders them (dims
    as they are)."""
    if isinstance(f, Rel):
        return _poly_source(f.poly, name) + _REL_SOURCE[f.op]
    return render_formula(f, DimOrder([]))


def _lambdas(formulas: Sequence[Formula], env: dict[str, object], codes: dict[str, CodeType]
             ) -> list[Callable[[], object]]:
    """Each formula as a function of no arguments reading its dims from `env` (its globals).

    NOTE: compiling costs more than the witness search it serves. A formula's source with its
    dims renamed `_0, _1, ...` is a shape that many components share (`x - y + 1 <= 0`), so each
    shape is compiled once (`codes`) and given its own dims by renaming the code's globals.
    """
    names = [sorted(f.dims()) for f in formulas]
    shapes = [formula_source(f, {d: f"_{k}" for k, d in enumerate(ds)}) for f, ds in zip(formulas, names)]
    missing = sorted({s for s in shapes if s not in codes})
    if missing:
        made = eval(compile("(" + ", ".join(f"lambda: ({s})" for s in missing) + ",)", "<witness>", "eval"),
                    {"__builtins__": {}})  # noqa: S307 - our own source
        codes.update((s, fn.__code__) for s, fn in zip(missing, made))
    out = []
    for f, ds, s in zip(formulas, names, shapes):
        code = codes[s]
        if isinstance(f, Rel):
            code = code.replace(co_names=tuple(ds[int(n[1:])] for n in code.co_names))
        out.append(FunctionType(code, env))
    return out


class Witnesses:
    """Searches points near one model of all `formulas` (plus `extra` and `size >= 0`).

    `find(i, active)` returns a point where formula i is false and every other formula in
    `active` true, or None.
    """

    @classmethod
    def at(cls, formulas: Sequence[Formula], extra: Iterable[Formula], sizes: set[str],
           point: Mapping[str, int], codes: dict[str, CodeType] | None = None) -> "Witnesses | None":
        """Witnesses around `point` when it is a model (every formula, extra and `size >= 0`
        holds there, by Python's arithmetic), else None: a trace's example sizes replace z3's
        first model.

        >>> x = Poly.var("x")
        >>> Witnesses.at([rel("ne", x, Poly.const(1))], [], {"x"}, {"x": 4}) is not None
        True
        >>> Witnesses.at([rel("ne", x, Poly.const(1))], [], {"x"}, {"x": 1}) is None
        True
        """
        if any(v < 0 and d in sizes for d, v in point.items()):
            return None
        w = cls(formulas, extra, sizes, point, spread=False, codes=codes)
        if not all(holds_at(fn) for fn in w.fns) or not all(holds_at(fn) for fns in w.extra.values() for fn in fns):
            return None
        w._spread()
        return w

    def __init__(self, formulas: Sequence[Formula], extra: Iterable[Formula], sizes: set[str],
                 model: Mapping[str, int], *, spread: bool = True, codes: dict[str, CodeType] | None = None):
        self.formulas = list(formulas)
        extra = list(extra)
        self.sizes = sizes
        # NOTE: each formula is a lambda over the dims, which it reads as globals from
        # `self.env`, so a one-dim move is one dict store. `codes`: compiled shapes to share.
        self.env: dict[str, object] = {"__builtins__": {}, **model}
        fns = _lambdas(self.formulas + extra, self.env, {} if codes is None else codes)
        self.fns: list[Callable[[], object]] = list(fns[:len(self.formulas)])
        self.users: dict[str, list[int]] = {}
        for i, f in enumerate(self.formulas):
            for d in f.dims():
                self.users.setdefault(d, []).append(i)
        self.extra_fns: list[Callable[[], object]] = list(fns[len(self.formulas):])
        self.extra: dict[str, list[Callable[[], object]]] = {}
        for f, fn in zip(extra, fns[len(self.formulas):]):
            for d in f.dims():
                self.extra.setdefault(d, []).append(fn)
        if spread:
            self._spread()

    @property
    def model(self) -> dict[str, int]:
        return {d: v for d, v in self.env.items() if d != "__builtins__"}  # type: ignore[misc]

    def _others_hold(self, d: str, skip: int, active: set[int] | None) -> bool:
        """Do the formulas over `d` (in `active`, but not `skip`) and the extras hold here?"""
        # NOTE: `holds_at` inlined: this is the witness search's innermost loop
        fns = self.fns
        try:
            for j in self.users.get(d, ()):
                if j != skip and (active is None or j in active) and not fns[j]():
                    return False
            for fn in self.extra.get(d, ()):
                if not fn():
                    return False
        except ZeroDivisionError:
            return False
        return True

    def _spread(self) -> None:
        """Move each dim away from the others while every constraint holds.

        Solver models sit on boundaries and reuse small values (`x = y = 0`); from such a point
        one-dim moves break several constraints at once. A spread-out point breaks one.
        """
        env = self.env
        top = max([abs(v) for d, v in env.items() if d != "__builtins__"] + [1])  # type: ignore[arg-type]
        for k, d in enumerate(sorted(self.users)):
            here = env[d]
            for v in (here + 3 * top + 7 * k + 5, here + 7 + k, here + 1):  # type: ignore[operator]
                env[d] = v
                if self._others_hold(d, -1, None):
                    break
            else:
                env[d] = here

    def _candidates(self, i: int, d: str) -> Iterator[int]:
        """Values to try for `d` (each once, nearest the boundary of f first), made as asked:
        the first often does."""
        f, env = self.formulas[i], self.env
        here: int = env[d]  # type: ignore[assignment]
        seen: set[int] = {here}
        size = d in self.sizes

        def fresh(values: Iterable[int]) -> Iterator[int]:
            for v in values:
                if v not in seen and (v >= 0 or not size):
                    seen.add(v)
                    yield v

        first = list(_boundary(f, d, env))  # type: ignore[arg-type]
        if first and isinstance(f, Rel) and f.op == "le":
            # NOTE: a step or two past the boundary still breaks f, and may suit the others
            # (a parity, a `!=`) where the boundary itself does not
            step = 1 if first[0] > here else -1
            first += [first[0] + step, first[0] + 2 * step]
        yield from fresh(first)
        yield from fresh((here + 1, here - 1, here + 2, here - 2))
        yield from fresh([env[e] + k for e in sorted(f.dims()) if e != d for k in (0, 1, -1)])  # type: ignore[operator]
        yield from fresh((0, 1, 2))

    def _broken(self, d: str, skip: int, active: set[int]) -> list[int] | None:
        """Active formulas over `d` (not `skip`) false here; None if an extra fails or one divides by 0."""
        out = []
        fns = self.fns
        try:  # NOTE: `holds_at` inlined, as in `_others_hold`
            for j in self.users.get(d, ()):
                if j != skip and j in active and not fns[j]():
                    out.append(j)
            for fn in self.extra.get(d, ()):
                if not fn():
                    return None
        except ZeroDivisionError:
            return None
        return out

    def _repair(self, i: int, d: str, broken: list[int], active: set[int]) -> bool:
        """Move one more dim (not `d`) so that the `broken` formulas hold again, `formulas[i]` still false."""
        env = self.env
        dims = sorted(set().union(*(self.formulas[j].dims() for j in broken)) - {d})
        for e in dims:
            here = env[e]
            values = [v for j in broken for v in _boundary(negate(self.formulas[j]), e, env)]  # type: ignore[arg-type]
            values += [here + 1, here - 1, here + 2, here - 2, 2 * abs(here) + 11]
            for v in values:
                if v == here or (v < 0 and e in self.sizes):
                    continue
                env[e] = v
                if holds_at(self.fns[i]) is False and self._others_hold(e, i, active) and \
                        self._others_hold(d, i, active):
                    return True
            env[e] = here
        return False

    def find(self, i: int, active: set[int]) -> dict[str, int] | None:
        env = self.env
        saved = dict(env)
        repairs: list[tuple[str, int, list[int]]] = []
        try:
            for d in sorted(self.formulas[i].dims()):
                here = env[d]
                for v in self._candidates(i, d):
                    env[d] = v
                    if holds_at(self.fns[i]) is not False:
                        continue
                    broken = self._broken(d, i, active)
                    if broken == []:
                        return self.model
                    if broken is not None and len(broken) <= 2 and len(repairs) < 8:
                        repairs.append((d, v, broken))
                env[d] = here
            # NOTE: no one-dim move works: try moving a second dim to fix what the first broke.
            for d, v, broken in repairs:
                env[d] = v
                if self._repair(i, d, broken, active):
                    return self.model
                env.update(saved)
            return self.model if self._along(i, active) else None
        finally:
            env.update(saved)

    def _along(self, i: int, active: set[int]) -> bool:
        """Move two of f's dims together: one a step or a few, the other back onto f's
        boundary (`x == y` with both odd; `x*y == z` with y changed). Leaves the point moved
        when it returns True."""
        f, env, sizes = self.formulas[i], self.env, self.sizes
        dims = sorted(f.dims())
        for e in dims:
            here_e: int = env[e]  # type: ignore[assignment]
            # NOTE: 0 makes a product 0; 1 and 2 the smallest others (as `_candidates` ends)
            for ve in dict.fromkeys((here_e + 1, here_e - 1, here_e + 2, here_e - 2, here_e + 3,
                                     2 * abs(here_e) + 11, 0, 1, 2)):
                if ve < 0 and e in sizes:
                    continue
                env[e] = ve
                for d in dims:
                    if d == e:
                        continue
                    here_d = env[d]
                    for vd in _boundary(f, d, env):  # type: ignore[arg-type]
                        if vd < 0 and d in sizes:
                            continue
                        env[d] = vd
                        if holds_at(self.fns[i]) is False and self._others_hold(e, i, active) and \
                                self._others_hold(d, i, active):
                            return True
                    env[d] = here_d
            env[e] = here_e
        return False


def flip_points(formulas: Sequence[Formula], sizes: set[str], example: Mapping[str, int],
                largest: int = 1 << 20, fallback: Callable[[int], dict[str, int] | None] | None = None
                ) -> list[dict[str, int]]:
    """For each formula, a point near `example` where it alone is false (the other side of
    that decision, every other one kept), by the same one- and two-dim moves as `find`; where
    none is found, `fallback(i)` (a solver's) if given; where a dim would exceed `largest`,
    that formula has none.

    >>> x0 = Poly.var("x0")
    >>> flip_points([rel("le", x0, Poly.const(1))], {"x0"}, {"x0": 1})
    [{'x0': 2}]
    >>> x1 = Poly.var("x1")
    >>> flip_points([rel("le", Poly.const(2), x0), rel("le", Poly.const(2), x1)], {"x0", "x1"}, {"x0": 2, "x1": 16})
    [{'x0': 1, 'x1': 16}, {'x0': 2, 'x1': 1}]
    """
    if any(v < 0 and d in sizes for d, v in example.items()):
        return []
    # NOTE: not `at`: its spread moves every dim away from the example, and a flip is a
    # move of the dims the decision reads, nearest the example
    w = Witnesses(formulas, [], sizes, example, spread=False)
    if not all(holds_at(fn) for fn in w.fns):
        return []
    active = set(range(len(formulas)))
    out: list[dict[str, int]] = []
    for i in range(len(formulas)):
        p = w.find(i, active)
        if p is None and fallback is not None:
            p = fallback(i)
        if p is not None and all(abs(v) <= largest for v in p.values()) and dict(p) not in out:
            out.append(dict(p))
    return out
