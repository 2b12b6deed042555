"""`simplify(graph)`: the minimal, provably equivalent guard set of a trace or guard graph.

outline (components sharing no value but constants) -> normalize each -> independent parts
(no dim shared), each on its own: union-find -> ordering layer -> z3 (per independent component). Each stage is sound on its own; together they leave a set where no constraint is implied by the others
(and by `size >= 0`). For the notebook's `a + b` on two `[4]` tensors:

    assert not (a0 == 1)                 a0 == b0
    assert not (b0 == 1)         ->      a0 != 1
    assert (a0 == b0)
    assert (a0 == a0)
    assert (b0 == a0)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from guardsolve.errors import GuardsolveError, InterpretError, MissingRuleError, UnsatisfiableGuardsError
from guardsolve.guards.expr import FALSE, TRUE, Formula, Poly, Rel, cancel, conjuncts, substitute
from guardsolve.guards.normalize import DIVISIONS, Atom, Normalized, Outline, describe, normalize, outline
from guardsolve.guards.shape import guard_graph
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.solve.constraint import Constraint, DimOrder, render_eq, render_formula, render_ne, render_order
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.bounded import INF, holds_on_box
from guardsolve.solve.parallel import default_jobs, map_forked
from guardsolve.solve.order import Z, OrderLayer, OrderResult, needs_solver
from guardsolve.solve.smt import Contexts, reduce_component
from guardsolve.solve.unify import Conflict, UnionFind
from guardsolve.trace.gcpause import paused_gc

DEFAULT_TIMEOUT_MS = 5000
# Exploring other routes (`merge_paths`) probes the far side of each of the example's decisions
# and each dim at 0 and 1, then stops after a number of probes run that the trace's size sets
# (`paths.run_budget`: no clock, so the guards are the same however loaded the machine is).
# Below this many bailouts a graph simplifies in well under a second: forking costs more than it saves
PARALLEL_MIN_BAILOUTS = 4000

Prov = frozenset


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


@dataclass
class _State:
    """Facts gathered so far: equalities (with provenance) and the other atoms."""

    eqs: list[tuple[tuple[Any, ...], Prov]] = field(default_factory=list)
    rest: list[Atom] = field(default_factory=list)
    implied: set[int] = field(default_factory=set)


class _Labels(Sequence[str]):
    """Constraint texts rendered on first use: only messages (undecided, unsatisfiable) read them."""

    def __init__(self, render: list[Callable[[], str]]):
        self._render = render

    def __len__(self) -> int:
        return len(self._render)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [f() for f in self._render[i]]
        return self._render[i]()


class Simplifier:
    """Owns the stages' state for one guard graph, or for one independent part of it (`norm`:
    that part's atoms, dims and sizes; `order`: the whole graph's dim order; `contexts`: z3
    solvers shared with the other parts)."""

    def __init__(self, graph: Graph, timeout_ms: int, norm: Normalized | None = None,
                 order: DimOrder | None = None, contexts: Contexts | None = None):
        self.graph = graph
        self.timeout_ms = timeout_ms
        self.norm = norm if norm is not None else normalize(graph, validate=False)  # NOTE: guard_graph() validated it
        self.order = order if order is not None else DimOrder(self.norm.dims)
        self.sizes = set(self.norm.sizes)
        self.contexts = contexts if contexts is not None else Contexts(timeout_ms)
        self._kinds: dict[Formula, tuple[Any, ...]] = {}
        self._moved: dict[str, Poly] = {}  # the previous round's substitution (`_substitute`)
        self._memo: dict[Formula, Any] = {}  # and what each atom rewrote to in it
        self._cancelled: dict[tuple[Formula, frozenset[str]], Formula] = {}  # `_cancel` by atom and positive dims

    def kind(self, f: Formula) -> tuple[Any, ...]:
        """`classify(f)`, once per formula: the rounds below ask about the same atoms again."""
        k = self._kinds.get(f)
        if k is None:
            k = self._kinds[f] = classify(f)
        return k

    def fail(self, provs: Any, detail: str = "") -> UnsatisfiableGuardsError:
        nodes: set[int] = set()
        for p in provs:
            if isinstance(p, (set, frozenset)):
                nodes |= p
            elif isinstance(p, int):
                nodes.add(p)
        return UnsatisfiableGuardsError([describe(self.graph, i) for i in sorted(nodes)], detail)

    # -- stages ----------------------------------------------------------------------------

    def run(self) -> tuple[list[Constraint], set[int], list[str]]:
        """The minimal constraints (sorted), the implied bailouts and what z3 left undecided."""
        out, implied, undecided = self.reduce()
        return (*finish(out, implied, self.norm.tautologies, self.order), undecided)

    def reduce(self) -> tuple[list[Constraint], set[int], list[str]]:
        """The stages: the kept constraints (unsorted), every node found implied (used ones
        too: `finish` takes them out), and what z3 left undecided."""
        st = _State()
        for a in self.norm.atoms:
            c = self.kind(a.formula)
            if c[0] in ("eq", "bind"):
                st.eqs.append((c, a.prov))
            else:
                st.rest.append(a)
        while True:
            uf = self._unify(st.eqs)
            atoms, new_eqs = self._substitute(uf, st)
            if new_eqs:
                st.eqs += new_eqs
                continue
            layer, general = self._order_layer(uf, atoms)
            try:
                res = layer.solve()
            except Conflict as c:
                raise self.fail(c.ids, "the comparisons contradict each other") from None
            if res.equalities:
                for v, u, k, prov in res.equalities:
                    st.eqs.append((("bind", v, k) if u == Z else ("eq", v, u, k), frozenset(prov)))
                continue
            pinned = self._pinned_by_enumeration(general, res)
            if pinned:
                st.eqs += pinned
                continue
            cancelled = self._closed_forms(self._cancel(general, res))
            if set(a.formula for a in cancelled) != set(a.formula for a in general):
                if all(isinstance(a.formula, Rel) and self.kind(a.formula)[0] == "general" for a in cancelled):
                    # NOTE: every rewritten atom stays with z3: another round would rebuild the
                    # same fast layers and cancel nothing more (cancel is idempotent)
                    general = cancelled
                    break
                # NOTE: the rewritten atoms may now belong to a fast layer; go round again with
                # the substituted atoms (equivalent given the equalities, which are kept).
                moved = {id(a) for a in general}
                st.rest = [a for a in atoms if id(a) not in moved] + cancelled
                continue
            break
        implied = st.implied | layer.implied
        general, boxed = self._within_bounds(general, res)
        for a in boxed:
            implied |= a.prov
        undecided: list[str] = []
        kept_edges = res.edges
        kept_diseqs = res.diseqs
        kept_general = general
        background_of = {e.u: e for e in layer.edges.values() if e.background}
        hard = self._components(kept_edges, kept_diseqs, kept_general, background_of)
        contexts = self.contexts
        removed: set[int] = set()  # ids of the items z3 found implied
        for comp_edges, comp_diseqs, comp_general in hard:
            items: list[tuple[Formula, Callable[[], str], Prov, Any]] = []
            # NOTE: removal is tried on the most complex constraints first, so that of two
            # equivalent guards the simpler one survives. Labels are rendered only if asked for.
            for a in sorted(comp_general, key=lambda a: -complexity(a.formula)):
                items.append((a.formula, self._label(render_formula, a.formula, self.order), a.prov, a))
            for d in comp_diseqs:
                items.append((self._ne_formula(d.u, d.v, d.k), self._label(render_ne, self.order, d.u, d.v, d.k),
                              d.prov, d))
            for e in comp_edges:
                items.append((self._le_formula(e.u, e.v, e.w), self._label(render_order, self.order, e.u, e.v, e.w),
                              frozenset(e.prov), e))
            dims = set().union(*(f.dims() for f, *_ in items))
            # NOTE: `size >= 0` of dims substituted away survives as a bound on their representative.
            background = [self._le_formula(e.u, e.v, e.w) for d in dims if (e := background_of.get(d)) is not None]
            red = reduce_component([i[0] for i in items], self.sizes, self.timeout_ms, _Labels([i[1] for i in items]),
                                   lambda idx: self.fail([items[j][2] for j in idx]), background,
                                   contexts, self.graph.meta.get("example"))
            undecided += red.undecided
            for j in red.removed:
                implied |= items[j][2]
                removed.add(id(items[j][3]))
        kept_general = [g for g in kept_general if id(g) not in removed]
        kept_diseqs = [g for g in kept_diseqs if id(g) not in removed]
        kept_edges = [g for g in kept_edges if id(g) not in removed]
        out = self._equalities(uf, st.eqs)
        out += [Constraint("order", self._le_formula(e.u, e.v, e.w), render_order(self.order, e.u, e.v, e.w),
                           frozenset(e.prov), self._dims(e.u, e.v)) for e in kept_edges]
        out += [Constraint("ne", self._ne_formula(d.u, d.v, d.k), render_ne(self.order, d.u, d.v, d.k),
                           frozenset(d.prov), self._dims(d.u, d.v)) for d in kept_diseqs]
        out += [Constraint("general", a.formula, render_formula(a.formula, self.order), a.prov,
                           tuple(sorted(a.formula.dims(), key=self.order.key))) for a in kept_general]
        return out, implied, undecided

    @staticmethod
    def _label(render: Callable[..., str], *args: Any) -> Callable[[], str]:
        return lambda: render(*args)

    def _within_bounds(self, general: list[Atom], res: OrderResult) -> tuple[list[Atom], list[Atom]]:
        """Split off the general atoms that hold on the whole box the kept bounds allow
        (`bounded.holds_on_box`): implied by those bounds, so they never reach z3.

        NOTE: the bounds come from the ordering layer alone (no general atom feeds it), so
        dropping atoms they imply cannot make a bound lose its own support.
        """
        if not general:
            return general, []
        lo, _ = self._bounds(res)
        keep, boxed = [], []
        for a in general:
            (boxed if holds_on_box(a.formula, lo, res.upper) else keep).append(a)
        return keep, boxed

    def _closed_forms(self, general: list[Atom]) -> list[Atom]:
        """A one-dim atom over a size whose divisions are by constants, as what it means (a
        bound, a range, a residue: `solve.readable`), proven equal for every size by z3; a
        bound then joins the ordering layer instead of reaching the solver."""
        from guardsolve.solve.readable import constant_divisors, has_divisions as _constant_divisors_in, one_dim_forms
        import z3

        from guardsolve.solve.readable import periodic_equal, readable_proves

        memo = self.__dict__.setdefault("_closed", {})
        out = []
        for a in general:
            f = a.formula
            dims = f.dims()
            if len(dims) != 1 or not dims <= self.sizes:
                out.append(a)
                continue
            if f not in memo:
                memo[f] = f
                divisors = constant_divisors(f)
                if divisors:
                    (d,) = dims
                    # NOTE: linear forms only (bounds, ranges, one value): those leave z3 for the
                    # ordering layer; a residue stays as it came (rewriting one residue form into
                    # another would go round forever)
                    linear = [(g, t) for g, t in one_dim_forms(f, d, divisors) if not _constant_divisors_in(g)]
                    for g, _ in sorted(linear, key=lambda ft: len(ft[1])):
                        # NOTE: decided exactly by evaluation where both are linear in d's
                        # divisions (`periodic_equal`); z3 proves the rest (one context, made
                        # when first needed: making one costs milliseconds)
                        same = periodic_equal(f, g, d)
                        if same is None:
                            ctx = self.__dict__.get("_closed_ctx")
                            if ctx is None:
                                ctx = self.__dict__["_closed_ctx"] = z3.Context()
                            same = readable_proves(f, g, self.sizes, [d], [], min(self.timeout_ms, 500), ctx)
                        if same:
                            memo[f] = g
                            break
            g = memo[f]
            out.append(a if g is f else Atom(g, a.prov))
        return out

    def _pinned_by_enumeration(self, general: list[Atom], res: OrderResult, span: int = 1024
                               ) -> list[tuple[tuple[Any, ...], frozenset[int]]]:
        """A size whose bounds leave a short interval, and whose one-dim atoms (any divisions)
        hold at one value of it only: that value, as an equality (`20 <= x <= 35`, `x % 16 <= 3`
        and `x % 4 == 0` pin x to 32). Decided by evaluating the atoms at each value, with
        Python's arithmetic (a zero divisor rejects: the division's own guard says the same).

        NOTE: exact: the equality holds wherever the bounds and those atoms do, and at it the
        atoms hold; the bounds stay (implied by it, the later stages drop them).
        """
        from guardsolve.solve.readable import holds

        by_dim: dict[str, list[Atom]] = {}
        for a in general:
            dims = a.formula.dims()
            if len(dims) == 1:
                (d,) = dims
                if d in self.sizes:
                    by_dim.setdefault(d, []).append(a)
        out = []
        for d, atoms in by_dim.items():
            lo, hi = max(res.lower.get(d, 0), 0), res.upper.get(d, INF)
            if hi == INF or hi - lo > span:
                continue
            values = [v for v in range(int(lo), int(hi) + 1) if all(holds(a.formula, {d: v}) for a in atoms)]
            if len(values) == 1:
                out.append((("bind", d, values[0]), frozenset().union(*(a.prov for a in atoms))))
        return out

    def _bounds(self, res: OrderResult) -> tuple[dict[str, float], dict[str, float]]:
        """Each dim's interval from the ordering layer (sizes from 0)."""
        lo: dict[str, float] = {d: 0 for d in self.sizes}
        for d, v in res.lower.items():
            lo[d] = max(lo.get(d, -INF), v)
        return lo, {d: res.upper.get(d, INF) for d in lo}

    def _cancel(self, general: list[Atom], res: OrderResult) -> list[Atom]:
        """Divide out factors the bounds make positive (`(x*a) % (x*b)` -> `x*(a % b)`,
        `(u*v) // u` -> `v`, `(a*b + a + b + 1) // (a + 1)` -> `b + 1`): a dim by the ordering
        layer, a division term or a polynomial by interval arithmetic over the dims' bounds
        (`bounded`)."""
        from guardsolve.solve.bounded import atom_range, poly_range

        lo, hi = self._bounds(res)
        ranges: dict = {}  # NOTE: each division's interval on this round's box, computed once

        def positive(a: Any) -> bool:
            if isinstance(a, str):
                return res.positive(a)
            if not a.dims() <= set(lo):
                return False
            try:
                return (poly_range(a, lo, hi, ranges) if isinstance(a, Poly) else atom_range(a, lo, hi, ranges))[0] >= 1
            except (ZeroDivisionError, OverflowError, ValueError):
                return False

        out: dict[Formula, set[int]] = {}
        memo: dict = {}
        done = self._cancelled
        for a in general:
            # NOTE: `cancel` asks `positive` only about the atom's own dims; with the same answers
            # there the previous round's result stands (most atoms come back unchanged)
            key = (a.formula, frozenset(d for d in a.formula.dims() if positive(d)),
                   tuple(sorted((d, lo.get(d), hi.get(d)) for d in a.formula.dims())))
            f = done.get(key)
            if f is None:
                f = done[key] = cancel(a.formula, positive, memo)
            if f == TRUE:
                continue  # NOTE: cannot happen for an atom the layers kept; guard anyway
            out.setdefault(f, set()).update(a.prov)
        return [Atom(f, frozenset(p)) for f, p in out.items()]

    def _dims(self, *names: str) -> tuple[str, ...]:
        return tuple(sorted((n for n in names if n != Z), key=self.order.key))

    @staticmethod
    def _difference(u: str, v: str, k: int) -> Poly:
        """`v - u - k` (Z stands for 0)."""
        terms: dict[Any, int] = {(): -k}
        if v != Z:
            terms[(v,)] = 1
        if u != Z:
            terms[(u,)] = terms.get((u,), 0) - 1
        return Poly.of(terms)

    @staticmethod
    def _le_formula(u: str, v: str, w: int) -> Formula:
        return Rel("le", Simplifier._difference(u, v, w))

    @staticmethod
    def _ne_formula(u: str, v: str, k: int) -> Formula:
        return Rel("ne", Simplifier._difference(u, v, k))

    def _unify(self, eqs: list[tuple[tuple[Any, ...], Prov]]) -> UnionFind:
        uf = UnionFind(self.norm.dims)
        try:
            for c, prov in eqs:
                if c[0] == "eq":
                    uf.union(c[1], c[2], c[3], prov)
                else:
                    uf.bind(c[1], c[2], prov)
        except Conflict as e:
            raise self.fail(e.ids, "the equalities contradict each other") from None
        self.reps: dict[str, tuple[str, int]] = {}
        for r, members in uf.classes().items():
            first = min(members, key=self.order.key)
            self.reps[r] = (first, uf.find(first)[1])
        for x in self.sizes:
            v = uf.value(x)
            if v is not None and v < 0:
                related = [p for c, p in eqs if x in c[1:3] or uf.find(c[1])[0] == uf.find(x)[0]]
                raise self.fail(related, f"they force size {x} to be {v}")
        return uf

    def _subst(self, uf: UnionFind) -> dict[str, Poly]:
        """Each dim that is not its own representative, as a polynomial over representatives."""
        out: dict[str, Poly] = {}
        for x in self.norm.dims:
            root, off = uf.find(x)
            if root in uf.const:
                out[x] = Poly.const(uf.const[root] + off)
                continue
            rep, roff = self.reps[root]
            if rep != x or off != roff:
                out[x] = Poly.var(rep) + Poly.const(off - roff)
        return out

    def _substitute(self, uf: UnionFind, st: _State) -> tuple[list[Atom], list[tuple[tuple[Any, ...], Prov]]]:
        """Rewrite every non-equality atom over class representatives.

        Equalities that appear (`a0*a1 == b0` with `a1 == 1`) are returned as new facts; on
        the next round the same atom substitutes to True for that part.
        NOTE: an atom none of whose dims moved differently since the previous round rewrites
        as it did then: its conjuncts (and their kinds) are taken from that round.
        """
        moved = self._subst(uf)
        before = self._moved
        changed = {d for d in moved.keys() | before.keys() if moved.get(d) != before.get(d)}
        memo, self._memo = self._memo, {}
        self._moved = moved

        def s(x: str) -> Poly:
            return moved[x] if x in moved else Poly.var(x)

        divs: dict = {}  # NOTE: each division term rewritten once for all atoms of this round

        atoms: dict[Formula, set[int]] = {}
        new_eqs: list[tuple[tuple[Any, ...], Prov]] = []
        for a in st.rest:
            parts = memo.get(a.formula)
            if parts is None or not changed.isdisjoint(a.formula.dims()):
                # NOTE: an atom over representatives only is already normalized: no rewrite.
                dims = a.formula.dims()
                f = substitute(a.formula, s, divs) if any(d in moved for d in dims) else a.formula
                parts = f if f == TRUE or f == FALSE else [(c, self.kind(c)) for c in conjuncts(f)]
            self._memo[a.formula] = parts
            if parts == TRUE:
                st.implied |= a.prov
                continue
            if parts == FALSE:
                raise self.fail([a.prov] + self._eq_provs(st, a), "it contradicts the equalities")
            for c, kind in parts:  # type: ignore[union-attr]
                if kind[0] in ("eq", "bind"):
                    new_eqs.append((kind, a.prov))
                else:
                    atoms.setdefault(c, set()).update(a.prov)
        return [Atom(f, frozenset(p)) for f, p in atoms.items()], new_eqs

    def _eq_provs(self, st: _State, a: Atom) -> list[Prov]:
        dims = a.formula.dims()
        return [p for c, p in st.eqs if set(c[1:2]) & dims or (c[0] == "eq" and c[2] in dims)]

    def _order_layer(self, uf: UnionFind, atoms: list[Atom]) -> tuple[OrderLayer, list[Atom]]:
        layer = OrderLayer()
        for x in self.sizes:
            root, off = uf.find(x)
            if root in uf.const:
                continue
            rep, roff = self.reps[root]
            # x = rep + (off - roff) >= 0  <=>  Z - rep <= off - roff
            layer.add_edge(rep, Z, off - roff, background=True)
        general: list[Atom] = []
        for a in atoms:
            c = self.kind(a.formula)
            if c[0] == "le":
                layer.add_edge(c[1], c[2], c[3], set(a.prov))
            elif c[0] == "ne":
                layer.add_diseq(c[1], c[2], c[3], a.prov)
            else:
                general.append(a)
        return layer, general

    def _components(self, edges: list[Any], diseqs: list[Any], general: list[Atom], background_of: dict[str, Any]
                    ) -> list[tuple[list[Any], list[Any], list[Atom]]]:
        """Independent components (by shared dims) that need z3.

        Those with general atoms, and those where a disequality can change what is implied
        (`order.needs_solver`); in the others the ordering layer's result is exact.
        """
        items: list[tuple[str, Any, list[str]]] = []
        for e in edges:
            items.append(("e", e, [n for n in (e.u, e.v) if n != Z]))
        for d in diseqs:
            items.append(("d", d, [n for n in (d.u, d.v) if n != Z]))
        for a in general:
            items.append(("g", a, sorted(a.formula.dims())))
        out = []
        for idx in _shared_dims_components([dims for _, _, dims in items]):
            chosen = [items[i] for i in idx]
            comp_edges = [o for k, o, _ in chosen if k == "e"]
            comp_diseqs = [o for k, o, _ in chosen if k == "d"]
            comp_general = [o for k, o, _ in chosen if k == "g"]
            if not comp_general:
                dims = {d for _, _, ds in chosen for d in ds}
                background = [b for d in dims if (b := background_of.get(d)) is not None]
                if not needs_solver(comp_edges + background, comp_diseqs):
                    continue
            out.append((comp_edges, comp_diseqs, comp_general))
        return out

    def _equalities(self, uf: UnionFind, eqs: list[tuple[tuple[Any, ...], Prov]]) -> list[Constraint]:
        """Each class as equalities to its earliest dim; a bound class as `x == c` per member."""
        owner: dict[str, set[int]] = {}
        for c, prov in eqs:
            dims = [c[1]] if c[0] == "bind" else [c[1], c[2]]
            root = uf.find(dims[0])[0]
            rep = self.reps[root][0]
            if root in uf.const:
                target = max(dims, key=self.order.key) if c[0] == "eq" else dims[0]
            else:
                others = [d for d in dims if d != rep]
                target = max(others or dims, key=self.order.key)
            owner.setdefault(target, set()).update(prov)
        out = []
        for root, members in uf.classes().items():
            if len(members) == 1 and root not in uf.const:
                continue
            rep, roff = self.reps[root]
            for x in sorted(members, key=self.order.key):
                _, off = uf.find(x)
                if root in uf.const:
                    val = uf.const[root] + off
                    out.append(Constraint("eq", Rel("eq", Poly.var(x) - Poly.const(val)), f"{x} == {val}",
                                          frozenset(owner.get(x, set())), (x,)))
                elif x != rep:
                    k = off - roff
                    out.append(Constraint("eq", Rel("eq", Poly.var(x) - Poly.var(rep) - Poly.const(k)),
                                          render_eq(self.order, x, rep, k), frozenset(owner.get(x, set())),
                                          (rep, x)))
        return out


def finish(out: list[Constraint], implied: set[int], tautologies: Sequence[int], order: DimOrder
           ) -> tuple[list[Constraint], set[int]]:
    """The constraints in canonical order, and the bailouts implied: found implied, used by no
    kept constraint (a bailout split into several atoms may be both), or tautologies."""
    out.sort(key=lambda c: c.sort_key(order))
    used = set().union(*(c.prov for c in out)) if out else set()
    return out, (implied - used) | set(tautologies)


def parts(norm: Normalized) -> list[Normalized]:
    """The atoms split into independent parts (no dim shared between parts), in the order of
    their first atoms; each part's dims in input order. Dims no atom mentions are in none.

    Every stage keeps to the dims an atom mentions (substitution by representatives of a
    class, whose equalities are atoms of the same part; orderings; z3 components), so each
    part simplifies alone to what the whole graph gives it; `_simplify` merges them.
    """
    rank = {d: i for i, d in enumerate(norm.dims)}
    out = []
    for idx in _shared_dims_components([list(a.formula.dims()) for a in norm.atoms]):
        atoms = [norm.atoms[i] for i in idx]
        dims = sorted(set().union(*(a.formula.dims() for a in atoms)), key=rank.__getitem__)
        out.append(Normalized(atoms, dims, norm.sizes.intersection(dims), [], []))
    return out


def _shared_dims_components(dims: Sequence[Sequence[str]]) -> list[list[int]]:
    """Indices of items grouped by shared dims (transitively), each group sorted, the groups
    ordered by their first item.

    >>> _shared_dims_components([["a"], ["b"], ["a", "c"], [], ["c"]])
    [[0, 2, 4], [1], [3]]
    """
    parent = list(range(len(dims)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, ds in enumerate(dims):
        for d in ds:
            j = owner.setdefault(d, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)  # NOTE: the root is the group's first item
    groups: dict[int, list[int]] = {}
    for i in range(len(dims)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


class _SharedContexts:
    """The z3 contexts of this process, made on first use (after a fork, the child's own)."""

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms
        self._pid = -1
        self._contexts: Contexts | None = None

    def get(self) -> Contexts:
        pid = os.getpid()
        if self._contexts is None or pid != self._pid:
            self._contexts, self._pid = Contexts(self.timeout_ms), pid
        return self._contexts


def simplify(graph: Any, *, verify: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS,
             jobs: int | None = None, explore: bool | int = True, readable: bool = True) -> GuardSet:
    """The minimal constraint set accepting exactly the inputs all bailouts accept.

    `graph` is a tensor trace, a guard graph (also one parsed from text), or a `Trace`.
    Raises `UnsatisfiableGuardsError` when no input satisfies the guards. `jobs`: processes
    for a large graph's independent parts (`solve.parallel`); None takes the cores this
    process may use (`GUARDSOLVE_JOBS` caps them) when no other Python thread runs, 1 keeps
    to this process. With None, graphs under `PARALLEL_MIN_BAILOUTS` bailouts stay in this
    process. The result does not depend on it.

    A `Trace` of a function is exact to the trace, not to the route PyTorch's rules took:
    `explore` (on by default; an int caps the traces it may run) traces the function again
    at sizes 0 and 1 and merges every route that records the same trace (`solve.paths`);
    the guards are then the disjunction of those routes' path conditions, made minimal and
    proved equal to it by z3. `explore=False` keeps the one path of the example.

    `readable` (on by default) prints each guard in the simplest form found, proven equivalent
    under the others (`solve.readable`); False keeps the solver's own forms.
    """
    from guardsolve.solve.explore import run_budget
    from guardsolve.trace.tracer import Trace

    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise GuardsolveError(f"jobs={jobs!r}: give a number of processes, at least 1 (or None for every core)")
    # NOTE: read (and checked) on every call, so a bad GUARDSOLVE_JOBS is named on a small graph too
    cap = default_jobs() if jobs is None else jobs
    with paused_gc():
        # NOTE: a Trace carries the guard graph recorded while it ran; no need to replay it
        gg = graph.guard_graph() if isinstance(graph, Trace) else guard_graph(graph)
        gs = _simplify(gg, False, timeout_ms, cap, auto=jobs is None)
    if explore is not False and explore != 0 and (isinstance(graph, Trace) or _saved_trace(graph)):
        # NOTE: a count of probes given: that many; by default the probe budget and, past the
        # first points, the run budget the trace's size sets (`paths.run_budget`)
        # NOTE: a saved trace's exploration spends the same run budget (its size is the same
        # trace's): else its guards are wider than the live ones (resnet18 at batch 0, issue 49)
        runs = run_budget(graph.graph if isinstance(graph, Trace) else graph) if explore is True else None
        gs = merge_paths(graph, gs, timeout_ms, limit=None if explore is True else int(explore), runs=runs)
    if readable:
        gs = readable_guards(gs, timeout_ms)
    if verify:
        gs.verify(timeout_ms=timeout_ms)
    return gs


def readable_guards(gs: GuardSet, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> GuardSet:
    """The guards in their simplest forms (`solve.readable`), each proven equivalent under the
    others; the same GuardSet when none is rewritten."""
    from guardsolve.solve.readable import readable

    from guardsolve.solve.readable import irredundant

    if not any(c.kind == "general" for c in gs.constraints):
        return gs
    out = readable(gs.constraints, gs.sizes, gs.dims, min(timeout_ms, 1000), gs.graph.meta.get("example"))
    if all(a is b for a, b in zip(out, gs.constraints)):
        return gs
    # NOTE: a form read under the others can imply one of them (`x >= 33` read under `x >= 1`
    # makes `x >= 1` redundant): drop those, so the set stays irredundant
    kept, dropped, undecided = irredundant(out, gs.constraints, gs.sizes, min(timeout_ms, 1000))
    out_gs = gs.with_routes(gs.exploration, kept, undecided, widened=gs.widened)
    out_gs.implied = frozenset(out_gs.implied | dropped)
    return out_gs


def _saved_trace(graph: Any) -> bool:
    """A tensor trace of PyTorch ops (a saved one: its routes are its own ops' replays)?"""
    from guardsolve.guards.shape import is_guard_graph, uses_pytorch_rules

    return isinstance(graph, Graph) and not is_guard_graph(graph) and uses_pytorch_rules(graph)


def merge_paths(t: Any, base: GuardSet, timeout_ms: int = DEFAULT_TIMEOUT_MS, limit: int | None = None,
                runs: int | None = None) -> GuardSet:
    """`base` (the example's path) joined with every route `paths.explore` finds that records
    the same trace: the disjunction of their guards (`disjoin`), made minimal by the same
    stages, and proved by z3 equal to the disjunction. Provenance stays with the example's
    bailouts; those a path answers otherwise are `widened`."""
    import z3

    from guardsolve.ir.ops import Op
    from guardsolve.solve.explore import (WIDE_CLAUSES, explore, explore_saved, guard_budget, implied_atoms,
                                        merged_clauses, one_of_routes, prove_union)
    from guardsolve.solve.tograph import emit_bailout
    from guardsolve.trace.tracer import Trace

    with paused_gc():
        reduce = lambda g: _simplify(g, False, timeout_ms, 1)  # noqa: E731
        if isinstance(t, Trace) and t.fn is None:
            t = t.graph
        ex = (explore(t, base, reduce, limit=limit, runs=runs) if isinstance(t, Trace)
              else explore_saved(t, base, reduce, limit=limit, runs=runs))
    if not ex.paths:
        return base.with_routes(ex)
    ctx = z3.Context()  # NOTE: one context for the merge's questions (making one costs ~4 ms)

    def reduced(base: GuardSet, paths: list[Any], max_clauses: int | None, one_of: bool = False
                ) -> tuple[list[Constraint], Any] | None:
        """The minimal guards of the routes' disjunction (None past `max_clauses` raw clauses);
        `one_of`: as the constraints every route implies and one `(route) or (route) ...`."""
        if one_of:
            clauses = one_of_routes(base, paths, implied_atoms(base, paths, [], timeout_ms, ctx))
        else:
            clauses = merged_clauses(base, paths, max_clauses)
            if clauses is None:
                return None
            clauses += implied_atoms(base, paths, [f for f, _ in clauses], timeout_ms, ctx)
        g = Graph(meta={"signature": base.signature})
        for d in base.dims:
            g.emit(Op.INT_PLACEHOLDER if d in base.sizes else Op.INT_ARG, (), name=d)
        prov_of: dict[int, frozenset[int]] = {}
        for f, prov in clauses:
            emit_bailout(g, f)
            prov_of[len(g.nodes) - 1] = prov
        merged = _simplify(g, False, timeout_ms, 1) if clauses else None
        return [Constraint(c.kind, c.formula, c.text, frozenset().union(*(prov_of.get(i, frozenset()) for i in c.prov)),
                           c.dims) for c in (merged or ())], merged

    def merge(base: GuardSet, paths: list[Any]) -> tuple[list[Constraint], Any, str | None]:
        """The merged guards, the GuardSet they came from, and why z3 did not prove them the
        routes' disjunction (None when it did)."""
        # NOTE: every route first, its raw clauses up to WIDE_CLAUSES: the constraints every route
        # implies often make most of them redundant (`mv`: 1 guard); kept when the minimal set fits
        # the reader's budget, else what every route implies and one `(route) or (route) ...`
        wide = reduced(base, paths, WIDE_CLAUSES) if len(paths) > 1 else None
        if wide is not None and len(wide[0]) <= guard_budget(base):
            constraints, merged = wide
        elif len(paths) == 1:
            constraints, merged = reduced(base, paths, None) or ([], None)
        else:
            constraints, merged = reduced(base, paths, None, one_of=True) or ([], None)
        failed = prove_union(constraints, [base.constraints] + [p.guards.constraints for p in paths], base.sizes,
                             timeout_ms, ctx)
        return constraints, merged, failed

    constraints, merged, failed = merge(base, ex.paths)
    if failed is not None:
        # NOTE: a division's divisor is a guard of its own at the top level (a zero divisor
        # rejects), so inside a clause `(x + (x + 1) // 2 - 1) // ((x + 1) // 2) == 2 or x == 0`
        # it still rejects x == 0. Then each route is merged again in its proven readable form
        # (`x >= 2`) where one is found: the same set of inputs, so the same disjunction.
        from dataclasses import replace

        from guardsolve.solve.guardset import has_division

        def plain(gs: GuardSet) -> GuardSet:
            return readable_guards(gs, timeout_ms) if any(has_division(c) for c in gs.constraints) else gs

        if any(has_division(c) for g in [base] + [p.guards for p in ex.paths] for c in g.constraints):
            base = plain(base)
            ex.paths = [replace(p, guards=plain(p.guards)) for p in ex.paths]
            constraints, merged, failed = merge(base, ex.paths)
    if failed is not None:
        # NOTE: never a guard set that is not the paths' disjunction: the example's path alone
        ex.skipped = f"the merged guards were not proved equal to the paths' ({failed}); kept the example's path"
        ex.paths.clear()
        return base.with_routes(ex)
    kept = frozenset().union(*(c.prov for c in constraints))
    widened = frozenset().union(*(c.prov for c in base.constraints)) - kept
    return base.with_routes(ex, constraints, merged.undecided if merged else (), widened)


def _simplify(gg: Graph, verify: bool, timeout_ms: int, jobs: int = 1, *, auto: bool = False) -> GuardSet:
    signature = gg.meta.get("signature")
    lay = outline(gg)
    constraints, implied, undecided, tautologies = _run(gg, lay, timeout_ms, jobs, auto=auto)
    gs = GuardSet(constraints, gg, lay.dims, lay.sizes, signature, implied, undecided,
                  tuple(tautologies), tuple(sorted(lay.values)))
    if verify:
        gs.verify(timeout_ms=timeout_ms)
    return gs


Reduced = tuple[list[Constraint], set[int], list[str]]


def _run(gg: Graph, lay: Outline, timeout_ms: int, jobs: int = 1, *, auto: bool = False
         ) -> tuple[list[Constraint], set[int], list[str], list[int]]:
    """`Simplifier.run` part by part: the graph's components (`outline`) each normalized and
    split into `parts` on their own, on up to `jobs` processes (`auto`: only from
    `PARALLEL_MIN_BAILOUTS` bailouts on); each part goes round the stages only as often as it
    needs, and over its own dims only. Also returns the tautologies.

    NOTE: an error (unsatisfiable guards above all) is named by the whole graph's run, as
    before: which one is met first depends on the order of the whole.
    """
    order = DimOrder(lay.dims)
    if auto and lay.bailouts < PARALLEL_MIN_BAILOUTS:
        jobs = 1
    if len(lay.components) < 2:
        return _whole(gg, timeout_ms, order, jobs)
    shared = _SharedContexts(timeout_ms)  # NOTE: one per process; a forked child makes its own on first use

    def reduce(nodes: Sequence[int]) -> tuple[list[tuple[tuple[int, int], Reduced]], list[int]] | None:
        norm = normalize(gg, validate=False, nodes=nodes, values=lay.values)
        if not all(a.formula.dims() for a in norm.atoms):
            return None
        return [(_first(gg, p), Simplifier(gg, timeout_ms, p, order, shared.get()).reduce())
                for p in parts(norm)], norm.tautologies

    try:
        done = map_forked(reduce, lay.components, jobs)
    except (UnsatisfiableGuardsError, MissingRuleError, InterpretError):
        done = [None]
    if any(d is None for d in done):
        return _whole(gg, timeout_ms, order, jobs)
    # NOTE: the parts in the order of their first atoms in the whole graph (`normalize` puts
    # the divisions' atoms first): the order `undecided` lists them in
    results = sorted((r for d in done for r in d[0]), key=lambda r: r[0])  # type: ignore[index]
    tautologies = sorted((i for d in done for i in d[1]),  # type: ignore[index]
                         key=lambda i: (gg.nodes[i].op not in DIVISIONS, i))
    return (*_merge([r for _, r in results], order, tautologies), tautologies)


def _first(gg: Graph, part: Normalized) -> tuple[int, int]:
    """Where the part's first atom comes first in the whole graph's `normalize`."""
    return min((gg.nodes[i].op not in DIVISIONS, i) for a in part.atoms for i in a.prov)


def _merge(results: Sequence[Reduced], order: DimOrder, tautologies: Sequence[int] = ()) -> Reduced:
    out: list[Constraint] = []
    implied: set[int] = set()
    undecided: list[str] = []
    for o, i, u in results:
        out += o
        implied |= i
        undecided += u
    return (*finish(out, implied, tautologies, order), undecided)


def _whole(gg: Graph, timeout_ms: int, order: DimOrder, jobs: int
           ) -> tuple[list[Constraint], set[int], list[str], list[int]]:
    """The whole graph normalized at once, then part by part (`parts`) on up to `jobs` processes."""
    norm = normalize(gg, validate=False)  # NOTE: guard_graph() validated it
    split = parts(norm) if all(a.formula.dims() for a in norm.atoms) else []
    if len(split) < 2:
        return (*Simplifier(gg, timeout_ms, norm, order).run(), norm.tautologies)
    shared = _SharedContexts(timeout_ms)

    def reduce(part: Normalized) -> Reduced:
        return Simplifier(gg, timeout_ms, part, order, shared.get()).reduce()

    try:
        results = map_forked(reduce, split, jobs)
    except UnsatisfiableGuardsError:
        return (*Simplifier(gg, timeout_ms, norm, order).run(), norm.tautologies)
    return (*_merge(results, order, norm.tautologies), norm.tautologies)
