"""`GuardSet`: the minimal constraints of a trace, with provenance, a compiled check and proofs.

>>> import torch, guardsolve
>>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)).graph, explore=False)
>>> print(gs)
a0 == b0
a0 != 1
>>> gs.check(torch.ones(3), torch.ones(3)), gs.check_dims({"a0": 4, "b0": 8})
(True, False)
"""

from __future__ import annotations

import functools
import linecache
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import z3

from guardsolve.errors import InputMismatchError, VerificationError
from guardsolve.guards.expr import Div
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import DIM_OPS
from guardsolve.ir.signature import Param
from guardsolve.solve.codegen import MISSING, check_dims_source, check_source, compile_function
from guardsolve.solve.constraint import Constraint
from guardsolve.solve.smt import formula_to_z3, graph_to_z3, limit, z3_vars
from guardsolve.trace.static import NAMESPACE as STATIC_NAMESPACE, StaticGuard


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


def has_division(c: Constraint) -> bool:
    def walk(f: Any) -> bool:
        if hasattr(f, "args"):
            return any(walk(a) for a in f.args)
        if hasattr(f, "poly"):
            return any(isinstance(a, Div) for a in f.poly.atoms())
        return False
    return walk(c.formula)


class GuardSet:
    """The minimal constraints over input dims, in canonical order.

    `static` guards (a trace's dtype, device, layout, requires_grad, observed strides, grad
    mode; see `guardsolve.trace.static`) come from the guard graph's meta unless given; the
    compiled check tests them after the inputs' kinds and ranks, before the size guards.
    `params` names every parameter of `check` in order, when some are not traced (pinned by
    a static guard instead).
    """

    def __init__(self, constraints: Sequence[Constraint], graph: Graph, dims: Sequence[str],
                 sizes: frozenset[str], signature: Sequence[Param] | None, implied: set[int],
                 undecided: Sequence[str], tautologies: Sequence[int] = (), value_guards: Sequence[int] = (),
                 *, static: Sequence[StaticGuard] | None = None, params: Sequence[str] | None = None,
                 exploration: Any = None, widened: frozenset[int] = frozenset()):
        # NOTE: `exploration` (a `paths.Exploration`): the other routes traced, the paths merged
        # into these constraints and the probes that record another trace; `widened`: the
        # original bailouts that no longer hold for every input (a merged path answers them
        # otherwise and records the same trace)
        self.exploration = exploration
        self.widened = frozenset(widened)
        self.static: tuple[StaticGuard, ...] = tuple(graph.meta.get("static", ()) if static is None else static)
        self.params = tuple(params) if params is not None else (
            tuple(p.name for p in signature) if signature is not None else None)
        self.constraints = tuple(constraints)
        self.graph = graph
        self.dims = tuple(dims)
        self.sizes = sizes
        self.signature = tuple(signature) if signature is not None else None
        self.implied = frozenset(implied)
        self.undecided = tuple(undecided)
        self.tautologies = tuple(tautologies)
        # Bailouts on tensor data (opted in at trace time): checked when the trace runs, not here.
        self.value_guards = tuple(value_guards)
        self._printed: dict[str, Any] | None = None
        texts = [c.text for c in self.constraints]
        divides = any(has_division(c) for c in self.constraints)
        self._dims_src = check_dims_source(texts, self.dims, divides)
        self._src = (check_source(texts, self.signature, divides, [g.source for g in self.static], self.params)
                     if self.signature is not None else None)
        self._bound = {**STATIC_NAMESPACE, **{k: v for g in self.static for k, v in g.values},
                       "_arity": self._arity}

    # NOTE: compiled on first use: compiling costs about as much as simplifying a large trace.
    @functools.cached_property
    def _check_dims(self) -> Callable[..., bool]:
        return compile_function(self._dims_src, "check_dims")

    @functools.cached_property
    def entry_check(self) -> Callable[..., bool] | None:
        """The compiled check of every guard, static and size (None where the set has none)."""
        return compile_function(self._src, "check", self._bound) if self._src is not None else None

    def with_static(self, static: Sequence[StaticGuard], params: Sequence[str] | None = None) -> "GuardSet":
        """The same size guards with other static guards (and parameters, some not traced)."""
        return GuardSet(self.constraints, self.graph, self.dims, self.sizes, self.signature, set(self.implied),
                        self.undecided, self.tautologies, self.value_guards, static=static, params=params,
                        exploration=self.exploration, widened=self.widened)

    def with_routes(self, exploration: Any, constraints: Sequence[Constraint] | None = None,
                    undecided: Sequence[str] = (), widened: frozenset[int] = frozenset()) -> "GuardSet":
        """These guards with an exploration's routes (`paths.Exploration`): the same constraints
        (no route merged), or `constraints`, the merged routes' (with their `undecided` and the
        bailouts they `widened`)."""
        return GuardSet(self.constraints if constraints is None else constraints, self.graph, self.dims, self.sizes,
                        self.signature, set(self.implied), [*self.undecided, *undecided], self.tautologies,
                        self.value_guards, static=self.static, params=self.params, exploration=exploration,
                        widened=widened)

    @property
    def paths(self) -> tuple[Any, ...]:
        """The other routes merged in (`paths.Path`): each records the same trace."""
        return tuple(self.exploration.paths) if self.exploration is not None else ()

    @property
    def probes(self) -> tuple[Any, ...]:
        """The points probed that record another trace (`paths.Probe`), with why."""
        return tuple(self.exploration.probes) if self.exploration is not None else ()

    # -- the set ---------------------------------------------------------------------------

    @property
    def minimal(self) -> bool:
        """False when some solver call was undecided (see `undecided`); the set is still exact."""
        return not self.undecided

    def __iter__(self) -> Iterator[Constraint]:
        return iter(self.constraints)

    def __len__(self) -> int:
        return len(self.constraints)

    def __getitem__(self, i: int) -> Constraint:
        return self.constraints[i]

    def __str__(self) -> str:
        return "\n".join(line for c in self.constraints for line in c.lines())

    def __repr__(self) -> str:
        """
        >>> import torch, guardsolve
        >>> guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)))
        <GuardSet of 1 guard over a0, b0 (minimal; 8 static): (a0 == 1) or (a0 == b0) or (b0 == 1)>
        """
        shown = "; ".join(c.short() for c in self.constraints[:3]) + ("; ..." if len(self.constraints) > 3 else "")
        n = len(self.constraints)
        return (f"<GuardSet of {n} guard{'s' if n != 1 else ''} over {', '.join(self.dims) or 'no dims'} "
                f"({'minimal' if self.minimal else 'not proved minimal'}; {len(self.static)} static)"
                f"{': ' + shown if shown else ''}>")

    def _repr_html_(self) -> str:
        """A table of guard, kind and sources, then the static guards (Jupyter shows it)."""
        import html

        rows = []
        for c in self.constraints:
            sources = sorted({self._origin(i) for i in c.prov})
            rows.append(f"<tr><td><code>{html.escape(c.text)}</code></td><td>{c.kind}</td>"
                        f"<td>{'<br>'.join(html.escape(s) for s in sources)}</td></tr>")
        static = "".join(f"<li><code>{html.escape(g.text)}</code></li>" for g in self.static)
        n = len(self.constraints)
        return (f"<div><b>GuardSet</b>: {n} guard{'s' if n != 1 else ''} over {html.escape(', '.join(self.dims))}"
                f" ({'minimal' if self.minimal else 'not proved minimal'})"
                "<table><thead><tr><th>guard</th><th>kind</th><th>sources</th></tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>"
                + (f"<details><summary>{len(self.static)} static guards (checked first)</summary><ul>{static}</ul>"
                   "</details>" if static else "") + "</div>")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GuardSet):
            return NotImplemented
        return [c.text for c in self] == [c.text for c in other]

    __hash__ = None  # type: ignore[assignment]

    # -- checking --------------------------------------------------------------------------

    def source(self) -> str:
        """The generated Python source of `check` (or of `check_dims` without a signature)."""
        return self._src if self._src is not None else self._dims_src

    # NOTE: `check` is the compiled function itself, stored on the instance on first use: a
    # method wrapping it cost as much again as the check (~0.5 us of a 2 us call).
    @functools.cached_property
    def check(self) -> Callable[..., bool]:
        """Do new inputs (the traced function's signature) satisfy the guards? Call it as
        `gs.check(*inputs)`; other arguments raise InputMismatchError."""
        if self.signature is None:
            def no_signature(*args: Any, **kwargs: Any) -> bool:
                raise InputMismatchError("this GuardSet has no input signature (a parsed guard graph); use check_dims")

            return no_signature
        # NOTE: `source()` with a first statement that turns a call with other arguments
        # into `_arity`'s InputMismatchError
        texts = [c.text for c in self.constraints]
        src = check_source(texts, self.signature, any(has_division(c) for c in self.constraints),
                           [g.source for g in self.static], self.params, arity=True)
        return compile_function(src, "check", self._bound)

    def _arity(self, given: tuple[Any, ...], more: tuple[Any, ...], named: dict[str, Any]) -> bool:
        missing = [n for n, v in zip(self.params or (), given) if v is MISSING]
        why = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"{len(more)} extra positional"] if more else []) + ([f"unknown {', '.join(named)}"] if named else [])
        raise InputMismatchError(f"check takes the traced inputs ({', '.join(self.params or ())}): {'; '.join(why)}")

    def check_dims(self, dims: Mapping[str, int]) -> bool:
        """Do explicit dim values satisfy the guards? Every dim must be given, sizes `>= 0`."""
        missing = [d for d in self.dims if d not in dims]
        unknown = [d for d in dims if d not in self.dims]
        if missing or unknown:
            raise InputMismatchError(
                (f"missing dims: {', '.join(missing)}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown dims: {', '.join(unknown)} (known: {', '.join(self.dims)})" if unknown else ""))
        negative = [d for d in self.dims if d in self.sizes and dims[d] < 0]
        if negative:
            raise InputMismatchError(f"negative sizes: {', '.join(f'{d}={dims[d]}' for d in negative)}"
                                     " (a tensor's sizes are >= 0; only int arguments may be negative)")
        return self._check_dims(**dims)

    def _bind(self, args: Sequence[Any]) -> dict[str, Any] | None:
        if self.params is None or len(args) != len(self.params):
            return None
        return dict(zip(self.params, args))

    def input_dims(self, *args: Any) -> dict[str, int] | None:
        """The dims of new inputs (the traced signature), or None if they do not fit it."""
        bound = self._bind(args)
        if self.signature is None or bound is None:
            return None
        dims: dict[str, int] = {}
        for p in self.signature:
            a = bound[p.name]
            if p.kind == "tensor":
                if not hasattr(a, "shape") or len(a.shape) != p.rank:
                    return None
                dims.update(zip(p.dims, (int(d) for d in a.shape)))
            else:
                if not isinstance(a, int) or isinstance(a, bool):
                    return None
                dims[p.name] = a
        return dims

    def _signature_misfit(self, args: Sequence[Any]) -> str:
        """How inputs that `input_dims` rejects differ from the traced signature, each misfit
        with what was found: `x has rank 3, traced at rank 2`."""
        bound = self._bind(tuple(args))
        if self.signature is None or bound is None:
            return f"inputs do not fit the traced signature ({len(args)} given)"
        out = []
        for p in self.signature:
            a = bound.get(p.name)
            if p.kind == "tensor":
                if not hasattr(a, "shape"):
                    out.append(f"{p.name} is a {type(a).__name__}, traced as a tensor")
                elif len(a.shape) != p.rank:
                    out.append(f"{p.name} has rank {len(a.shape)}, traced at rank {p.rank}")
            elif not isinstance(a, int) or isinstance(a, bool):
                out.append(f"{p.name} is a {type(a).__name__}, traced as an int")
        return "inputs do not fit the traced signature: " + ("; ".join(out) or "their arguments differ")

    def static_failure(self, *args: Any, state: Mapping[str, Any] | None = None) -> str | None:
        """The first static guard new inputs fail, with the value found, or None. `state`
        replaces names the guards call (`_is_grad_enabled`, ...) by what they returned then."""
        env = self._bind(args)
        if env is None:
            return None
        names = {**self._bound, **(state or {})}
        for g in self.static:
            try:
                ok = eval(g.source, names, env)  # NOTE: only on the miss path
                found = eval(g.subject, names, env)
            except Exception as e:  # an argument of another kind than traced
                return f"{g.text} failed ({type(e).__name__}: {e})"
            if not ok:
                return f"{g.text} failed (found {found!r})"
        return None

    def first_failure(self, dims: Mapping[str, int]) -> Constraint | None:
        """The first constraint (in canonical order) that `dims` violate, if any."""
        for c in self.constraints:
            try:
                if not eval(c.text, {}, dict(dims)):  # NOTE: only on the miss path, never per hit
                    return c
            except ZeroDivisionError:
                return c
        return None

    def explain_failure(self, *args: Any, state: Mapping[str, Any] | None = None) -> str:
        """Why new inputs miss: `a0 == b0 failed (a0=4, b0=8) — examples/mlp.py:12  code`."""
        dims = self.input_dims(*args)
        if dims is None:
            return self._signature_misfit(args)
        failed = self.static_failure(*args, state=state)
        if failed is not None:
            return failed
        c = self.first_failure(dims)
        if c is None:
            return "all guards hold"
        values = ", ".join(f"{d}={dims[d]}" for d in c.dims)
        where = self.failed_at(c, dims)
        probe = next((p for p in self.probes if dict(p.point) == dims), None)
        why = f"; a fresh trace at these sizes {self.rejection(probe)}" if probe is not None else ""
        return f"{c.short()} failed ({values}){where}{why}"

    def failed_at(self, c: Constraint, dims: Mapping[str, int]) -> str:
        """` (who asked) — file:line  code` of the source of failed constraint `c` that decides
        at `dims`: the one a route tried there names (`rejection`), else a test of the program's
        own answered otherwise there (it always records another trace), else the first source
        answered otherwise, else the first source; "" for a constraint without sources.

        >>> import torch, guardsolve
        >>> f = lambda x: x.sin() if x.shape[0] > 1 else x.cos()
        >>> gs = guardsolve.simplify(guardsolve.trace(f, torch.randn(5, 8)))
        >>> gs.failed_at(gs[0], {"x0": 1, "x1": 8}).split(" — ")[0]
        " (the program's own test of a size)"
        """
        if not c.prov:
            return ""
        probe = next((p for p in self.probes if dict(p.point) == dict(dims)), None)
        named = self._decisive(probe) if probe is not None else None
        if named is not None and named[0] in c.prov:
            i = named[0]  # NOTE: the source the route tried at these very sizes stops or differs at
        else:
            flipped = [i for i in self._answered_otherwise(dims) if i in c.prov]
            user = [i for i in flipped if self.graph.nodes[i].meta.get("user")]
            i = (user or flipped or sorted(c.prov))[0]
        return f" ({self._who(i)}) — {self._origin(i)}"

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
        stops at <doctest guardsolve.solve.guardset.GuardSet.rejection[1]>:1  ...: aten.add.Tensor's shape rule rejects these sizes
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

    def to_graph(self) -> Graph:
        """A guard graph with one bailout per constraint (its text form saves the guard set)."""
        from guardsolve.ir.ops import Op
        from guardsolve.solve.tograph import emit_bailout

        g = Graph(meta={"signature": self.signature})
        for d in self.dims:
            g.emit(Op.INT_PLACEHOLDER if d in self.sizes else Op.INT_ARG, (), name=d)
        for c in self.constraints:
            emit_bailout(g, c.formula)
        return g

    # -- proofs ----------------------------------------------------------------------------

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
