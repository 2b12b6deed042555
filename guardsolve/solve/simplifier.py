"""The stages for one guard graph or one independent part of it (`Simplifier`): union-find, the
ordering layer, cancellations, z3 per component; `finish` puts the result in canonical order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import z3

from guardsolve.errors import UnsatisfiableGuardsError
from guardsolve.guards.expr import FALSE, TRUE, Formula, Poly, Rel, cancel, conjuncts, substitute
from guardsolve.guards.normalize import Atom, Normalized, describe, normalize
from guardsolve.ir.graph import Graph
from guardsolve.solve.bounded import atom_range, poly_range
from guardsolve.solve.constraint import Constraint, DimOrder, render_eq, render_formula, render_ne, render_order
from guardsolve.solve.bounded import INF, holds_on_box
from guardsolve.solve.difference import Z, OrderResult
from guardsolve.solve.order import OrderLayer
from guardsolve.solve.tight import needs_solver
from guardsolve.solve.smt import Contexts, reduce_component
from guardsolve.solve.one_dim import constant_divisors, has_divisions as _constant_divisors_in, one_dim_forms
from guardsolve.solve.one_dim import holds, periodic_equal
from guardsolve.solve.proving import readable_proves
from guardsolve.solve.unify import Conflict, UnionFind
from guardsolve.solve.atom_kind import classify, complexity
from guardsolve.solve.parts import shared_dims_components


DEFAULT_TIMEOUT_MS = 5000


Prov = frozenset


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
        for idx in shared_dims_components([dims for _, _, dims in items]):
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
