"""What `GuardSet.verify()` proves with z3, and its `Certificate`: equivalence with the trace's
bailouts and the irredundancy of each constraint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence
import z3
from guardsolve.errors import VerificationError
from guardsolve.ir.ops import DIM_OPS
from guardsolve.solve.smt import formula_to_z3, graph_to_z3, limit, z3_vars


@dataclass
class Certificate:
    """What `verify()` proved: equivalence both ways and, per constraint, a witness of irredundancy."""

    equivalent: bool
    irredundant: bool
    witnesses: dict[str, dict[str, int]] = field(default_factory=dict)
    paths: int = 0  # the merged routes besides the example's

    def __str__(self) -> str:
        lines = [f"equivalent to the original bailouts (z3, both directions): {self.equivalent}"
                 + (f" (the disjunction of {self.paths + 1} routes' bailouts)" if self.paths else ""),
                 f"every constraint irredundant (z3): {self.irredundant}"]
        for c, w in self.witnesses.items():
            lines.append(f"  {c}: fails alone at " + ", ".join(f"{k}={v}" for k, v in sorted(w.items())))
        return "\n".join(lines)


class GuardSetProofs:
    """A GuardSet's proofs: its z3 formula and `verify()` (equivalence with the bailouts, each
    constraint's irredundancy, by component)."""

    def to_z3(self, ctx: z3.Context | None = None) -> z3.BoolRef:
        """The conjunction of the constraints as a z3 formula over `Int(dim)`."""
        var = z3_vars(ctx)
        parts = [formula_to_z3(c.formula, var) for c in self.constraints]
        return z3.And(parts) if parts else z3.BoolVal(True, ctx)

    def verify(self, timeout_ms: int = 10000, minimal: bool = True) -> Certificate:
        """Prove with z3: equivalent to the original bailouts, and every constraint irredundant.
        With merged paths (`paths`), "the original bailouts" are the disjunction of every
        route's: the example's guard graph or any path's.

        Raises `VerificationError` with a counterexample when a proof fails (or is undecided).
        With `minimal=False`, a constraint whose irredundancy is not proved (implied, or the
        solver undecided) is reported (`irredundant` False, no witness) rather than raised:
        the check is exact either way, and a compiled variant is not thrown away for a
        constraint too many (Inductor's ShapeEnv guards can be identities z3 takes long over).
        NOTE: group by group (`_groups`: parts of the graph and of the guard set that share no
        dim), so independent parts cost a solver call each, not one call over all of them. The
        groups' variables are disjoint and each is satisfiable (its model is proved below), so
        the proofs per group are the proofs for the whole, and a witness is the constraint's
        group's point with the other groups' models.
        """
        ctx = z3.Context()
        var = z3_vars(ctx)
        parts = [formula_to_z3(c.formula, var) for c in self.constraints]
        index = {id(n): i for i, n in enumerate(self.graph.nodes)}
        from guardsolve.guards.shape import value_bailouts

        skip = frozenset(value_bailouts(self.graph))
        base: dict[str, int] = {d: 0 for d in self.dims}  # NOTE: a dim no guard mentions is free
        found: list[tuple[int, dict[str, int]]] = []
        unproved = 0
        # NOTE: with merged paths the original is the disjunction of every route's bailouts
        # (the example's and each path's graph), proved over all dims at once
        groups = self._groups() if not self.paths else [
            (list(range(len(self.graph.nodes))), list(range(len(self.constraints))), list(self.dims))]
        for nodes, members, dims in groups:
            background = [var(d) >= 0 for d in dims if d in self.sizes]
            original = graph_to_z3(self.graph, var, nodes, skip, index)
            if self.paths:
                original = z3.Or(original, *[graph_to_z3(p.graph, var) for p in self.paths])
            mine = z3.And([parts[j] for j in members]) if members else z3.BoolVal(True, ctx)
            for premise, goal, what in ((original, mine, "the original bailouts do not imply the guard set"),
                                        (mine, original, "the guard set does not imply the original bailouts")):
                self._prove(ctx, background + [premise], goal, what, timeout_ms)
            base.update(self._model(ctx, background + [mine], dims, var, timeout_ms))
            for i in members:
                s = z3.Solver(ctx=ctx)
                limit(s, timeout_ms)
                s.add(*background, *[parts[j] for j in members if j != i], z3.Not(parts[i]))
                r = s.check()
                c = self.constraints[i]
                if r != z3.sat and not minimal:
                    unproved += 1
                    continue
                if r == z3.unsat:
                    raise VerificationError(f"`{c}` is implied by the other constraints")
                if r == z3.unknown:
                    raise VerificationError(f"could not decide whether `{c}` is redundant: {s.reason_unknown()}")
                m = s.model()
                found.append((i, {d: m.eval(var(d), model_completion=True).as_long() for d in dims}))
        witnesses = {self.constraints[i].text: {**base, **point} for i, point in sorted(found)}
        return Certificate(True, not unproved, witnesses, len(self.paths))

    def _groups(self) -> list[tuple[list[int], list[int], list[str]]]:
        """(graph nodes, constraint indices, dims) of each part of the graph and the guard set
        that shares no dim with the others: `outline`'s components, joined where a constraint
        spans two (it never should)."""
        from guardsolve.guards.normalize import outline

        comps = outline(self.graph).components
        nodes = self.graph.nodes
        parent = list(range(len(comps)))

        def find(k: int) -> int:
            while parent[k] != k:
                parent[k] = k = parent[parent[k]]
            return k

        owner: dict[str, int] = {}
        for k, comp in enumerate(comps):
            for i in comp:
                if nodes[i].op in DIM_OPS:
                    owner[nodes[i].params["name"]] = k
        for c in self.constraints:
            ks = {find(owner[d]) for d in c.dims if d in owner}
            for k in ks:
                parent[k] = min(ks)
        groups: dict[int, tuple[list[int], list[int], list[str]]] = {}
        for k, comp in enumerate(comps):
            g = groups.setdefault(find(k), ([], [], []))
            g[0].extend(comp)
            g[2].extend(nodes[i].params["name"] for i in comp if nodes[i].op in DIM_OPS)
        for j, c in enumerate(self.constraints):
            # NOTE: a constraint over no input dim is checked with the first group (or alone)
            k = next((owner[d] for d in c.dims if d in owner), 0 if comps else None)
            groups.setdefault(find(k) if k is not None else -1, ([], [], []))[1].append(j)
        return [(sorted(set(n)), m, d) for n, m, d in groups.values()]

    @staticmethod
    def _model(ctx: z3.Context, facts: list[Any], dims: Sequence[str], var: Any, timeout_ms: int) -> dict[str, int]:
        s = z3.Solver(ctx=ctx)
        limit(s, timeout_ms)
        s.add(*facts)
        r = s.check()
        if r != z3.sat:
            raise VerificationError(f"could not find a point where the guards hold ({r}"
                                    f"{': ' + s.reason_unknown() if r == z3.unknown else ''})")
        m = s.model()
        return {d: m.eval(var(d), model_completion=True).as_long() for d in dims}

    @staticmethod
    def _prove(ctx: z3.Context, premises: list[Any], goal: Any, what: str, timeout_ms: int) -> None:
        s = z3.Solver(ctx=ctx)
        limit(s, timeout_ms)
        s.add(*premises, z3.Not(goal))
        r = s.check()
        if r == z3.sat:
            m = s.model()
            raise VerificationError(what, {d.name(): m[d].as_long() for d in m.decls() if z3.is_int_value(m[d])})
        if r == z3.unknown:
            raise VerificationError(f"could not decide ({s.reason_unknown()}): {what}?")
