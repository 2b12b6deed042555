"""A probe without a trace: replay only the torch calls whose decisions change at the new sizes.

A fresh trace at other sizes runs the user's code again; every decision it makes about a
size is one the example's trace recorded (a `bool_bailout` of the user's code, or one a
call's shape rule made). Up to the first decision answered otherwise, the fresh trace is the
example's, call for call. A call whose every decision holds at the new sizes takes the same
route through its rule, so it computes the same symbolic sizes and strides (the same
guard-graph expressions, other values). Only the calls some decision of which flips need
their rule run again: `LocalReplay` runs just those, on meta inputs with the example's
symbolic sizes at the new values, and compares what they return with what they returned.
When each returns the very same symbolic sizes, strides and dtypes, nothing downstream can
tell, and the fresh trace would record the same trace: a route, whose path condition is the
decisions of the calls left alone and those the replayed rules make now. A call that
returns other sizes (the constant 1 where the trace has a size valued 1 there) hands them to
the calls that take them, which are replayed with them as a fresh trace runs them, as long as
user code never reads that tensor's sizes. A replayed rule that rejects the sizes stops the
trace there, as a fresh trace would (at a point with a size 0, looked for first on plain meta
tensors: `_stops`). Anything else (other sizes user code reads, a composite decomposed over
traced tensors, a decision no call owns) answers None, and the caller traces again.

A route found so is then run eagerly at the new sizes (`run_concrete`): a kernel that raises
there, or returns other sizes than the rule said, leaves it to a fresh trace.

>>> import torch, guardsolve
>>> t = guardsolve.trace(lambda x: x.sin(), torch.randn(32, 8))
>>> replay = LocalReplay.of(t)
>>> got = replay({"x0": 1, "x1": 8}, (torch.randn(1, 8),))
>>> got[0], replay.replayed
('same', 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from guardsolve.errors import GuardsolveError
from guardsolve.ir.aten import qualified_name, refs
from guardsolve.ir.concrete import INT_RULES
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.guards.rule_cache import RuleCache
from guardsolve.guards.rule_base import sym_of
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.trace.op_checks import Call
from guardsolve.trace.presents import presents_as_tracing
from guardsolve.trace.why import Why

UNKNOWN = object()  # a value the guard graph cannot give at these sizes (a zero divisor, data)
_DIMS = frozenset({Op.INT_PLACEHOLDER, Op.INT_ARG})


@dataclass(eq=False)
class Recorded:
    """What a trace's recorder knew when the trace ended: its calls (`tensor.Call`), its guard
    graph as recorded (nodes with their names before `Graph.pruned` renamed them), and its
    hash-consing tables, so a replay builds on the very same names. `blocked`: why single
    calls cannot stand in for a trace of this function (or None)."""

    calls: list[Call]
    user_at: list[tuple[int, str, bool]]  # the user code's decisions: (made before call N, name, answer)
    nodes: list[Node]
    counters: dict[str, int]
    used: set[str]
    memo: dict[tuple[Any, ...], str]
    shape: dict[str, tuple[int, int]]
    products: dict[str, tuple[str, str]]
    unbacked: int
    blocked: str | None
    layout_read: bool  # user code read a stride, an offset or a contiguity (constant ones too)
    sizes_seen: set[str]  # tensors whose sizes user code read (constant ones too)

    @staticmethod
    def of(rec: Recorder) -> "Recorded":
        """The recorder's state; its graph must then be pruned with `in_place=False` (pruning in
        place renames the nodes)."""
        g = rec.guards
        return Recorded(rec.calls or [], rec.user_at, list(g.nodes),
                        dict(g._counters), set(g._used), rec._memo, rec._shape, rec.products, rec._unbacked,
                        rec.local_blocked, rec.strides_read or rec.user_layout, set(rec.sizes_seen))


def values_at(nodes: list[Any], point: Mapping[str, int]) -> dict[str, Any]:
    """Every int and bool of a recorded guard graph's `nodes` at input dims `point` (`UNKNOWN`
    where it has none: a dim not given, a zero divisor, data)."""
    env: dict[str, Any] = {}
    for n in nodes:
        op = n.op
        if op is Op.BOOL_BAILOUT or not n.outputs:
            continue
        out = n.outputs[0]
        if op in _DIMS:
            env[out] = point.get(n.params["name"], UNKNOWN)
            continue
        rule = INT_RULES.get(op)
        args = [env.get(i, UNKNOWN) for i in n.inputs]
        if rule is None or any(a is UNKNOWN for a in args):
            env[out] = UNKNOWN
            continue
        try:
            env[out] = rule(*args, **n.params)
        except (ArithmeticError, TypeError, ValueError):
            env[out] = UNKNOWN
    return env


class _Cannot(Exception):
    """A call this replay cannot run alone (its inputs are not sizes and strides it can rebuild)."""


@dataclass(eq=False)
class LocalReplay:
    """Probes of one trace by replaying single calls (see the module's docstring).

    `replayed`: points answered so; `declined`: points left to a fresh trace (`why`: the last one's reason).
    """

    trace: Any
    recorded: Recorded
    orphans: list[tuple[str, bool]] = field(default_factory=list)
    meta: dict[tuple[str, bool], dict[str, Any]] = field(default_factory=dict)
    sizes_read: set[str] = field(default_factory=set)  # tensors whose sizes user code reads (a read, a `var_size` node)
    _ints: list[Node] = field(default_factory=list)  # the recorded guard graph's nodes, decisions aside
    _defs: dict[str, Node] = field(default_factory=dict)  # those by output name
    decisions: int = 0
    replayed: int = 0
    declined: int = 0
    stopped: int = 0  # points a rule rejects, found on plain meta tensors (`_stops`)
    why: str = ""  # why the last point declined was left to a fresh trace

    @staticmethod
    def of(t: Any) -> "LocalReplay | None":
        """The replay of trace `t`, or None where only fresh traces can probe it (no calls
        recorded, a call that changes sizes in place, a decision on tensor data)."""
        r = getattr(t, "recorded", None)
        if r is None or r.blocked is not None or t.value_guards:
            return None
        if any(n.op is Op.BOOL_OPAQUE for n in r.nodes):
            return None
        replay = LocalReplay(t, r)
        replay._ints = [n for n in r.nodes if n.op is not Op.BOOL_BAILOUT]
        replay.decisions = len(r.nodes) - len(replay._ints)
        replay._defs = {n.outputs[0]: n for n in replay._ints if n.outputs}
        replay.sizes_read = set(r.sizes_seen)
        for n in t.graph.nodes:
            if n.op is Op.VAR_SIZE:
                replay.sizes_read.add(n.inputs[0])
        owned = {q for c in r.calls for q in c.asked}
        for n in r.nodes:
            if n.op is not Op.BOOL_BAILOUT:
                continue
            q = (n.inputs[0], bool(n.params["expect"]))
            replay.meta.setdefault(q, n.meta)
            if not n.meta.get("user") and q not in owned:
                replay.orphans.append(q)
        return replay

    # -- values at other sizes ----------------------------------------------------------------

    def values(self, point: Mapping[str, int]) -> dict[str, Any]:
        """Every int and bool of the recorded guard graph at `point` (`UNKNOWN` where it has none)."""
        return values_at(self.recorded.nodes, point)

    # -- one probe ------------------------------------------------------------------------------

    def __call__(self, point: Mapping[str, int], inputs: Sequence[Any]) -> Any:
        """The probe at `point` (`paths.Outcome`: ("same", its guard graph) or ("other", why,
        the region of sizes known to decide the same, or None)), or None: trace again.
        `inputs`: the example inputs resized to `point`."""
        got = self._probe(point, inputs)
        if got is None:
            self.declined += 1
        else:
            self.replayed += 1
        return got

    def _probe(self, point: Mapping[str, int], inputs: Any) -> Any:
        env = self.values(point)

        def holds(q: tuple[str, bool]) -> bool:
            v = env.get(q[0], UNKNOWN)
            return v is not UNKNOWN and bool(v) == q[1]

        if not all(map(holds, self.orphans)):
            return self._decline("a decision no call made is answered otherwise")
        calls = self.recorded.calls
        user: dict[int, list[tuple[str, bool]]] = {}
        for i, g, e in self.recorded.user_at:
            user.setdefault(i, []).append((g, e))
        flipped = [not all(map(holds, c.asked)) for c in calls]
        if not any(flipped):
            return self._decline("no decision is answered otherwise")
        if 0 in point.values():
            stops = self._stops(env, flipped, user, holds)
            if stops is not None:
                self.stopped += 1
                return stops
        rec = self._recorder(point)
        done: set[tuple[str, bool]] = set()

        def keep(q: tuple[str, bool]) -> None:
            if q not in done:
                done.add(q)
                rec.guards.emit(Op.BOOL_BAILOUT, (q[0],), meta=self.meta.get(q, {}), expect=q[1])

        def decided(i: int) -> bool:
            """Do the user's decisions made before call `i` hold (each then kept in its place,
            so a rejection's region has only those made before it)? Else a fresh trace differs
            there, or its sizes stop it in a way only a trace tells."""
            made = user.get(i, ())
            if not all(map(holds, made)):
                return False
            for q in made:
                keep(q)
            return True

        # NOTE: a replayed call that returns other sizes or strides than the example's (a size
        # the rule made the constant 1) hands them to the calls that use its outputs, which are
        # replayed too; user code must not read them (it would compute other values)
        changed: dict[str, torch.Tensor] = {}
        now: dict[int, Any] = {}  # the replayed calls' outputs
        tainted: str | None = None  # why the replay can no longer say "the same trace"
        nodes = self.trace.graph.nodes
        try:
            for i, (c, f) in enumerate(zip(calls, flipped)):
                if not decided(i):
                    return self._decline("a decision of the user's code is answered otherwise")
                moved = c.names is not None and any(n in changed for n in c.names if n is not None)
                if not f and not moved:
                    for q in c.asked:
                        keep(q)
                    continue
                if c.flat is None or c.names is None:
                    return self._decline(f"{qualified_name(c.func)} decomposed over traced tensors")
                try:
                    made: dict[str, Any] = {}
                    flat = [changed[n] if n is not None and n in changed else _rehinted(rec, env, made, x)
                            for x, n in zip(c.flat, c.names)]
                except _Cannot:
                    return self._decline(f"{qualified_name(c.func)}'s inputs cannot be rebuilt")
                args, kwargs = unflatten(flat, c.spec)
                rec.loc, rec.op = c.loc, c.func
                try:
                    # NOTE: as the trace ran it: below autograd, so a CompositeImplicit op reaches
                    # its rule whole (above, `lstm`'s parts decompose on their own and pin sizes)
                    with presents_as_tracing(), torch._C._AutoDispatchBelowAutograd():
                        out = rec.rules(c.func, args, kwargs)
                except GuardsolveError as e:
                    return self._decline(f"{qualified_name(c.func)}: {e}")
                except Exception as e:
                    # NOTE: a CompositeImplicit op whose rule fails decomposes over the traced tensors
                    # in a fresh trace: its parts are other nodes than the trace's one, so that
                    # trace differs too (or stops in a part's rule): rejected either way
                    # NOTE: worded as a fresh trace's rejection is (`paths._why_not`)
                    return ("other", _rejects(c.func, e, c.loc), self._pruned(rec.guards))
                now[i] = out
                if _same_meta(out, c.out):
                    continue
                new, old = flatten(out)[0], flatten(c.out)[0]
                names = nodes[c.first].outputs
                tensors = [(a, b) for a, b in zip(new, old) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)]
                if len(new) != len(old) or len(tensors) != len(names) or not _same_meta(
                        [a for a in new if not isinstance(a, torch.Tensor)], [b for b in old if not isinstance(b, torch.Tensor)]):
                    return self._decline(f"{qualified_name(c.func)} returns other values")
                for name, (a, b) in zip(names, tensors):
                    if _same_meta(a, b):
                        continue
                    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != b.dim() \
                            or a.dtype != b.dtype:
                        return self._decline(f"{qualified_name(c.func)} returns another rank or dtype")
                    # NOTE: other sizes (`b0` where the trace has `a0`: a broadcast of a size-1
                    # operand; the constant 1 where it has a size valued 1 here) are invisible to
                    # user code that never reads that tensor's sizes: a read goes through
                    # `TracedTensor` (`sizes_seen`, constant sizes too: user code gets those as
                    # plain ints, with no trace node) or is a `var_size` node of the trace. The
                    # calls that take it are replayed with it, as a fresh trace runs their rules.
                    # Otherwise only a fresh trace says "the same trace"; the replay goes on, as
                    # a later rule that rejects these sizes stops a fresh trace too. Other strides
                    # are invisible where user code asked no tensor's strides, offset or
                    # contiguity (each such question goes through `TracedTensor`, constant ones too).
                    if tainted is None:
                        tainted = (_unseen(c.func, name, "sizes", a.shape, b.shape, name in self.sizes_read)
                                   or _unseen(c.func, name, "strides", a.stride(), b.stride(),
                                              self.recorded.layout_read))
                    changed[name] = a
            if not decided(len(calls)):
                return self._decline("a decision of the user's code is answered otherwise")
        finally:
            rec.rules.close()
        if tainted is not None:
            return self._decline(tainted)
        if not self._eager_agrees(env, now, inputs):
            return self._decline("eager raises, or returns other sizes than a rule")
        gg = self._pruned(rec.guards)
        gg.meta["static"] = self.trace.graph.meta.get("static", ())
        return ("same", gg)

    def decides_nothing(self, point: Mapping[str, int]) -> list[int]:
        """The calls (indices into `recorded.calls`) some decision of which is answered
        otherwise at `point`, whose rule, run alone there on its recorded inputs at those sizes,
        returns the very same symbolic sizes, strides and dtypes: their decisions change
        nothing the call hands on (eval-mode dropout asking a stride order). A call this replay
        cannot run alone is left out (it may decide something).

        >>> import torch, guardsolve
        >>> t = guardsolve.trace(lambda x: torch.nn.functional.dropout(x, 0.1, False) + 1, torch.randn(4, 8))
        >>> LocalReplay.of(t).decides_nothing({"x0": 1, "x1": 8})  # the dropout and the add: the same sizes and strides at x0=1
        [0, 1]
        """
        env = self.values(point)

        def holds(q: tuple[str, bool]) -> bool:
            v = env.get(q[0], UNKNOWN)
            return v is not UNKNOWN and bool(v) == q[1]

        rec = self._recorder(point)
        idle: list[int] = []
        try:
            for i, c in enumerate(self.recorded.calls):
                if all(map(holds, c.asked)) or c.flat is None or c.names is None:
                    continue
                try:
                    made: dict[str, Any] = {}
                    args, kwargs = unflatten([_rehinted(rec, env, made, x) for x in c.flat], c.spec)
                    rec.loc, rec.op = c.loc, c.func
                    with presents_as_tracing(), torch._C._AutoDispatchBelowAutograd():
                        out = rec.rules(c.func, args, kwargs)
                except Exception:  # NOTE: `_Cannot`, or a rule that rejects these sizes: it decides
                    continue
                if _same_meta(out, c.out):
                    idle.append(i)
        finally:
            rec.rules.close()
        return idle

    def _stops(self, env: Mapping[str, Any], flipped: Sequence[bool], user: Mapping[int, Any], holds: Any
               ) -> Any:
        """("other", why, None) where a rule rejects the sizes, found cheaply: each call some
        decision of which flips (or whose inputs come out otherwise) runs its rule on plain meta
        tensors of the new sizes, without symbols (a rule on concrete sizes costs a third of
        one over symbols). None where no rule rejects them, or this cannot tell (the symbolic
        replay then decides).

        Empty tensors are where rules reject most (`view(-1)`, kernels that need an element),
        so `_probe` asks this first at points with a size 0. The rejection is a fresh trace's:
        every call before the rejecting one takes its recorded route (its decisions hold) or
        ran here on the values a fresh trace hands it. No region comes with it (a region needs
        the rejecting rule's decisions over symbols); a later point inside it runs this again.
        """
        from guardsolve.guards.data_shaped import DATA_SHAPED, READS_DATA
        from guardsolve.guards.rules import shape_rule

        calls = self.recorded.calls
        outputs = self.trace.graph.nodes
        changed: dict[str, torch.Tensor] = {}
        for i, (c, f) in enumerate(zip(calls, flipped)):
            if not all(map(holds, user.get(i, ()))):
                return None  # NOTE: the user's code branches otherwise first: the replay says how
            moved = c.names is not None and any(n in changed for n in c.names if n is not None)
            if not f and not moved:
                continue
            if c.flat is None or c.names is None or c.func in DATA_SHAPED or c.func in READS_DATA:
                return None
            try:
                flat = [changed[n] if n is not None and n in changed else _concrete(env, x)
                        for x, n in zip(c.flat, c.names)]
            except _Cannot:
                return None
            args, kwargs = unflatten(flat, c.spec)
            try:
                with presents_as_tracing(), torch._C._AutoDispatchBelowAutograd():
                    out = shape_rule(c.func, args, kwargs, None)
            except (GuardsolveError, NotImplementedError):
                return None
            except Exception as e:
                if "meta" in str(e).lower():
                    return None  # NOTE: a part that cannot run on plain meta tensors (it reads data)
                return ("other", _rejects(c.func, e, c.loc), None)
            try:
                was = [_concrete(env, x) for x in flatten(c.out)[0]]
            except _Cannot:
                return None
            now = flatten(out)[0]
            new = [x for x in now if isinstance(x, torch.Tensor)]
            old = [x for x in was if isinstance(x, torch.Tensor)]
            # NOTE: an int it returns otherwise would reach later calls under its recorded name
            if len(new) != len(old) or [x for x in now if not isinstance(x, torch.Tensor)] != [
                    x for x in was if not isinstance(x, torch.Tensor)]:
                return None
            for name, a, b in zip(outputs[c.first].outputs, new, old):
                if _layout(a) != _layout(b):
                    changed[name] = a
        return None

    def _pruned(self, g: Graph) -> Graph:
        """`g` (a probe's graph: the recorded ints, then its decisions and the nodes its replayed
        rules made) without the nodes no decision needs, found from the decisions back (the
        recorded graph is mostly sizes PyTorch computes and never asks about)."""
        base = len(self.recorded.nodes) - self.decisions
        by_name = self._defs
        extra = {n.outputs[0]: n for n in g.nodes[base:] if n.outputs}
        need: set[str] = set()
        stack = [i for n in g.nodes[base:] if n.op is Op.BOOL_BAILOUT for i in n.inputs]
        while stack:
            name = stack.pop()
            if name in need:
                continue
            need.add(name)
            n = extra.get(name) or by_name.get(name)
            if n is not None:
                stack.extend(n.inputs)
        keep = [n for n in g.nodes[:base] if n.op in _DIMS or (n.outputs and n.outputs[0] in need)]
        keep += [n for n in g.nodes[base:] if n.op is Op.BOOL_BAILOUT or (n.outputs and n.outputs[0] in need)]
        return Graph(keep, meta=g.meta)

    def _decline(self, why: str) -> None:
        self.why = why
        return None

    def _recorder(self, point: Mapping[str, int]) -> Recorder:
        """A recorder over the example's guard graph (its ints, no decisions), hinted at `point`."""
        r = self.recorded
        rec = Recorder(None)
        g = rec.guards
        g.nodes = list(self._ints)
        g._used, g._counters = set(r.used), dict(r.counters)
        g.meta.update(signature=self.trace.signature, example=dict(point))
        rec._memo, rec._shape, rec.products = dict(r.memo), dict(r.shape), dict(r.products)
        rec._unbacked = r.unbacked
        rec.depth = 1  # NOTE: inside shape rules: every decision goes to the guard graph only
        rec.meta_first = True
        rec.rules = RuleCache(rec)
        return rec

    def _eager_agrees(self, env: Mapping[str, Any], now: Mapping[int, Any], inputs: Any) -> bool:
        """Does eager run the trace at these sizes, each call's outputs of the sizes its rule
        gives there (`now`: the replayed calls' outputs; the others' are the example's)?"""
        from guardsolve.ir.concrete import run_concrete

        t = self.trace
        names = [n.params["name"] for n in t.graph.placeholders()]
        try:
            with torch.no_grad():
                values = run_concrete(t.graph, {**t.constants, **dict(zip(names, inputs))})
        except Exception:  # NOTE: eager raises at these sizes: a fresh trace says how
            return False
        nodes = t.graph.nodes
        for i, c in enumerate(self.recorded.calls):
            if c.out is None or c.nodes != 1:
                continue
            node = nodes[c.first]
            # NOTE: eager's kernel may hand an input back as an output at some sizes only (a
            # broadcast that changes nothing): user code then holds the input, another trace
            ins = [values.get(n) for n in refs((node.params["args"], node.params["kwargs"]))]
            for o, was in zip(node.outputs, c.aliased or ()):
                r = values.get(o)
                if any(r is x for x in ins if isinstance(x, torch.Tensor)) != was:
                    return False
            replayed = i in now
            metas = [m for m in flatten(now[i] if replayed else c.out)[0] if isinstance(m, torch.Tensor)]
            reals = [values.get(o) for o in nodes[c.first].outputs]
            for m, r in zip(metas, reals):
                if not isinstance(r, torch.Tensor):
                    continue
                want = [s.node.hint if replayed and isinstance(s, torch.SymInt)
                        else env.get(s.node.g, UNKNOWN) if isinstance(s, torch.SymInt) and not s.node.const
                        else int(s) for s in m.shape]
                if r.dtype != m.dtype or len(want) != r.dim() or any(
                        w is not UNKNOWN and w != n for w, n in zip(want, r.shape)):
                    return False
        return True


def _rejects(func: Any, e: BaseException, loc: Any) -> Why:
    """Why a probe stops at `func`'s rule, called at user line `loc`, worded as a fresh trace's
    rejection is (`paths._why_not`)."""
    first = (str(e).strip().splitlines() or [""])[0]
    at = f" at {loc}" if loc is not None else ""
    return Why(f"stops{at}: {qualified_name(func)}'s shape rule rejects these sizes: "
               f"{f'{type(e).__name__}: {first}'[:200]}", loc, qualified_name(func))


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def _node(s: torch.SymInt) -> SymGuard:
    """The guard-graph node of a recorded size (one a replay can value by its name)."""
    node = s.node
    if not isinstance(node, SymGuard) or node.lazy is not None or node.data is not None:
        raise _Cannot
    return node


def _rebuilt(x: Any, size: Callable[[torch.SymInt], Any]) -> Any:
    """A call's recorded meta argument `x` with `size` of each symbolic size, stride and offset:
    a meta tensor of them (a view into a storage as large as `x`'s where it has an offset:
    `split`'s parts), or the int."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "meta" or x.layout is not torch.strided or x.is_conj() or x.is_neg():
            raise _Cannot

        def value(v: Any) -> Any:
            return size(v) if isinstance(v, torch.SymInt) else v

        offset = value(x.storage_offset())
        shape, stride = [value(v) for v in x.shape], [value(v) for v in x.stride()]
        if isinstance(offset, int) and offset == 0:
            y = torch.empty_strided(shape, stride, dtype=x.dtype, device="meta")
        else:
            elements = value(x.untyped_storage().nbytes()) // x.element_size()
            y = torch.empty(elements, dtype=x.dtype, device="meta").as_strided(shape, stride, offset)
        return y.requires_grad_(True) if x.requires_grad else y
    if isinstance(x, torch.SymInt):
        return size(x)
    if isinstance(x, (torch.SymBool, torch.SymFloat)) and x.node.is_symbolic():
        raise _Cannot
    return x


def _concrete(env: Mapping[str, Any], x: Any) -> Any:
    """A call's meta argument `x` at the sizes of `env`, without symbols (a plain meta tensor)."""

    def size(s: torch.SymInt) -> int:
        node = _node(s)
        v = node.hint if node.const else env.get(node.g, UNKNOWN)
        if not isinstance(v, int) or v < 0:
            raise _Cannot  # NOTE: unknown here, or a size the recorded route computes that has no meaning here
        return v

    return _rebuilt(x, size)


def _rehinted(rec: Recorder, env: Mapping[str, Any], made: dict[str, Any], x: Any) -> Any:
    """A call's meta argument `x` with every symbolic size a node of `rec` valued from `env`
    (`made`: the sizes made so far for this call, one per guard-graph name)."""

    def size(s: torch.SymInt) -> Any:
        node = _node(s)
        if node.const:
            return node.hint
        got = made.get(node.g)
        if got is None:
            v = env.get(node.g, UNKNOWN)
            if v is UNKNOWN:
                raise _Cannot
            got = made[node.g] = torch.SymInt(SymGuard(rec, v, int, node.g))
        return got

    muted, rec.muted = rec.muted, True  # NOTE: building a stand-in asks nothing of user code
    try:
        return _rebuilt(x, size)
    finally:
        rec.muted = muted


def _unseen(func: Any, name: str, what: str, new: Any, old: Any, read: bool) -> str | None:
    """Why user code could tell `new` sizes (or strides) of tensor `name` from the trace's `old`
    ones, or None: they are the same, or user code does not `read` them."""
    if tuple(map(sym_of, new)) == tuple(map(sym_of, old)):
        return None
    # NOTE: a size computed from tensor data (`nonzero`'s) is another one in every run: a trace tells
    data = any(isinstance(v, torch.SymInt) and getattr(v.node, "data", None) is not None for v in (*new, *old))
    if read or data:
        return f"{qualified_name(func)} returns other {what} for {name}" + (", which user code reads" if read else "")
    return None


def _same_meta(a: Any, b: Any) -> bool:
    """The same symbolic sizes, strides, offsets and dtypes (by guard-graph name), leaf for leaf."""
    la, sa = flatten(a)
    lb, sb = flatten(b)
    if sa != sb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            kx = (tuple(map(sym_of, x.shape)), tuple(map(sym_of, x.stride())), sym_of(x.storage_offset()), x.dtype)
            ky = (tuple(map(sym_of, y.shape)), tuple(map(sym_of, y.stride())), sym_of(y.storage_offset()), y.dtype)
            if kx != ky or None in kx[0] or None in kx[1] or kx[2] is None:
                return False
        elif isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)) or \
                isinstance(y, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            vx = sym_of(x) if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)) else x
            vy = sym_of(y) if isinstance(y, (torch.SymInt, torch.SymBool, torch.SymFloat)) else y
            if vx is None or vx != vy:
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
