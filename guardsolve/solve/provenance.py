"""Where each guard of a GuardSet came from, in the user's words: the bailouts and source lines it
stands for, `explain()`, and why a route tried at other sizes was rejected.
"""

from __future__ import annotations

import linecache
from typing import Any, Callable, Mapping, Sequence


class GuardSetExplanation:
    """What a GuardSet says of itself: each guard's provenance (the bailouts and source lines it
    stands for, the decision each line made), `explain()`, and why another route was rejected."""

    def _who(self, i: int) -> str:
        """Who asked bailout `i`: `aten.add.Tensor's shape rule` (the op's, or in a saved trace
        its node's), the backend (a compiled variant's guard), or the program's own test of a size."""
        from guardsolve.ir.ops import Op

        meta = self.graph.nodes[i].meta
        if "backend" in meta:
            return "assumed by the backend"  # NOTE: a compiled variant's guard, read back from its ShapeEnv
        node = meta.get("trace_node")
        op = meta.get("op") or (node.params["fn"] if node is not None and node.op is Op.ATEN else None)
        return f"{op}'s shape rule" if op else "the program's own test of a size"

    # -- explaining ------------------------------------------------------------------------

    def _describe(self, i: int) -> str:
        """A node as its user-facing guard: `assert not (a0 == 1)`."""
        if self._printed is None:
            from guardsolve.ir.interp import interpret
            from guardsolve.ir.printer import print_rules

            self._printed = interpret(self.graph, print_rules([]))
        n = self.graph.nodes[i]
        if n.op.value == "bool_bailout":
            b = self._printed[n.inputs[0]]
            return f"assert {b}" if n.params["expect"] else f"assert not {b}"
        if n.outputs:
            return f"{self._printed[n.outputs[0]]} needs a non-zero divisor"
        return str(n)

    def _data_decision(self, i: int) -> str:
        """A bailout on tensor data, by the trace node that read the data (not an internal name)."""
        n = self.graph.nodes[i]
        by_name = {o: m for m in self.graph.nodes for o in m.outputs}
        stack, seen = list(n.inputs), set()
        while stack:
            v = stack.pop()
            if v in seen or v not in by_name:
                continue
            seen.add(v)
            m = by_name[v]
            if m.op.value == "bool_opaque":
                node = m.meta.get("trace_node")
                return f"a decision on tensor data ({node})" if node is not None else "a decision on tensor data"
            stack.extend(m.inputs)
        return self._describe(i)

    def _asked(self, i: int) -> str:
        """` (aten.add.Tensor's shape rule)`: the op whose shape rule asked bailout `i`, if any."""
        op = self.graph.nodes[i].meta.get("op")
        return f" ({op}'s shape rule)" if op and self.graph.nodes[i].meta.get("loc") is not None else ""

    def _origin(self, i: int) -> str:
        n = self.graph.nodes[i]
        loc = n.meta.get("loc")
        if loc is not None:
            return f"{loc.short_file}:{loc.line}  {loc.code or linecache.getline(loc.file, loc.line).strip()}"
        if n.meta.get("origin"):
            return n.meta["origin"]  # NOTE: a guard translated from another tracer's (Dynamo's), with its source
        if n.meta.get("op"):
            return f"{n.meta['op']}'s shape rule"
        if n.meta.get("trace_line") is not None:
            return f"trace line {n.meta['trace_line']}: {n.meta['trace_node']}"
        line = n.meta.get("line")
        return f"guard graph line {line}: {n}" if line is not None else f"node {i}: {n}"

    def _reading(self, i: int) -> str:
        """A bailout as the condition it asserts, normalized for reading (`x2 >= 4` for
        `assert not (((x2 - 2) // 2) == 0)`); `_describe` keeps the raw form."""
        if self.__dict__.get("_readings") is None:
            self.__dict__["_readings"] = self._bailout_formulas()
        f = self.__dict__["_readings"].get(i)
        n = self.graph.nodes[i]
        if f is None or n.op.value != "bool_bailout":
            return self._describe(i)
        from guardsolve.solve.constraint import DimOrder, render_formula
        from guardsolve.solve.readable import readable_formula

        text = render_formula(f, DimOrder(list(self.dims)))
        if "//" in text or "%" in text:
            found = readable_formula(f, self.sizes, self.dims, timeout_ms=200)
            text = found[1] if found is not None else text
        return text

    def _bailout_formulas(self) -> dict[int, Any]:
        """Each shape bailout's normalized formula (what it asserts), by node index."""
        from guardsolve.guards.normalize import Found, symbolic_rules
        from guardsolve.guards.shape import value_bailouts
        from guardsolve.ir.interp import interpret

        found = Found()
        try:
            interpret(self.graph, symbolic_rules(found))
        except Exception:  # NOTE: a reading only: the raw form stays where the graph does not normalize
            return {}
        nodes = [i for i, n in enumerate(self.graph.nodes) if n.op.value == "bool_bailout"]
        data = value_bailouts(self.graph)
        return {i: f for i, f in zip(nodes, found.bailouts) if i not in data} if len(nodes) == len(found.bailouts) else {}

    def _by_line(self, nodes: Sequence[int], verbose: bool) -> list[str]:
        """Bailouts grouped by source line, with a count (each one listed when `verbose`)."""
        if verbose:
            return [f"    {self._reading(i)}  at {self._origin(i)}" for i in nodes]
        groups: dict[str, list[int]] = {}
        for i in nodes:
            groups.setdefault(self._origin(i), []).append(i)
        return [f"    {origin}  ({len(ids)} bailout{'s' if len(ids) != 1 else ''}, e.g. {self._reading(ids[0])})"
                for origin, ids in groups.items()]

    def explain(self, verbose: bool = False) -> str:
        """Each constraint with the original bailouts it stands for and their source lines; the
        dropped bailouts grouped by line with a count, and the other routes tried as one line
        (`verbose`: each bailout, and each route merged or rejected)."""
        out: list[str] = []
        if self.static:
            out.append("checked first (static: not sizes):")
            out += [f"    {g.text}" for g in self.static]
        for c in self.constraints:
            out += c.lines(full=verbose)  # NOTE: every route of a disjunction past a reader's count
            for i in sorted(c.prov):
                out.append(f"    from {self._reading(i)}{self._asked(i)}  at {self._origin(i)}")
        always = set(self.tautologies)
        for title, nodes in (("implied by the above (dropped):", sorted(self.implied - always)),
                             ("always true (dropped):", sorted(always))):
            if nodes:
                out.append(f"{title} {len(nodes)}")
                out += self._by_line(nodes, verbose)
        out += self._explain_paths(verbose)
        if self.value_guards:
            out.append("not checkable from shapes alone (checked while the trace runs):")
            for i in self.value_guards:
                out += [f"    {self._data_decision(i)}  at {self._origin(i)}", *self._data_lines(i)]
        if self.undecided:
            out.append("not proved minimal (solver undecided):")
            out += [f"    {u}" for u in self.undecided]
        return "\n".join(out)

    def _explain_paths(self, verbose: bool) -> list[str]:
        """How many other routes were tried; with `verbose`, the routes merged (each: where it
        was found, the example's bailouts it answers otherwise, with the op and line that
        asked) and the sizes probed that record another trace."""
        ex = self.exploration
        if ex is None:
            return []
        if not verbose:
            if ex.skipped and not (self.paths or self.probes):
                return [f"other routes not explored: {ex.skipped}"]
            more = " (explain(verbose=True) lists them)" if self.paths or self.probes else ""
            return [f"other routes: {ex.summary()}{more}"]
        out: list[str] = [f"other routes: {ex.summary()}"]
        if self.paths:
            out.append("accepted by other routes that record the same trace (probed at these sizes):")
        for p in self.paths:
            flipped = self._answered_otherwise(p.point)
            asked = "; ".join(f"{self._reading(i)}{self._asked(i)} at {self._origin(i)}" for i in flipped[:2])
            more = f" (and {len(flipped) - 2} more)" if len(flipped) > 2 else ""
            out.append(f"    {p.describe()} ({p.how()}): takes another route" + (f" where {asked}{more}" if asked else "")
                       + f"; its guards: {', '.join(c.text for c in p.guards) or 'none'}")
        if self.probes:
            out.append("another trace at these sizes (rejected):")
            out += [f"    {p.describe()}: {self.rejection(p)}" for p in self.probes]
        return out

    def rejection(self, probe: Any) -> str:
        """Why a route tried (`paths.Probe`) is rejected, in the user's words: where its trace
        stops or first records another node (line and op), then the decision of the example's
        path it answers otherwise, by the op that asked it (or the program's own test), with
        the sizes in the trace and at the probe.

        >>> import torch, guardsolve
        >>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)))
        >>> p = next(p for p in gs.probes if dict(p.point) == {"a0": 5, "b0": 4})
        >>> print(gs.rejection(p).split(": RuntimeError")[0])
        stops at <doctest guardsolve.solve.provenance.GuardSetExplanation.rejection[1]>:1  ...: aten.add.Tensor's shape rule rejects these sizes
        >>> print(gs.rejection(p).split("; ")[-1])
        decided otherwise: a0 == b0 by aten.add.Tensor's shape rule (in the trace a0=4, b0=4, here a0=5, b0=4) on that line
        """
        text = probe.because()
        found = self._decisive(probe)
        if found is None:
            return text
        i, at_line = found
        return f"{text}; {self._decision(i, probe.point, at_line=at_line)}"

    def _decisive(self, probe: Any) -> tuple[int, bool] | None:
        """The example's bailout a rejected route answers otherwise that its rejection names: the
        first one on the line where its trace stops or differs (then True), else the first one."""
        flips = self._answered_otherwise(probe.point)
        if not flips:
            return None
        loc = getattr(probe.why, "loc", None)
        at = str(loc).split("  ", 1)[0] if loc is not None else None
        here = [i for i in flips if at is not None and self._origin(i).split("  ", 1)[0] == at]
        return (here or flips)[0], bool(here)

    def _decision(self, i: int, point: Mapping[str, int], at_line: bool = False) -> str:
        """Bailout `i`, answered otherwise at `point`: what it asserts, who asked it, the sizes
        it reads in the trace and at `point`, and its line (`at_line`: the line just named)."""
        import re

        reading = self._reading(i)
        who = self._who(i)
        named = [d for d in self.dims if re.search(rf"\b{re.escape(d)}\b", reading)]
        example = self.graph.meta.get("example") or {}
        sizes = ""
        if named:
            was = ", ".join(f"{d}={example[d]}" for d in named if d in example)
            now = ", ".join(f"{d}={point[d]}" for d in named if d in point)
            sizes = f" (in the trace {was}, here {now})" if was else f" (here {now})"
        return f"decided otherwise: {reading} by {who}{sizes}" + (" on that line" if at_line else f" — {self._origin(i)}")

    def _answered_otherwise(self, point: Mapping[str, int]) -> list[int]:
        """The example's bailouts (node indices) that are false at `point` (a division by zero
        counts as 0: only the bailouts' answers are wanted)."""
        from guardsolve.ir.concrete import INT_RULES
        from guardsolve.ir.interp import RuleTable, interpret
        from guardsolve.ir.ops import Op

        found: list[int] = []
        index = {id(n): i for i, n in enumerate(self.graph.nodes)}
        current = [-1]

        def enter(node: Any) -> None:
            current[0] = index.get(id(node), -1)

        def bailout(b: Any, *, expect: bool) -> None:
            if bool(b) != expect:
                found.append(current[0])

        def total(fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **k: Any) -> Any:
                try:
                    return fn(*a, **k)
                except ZeroDivisionError:
                    return 0
            return run

        table: dict[Op, Callable[..., Any]] = {op: total(fn) for op, fn in INT_RULES.items()}
        table[Op.INT_PLACEHOLDER] = lambda *, name: point[name]
        table[Op.INT_ARG] = lambda *, name, val=None: point[name]
        table[Op.BOOL_BAILOUT] = bailout
        table[Op.BOOL_OPAQUE] = lambda *, name: True
        interpret(self.graph, RuleTable("answers", table, enter), validate=False)
        data = set(self.value_guards)  # NOTE: not decided by sizes: `value_flips` says where the data flips them
        return [i for i in found if i not in data]

    def value_flips(self, i: int) -> list[str]:
        """The points tried whose data drawn answers value bailout `i` otherwise (`x0=1`): there
        the probe took the example's answer, so the size guards do not depend on the data."""
        loc = self.graph.nodes[i].meta.get("loc")
        if loc is None:
            return []
        return [p.describe() for p in self.paths
                if any((f.file, f.line) == (loc.file, loc.line) for f in p.value_flips)]

    def _data_lines(self, i: int) -> list[str]:
        """A value bailout where the data drawn at other sizes flips it, said in one line."""
        flips = self.value_flips(i)
        if not flips:
            return []
        return [f"    the data drawn at {'; '.join(flips)} answers it otherwise: those sizes were tried with the "
                f"example's answer, so the size guards do not depend on the data (a replay checks it on real data)"]
