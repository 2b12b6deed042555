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
from typing import Any, Callable, Iterator, Mapping, Sequence
from guardsolve.errors import InputMismatchError
from guardsolve.guards.expr import Div
from guardsolve.ir.graph import Graph
from guardsolve.ir.signature import Param
from guardsolve.solve.codegen import MISSING, check_dims_source, check_source, compile_function
from guardsolve.solve.constraint import Constraint
from guardsolve.trace.static import NAMESPACE as STATIC_NAMESPACE, StaticGuard
from guardsolve.solve.certify import GuardSetProofs
from guardsolve.solve.provenance import GuardSetExplanation


def has_division(c: Constraint) -> bool:
    def walk(f: Any) -> bool:
        if hasattr(f, "args"):
            return any(walk(a) for a in f.args)
        if hasattr(f, "poly"):
            return any(isinstance(a, Div) for a in f.poly.atoms())
        return False
    return walk(c.formula)


class GuardSet(GuardSetExplanation, GuardSetProofs):
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
