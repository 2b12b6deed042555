"""Other routes to the same trace: trace again at sizes 0 and 1 and on the other side of each
decision of the example's path, keep the paths that record it.

A trace's guards are its *path condition*: every question PyTorch's rules and the user's code
asked about a size, answered as at the example. Other answers often record the very same
trace: the size-1 branch of a contiguity rule changes only the stride of a size-1 dim, a
broadcast of a size-1 operand records the same `aten.add`. `explore` traces the function
again with dims (one at a time, each class of equal dims together, then mixes from every
point that merged) set to 0 and to 1, each probe stopped at the first trace node it records
differently (`tracer.Diverged`). A probe that records the same trace (same nodes, outputs and
static guards) is a *path*: its own path condition, simplified, holds exactly where a fresh
trace takes that route, so each input it accepts records the trace. `merge` joins the paths'
guards into one minimal set (`disjoin`), proved by z3 to be their disjunction.

>>> import torch, guardsolve
>>> gs = guardsolve.simplify(guardsolve.trace(lambda x: x.sin(), torch.randn(32, 8)))
>>> print(gs if len(gs) else "(no size guard)")
(no size guard)
>>> len(gs.paths), gs.check(torch.randn(1, 8)), gs.check(torch.randn(0, 1))
(4, True, True)
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import z3

from guardsolve.ir.graph import Graph
from guardsolve.solve.witness import flip_points
from guardsolve.ir.ops import Op
from guardsolve.solve.constraint import Constraint
from guardsolve.guards.expr import TRUE as _TRUE
from guardsolve.guards.expr import Formula
from guardsolve.solve.disjoin import disjoin, one_term_set
from guardsolve.solve.disjoin import routes as _routes
from guardsolve.solve.smt import formula_to_z3, limit, why_unknown, z3_vars

VALUES = (0, 1)
MAX_PROBES = 16  # points probed per trace, at most (each costs up to a trace)
SMALL_TRACE = 40  # a trace of at most this many nodes is cheap to trace again: up to SMALL_PROBES
SMALL_PROBES = 64
ROUTE_PROBES = 4  # more probes a small trace takes for each route it finds, up to its cap
ROUTE_RATE = 1  # a small trace's run budget goes on while one probe in this many finds a route
TINY_TRACE = 12  # one op or two (a broadcast of three operands): every point queued, up to TINY_PROBES
TINY_OPS = 2
TINY_PROBES = 160
# NOTE: past the points always probed, exploring stops once its probes have *run* (traced again
# or replayed call by call; not those a rule stops on meta tensors, nor those known without a
# run) RUN_WORK // nodes times, at least EXPLORE_RUNS (`run_budget`): a count, so the guards do
# not depend on how loaded the machine is. A run costs about what the trace's nodes cost. It
# replaced a time budget (twice the example's own trace and simplify, timed), which explored a
# process's first, cold trace to the end and cut warm ones short: these constants explore the
# small example nets and models to the end (a conv net of 25 nodes runs 20; its full
# exploration runs 17) and stop GPT-2 and BERT (300 nodes) after their first points, as a warm
# run's time budget did.
EXPLORE_RUNS = 2
RUN_WORK = 500
WIDE_CLAUSES = 96  # raw clauses of every route's disjunction tried before picking routes
MAX_PAIRS_UNITS = 12  # pairs of dims or classes at 1 are tried up to this many dims and classes
MAX_DIMS = 32  # more input dims than this: not explored (the routes' disjunction grows too large)


@dataclass(frozen=True)
class Path:
    """Another route through PyTorch's rules that records the same trace.

    `point`: the input dims it was found at; `changed`: the dims set away from the example;
    `graph`: its guard graph (the route's path condition); `guards`: that condition, minimal;
    `replayed`: found by `trace.local` (the calls whose decisions change run again) rather than
    by tracing the function again.
    """

    point: Mapping[str, int]
    changed: tuple[str, ...]
    graph: Graph
    guards: Any  # GuardSet
    replayed: bool = False  # found by replaying the calls whose decisions change, not a new trace
    # NOTE: decisions on tensor data (value bailouts, `SourceLoc`s) that the data drawn at `point`
    # answers otherwise: the probe took the example's answer (sizes must not depend on the data)
    value_flips: tuple[Any, ...] = ()

    def describe(self) -> str:
        return ", ".join(f"{d}={self.point[d]}" for d in self.changed)

    def how(self) -> str:
        return "replayed call by call" if self.replayed else "traced again"


@dataclass(frozen=True)
class Probe:
    """A point traced again that does not record the same trace, and why."""

    point: Mapping[str, int]
    changed: tuple[str, ...]
    why: Any  # a `trace.why.Why` (its user line and op, where known), or a plain reason
    like: str | None = None  # not traced: it makes the decisions the probe at `like` made
    replayed: bool = False  # decided by replaying the calls whose decisions change, not a new trace

    def because(self) -> str:
        """Why it is rejected, as the rest of "a fresh trace at these sizes ...": where it stops
        or records another node, by the user's line and op (`GuardSet.rejection` adds the
        decision answered otherwise, with the sizes on both sides)."""
        if self.like is None:
            return str(self.why)
        # NOTE: not `why` whole: its message quotes the sizes of the point at `like`, not this one's
        loc, op = getattr(self.why, "loc", None), getattr(self.why, "op", None)
        if loc is None or op is None:
            return f"makes the decisions the trace at {self.like} made before it was rejected (known without tracing again)"
        what = "stops" if str(self.why).startswith("stops") else "records another trace"
        return (f"{what} at {loc}: {op}, as the trace at {self.like} does (the same decisions up to there; known "
                f"without tracing again)")

    def describe(self) -> str:
        return ", ".join(f"{d}={self.point[d]}" for d in self.changed)


@dataclass
class Exploration:
    """What `explore` found: the merged paths, the rejected probes, how many traces it ran."""

    paths: list[Path] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    traces: int = 0  # points traced again (a fresh trace of the function)
    replayed: int = 0  # points probed by replaying only the calls whose decisions change (`trace.local`)
    # NOTE: of those, the ones a rule rejects on plain meta tensors (a fraction of a trace): outside
    # the probe budget, as a known region's points are
    stopped: int = 0
    seconds: float = 0.0  # NOTE: reported only: no decision reads the clock (`run_budget`)
    skipped: str | None = None  # why nothing was explored
    left: int = 0  # points queued that the run budget left unexplored
    out_of_runs: int = 0  # the run budget that ran out (probes run), or 0

    def summary(self) -> str:
        """One line: how many points were tried, merged and rejected, and how each was decided.

        >>> Exploration(paths=[], probes=[], traces=1, replayed=2, seconds=0.004).summary()
        "tried 0 points (sizes 0 and 1, each decision's other side) in 4.0 ms: 0 merged, 0 rejected"
        >>> Exploration(traces=0, replayed=7, left=65, out_of_runs=4).summary().split("; ")[-1]
        'the run budget (4 runs) left 65 queued points unexplored'
        """
        tried = len(self.paths) + len(self.probes)
        ran = self.traces + self.replayed
        how = [f"{self.replayed} replayed call by call", f"{self.traces} traced again"] if tried else []
        if tried > ran:
            how.append(f"{tried - ran} known without a run")
        return (f"tried {tried} point{'' if tried == 1 else 's'} (sizes 0 and 1, each decision's other side) in "
                f"{self.seconds * 1000:.1f} ms: "
                f"{len(self.paths)} merged, {len(self.probes)} rejected" + (f"; {', '.join(how)}" if how else "")
                + (f"; {self.skipped}" if self.skipped else "")
                + (f"; the run budget ({self.out_of_runs} run{'' if self.out_of_runs == 1 else 's'}) left "
                   f"{self.left} queued point{'' if self.left == 1 else 's'} unexplored" if self.left else ""))


def equal_classes(base: Any) -> list[tuple[str, ...]]:
    """Dims the base guards hold equal (`a0 == b0`), as classes of two or more."""
    parent: dict[str, str] = {d: d for d in base.dims}

    def find(d: str) -> str:
        while parent[d] != d:
            d = parent[d]
        return d

    for c in base.constraints:
        f = c.formula
        if c.kind == "eq" and len(c.dims) == 2 and getattr(f, "op", None) == "eq" and f.poly.constant == 0 \
                and sorted(f.poly.nonconst().values()) == [-1, 1]:
            a, b = c.dims
            parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for d in base.dims:
        groups.setdefault(find(d), []).append(d)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def resized(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """`x` at another shape, its values taken (wrapping round) from `x`'s own, so that
    indices stay in range; contiguous, with x's dtype, device and requires_grad; always a tensor
    of its own.

    NOTE: at a point that leaves x's sizes as they are, this was `x` itself (detached: the
    caller's memory), and a probe of `x.add_(y)` added to the caller's tensor again: the first
    call of `guarded` left x with 4 y added."""
    y = x.detach()
    for d, n in enumerate(shape):
        if y.shape[d] == n:
            continue
        if y.shape[d] == 0:
            size = list(y.shape)
            size[d] = n
            y = torch.zeros(size, dtype=y.dtype, device=y.device)
        else:
            y = y.index_select(d, torch.arange(n, device=y.device) % y.shape[d])
    y = y.clone(memory_format=torch.contiguous_format) if y.untyped_storage().data_ptr() == \
        x.untyped_storage().data_ptr() else y.contiguous()
    if x.requires_grad:
        y.requires_grad_(True)
    return y


def _inputs_at(t: Any, point: Mapping[str, int]) -> tuple[Any, ...]:
    out: list[Any] = []
    for p, v in zip(t.signature, t.inputs):
        if p.kind == "tensor":
            out.append(resized(v, [point[d] for d in p.dims]))
        else:
            out.append(point[p.name])
    return tuple(out)


def _mutates_constants(t: Any) -> bool:
    """Does the trace write to a parameter or buffer (BatchNorm's running statistics in
    training mode)? Tracing it again would change the module."""
    from guardsolve.ir.aten import resolve

    for n in t.graph.nodes:
        if n.op is Op.ATEN and any(i in t.constants for i in n.inputs):
            try:
                if resolve(str(n.params["fn"]))._schema.is_mutable:
                    return True
            except Exception:
                return True
    return False


def _why_not(e: BaseException) -> Any:
    """A probe's failure, said as its reason for not merging (a `tracer.Why`: the user's line
    and the op where it stops or records another node, where known)."""
    from guardsolve.errors import UnsupportedOpError
    from guardsolve.trace.tracer import Diverged, Why

    if isinstance(e, Diverged):
        return e.why
    for lead in ("its shape rule rejects these sizes (", "PyTorch's shape rule fails while replaying "):
        if isinstance(e, UnsupportedOpError) and e.reason.startswith(lead):
            inner = e.reason[len(lead):]
            inner = inner[:-1] if inner.endswith(")") else inner  # NOTE: the wrapping one only
            inner = inner.split("` (", 1)[1] if inner.startswith("`") and "` (" in inner else inner
            where = getattr(e, "where", "")
            at = f" at {where}" if where else ""
            return Why(f"stops{at}: {e.op}'s shape rule rejects these sizes: {inner[:200]}", where or None, e.op)
    first = (str(e).strip().splitlines() or [""])[0]
    return Why(f"raises {type(e).__name__}: {first[:200]}", None, getattr(e, "op", None))


def _user_decisions(g: Graph) -> Graph | None:
    """The example's decisions made outside any op (the user's code, library Python): a trace
    records each as a node of its own (`bool_bailout(i4, expect=True)`), so a point where one
    is answered otherwise records another trace, whatever route it takes. None if there is none."""
    if _on_data(g) or not any(n.op is Op.BOOL_BAILOUT and n.meta.get("user") for n in g.nodes):
        return None
    return Graph([n for n in g.nodes if n.op is not Op.BOOL_BAILOUT or n.meta.get("user")], meta=g.meta)


def _on_data(g: Graph) -> bool:
    """Does guard graph `g` hold a decision on tensor data (not a region of sizes)?"""
    return any(n.op is Op.BOOL_OPAQUE for n in g.nodes)


def _run(g: Graph, point: Mapping[str, int]) -> None:
    """Interpret guard graph `g` at `point` (raises `GuardFailure` where a decision fails).

    NOTE: not validated again: these graphs are the tracer's own (a trace's decisions, a
    probe's prefix), asked at many points each.
    """
    from guardsolve.ir.concrete import concrete_rules
    from guardsolve.ir.interp import interpret

    interpret(g, concrete_rules(dict(point)), validate=False)


def _decided_otherwise(user: Graph | None, point: Mapping[str, int]) -> Any:
    """Where the program (outside any op) decides otherwise at `point` (a `Why`), or None."""
    from guardsolve.errors import GuardFailure, GuardsolveError
    if user is None:
        return None
    try:
        _run(user, point)
    except GuardFailure as e:
        from guardsolve.trace.why import Why

        loc = getattr(e, "loc", None)
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace{at}: the program's own test of a size answers otherwise (known without "
                   "tracing again)", loc, "the program's own test of a size")
    except (GuardsolveError, ArithmeticError, KeyError):
        return None
    return None


def _decided(e: BaseException) -> bool:
    """Does the failure follow from the decisions recorded before it (so every input that
    makes them fails the same way)? A divergence does, and so does a shape rule that rejects
    the sizes (its checks are recorded decisions); an eager kernel's error need not."""
    from guardsolve.errors import UnsupportedOpError
    from guardsolve.trace.tracer import Diverged

    return isinstance(e, Diverged) or (isinstance(e, UnsupportedOpError)
                                       and e.reason.startswith("its shape rule rejects these sizes"))


def _inside(g: Graph, point: Mapping[str, int]) -> bool:
    """Does `point` make every decision recorded in guard graph `g` as it was made?"""
    from guardsolve.errors import GuardsolveError
    try:
        _run(g, point)
    except (GuardsolveError, ArithmeticError, KeyError):  # NOTE: a failed guard, a zero divisor
        return False
    return True


def _candidates(example: Mapping[str, int], units: Sequence[tuple[str, ...]], point: Mapping[str, int]
                ) -> Iterator[tuple[dict[str, int], tuple[str, ...]]]:
    for u in units:
        for v in VALUES:
            if any(point[d] != v for d in u):
                new = {**point, **{d: v for d in u}}
                yield new, tuple(d for d in example if new[d] != example[d])


# A probe at a point: ("same", its guard graph) or ("other", why, the region it decides, or None)
Outcome = tuple


def run_budget(graph: Graph) -> int | None:
    """How many probes exploring tensor trace `graph` may run (counting those of its first
    points, which always run): `RUN_WORK` nodes' worth, at least `EXPLORE_RUNS`; None (its probe
    budget alone) for a trace of one op or two (at most `TINY_OPS` ops or `TINY_TRACE` nodes),
    which probes a few ms a point. It reads the trace's size alone, never a clock.

    >>> import torch, guardsolve
    >>> m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    ...                         torch.nn.Conv2d(8, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 5 * 5, 4))
    >>> g = guardsolve.trace(m, torch.randn(2, 3, 16, 16)).graph
    >>> len(g.nodes), run_budget(g)
    (13, 38)
    >>> run_budget(guardsolve.trace(lambda x: x.sin(), torch.randn(4)).graph) is None
    True
    """
    ops = sum(1 for n in graph.nodes if n.op is Op.ATEN)
    if len(graph.nodes) <= TINY_TRACE or ops <= TINY_OPS:
        return None
    return max(EXPLORE_RUNS, RUN_WORK // len(graph.nodes))


def explore(t: Any, base: Any, reduce: Callable[[Graph], Any], *, limit: int | None = None,
            runs: int | None = None) -> Exploration:
    """Trace `t.fn` again at the example with dims set to 0 and 1; the paths that record
    `t`'s trace, and the probes that do not. At most `limit` traces (None: 4 per dim or
    class of equal dims, plus 4, at most `MAX_PROBES`), and past the first points none once
    `runs` probes have run (`run_budget`; None: no such budget). `reduce` simplifies one path's guard graph. A `Trace`
    without its function (or a tensor trace `Graph`: a saved one) replays its own ops with
    PyTorch's shape rules instead (`explore_saved`)."""
    from guardsolve.trace.local import LocalReplay
    from guardsolve.trace.tracer import trace_once, difference

    out = Exploration()
    if t.fn is None or t.inputs is None:
        out.skipped = "no function to trace again (a saved trace or a guard graph)"
        return out
    if any(isinstance(v, torch.Tensor) and not v.is_contiguous() for v in t.inputs):
        out.skipped = "an input is not contiguous (its strides are part of the trace)"
        return out
    if _mutates_constants(t):
        out.skipped = "the trace writes to a parameter or buffer (tracing again would change the module)"
        return out
    example = base.input_dims(*t.inputs)
    if example is None:
        out.skipped = "the example inputs do not fit the traced signature"
        return out

    local = LocalReplay.of(t)
    # NOTE: ops of the trace that are identities at some sizes (an `expand` to the tensor's own
    # size, a full `slice`): where one is an identity at a point and not at the example, a route
    # that leaves it out (or one the trace's own decisions skip there) may compute the same
    from guardsolve.trace.identity import candidates, holding, same_but_identities
    from guardsolve.trace.local import values_at

    ids = candidates(t)
    at_example = {i.out for i in holding(ids, values_at(t.recorded.nodes, example))} if ids else set()

    def identities_here(point: Mapping[str, int]) -> bool:
        return bool(ids) and any(i.out not in at_example for i in holding(ids, values_at(t.recorded.nodes, point)))

    def probe(point: Mapping[str, int]) -> Outcome:
        got = _probe(point)
        if got[0] != "other" or not identities_here(point):
            return got
        # NOTE: the route differs: trace it whole, and compare with the identities set aside
        out.traces += 1
        try:
            u = trace_once(t.fn, _inputs_at(t, point), t.value_guards)
        except Exception:
            return got
        g = same_but_identities(t, u, point)
        if g is None:
            return got
        identity_routes.add(id(g))
        return ("same", g, tuple(u.graph.meta.get("value_flips", ())))

    def _probe(point: Mapping[str, int]) -> Outcome:
        inputs = _inputs_at(t, point)
        if local is not None:
            got = local(point, inputs)
            out.stopped = local.stopped  # NOTE: one replay per exploration: its count is this one's
            if got is not None:
                out.replayed += 1
                return got
        out.traces += 1
        try:
            u = trace_once(t.fn, inputs, t.value_guards, expect=t.graph.nodes)
        except Exception as e:  # NOTE: any failure at the new sizes is a route not merged
            why = _why_not(e)
            prefix = getattr(e, "prefix_guards", None)
            # NOTE: a region with a decision on tensor data (recorded with value_guards), or that
            # holds the example itself, was not decided by sizes alone: not a region then
            decided = (prefix is not None and _decided(e) and not _on_data(prefix)
                       and not _inside(prefix, example))
            return ("other", why, prefix if decided else None)
        why = difference(t, u)
        if why is not None:
            return ("other", why, None)
        return ("same", u.guard_graph(), tuple(u.graph.meta.get("value_flips", ())))

    identity_routes: set[int] = set()  # NOTE: the guard graphs of routes found by tracing again (`id`)
    rng = torch.random.get_rng_state()
    try:
        _search(out, example, base, probe, reduce, limit, size=len(t.graph.nodes), widen=identities_here,
                runs=runs)
    finally:
        torch.random.set_rng_state(rng)  # NOTE: the probes' random ops leave the user's stream as it was
    # NOTE: what only tracing the function found goes into the trace's text (`ir.routes`), so
    # that exploring the saved text merges those routes as this exploration did
    _record_routes(t.graph, [p for p in out.paths if id(p.graph) in identity_routes])
    return out


ROUTE_WHY = "a route the trace records (traced again: this trace but for ops that are identities there)"


def _record_routes(graph: Graph, paths: Sequence[Path]) -> None:
    """Record `paths` (routes found by tracing the function again) in tensor trace `graph`'s
    `meta["routes"]`, each as its minimal guards (`ir.routes`); a route recorded before is not
    recorded twice."""
    from guardsolve.ir.routes import Route

    have = list(graph.meta.get("routes", ()))
    keys = {r.key() for r in have}
    for p in paths:
        r = Route(dict(p.point), p.guards.to_graph(), "; ".join(c.text for c in p.guards.constraints))
        if r.key() not in keys:
            keys.add(r.key())
            have.append(r)
    if have:
        graph.meta["routes"] = have


def _route_holding(graph: Graph, point: Mapping[str, int]) -> Any:
    """The first route saved trace `graph` records (`ir.routes`) whose guards hold at `point`;
    None if none does."""
    from guardsolve.errors import GuardFailure, GuardsolveError

    for r in graph.meta.get("routes", ()):
        try:
            _run(r.guards, point)
        except (GuardFailure, GuardsolveError, ArithmeticError, KeyError):
            continue
        return r
    return None


def _route_graph(route: Any) -> Graph:
    """A recorded route's guard graph, each bailout saying where it comes from (`ROUTE_WHY`)."""
    from guardsolve.ir.node import Node

    return Graph([Node(n.op, n.inputs, n.outputs, n.params, {"why": ROUTE_WHY}) if n.op is Op.BOOL_BAILOUT
                  else n for n in route.guards.nodes], meta=dict(route.guards.meta))


def explore_saved(graph: Graph, base: Any, reduce: Callable[[Graph], Any], *, limit: int | None = None,
                  runs: int | None = None) -> Exploration:
    """The routes of a saved tensor trace (no function to trace again): its own ops replayed
    with PyTorch's shape rules at sizes 0 and 1, as `explore` traces the function again.

    The trace is the program: a replay that runs through, every recorded decision of the
    user's code answered as recorded and every size the user's code reads read as recorded (a
    size where the trace reads one, not a constant: `pytorch.ReadsOtherwise`), records the
    same trace, and its guard graph is that route's path condition. A replay that stops (a
    rule rejects the sizes, a decision or a read answers otherwise) rejects the region of
    every point that makes the decisions it made up to there, as a fresh trace's does, unless
    a route the text records (`ir.routes`: found by tracing the function again, down another
    branch of the program, its identity ops left out) holds there: that route is merged. Past
    the first points, none once `runs` probes have run, as `explore` (the same trace's budget:
    the same points probed, so the same guards)."""
    from guardsolve.guards.pytorch import pytorch_guard_graph, signature_of

    out = Exploration()
    signature = signature_of(graph)
    example: dict[str, int] = {}
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            shape = n.params.get("shape")
            if shape is None:
                out.skipped = f"placeholder {n.params['name']} has no example shape"
                return out
            example.update(zip(next(p.dims for p in signature if p.name == n.params["name"]), shape))
        elif n.op is Op.INT_ARG:
            example[n.params["name"]] = n.params.get("val", 0)
    reads: dict[str, Any] = {}
    try:
        pytorch_guard_graph(graph, signature, reads=reads)  # NOTE: what the user's code reads at the example
    except Exception as e:  # NOTE: `simplify` replayed it already; an error here is its own
        out.skipped = f"the trace does not replay at its example ({type(e).__name__}: {e})"
        return out

    def probe(point: Mapping[str, int]) -> Outcome:
        out.traces += 1
        try:
            gg = pytorch_guard_graph(_graph_at(graph, signature, point), signature, expect=reads)
        except Exception as e:
            # NOTE: a route the live trace found by tracing the function again, recorded in the text
            route = _route_holding(graph, point)
            if route is not None:
                return ("same", _route_graph(route))
            prefix = getattr(e, "prefix_guards", None)
            decided = (prefix is not None and _replay_decided(e) and not _on_data(prefix)
                       and not _inside(prefix, example))
            if 0 in point.values() and _rejected_by_rule(e):
                # NOTE: as a live probe's rejection at a size 0, found on plain meta tensors
                # (`LocalReplay._stops`): outside the probe budget, and with no region
                out.stopped += 1
                decided = False
            return ("other", _replay_why(e), prefix if decided else None)
        why = _eager_rejects(graph, point)
        if why is not None:
            return ("other", why, None)
        gg.meta["static"] = graph.meta.get("static", ())
        return ("same", gg)

    # NOTE: where a recorded route holds, the program's own decisions and the regions rejected
    # before do not decide the point: it is probed (as a live exploration's `widen`)
    widen = (lambda point: _route_holding(graph, point) is not None) if graph.meta.get("routes") else None
    return _search(out, example, base, probe, reduce, limit, size=len(graph.nodes), widen=widen, runs=runs)


def _eager_rejects(graph: Graph, point: Mapping[str, int]) -> Any:
    """Why eager's kernels raise on the saved trace at `point`, or None. A live probe runs them
    (`LocalReplay._eager_agrees`, or the fresh trace itself); a meta kernel may check less than
    eager's (`upsample_nearest2d` of no channels: "Non-empty 4D data tensor expected"). The
    text holds no data: inputs and constants are drawn (floats normal, the rest zeros), which
    decides nothing about sizes; a decision of the trace on such data is left to the replay.

    >>> g = Graph.parse("x = var_placeholder(name=x, rank=2, shape=[2, 3], dtype=float32)\\n"
    ...                 "v0 = aten.max.dim(x, 0)")
    >>> print(_eager_rejects(g, {"x0": 0, "x1": 3}))
    eager raises at these sizes: aten.max.dim: max(): Expected reduction dim 0 to have non-zero size.
    """
    from guardsolve.errors import GuardFailure
    from guardsolve.guards.pytorch import dtype_of, signature_of
    from guardsolve.ir.concrete import concrete_rules
    from guardsolve.ir.interp import interpret
    from guardsolve.trace.why import Why, node_op

    dims = {p.name: p.dims for p in signature_of(graph)}
    gen = torch.Generator().manual_seed(0)

    def drawn(shape: Sequence[int], dtype: str) -> torch.Tensor:
        d = dtype_of(dtype)
        return torch.randn(list(shape), generator=gen, dtype=d) if d.is_floating_point else torch.zeros(shape, dtype=d)

    env: dict[str, Any] = {}
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            env[n.params["name"]] = drawn([point[d] for d in dims[n.params["name"]]], n.params.get("dtype", "float32"))
        elif n.op is Op.VAR_PARAM:
            env[n.params["name"]] = drawn(n.params["shape"], n.params.get("dtype", "float32"))
        elif n.op is Op.INT_ARG:
            env[n.params["name"]] = point[n.params["name"]]
    where: dict[str, Any] = {}
    table = dataclasses.replace(concrete_rules(env), enter=lambda n: where.__setitem__("node", n))
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            interpret(graph, table, validate=False)
    except GuardFailure:
        return None  # NOTE: a decision on the drawn data, not on sizes: the replay decided those
    except Exception as e:  # NOTE: an eager kernel raised: no trace serves these sizes
        cause = e.__cause__ if e.__cause__ is not None else e
        node = where.get("node")
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        op = node_op(node) if node is not None else None
        loc = node.meta.get("loc") if node is not None else None
        return Why(f"eager raises at these sizes: {op + ': ' if op else ''}{first}", loc, op)
    return None


def _replay_decided(e: BaseException) -> bool:
    """Does a saved trace's replay stop for the decisions it recorded before (so that every
    point making them stops the same way)? A decision of the trace answered otherwise does, a
    read answered otherwise, and a shape rule that rejects the sizes (its checks are recorded
    decisions); a decision on tensor data, or an op the rules cannot run, need not."""
    from guardsolve.errors import GuardFailure, UnsupportedOpError
    from guardsolve.guards.pytorch import ReadsOtherwise

    if isinstance(e, (GuardFailure, ReadsOtherwise)):
        return True
    if not isinstance(e, UnsupportedOpError) or not e.reason.startswith("PyTorch's shape rule fails while replaying"):
        return False
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    return not isinstance(e.__cause__, (DataDependentOutputException, DynamicOutputShapeException))


def _rejected_by_rule(e: BaseException) -> bool:
    """Did a shape rule reject the sizes (not a decision of the trace, nor data)?"""
    from guardsolve.errors import UnsupportedOpError

    return (isinstance(e, UnsupportedOpError) and e.reason.startswith("PyTorch's shape rule fails while replaying")
            and _replay_decided(e))


def _replay_why(e: BaseException) -> Any:
    """A saved trace's replay that stops, said as a fresh trace's rejection (`_why_not`)."""
    from guardsolve.errors import GuardFailure
    from guardsolve.guards.pytorch import ReadsOtherwise
    from guardsolve.trace.why import Why, node_op

    if isinstance(e, ReadsOtherwise):
        return Why(str(e), e.loc, node_op(e.node))
    if isinstance(e, GuardFailure) and getattr(e, "node", None) is not None:
        loc = e.node.meta.get("loc")
        at = f" at {loc}" if loc is not None else ""
        return Why(f"records another trace{at}: the program's own test of a size answers otherwise", loc,
                   node_op(e.node))
    return _why_not(e)


def _graph_at(graph: Graph, signature: Any, point: Mapping[str, int]) -> Graph:
    """The trace with its placeholders' example shapes (and int arguments' values) at `point`."""
    from guardsolve.ir.node import Node

    dims = {p.name: p.dims for p in signature}
    nodes = []
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER:
            n = Node(n.op, n.inputs, n.outputs, {**n.params, "shape": tuple(point[d] for d in dims[n.params["name"]])},
                     n.meta)
        elif n.op is Op.INT_ARG:
            n = Node(n.op, n.inputs, n.outputs, {**n.params, "val": point[n.params["name"]]}, n.meta)
        nodes.append(n)
    return Graph(nodes, meta=graph.meta)


def _flips(gs: Any, point: Mapping[str, int]) -> list[dict[str, int]]:
    """For each guard of `gs`, the point nearest `point` where it alone is false (local moves,
    then z3)."""
    formulas = [c.formula for c in gs.constraints]
    sizes = set(gs.sizes)
    return flip_points(formulas, sizes, point, fallback=lambda i: solver_flip(formulas, i, sizes, point))


def _search(out: Exploration, example: dict[str, int], base: Any, probe: Callable[[Mapping[str, int]], Outcome],
            reduce: Callable[[Graph], Any], limit: int | None, size: int = SMALL_TRACE + 1,
            widen: Callable[[Mapping[str, int]], bool] | None = None, runs: int | None = None) -> Exploration:
    """The points to probe, in order (the far side of each decision of the example's path,
    each dim and class at 0 and 1, then mixes, then the neighbours of every route that merged
    and, in a small trace, the far sides of its decisions), skipping those a known route accepts or a known
    region rejects (unless `widen` says an op of the trace is an identity there, which a
    route may leave out); at most `limit` probes, and past the far sides and the 0s and 1s,
    none started once `runs` probes have run (traced again or replayed, not stopped by a rule)."""
    if len(example) > MAX_DIMS:
        out.skipped = f"{len(example)} input dims (more than {MAX_DIMS}: too many routes to try)"
        return out
    start = time.perf_counter()
    # NOTE: classes first: one probe moves every dim the guards hold equal
    units = equal_classes(base) + [(d,) for d in example]
    # NOTE: first the other side of each decision of the example's path, nearest the example
    # (each minimal guard false alone, the others kept): a model traced at batch 2 is asked
    # batch 1 first, one traced at batch 1 batch 2; then each dim and class at 0 and 1
    queue = deque((flip, tuple(d for d in example if flip[d] != example[d])) for flip in _flips(base, example))
    queue.extend(_candidates(example, units, example))
    # NOTE: these are always probed; the run budget applies to what comes after them
    essential = len(queue)
    # NOTE: then mixes: every dim at 0, at 1, and each pair of dims or classes at 1, then at 0
    # (a route may need both: a broadcast of two size-1 operands)
    for v in VALUES:
        mix = {d: v for d in example}
        queue.append((mix, tuple(d for d in example if mix[d] != example[d])))
    if len(units) <= MAX_PAIRS_UNITS:
        for v in (1, 0):  # NOTE: pairs at 0 after pairs at 1 (an empty tensor's contiguity asks of two dims)
            for i, a in enumerate(units):
                for b in units[i + 1:]:
                    mix = {**example, **{d: v for d in a + b}}
                    queue.append((mix, tuple(d for d in example if mix[d] != example[d])))
    # NOTE: a small trace (a few ops) is cheap to trace again: every point queued so far, and
    # some neighbours of the routes found
    small = size <= SMALL_TRACE
    cap = TINY_PROBES if size <= TINY_TRACE else SMALL_PROBES
    # NOTE: a small trace probes everything queued first, then more while probes find routes
    # (each route found allows ROUTE_PROBES more: its neighbours and the far sides of its decisions)
    first = min(len(queue) + 8, cap)
    budget = limit if limit is not None else (first if small else min(4 * len(units) + 4, MAX_PROBES))
    seen = {tuple(sorted(example.items()))}
    looked = 0
    accepts: list[Callable[..., bool]] = [base.check_dims]
    user = _user_decisions(base.graph)
    # NOTE: regions known to record another trace: the decisions a probe made before it
    # diverged (or before a shape rule rejected its sizes) hold at every point of the region
    rejects: list[Graph] = []
    # NOTE: a small trace's run budget goes on while its probes find routes, at least one probe
    # in ROUTE_RATE (every probe, so far): past `runs`, until ROUTE_PROBES more runs find none
    # (`masked.var`'s 20 probes find 20 routes; a conv net's first probes find some and reject
    # others: its run budget holds)
    probes_run, extra = 0, 0  # NOTE: probes started (stopped ones too), runs allowed past `runs`
    try:
        while queue and out.traces + out.replayed - out.stopped < budget and looked < 32 * budget:
            ran = out.traces + out.replayed - out.stopped
            if runs is not None and looked >= essential and ran >= runs + extra:
                out.left = len(queue)
                out.out_of_runs = runs + extra
                break
            point, changed = queue.popleft()
            key = tuple(sorted(point.items()))
            if key in seen:
                continue
            seen.add(key)
            looked += 1
            if any(ok(point) for ok in accepts):
                queue.extend(_candidates(example, units, point))
                continue
            wide = widen is not None and widen(point)
            asked = _decided_otherwise(user, point) if not wide else None
            if asked is not None:
                out.probes.append(Probe(point, changed, asked))
                continue
            known = next((g for g in rejects if _inside(g, point)), None) if not wide else None
            if known is not None:
                out.probes.append(Probe(point, changed, known.meta["why"], known.meta["probe"]))
                continue
            before = out.replayed
            got = probe(point)
            probes_run += 1
            replayed = out.replayed > before
            if got[0] == "other":
                _, why, region = got
                rejected = Probe(point, changed, why, replayed=replayed)
                out.probes.append(rejected)
                if region is not None:
                    region.meta.update(probe=rejected.describe(), why=why)
                    rejects.append(region)
                continue
            gg = got[1]
            try:
                gs = reduce(gg)
            except Exception as e:
                out.probes.append(Probe(point, changed, f"its guards do not simplify ({type(e).__name__}: {e})"))
                continue
            if not gs.check_dims(point):  # NOTE: the route's own decisions do not hold there
                out.probes.append(Probe(point, changed, "the replay's recorded decisions fail there"))
                continue
            out.paths.append(Path(point, changed, gg, gs, replayed, got[2] if len(got) > 2 else ()))
            accepts.append(gs.check_dims)
            if small and limit is None:
                budget = min(first + ROUTE_PROBES * len(out.paths), cap)
                if runs is not None and len(out.paths) * ROUTE_RATE >= probes_run:
                    extra = max(extra, out.traces + out.replayed - out.stopped - runs) + ROUTE_PROBES
            queue.extend(_candidates(example, units, point))
            # NOTE: and, for a small trace (cheap to probe), the far side of each decision of the
            # route found, nearest its point: the routes beyond it
            if small:
                queue.extend((flip, tuple(d for d in example if flip[d] != example[d]))
                             for flip in _flips(gs, point))
    finally:
        out.seconds = time.perf_counter() - start
    return out


def path_literals(gs: Any, provenance: bool, terms: dict[str, Any]) -> dict[str, Any]:
    """One path's constraints as `disjoin` takes them: sets of one dim or one term (`x0*x1`),
    and other formulas; `terms` collects the terms by key."""
    sets: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for c in gs.constraints:
        prov = c.prov if provenance else frozenset()
        one = one_term_set(c.formula)
        if one is not None:
            term, s = one
            key = str(term)
            if not (len(term.terms) == 1 and len(next(iter(term.terms))[0]) == 1
                    and isinstance(next(iter(term.terms))[0][0], str)):
                terms[key] = term  # NOTE: a product or a division: not a plain dim
            if key in sets:
                sets[key] = (sets[key][0].inter(s), sets[key][1] | prov)
            else:
                sets[key] = (s, prov)
        else:
            rest[c.text] = (c.formula, prov)
    return {"sets": sets, "rest": rest}


def _all_literals(base: Any, paths: Sequence[Path]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The base's and each path's constraints as `disjoin` takes them (the base's with their
    provenance), every dim they mention, and the product terms by key."""
    terms: dict[str, Any] = {}
    literals = [path_literals(base, True, terms)] + [path_literals(p.guards, False, terms) for p in paths]
    dims = list(base.dims) + [d for p in paths for d in p.guards.dims if d not in base.dims]
    return literals, dims, terms


def merged_clauses(base: Any, paths: Sequence[Path], max_clauses: int | None = None
                   ) -> list[tuple[Any, frozenset[int]]] | None:
    """The disjunction of the base guards and each path's, as clauses with the base's provenance
    (None past `max_clauses`, the reader's budget by default)."""
    literals, dims, terms = _all_literals(base, paths)
    return disjoin(literals, dims, base.sizes, terms, guard_budget(base) if max_clauses is None else max_clauses)


def one_of_routes(base: Any, paths: Sequence[Path], common: Sequence[tuple[Any, frozenset[int]]]
                  ) -> list[tuple[Any, frozenset[int]]]:
    """The routes' disjunction as `common` (constraints every route implies) and one
    constraint `(route 1) or (route 2) or ...`, each route without the literals `common`
    already says: exact, since every route implies `common`. For routes whose CNF is past the
    reader's budget (a broadcast of many operands, each at size 1 in each dim)."""
    from guardsolve.guards.expr import conj, conjuncts, disj

    literals, dims, terms = _all_literals(base, paths)
    said = {f for f, _ in common}
    routes = [(conj(g for g in conjuncts(f) if g not in said), prov)
              for f, prov in _routes(literals, dims, base.sizes, terms)]
    union = disj(f for f, _ in routes)
    prov = frozenset().union(*(p for _, p in routes))
    return list(common) + ([] if union == _TRUE else [(union, prov)])


def guard_budget(base: Any) -> int:
    """How many guards the routes' clauses may take: a reader's budget, not the solver's (past
    it, they read as what every route implies and one of the routes: `one_of_routes`)."""
    return max(16, 4 * len(base.constraints) + 4)


def implied_atoms(base: Any, paths: Sequence[Path], have: Sequence[Any], timeout_ms: int,
                  ctx: z3.Context | None = None) -> list[tuple[Any, frozenset[int]]]:
    """Constraints of any route that every route implies (z3) and that are not clauses yet:
    `x1 == y0` where one route says it and the others say `x1 == 1, y0 == 1`. As clauses of
    their own they let `simplify` drop the longer clauses they imply. A constraint false at a
    route's own point (or the example's) is no candidate: no solver call for it."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)
    points = [dict(p.point) for p in paths]
    if base.signature is not None and base.graph.meta.get("example"):
        points.append(dict(base.graph.meta["example"]))
    sets = [base.constraints] + [p.guards.constraints for p in paths]
    dims = {d for s in sets for c in s for d in c.dims}
    background = [var(d) >= 0 for d in dims if d in base.sizes]
    routes = [z3.And([formula_to_z3(c.formula, var) for c in s]) if s else z3.BoolVal(True, ctx) for s in sets]
    seen = {repr(f) for f in have}
    out: list[tuple[Any, frozenset[int]]] = []
    for s in sets:
        for c in s:
            if repr(c.formula) in seen:
                continue
            seen.add(repr(c.formula))
            if not all(_holds(c.text, q) for q in points):
                continue
            goal = formula_to_z3(c.formula, var)
            solver = z3.Solver(ctx=ctx)
            limit(solver, timeout_ms)
            solver.add(*background, z3.Or(routes), z3.Not(goal))
            if solver.check() == z3.unsat:
                out.append((c.formula, c.prov if s is base.constraints else
                            _prov_in_base(base, goal, background, var, ctx, timeout_ms)))
    return out


def _prov_in_base(base: Any, goal: Any, background: list[Any], var: Any, ctx: z3.Context,
                  timeout_ms: int) -> frozenset[int]:
    """The example's bailouts that a route's constraint follows from on the example's side (an
    unsat core): the merged guard names the lines that ask it (DistilBERT's `attention_mask0 >= 2`
    was a guard with no source)."""
    solver = z3.Solver(ctx=ctx)
    limit(solver, timeout_ms)
    solver.add(*background, z3.Not(goal))
    for k, c in enumerate(base.constraints):
        solver.assert_and_track(formula_to_z3(c.formula, var), z3.Bool(f"_base_{k}", ctx))
    if solver.check() != z3.unsat:
        return frozenset()
    core = {str(m) for m in solver.unsat_core()}
    return frozenset().union(*(c.prov for k, c in enumerate(base.constraints) if f"_base_{k}" in core))


def _holds(text: str, point: Mapping[str, int]) -> bool:
    """Does a printed constraint hold at `point` (a zero divisor: no)?"""
    try:
        return bool(eval(text, {}, dict(point)))  # NOTE: guardsolve's own printed guards over dims
    except (ZeroDivisionError, NameError):
        return False


def prove_union(constraints: Sequence[Constraint], sets: Sequence[Sequence[Constraint]], sizes: Any,
                timeout_ms: int, ctx: z3.Context | None = None) -> str | None:
    """z3: are `constraints` equivalent to the disjunction of `sets` (sizes >= 0)? None when
    proved, else what failed."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)

    def conj(cs: Sequence[Constraint]) -> Any:
        return z3.And([formula_to_z3(c.formula, var) for c in cs]) if cs else z3.BoolVal(True, ctx)

    mine = conj(constraints)
    union = z3.Or([conj(s) for s in sets]) if sets else z3.BoolVal(False, ctx)
    dims = {d for s in [constraints, *sets] for c in s for d in c.dims}
    background = [var(d) >= 0 for d in dims if d in sizes]
    for premise, goal, what in ((mine, union, "accepts an input no path accepts"),
                                (union, mine, "rejects an input a path accepts")):
        s = z3.Solver(ctx=ctx)
        limit(s, timeout_ms)
        s.add(*background, premise, z3.Not(goal))
        r = s.check()
        if r != z3.unsat:
            return what if r == z3.sat else f"undecided ({why_unknown(s)}): {what}?"
    return None


def solver_flip(formulas: Sequence[Formula], i: int, sizes: set[str], example: Mapping[str, int],
                largest: int = 1 << 20, timeout_ms: int = 200) -> dict[str, int] | None:
    """A point where `formulas[i]` alone is false, asked of z3 where local moves find none:
    first moving only the dims it reads, then those of the formulas that share a dim with it
    (and so on), each time within a box around `example` that widens (8, 64, 1024, `largest`)
    so the point found is near. None where z3 finds none in time.

    >>> from guardsolve.guards.expr import Poly, divide, rel
    >>> x2, x3 = Poly.var("x2"), Poly.var("x3")
    >>> patches = rel("eq", Poly.const(16), divide("floordiv", x2, Poly.const(4)) * divide("floordiv", x3, Poly.const(4)))
    >>> solver_flip([rel("le", Poly.const(8), x2), patches], 0, {"x2", "x3"}, {"x2": 16, "x3": 16})
    {'x2': 4, 'x3': 64}
    """
    ctx = z3.Context()
    var = z3_vars(ctx)
    dims = sorted({d for f in formulas for d in f.dims()})
    if any(d not in example for d in dims):
        return None
    s = z3.Solver(ctx=ctx)
    limit(s, timeout_ms)
    s.add(z3.Not(formula_to_z3(formulas[i], var)))
    s.add(*[formula_to_z3(f, var) for j, f in enumerate(formulas) if j != i])
    s.add(*[var(d) >= 0 for d in dims if d in sizes])
    moved = set(formulas[i].dims())
    while True:
        for box in (8, 64, 1024, largest):
            s.push()
            for d in dims:
                if d in moved:
                    s.add(var(d) >= example[d] - box, var(d) <= example[d] + box)
                else:
                    s.add(var(d) == example[d])
            got = s.check()
            if got == z3.sat:
                m = s.model()
                return {d: (m.eval(var(d), model_completion=True).as_long() if d in dims else v)
                        for d, v in example.items()}
            s.pop()
            if got == z3.unknown:
                return None
        more = moved | {d for f in formulas if set(f.dims()) & moved for d in f.dims()}
        if more == moved:
            return None
        moved = more
