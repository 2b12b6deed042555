"""`Recorder`: the trace and guard graph being built, and what every `SymGuard` of one trace shares."""

from __future__ import annotations

import zlib
from typing import Any
from guardsolve.errors import TraceError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import SourceLoc
from guardsolve.ir.ops import Op
from guardsolve.guards.location import user_location
from guardsolve.guards.sym_tables import COMMUTATIVE
from guardsolve.guards.symbolic import SymGuard



class Recorder:
    """The state of one trace: the guard graph, the tensor trace, and where user code is.

    `trace` is None while replaying a saved trace (only guards are recorded then). Guard-graph
    nodes are hash-consed (`int_eq(a0, b0)` twice is one node), and a bailout repeated on the
    same user line is recorded once.
    """

    def __init__(self, trace: Graph | None, value_guards: bool = False) -> None:
        self.guards = Graph()
        self.trace = trace
        self.value_guards = value_guards
        self.unbacked_at = 0  # NOTE: `_unbacked` as the op in progress began (did it count a size from data?)
        self.depth = 0  # > 0 inside PyTorch's shape rules for one op
        self.loc: SourceLoc | None = None  # the user line of the torch call in progress
        self.op: Any = None  # the torch op in progress (its shape rule asks the questions)
        self._locs: dict[tuple[str, int, str], SourceLoc] = {}  # user lines seen, for `user_location`
        self._memo: dict[tuple[Any, ...], str] = {}
        # NOTE: inside shape rules (depth > 0) an operation on the same guard-graph names gives
        # the same node: its result is kept, so a repeated size computation is one lookup
        self._results: dict[tuple[Any, ...], "SymGuard"] = {}
        self._consts: dict[tuple[type, Any], "SymGuard"] = {}  # constant nodes, by type and value
        # NOTE: a deterministic structural key per guard-graph name, to order the operands of
        # commutative ops the same way in every trace (names depend on creation order)
        self._shape: dict[str, tuple[int, int]] = {}
        self._seen: set[tuple[str, bool, Any]] = set()
        self._trace_consts: dict[tuple[type, Any], str] = {}
        self._sizes: dict[tuple[str, Op], str] = {}
        self.extra: dict[str, Any] = {}  # more meta for guard nodes (the trace line, on replay)
        self.muted = False  # True while guardsolve itself builds the inputs' meta tensors
        self.capture: list[tuple[str, bool]] | None = None  # bailouts of the shape rule running now
        # NOTE: each torch call of the trace, with its meta inputs and outputs and the decisions its
        # rule made (`trace.local`: a probe replays only the calls whose decisions change)
        self.calls: list[Any] | None = None
        self.pending: Any = None  # the meta call of the torch call in progress (`TracingMode._meta_call`)
        self.local_blocked: str | None = None  # why replaying single calls cannot stand in for a trace
        self.user_at: list[tuple[int, str, bool]] = []  # the user's decisions, each before call N
        self.products: dict[str, tuple[str, str]] = {}  # int_mul nodes of the guard graph, by name
        # NOTE: a size an op counted from data, by its guard-graph name: the first traced tensor
        # (name, dim) that has it, so a shape rule that needs its value can name it (`_pin_at_op`)
        self.data_sizes: dict[str, tuple[str, Op, int]] = {}
        self.rules: Any = None  # PyTorch's shape rules for this trace (a `rules.RuleCache`)
        self.real: Any = None  # eager's output of the op whose shape rule runs now (tracing only)
        self.meta_first = False  # run each op's shape rule before its eager kernel (`solve.explore`' probes)
        self._unbacked = 0  # unbacked sizes made so far (their names: u0, u1, ...)
        # NOTE: what the trace assumed about the inputs' memory layout (a cache must check it):
        # a contiguity decision or a view was made, or user code read a stride's value.
        self.layout_observed = False
        self.strides_read = False
        self.user_layout = False  # user code asked a tensor's strides, offset or contiguity (`TracedTensor`)
        # NOTE: an eager output was copied into the strides its shape rule gives (`tensor._laid_out_as`):
        # the trace's own outputs may then be laid out otherwise than eager's (a channels-last conv)
        self.relaid = False
        self.sizes_seen: set[str] = set()  # tensors whose sizes user code asked, constant ones too (`TracedTensor`)

    # -- locations --------------------------------------------------------------------------

    def location(self) -> SourceLoc | None:
        """The user line of what is being recorded: the torch call in progress inside a shape
        rule, else the innermost user frame."""
        return self.loc if self.depth else user_location(self._locs)

    # -- guard graph ------------------------------------------------------------------------

    def g_const(self, v: int | bool) -> str:
        key = ("const", type(v), v)
        name = self._memo.get(key)
        if name is None:
            op = Op.BOOL_CONST if isinstance(v, bool) else Op.INT_CONST
            name = self._memo[key] = self.guards.emit(op, (), val=v)
            self._shape[name] = (1, zlib.crc32(repr(v).encode()))
        return name

    def _order(self, g: str) -> tuple[int, int]:
        return self._shape.get(g) or (0, zlib.crc32(g.encode()))

    def g_op(self, op: Op, args: tuple[str, ...], loc: SourceLoc | None) -> str:
        if op in COMMUTATIVE and self._order(args[1]) < self._order(args[0]):
            args = (args[1], args[0])  # NOTE: `a*b` and `b*a` are one node; constants go right
        key = (op, *args)
        name = self._memo.get(key)
        if name is None:
            name = self._memo[key] = self.guards.emit(op, args, meta={"loc": loc, **self.extra})
            parts = [op.value, *(str(self._order(a)) for a in args)]
            self._shape[name] = (0, zlib.crc32("|".join(parts).encode()))
            if op is Op.INT_MUL:
                self.products[name] = args
        return name

    def factors(self, g: str) -> list[str]:
        """The guard-graph names whose product `g` is (itself when it is no product)."""
        args = self.products.get(g)
        return [g] if args is None else self.factors(args[0]) + self.factors(args[1])

    def g_bailout(self, g: str, expect: bool, loc: SourceLoc | None) -> None:
        if self.muted:
            return
        if self.capture is not None:
            self.capture.append((g, expect))
        user = not self.depth and self.trace is not None
        # NOTE: a decision of the user's code is kept apart from the same one an op's rule made
        # on the same line: the trace records the user's (a probe that answers it otherwise
        # records another trace, known without tracing again: `paths._user_decisions`)
        key = (g, expect, (loc.file, loc.line) if loc is not None else None, user)
        if key not in self._seen:
            self._seen.add(key)
            meta = {"loc": loc, **self.extra}
            if self.depth and self.op is not None:
                meta["op"] = str(self.op)
            elif user:
                meta["user"] = True  # NOTE: outside any op: the trace records this decision too
                if self.calls is not None:
                    self.user_at.append((len(self.calls), g, expect))  # NOTE: made before that call
            self.guards.emit(Op.BOOL_BAILOUT, (g,), meta=meta, expect=expect)

    # -- tensor trace -----------------------------------------------------------------------

    def t_name(self, node: "SymGuard") -> str:
        """The node's name in the tensor trace, defining it from its origin on first use."""
        assert self.trace is not None
        if node.t is not None:
            return node.t
        if node.const:
            key = (type(node.hint), node.hint)  # NOTE: True == 1, but not as a trace constant
            name = self._trace_consts.get(key)
            if name is None:
                op = Op.BOOL_CONST if isinstance(node.hint, bool) else Op.INT_CONST
                name = self._trace_consts[key] = self.trace.emit(op, (), val=node.hint)
            return name
        if node.origin is None:
            raise TraceError(f"the symbolic value {node.g} (= {node.hint}) was computed inside a PyTorch op "
                             "and reached user code without a tensor that carries it; guardsolve cannot trace that")
        tensor, kind, index = node.origin
        if kind is not Op.VAR_SIZE:
            self.strides_read = True
        # NOTE: the user's line of the read, so a probe that reads another size is named by it
        meta = {"loc": self.location()}
        if kind is Op.VAR_STORAGE_OFFSET:
            node.t = self.trace.emit(kind, (tensor,), meta=meta)
            return node.t
        sizes = self._sizes.get((tensor, kind))
        if sizes is None:
            sizes = self._sizes[(tensor, kind)] = self.trace.emit(kind, (tensor,), meta=meta)
        node.t = self.trace.emit(Op.SIZE_INDEX, (sizes,), meta=meta, index=index)
        return node.t

    def unbacked(self, what: str, hint: int, data: str | None = None) -> "SymGuard":
        """A fresh size that an op computes from tensor data (`what` says which op, for errors).

        It has no value any guard could check at entry: observing it (or anything computed
        from it) raises DataDependentError, and its node never reaches a bailout. Its hint
        is eager's value while tracing (eager calls get it as an argument), a stand-in when
        a saved trace is reinterpreted. `data` replaces the description errors give.
        """
        name = f"u{self._unbacked}"
        self._unbacked += 1
        g = self.guards.emit(Op.INT_UNBACKED, (), name=name)
        node = SymGuard(self, hint, int, g)
        node.data = data or f"{name}, the size {what} computes from tensor data"
        return node

    def input_dim(self, name: str, hint: int, kind: Op, tensor: str | None, index: int) -> "SymGuard":
        """A placeholder dim `name` of the guard graph; its example value goes to `meta["example"]`
        (every recorded bailout holds there, so simplify starts from it instead of a solver model)."""
        self.guards.emit(kind, (), out=name, name=name)
        self.guards.meta.setdefault("example", {})[name] = hint
        return SymGuard(self, hint, int, name, origin=(tensor, Op.VAR_SIZE, index) if tensor is not None else None,
                        t=name if tensor is None else None)
