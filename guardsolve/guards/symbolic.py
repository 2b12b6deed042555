"""Guarded ints as PyTorch SymNodes: every size PyTorch or the user computes is a node, every
decision a `bool_bailout`.

`torch.SymInt(node)` accepts any object with the SymNode protocol
(`torch/fx/experimental/sym_node.py`). Ours holds the concrete value it was traced with (the
hint) and its name in two graphs of its `Recorder`: the guard graph (always) and the tensor
trace (only for what user code computes, outside PyTorch's own shape rules). A user branch
`if x.shape[0] == 1:` records, in the guard graph:

    i0 = int_const(val=1)
    i1 = int_eq(x0, i0)
    bool_bailout(i1, expect=False)
"""

from __future__ import annotations

import functools
import linecache
import operator
import os
import sys
import zlib
from typing import Any, Callable

from torch.fx.experimental.sym_node import SymNode

from guardsolve.errors import DataDependentError, TraceError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import SourceLoc
from guardsolve.ir.ops import Op

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """Is this a frame of guardsolve, torch or Python's own machinery (not user code)?"""
    if filename.startswith("<frozen") or filename.startswith("<string>"):
        return True
    if not filename.startswith("<"):
        filename = os.path.abspath(filename)
    return (filename.startswith(_PACKAGE_DIR + os.sep) or f"{os.sep}torch{os.sep}" in filename
            or f"{os.sep}contextlib.py" in filename)


def call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """Call the traced function; `user_location` looks no further out than this frame."""
    return fn(*args)


_NN_DIR = f"{os.sep}torch{os.sep}nn{os.sep}"


def user_location(memo: dict[tuple[str, int, str], SourceLoc] | None = None) -> SourceLoc | None:
    """The innermost stack frame outside guardsolve and torch, inside the traced call.

    A program that is all torch (`nn.LSTM` traced as it is) has no such frame: then the
    innermost line of `torch.nn` (the module's own call of the op), never the traced
    function's caller (a CLI, a test). `memo` keeps the locations already made (a trace asks
    for the same few lines over and over).
    """
    frame = sys._getframe(1)
    fallback = None
    while frame is not None and frame.f_code is not call_user.__code__:
        filename = frame.f_code.co_filename
        if not is_library_file(filename):
            return _loc(frame, memo)
        if fallback is None and _NN_DIR in filename:
            fallback = frame
        frame = frame.f_back  # type: ignore[assignment]
    return _loc(fallback, memo) if fallback is not None else None


def _loc(frame: Any, memo: dict[tuple[str, int, str], SourceLoc] | None) -> SourceLoc:
    filename, line, function = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
    key = (filename, line, function)
    loc = memo.get(key) if memo is not None else None
    if loc is None:
        loc = SourceLoc(filename, line, function, linecache.getline(filename, line).strip())
        if memo is not None:
            memo[key] = loc
    return loc


_INT_OPS: dict[str, tuple[Op, Callable[[Any, Any], Any]]] = {
    "add": (Op.INT_ADD, operator.add), "sub": (Op.INT_SUB, operator.sub), "mul": (Op.INT_MUL, operator.mul),
    "floordiv": (Op.INT_FLOORDIV, operator.floordiv), "int_floordiv": (Op.INT_FLOORDIV, operator.floordiv),
    "mod": (Op.INT_MOD, operator.mod),
}
_COMPARE: dict[str, tuple[Op, Callable[[Any, Any], bool]]] = {
    "eq": (Op.INT_EQ, operator.eq), "ne": (Op.INT_NE, operator.ne), "lt": (Op.INT_LT, operator.lt),
    "le": (Op.INT_LE, operator.le), "gt": (Op.INT_GT, operator.gt), "ge": (Op.INT_GE, operator.ge),
}
_LOGIC: dict[str, tuple[Op, Callable[[Any, Any], bool]]] = {
    "sym_and": (Op.BOOL_AND, lambda a, b: a and b), "sym_or": (Op.BOOL_OR, lambda a, b: a or b),
    "and_": (Op.BOOL_AND, lambda a, b: a and b), "or_": (Op.BOOL_OR, lambda a, b: a or b),
}
# The recorded binary operations, by SymNode method name.
_BINARY = _INT_OPS | _COMPARE | _LOGIC
# NOTE: the guard graph has no floats: a float computed from a size (`x.shape[-1] ** 0.5`,
# `size / 2`) specializes its int inputs, recording `x == value` the way `int(x)` does.
_FLOAT_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "truediv": operator.truediv, "int_truediv": operator.truediv, "float_truediv": operator.truediv,
    "pow": operator.pow, "float_pow": operator.pow, "pow_by_natural": operator.pow,
    "sym_min": min, "sym_max": max, "lshift": operator.lshift, "rshift": operator.rshift,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
}
_FOLD = {**{k: f for k, (_, f) in _BINARY.items()}, **_FLOAT_OPS}
_TO_FLOAT = frozenset({"truediv", "int_truediv", "float_truediv", "float_pow"})  # a float out of ints
_COMMUTATIVE = frozenset({Op.INT_ADD, Op.INT_MUL, Op.INT_EQ, Op.INT_NE, Op.BOOL_AND, Op.BOOL_OR})
# Ops that fold to a constant when both sides are the same node.
_SELF_TRUE = frozenset({Op.INT_EQ, Op.INT_LE, Op.INT_GE})
_SELF_FALSE = frozenset({Op.INT_NE, Op.INT_LT, Op.INT_GT})
_SELF = _SELF_TRUE | _SELF_FALSE
_DIVIDES = frozenset({Op.INT_FLOORDIV, Op.INT_MOD})


def _identity(op: Op, a: "SymGuard", b: "SymGuard") -> "SymGuard | None":
    """`x + 0`, `x * 1`, `x // 1`, `x % 1`, `x * 0`: exact for Python ints, so PyTorch's
    `1 * size` and `(n - 0) // 1` never reach the guard graph."""
    if a.pytype is not int or b.pytype is not int:
        return None
    if b.const:
        if b.hint == 0 and (op is Op.INT_ADD or op is Op.INT_SUB):
            return a
        if b.hint == 1 and (op is Op.INT_MUL or op is Op.INT_FLOORDIV):
            return a
        if (b.hint == 1 and op is Op.INT_MOD) or (b.hint == 0 and op is Op.INT_MUL):
            return a._wrap(0)
    if a.const:
        if (a.hint == 0 and op is Op.INT_ADD) or (a.hint == 1 and op is Op.INT_MUL):
            return b
        if a.hint == 0 and op is Op.INT_MUL:
            return a._wrap(0)
    return None


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
        self.meta_first = False  # run each op's shape rule before its eager kernel (`solve.paths`' probes)
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
        if op in _COMMUTATIVE and self._order(args[1]) < self._order(args[0]):
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


def _method(name: str) -> Callable[["SymGuard", "SymGuard"], "SymGuard"]:
    """The SymNode method `name` (`add`, `eq`, ...): `_binary` with the op and its Python fold."""
    op, fn = _BINARY[name]

    def method(self: "SymGuard", other: "SymGuard") -> "SymGuard":
        return self._binary(op, fn, other)

    method.__name__ = method.__qualname__ = name
    return method


# What a value `.item()` reads is (the same object in every value computed from one).
ITEM_DATA = "a value .item() or bool(tensor) reads from tensor data"


class SymGuard(SymNode):
    """A PyTorch SymNode whose value is known (the hint) and whose every use is recorded.

    `g` is the name in the guard graph (None for a constant), `t` the name in the tensor
    trace once user code has used it there, `origin` the (tensor, `var_size` / `var_stride` /
    `var_storage_offset`, dim) it was read from.
    """

    # NOTE: a subclass of torch's SymNode only so that torch's `wrap_node` unwraps constants
    # (`x.constant`) into plain Python numbers; nothing of ShapeEnv's node is used.
    @property
    def shape_env(self) -> "_Unbacked | None":
        """Read by torch's helpers: None makes them call guard_bool/_int; an unbacked size's
        (`_Unbacked`) answers `guard_or_false`/`guard_or_true` with their default."""
        return _UNBACKED if self.data is not None else None

    fx_node = None
    hint: Any = None  # NOTE: shadows SymNode's property: a plain attribute, set per node
    data: str | None = None  # set when the value depends on an unbacked size (`Recorder.unbacked`)
    # NOTE: a float inside a shape rule that is an int times an exact fraction (`sym_float(h) *
    # 1.5`): (the int, numerator, denominator), so rounding it is int arithmetic (`_rounded`)
    ratio: tuple[Any, int, int] | None = None
    why: tuple[Any, ...] | None = None  # (op, *args) of a data-dependent value; None for the size itself

    def __init__(self, rec: Recorder, hint: Any, pytype: type, g: str | None, *,
                 origin: tuple[str, Op, int] | None = None, t: str | None = None, const: bool = False):
        self.rec, self.hint, self.pytype, self.g = rec, hint, pytype, g
        self.origin, self.t, self.const = origin, t, const
        self.lazy: Callable[[], None] | None = None

    @property  # type: ignore[override]
    def constant(self) -> Any:
        return self.hint if self.const else None

    @classmethod
    def deferred(cls, rec: Recorder, hint: bool, decide: Callable[[], None]) -> "SymGuard":
        """A bool whose value is known now but whose guards are recorded only when something
        observes it (`decide` records them). PyTorch computes contiguity of every new tensor
        this way; most are never asked."""
        node = cls(rec, hint, bool, None)
        node.lazy = decide
        return node

    def _force(self) -> None:
        if self.lazy is not None:
            decide, self.lazy = self.lazy, None
            decide()
            # NOTE: a float stays "symbolic" for torch (its SymFloat wrapper must keep working);
            # every operation on it pins it, so it never reaches the guard graph.
            self.const = self.pytype is not float

    def __repr__(self) -> str:
        return f"SymGuard({self.g or self.hint}~{self.hint})"

    # -- what torch reads -------------------------------------------------------------------

    @property
    def expr(self) -> Any:
        import sympy

        if self.const or self.g is None:
            return sympy.sympify(self.hint)
        return sympy.Symbol(self.g, integer=self.pytype is int)

    @property
    def _hint(self) -> Any:
        return self.hint

    def has_hint(self) -> bool:
        return self.data is None

    def require_hint(self, fallback: Any = None) -> Any:
        return self.hint

    def is_int(self) -> bool:
        return self.pytype is int

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_float(self) -> bool:
        return self.pytype is float

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def is_symbolic(self) -> bool:
        return not self.const

    def is_constant(self) -> bool:
        return self.const

    def maybe_as_int(self) -> int | None:
        return self.hint if self.const and self.pytype is int else None

    def maybe_as_bool(self) -> bool | None:
        return self.hint if self.const and self.pytype is bool else None

    def maybe_as_float(self) -> float | None:
        return self.hint if self.const and self.pytype is float else None

    def _wrap(self, v: Any) -> "SymGuard":
        # NOTE: a constant node is never changed, so one per int or bool serves the whole trace
        # (floats are not shared: -0.0 == 0.0 as a key)
        key = (type(v), v)
        node = self.rec._consts.get(key)
        if node is None:
            node = SymGuard(self.rec, v, type(v), None, const=True)
            if type(v) is not float:
                self.rec._consts[key] = node
        return node

    wrap_int = wrap_bool = wrap_float = _wrap

    def clone(self) -> "SymGuard":
        return self

    def str(self) -> str:
        """What a message prints for this size: its value, as eager prints it (PyTorch formats
        its checks' messages with `str(SymInt)`); the guard-graph name is internal."""
        return str(self.hint)

    __str__ = str

    def _graph_repr(self) -> str:
        return self.str()

    # -- recorded operations ----------------------------------------------------------------

    def _g(self) -> str:
        return self.rec.g_const(self.hint) if self.const else self.g  # type: ignore[return-value]

    def _traced_data(self) -> bool:
        """Is this a value read from tensor data (`.item()`, a `nonzero` count) that user code
        computes with, in a trace that records value bailouts (`value_guards`)? Then what user
        code computes from it is recorded in the tensor trace alone, and a decision on it is a
        value bailout there: checked on each call's data (a compiled entry splits there into
        segments), never a shape guard."""
        rec = self.rec
        return (self.data is not None and not self.const and rec.value_guards and rec.depth == 0
                and rec.trace is not None and not rec.muted)

    def _pin_at_op(self) -> bool:
        """Decide this value read from data (a count, `.item()`'s value) where the shape rule of
        an op user code called needs it (depth 1: `for row in x.nonzero()` unbinds the count
        into that many tensors, after asking whether it is 0), in a trace that records value
        bailouts: each value read from data that it is computed from is pinned to its value
        now, a value bailout checked on each call's data (a compiled entry cuts there), as
        `int(v)` in user code would. The trace then holds for those values only. False (and
        nothing recorded) where one of them has no name in the trace.

        >>> rec = Recorder(Graph(), value_guards=True)
        >>> u = rec.unbacked("nonzero", 3); u.t = "v0"
        >>> rec.depth = 1
        >>> u.eq(u._wrap(0)).bool_(), u.const, rec.trace.nodes[-1].op.value
        (False, True, 'bool_bailout')
        """
        rec = self.rec
        if not (rec.value_guards and rec.depth == 1 and rec.trace is not None and not rec.muted):
            return False
        leaves: list[SymGuard] = []
        todo: list[Any] = [self]
        while todo:
            n = todo.pop()
            if not isinstance(n, SymGuard) or n.const or n.data is None:
                continue
            if n.t is None and n.origin is None and n.g in rec.data_sizes:
                n.origin = rec.data_sizes[n.g]
            if n.t is not None or n.origin is not None:
                if all(n is not m for m in leaves):
                    leaves.append(n)
            elif n.why is not None and n.why[0] != "range":
                todo.extend(n.why[1:])
            else:
                return False
        if any(n.pytype is not int for n in leaves):
            return False
        for n in leaves:
            n._data_bailout(int(n.hint))
            n.const = True  # NOTE: decided: later arithmetic on it is plain ints
        return True

    def _data_op(self, op: Op, args: tuple["SymGuard", ...], value: Any) -> "SymGuard":
        """`op(*args)` over a value read from data, in the tensor trace only (ints and floats
        alike: the replay evaluates the op in Python).

        >>> rec = Recorder(Graph(), value_guards=True)
        >>> v = rec.unbacked("", 3, ITEM_DATA); v.pytype, v.hint, v.t = float, 0.25, "v0"
        >>> w = v._binary(Op.INT_GT, operator.gt, v._wrap(0))
        >>> w.hint, rec.trace.nodes[-1].op.value
        (True, 'int_gt')
        """
        rec = self.rec
        assert rec.trace is not None
        out = SymGuard(rec, value, type(value), None)
        out.data = next(a.data for a in args if a.data is not None)
        out.t = rec.trace.emit(op, tuple(rec.t_name(a) for a in args), meta={"loc": rec.location()})
        return out

    def _data_bailout(self, expect: Any) -> bool:
        """A decision of user code on a value read from data: a value bailout of the trace.
        Returns the answer the program takes: its own, or, in a trace at other sizes following
        the example's (a probe of `solve.paths`), the example's (the data drawn at those sizes
        must not decide their size guards; the flip is noted for the report)."""
        rec = self.rec
        assert rec.trace is not None
        name = rec.t_name(self)
        pinned = not isinstance(expect, bool)
        if self.pytype is float and not pinned:  # NOTE: `bool(v)` of a float: `v != 0`
            name = rec.trace.emit(Op.INT_NE, (name, rec.t_name(self._wrap(0))), meta={"loc": rec.location()})
        elif pinned:  # NOTE: the value itself pinned (`int(v)`, `float(v)`)
            name = rec.trace.emit(Op.INT_EQ, (name, rec.t_name(self._wrap(expect))), meta={"loc": rec.location()})
            expect = True
        loc = rec.location()
        recorded = None if pinned else recorded_answer(rec.trace)
        if recorded is not None and recorded != expect:
            rec.trace.meta.setdefault("value_flips", []).append(loc)
            expect = recorded
        rec.trace.emit(Op.BOOL_BAILOUT, (name,), meta={"loc": loc}, expect=expect)
        # NOTE: in the guard graph an opaque bool, as `bool(tensor)`'s: a value bailout there too,
        # so reports list it among the decisions shapes cannot check
        rec.g_bailout(rec.guards.emit(Op.BOOL_OPAQUE, (), meta={"loc": loc}, name=name), expect, loc)
        return expect

    def _record(self, op: Op, args: tuple["SymGuard", ...], value: Any) -> "SymGuard":
        rec = self.rec
        for a in args:
            a._force()
        if all(a.const for a in args):
            return self._wrap(value)
        if any(a._traced_data() for a in args):
            return self._data_op(op, args, value)
        loc = rec.location()
        out = SymGuard(rec, value, type(value), rec.g_op(op, tuple(a._g() for a in args), loc))
        out.data = next((a.data for a in args if a.data is not None), None)
        if out.data is not None:
            out.why = (op, *args)
        if rec.depth == 0 and rec.trace is not None:
            out.t = rec.trace.emit(op, tuple(rec.t_name(a) for a in args), meta={"loc": loc})
        return out

    def _binary(self, op: Op, fn: Callable[[Any, Any], Any], other: "SymGuard") -> "SymGuard":
        """`self op other`, recorded; the hot path of every shape rule, so written out flat."""
        if (self.data is not None or other.data is not None) and (self._traced_data() or other._traced_data()):
            self._force()
            other._force()
            return self._data_op(op, (self, other), fn(self.hint, other.hint))
        if self.pytype is float or other.pytype is float:
            return self._float(fn, other)
        if self.lazy is not None:
            self._force()
        if other.lazy is not None:
            other._force()
        if self.const or other.const:
            if self.const and other.const:
                return self._wrap(fn(self.hint, other.hint))
            same = _identity(op, self, other)
            if same is not None:
                return same
        elif self.g == other.g and op in _SELF:
            return self._wrap(op in _SELF_TRUE)
        rec = self.rec
        if rec.depth:
            if op in _DIVIDES and not other.const:
                cancelled = self._cancel(other, op is Op.INT_MOD)
                if cancelled is not None:
                    return cancelled
            key = (op, self.g if not self.const else rec.g_const(self.hint),
                   other.g if not other.const else rec.g_const(other.hint))
            out = rec._results.get(key)
            if out is None:
                value = fn(self.hint, other.hint) if not (self.data or other.data) else _stand_in(fn, self, other)
                out = rec._results[key] = SymGuard(rec, value, type(value), rec.g_op(op, key[1:], rec.loc))
                out.data = self.data or other.data
                if out.data is not None:
                    out.why = (op, self, other)
            return out
        return self._record(op, (self, other), fn(self.hint, other.hint))  # NOTE: user code: `% 0` raises

    def _cancel(self, den: "SymGuard", mod: bool) -> "SymGuard | None":
        """`(a*b) // a` is `b` and `(a*b) % a` is `0` once `a != 0` (which the division needs
        anyway, so the guard says the same). PyTorch's view rules divide numels by the sizes
        they are products of; folding keeps a reshaped size the very name it came from."""
        rec = self.rec
        if self.const or self.g is None or den.g is None or den.hint == 0 or self.data or den.data:
            return None
        num, rest = rec.factors(self.g), rec.factors(den.g)
        for f in rest:
            if f not in num:
                return None
            num.remove(f)
        den.ne(self._wrap(0)).guard_bool("", 0)
        if mod:
            return self._wrap(0)
        hint = self.hint // den.hint
        if not num:
            return self._wrap(1)
        g = num[0]
        for f in num[1:]:
            g = rec.g_op(Op.INT_MUL, (g, f), rec.location())
        return SymGuard(rec, hint, int, g)

    add = _method("add")
    sub = _method("sub")
    mul = _method("mul")
    floordiv = int_floordiv = _method("floordiv")
    mod = _method("mod")
    eq = _method("eq")
    ne = _method("ne")
    lt = _method("lt")
    le = _method("le")
    gt = _method("gt")
    ge = _method("ge")
    sym_and = _method("sym_and")
    sym_or = _method("sym_or")

    def and_(self, o: "SymGuard") -> "SymGuard":
        return self._binary(Op.BOOL_AND, _FOLD["and_"], o) if self.pytype is bool else self._specialized("bitwise_and", o)

    def or_(self, o: "SymGuard") -> "SymGuard":
        return self._binary(Op.BOOL_OR, _FOLD["or_"], o) if self.pytype is bool else self._specialized("bitwise_or", o)

    def sym_not(self) -> "SymGuard":
        return self._record(Op.BOOL_NOT, (self,), not self.hint)

    def neg(self) -> "SymGuard":
        return self._wrap(0).sub(self)

    def pos(self) -> "SymGuard":
        return self

    def sym_sum(self, args: list["SymGuard"]) -> "SymGuard":
        total = self._wrap(0)
        for a in args:
            total = total.add(a)
        return total

    # -- specializing operations (a guard that pins the branch taken) ------------------------

    def _specialized(self, name: str, other: "SymGuard") -> "SymGuard":
        if name in ("sym_min", "sym_max"):
            if (self.data or other.data) and _static(self.le(other)) is None:
                return self._extremum(name, other)
            keep_self = (self.le(other) if name == "sym_min" else self.ge(other)).guard_bool("", 0)
            return self if keep_self else other
        if name in _TO_FLOAT or self.pytype is float or other.pytype is float:
            return self._float(_FOLD[name], other)
        return self._wrap(_FOLD[name](self._pin(), other._pin()))

    def _float(self, fn: Callable[[Any, Any], Any], other: "SymGuard") -> "SymGuard":
        """`fn(self, other)` where a float takes part: pinned in user code (the trace has no
        floats); inside a shape rule, a float (or a comparison of one) that pins its sizes only
        once something reads its value. A rule often computes a float it never reads for the
        shape (`pinv`'s default `rtol = eps * max(m, n)`, an `upsample`'s `scale = in / out` for
        its indices): the sizes stay free.

        >>> from guardsolve.ir.ops import Op
        >>> rec = Recorder(None); x = rec.input_dim("x0", 6, Op.INT_PLACEHOLDER, None, 0)
        >>> rec.depth = 1; quarter = x.truediv(x._wrap(4))
        >>> bailouts = lambda: [n for n in rec.guards.nodes if n.op is Op.BOOL_BAILOUT]
        >>> quarter.hint, bailouts()
        (1.5, [])
        >>> quarter.floor().hint, len(bailouts())  # reading it pins x0
        (1, 1)
        """
        if (self.data or other.data) and self.rec.depth and not (self.const and other.const):
            # NOTE: inside a rule (or a saved trace's replay): a float of data (the trace's
            # comparison of `.item()`) stays data; only a decision on it would raise
            out = SymGuard(self.rec, _stand_in(fn, self, other), float, None)
            out.pytype = type(out.hint)
            out.data = self.data or other.data
            return out
        if self.rec.depth == 0 or (self.const and other.const) or self.data or other.data:
            return self._wrap(fn(self._pin(), other._pin()))
        try:
            value = fn(self.hint, other.hint)
        except ArithmeticError:  # NOTE: `1 / sqrt(0)`: the failure is decided by these values
            self._pin()
            other._pin()
            raise
        node = SymGuard(self.rec, value, type(value), None)

        def pin() -> None:
            self._pin()
            other._pin()

        node.lazy = pin
        node.ratio = _scaled(fn, self, other)
        return node

    def _extremum(self, name: str, other: "SymGuard") -> "SymGuard":
        """`min`/`max` of an unbacked size that no bound decides (PyTorch keeps `Max(u0, 1)`
        symbolic; its contiguity checks take it): a fresh unbacked value within their bounds."""
        pick = min if name == "sym_min" else max
        out = self.rec.unbacked("", pick(self.hint, other.hint))
        out.data = self.data or other.data
        ra, rb = _range(self), _range(other)
        if ra is not None and rb is not None:
            out.why = ("range", pick(ra[0], rb[0]), pick(ra[1], rb[1]))
        else:
            out.why = ("range", -_INF, _INF)
        return out

    def _pin(self) -> Any:
        self._force()
        if self.data is not None and not self.const:
            if self._traced_data() and self.hint == self.hint:  # NOTE: NaN equals no value
                self._data_bailout(self.hint)
                return self.hint
            raise self._data_dependent()  # NOTE: a float of tensor data: the trace has no float ops
        if self.const or self.pytype is float:
            return self.hint
        if self.pytype is bool:
            return self.guard_bool("", 0)
        return self.guard_int("", 0)

    def truediv(self, o: "SymGuard") -> "SymGuard": return self._specialized("truediv", o)
    def int_truediv(self, o: "SymGuard") -> "SymGuard": return self._specialized("int_truediv", o)
    def float_truediv(self, o: "SymGuard") -> "SymGuard": return self._specialized("float_truediv", o)
    def pow(self, o: "SymGuard") -> "SymGuard": return self._specialized("pow", o)
    def float_pow(self, o: "SymGuard") -> "SymGuard": return self._specialized("float_pow", o)
    def pow_by_natural(self, o: "SymGuard") -> "SymGuard": return self._specialized("pow_by_natural", o)
    def sym_min(self, o: "SymGuard") -> "SymGuard": return self._specialized("sym_min", o)
    def sym_max(self, o: "SymGuard") -> "SymGuard": return self._specialized("sym_max", o)
    def lshift(self, o: "SymGuard") -> "SymGuard": return self._specialized("lshift", o)
    def rshift(self, o: "SymGuard") -> "SymGuard": return self._specialized("rshift", o)
    def bitwise_and(self, o: "SymGuard") -> "SymGuard": return self._specialized("bitwise_and", o)
    def bitwise_or(self, o: "SymGuard") -> "SymGuard": return self._specialized("bitwise_or", o)
    def bitwise_xor(self, o: "SymGuard") -> "SymGuard": return self._specialized("bitwise_xor", o)

    def sym_float(self) -> "SymGuard":
        """A float that pins this int (`x == value`) once anything computes with it."""
        if self.const or self.pytype is float:
            return self._wrap(float(self.hint))
        node = SymGuard(self.rec, float(self.hint), float, None)
        node.lazy = lambda: self._pin() and None
        if self.data is None and self.rec.depth:
            node.ratio = (self, 1, 1)
        return node

    def sym_int(self) -> "SymGuard":
        return self if self.pytype is int else self._rounded("trunc") or self._wrap(int(self._pin()))

    def _unary_float(self, fn: Callable[[Any], Any]) -> "SymGuard":
        return self if self.pytype is int else self._wrap(fn(self._pin()))

    def _rounded(self, how: str) -> "SymGuard | None":
        """`floor`/`ceil`/`trunc` of an int times an exact small fraction (`int(h * 1.5)`, an
        upsample's output size, is `(h * 3) // 2`) as int arithmetic, no pin; None otherwise.
        Recorded with two guards: the int is >= 0 (a size always is) and small enough that the
        double product PyTorch computes is exact (`h * 3 < 2**53`).

        >>> from guardsolve.ir.ops import Op
        >>> rec = Recorder(None); h = rec.input_dim("h", 7, Op.INT_PLACEHOLDER, None, 0)
        >>> rec.depth = 1; f = h.sym_float().mul(h._wrap(1.5)); out = f.trunc()
        >>> out.hint, out.pytype.__name__, out.const, f.trunc().const
        (10, 'int', False, False)
        >>> pins = lambda: [n for n in rec.guards.nodes if n.op is Op.INT_EQ]
        >>> len(pins()), f.guard_float("", 0), len(pins())  # reading the float itself pins h
        (0, 10.5, 1)
        """
        if self.ratio is None or self.rec.depth == 0:
            return None
        src, num, den = self.ratio
        wrap = src._wrap
        src.ge(wrap(0)).guard_bool("", 0)
        src.le(wrap((2 ** 53 - 1) // num)).guard_bool("", 0)
        # NOTE: the float itself stays unread: a rule that reads it later still pins the int
        scaled = src.mul(wrap(num)) if num != 1 else src
        if how == "ceil":
            return wrap(0).sub(wrap(0).sub(scaled).floordiv(wrap(den)))
        return scaled.floordiv(wrap(den)) if den != 1 else scaled

    def floor(self) -> "SymGuard":
        import math

        return self._rounded("floor") or self._unary_float(math.floor)

    def ceil(self) -> "SymGuard":
        import math

        return self._rounded("ceil") or self._unary_float(math.ceil)

    def trunc(self) -> "SymGuard":
        return self._rounded("trunc") or self._unary_float(int)

    def round(self, ndigits: int | None = None) -> "SymGuard":
        return self._unary_float(lambda v: round(v, ndigits))

    def is_integer(self) -> "SymGuard":
        return self._wrap(self.pytype is int or float(self._pin()).is_integer())

    def abs(self) -> "SymGuard":
        return self if self.ge(self._wrap(0)).guard_bool("", 0) else self.neg()

    def sym_ite(self, then_val: "SymGuard", else_val: "SymGuard") -> "SymGuard":
        return then_val if self.guard_bool("", 0) else else_val

    def is_contiguous(self, sizes: list["SymGuard"], strides: list["SymGuard"]) -> "SymGuard":
        """PyTorch's contiguity rule (`_compute_contiguous`), each decision a guard once observed."""
        return self._deferred(sizes, strides, _contiguous)

    def is_non_overlapping_and_dense_indicator(self, sizes: list["SymGuard"], strides: list["SymGuard"]) -> "SymGuard":
        return self._deferred(sizes, strides, _non_overlapping_and_dense, int)

    def _deferred(self, sizes: list["SymGuard"], strides: list["SymGuard"],
                  rule: Callable[[list[Any], list[Any]], bool], as_type: type = bool) -> "SymGuard":
        hint = rule([s.hint for s in sizes], [s.hint for s in strides])
        if all(s.const for s in sizes) and all(s.const for s in strides):
            return self._wrap(as_type(hint))
        rec = self.rec

        def decide() -> None:
            if not rec.muted:
                rec.layout_observed = True
            rule([_Observed(s) for s in sizes], [_Observed(s) for s in strides])

        if as_type is int:  # NOTE: an int indicator is compared, not guarded: decide now
            decide()
            return self._wrap(int(hint))
        return SymGuard.deferred(rec, hint, decide)

    # -- guards: the value is observed, so the branch is recorded ----------------------------

    def guard_bool(self, file: str, line: int) -> bool:
        self._force()
        if self.data is not None and self._traced_data():
            # NOTE: a count (`nonzero`'s) is >= 0, as `_static` assumes; a value `.item()` read
            # may be anything: every decision user code makes on it is a bailout
            known = _static(self) if self.pytype is not float and self.data is not ITEM_DATA else None
            return self._data_bailout(bool(self.hint)) if known is None else known
        if self.pytype is float:  # NOTE: `bool(x)` of a float: forcing it pinned its sizes
            return bool(self.hint)
        if self.data is not None:
            known = _static(self)
            if known is None and self._pin_at_op():
                return bool(self.hint)
            if known is None:
                raise self._data_dependent()
            return known  # NOTE: true (or false) for every value of the unbacked sizes: no guard
        if not self.const:
            rec = self.rec
            loc = rec.location()
            rec.g_bailout(self._g(), bool(self.hint), loc)
            if rec.depth == 0 and rec.trace is not None and not rec.muted:
                rec.trace.emit(Op.BOOL_BAILOUT, (rec.t_name(self),), meta={"loc": loc}, expect=bool(self.hint))
        return bool(self.hint)

    def guard_int(self, file: str, line: int) -> int:
        if self.data is not None and not self.const and self._pin_at_op():
            return int(self.hint)
        if not self.const:
            self.eq(self._wrap(self.hint)).guard_bool(file, line)
        return self.hint

    def guard_float(self, file: str, line: int) -> float:
        return float(self._pin())

    def bool_(self) -> bool:
        return self.guard_bool("", 0)

    def int_(self) -> int:
        return self.guard_int("", 0)

    def _data_dependent(self) -> DataDependentError:
        loc = self.rec.location()
        at = f" — {loc}" if loc is not None else ""
        hint = ("; pass value_guards=True to trace() or guarded() (--value-guards on the command line) to record a value "
                "bailout instead" if self.data is ITEM_DATA else "")
        return DataDependentError(f"a shape decision depends on {self.data}; shape guards cannot check "
                                  f"it{at}{hint}")

    # NOTE: a value with a hint is observed, so these record a guard; an unbacked size's
    # decisions raise (`guard_bool`).
    guard_size_oblivious = guard_bool

    def expect_true(self, file: str, line: int) -> bool:
        """PyTorch's checks that its kernels assert (`TORCH_SYM_CHECK`): observed like any guard.
        On an unbacked size it is assumed, as PyTorch defers it to a runtime assert: the eager
        kernel a replay runs makes the same check."""
        self._force()
        if self.data is None:
            return self.guard_bool(file, line)
        rec = self.rec
        if rec.depth == 0 and rec.trace is not None and not rec.muted and self.t is not None:
            # NOTE: a check outside any op (a C++ composite's, `narrow`'s bounds on a start
            # read by `.item()`): no eager kernel of the trace makes it, so the trace does,
            # as a runtime check each replay runs (a value bailout, never a shape guard). The
            # value is eager's: a failing check raises now, with PyTorch's own message.
            rec.trace.emit(Op.BOOL_BAILOUT, (self.t,), meta={"loc": rec.location()}, expect=True)
            return bool(self.hint)
        return True

    expect_size = expect_true

    # NOTE: PyTorch may answer these without a guard (for sizes it has no value of); with a
    # value at hand the answer is observed, so re-tracing at other sizes takes the same path
    # exactly when the guards hold. Without one (an unbacked size) PyTorch's contract holds:
    # the branch taken is valid whatever the value, so no guard is needed.
    def guard_or_false(self, file: str, line: int) -> bool:
        self._force()
        return False if self.data is not None else self.guard_bool(file, line)

    def guard_or_true(self, file: str, line: int) -> bool:
        self._force()
        return True if self.data is not None else self.guard_bool(file, line)

    def statically_known_true(self, file: str, line: int) -> bool:
        return bool(self.const and self.hint)


class _Unbacked:
    """The part of PyTorch's ShapeEnv its helpers ask of an expression over an unbacked size.

    `guard_or_false(e)` / `guard_or_true(e)` (`symbolic_shapes._guard_or`) pass the default
    as `fallback_value`: by PyTorch's contract the branch it picks is valid whatever the value,
    so it needs no guard. Any other decision raises DataDependentError naming the user's line.
    """

    def evaluate_sym_node(self, node: "SymGuard", size_oblivious: bool = False, fallback_value: bool | None = None) -> bool:
        known = _static(node)
        if known is not None:
            return known
        if fallback_value is not None:
            return fallback_value
        raise node._data_dependent()

    def is_unbacked_symint(self, expr: Any) -> bool:
        return True


_UNBACKED = _Unbacked()  # NOTE: stateless
_INF = float("inf")


def recorded_answer(trace: Graph) -> bool | None:
    """The answer the trace being followed recorded for the decision on data about to be
    recorded (a probe traces against the example's nodes, `tracer._Expecting`), or None."""
    expect = getattr(trace, "expect", None)
    if expect is None or len(trace.nodes) >= len(expect):
        return None
    node = expect[len(trace.nodes)]
    return bool(node.params["expect"]) if node.op is Op.BOOL_BAILOUT else None


_MAX_NUM = 1 << 20  # NOTE: a fraction's numerator and denominator at most this: the product stays exact


def _scaled(fn: Callable[[Any, Any], Any], a: SymGuard, b: SymGuard) -> tuple[Any, int, int] | None:
    """`a op b` as (int, numerator, denominator) where one side is an int times a fraction
    (`SymGuard.ratio`) and the other a constant exact fraction, op a product or a quotient."""
    import operator as op

    if a.ratio is None or not b.const or isinstance(b.hint, bool) or not isinstance(b.hint, (int, float)):
        if b.ratio is not None and a.const and fn is op.mul:
            return _scaled(fn, b, a)
        return None
    src, num, den = a.ratio
    try:
        n, d = float(b.hint).as_integer_ratio()
    except (OverflowError, ValueError):  # NOTE: inf, nan
        return None
    if n <= 0:
        return None
    if fn is op.mul:
        num, den = num * n, den * d
    elif fn is op.truediv:
        num, den = num * d, den * n
    else:
        return None
    from math import gcd

    g = gcd(num, den)
    num, den = num // g, den // g
    return (src, num, den) if num <= _MAX_NUM and den <= _MAX_NUM else None


def _stand_in(fn: Callable[[Any, Any], Any], a: SymGuard, b: SymGuard) -> Any:
    """The hint of an operation on an unbacked size inside a shape rule: only further
    arithmetic sees it (every decision on it raises or holds for all values), so a zero
    divisor (an empty `nonzero`) gives 0 where eager has nothing to divide."""
    try:
        return fn(a.hint, b.hint)
    except ZeroDivisionError:
        return 0


def _range(n: SymGuard) -> tuple[float, float] | None:
    """Bounds on an int that hold for every value of the unbacked sizes in it (each >= 0),
    or None: sums, differences and products of them and constants (PyTorch's value ranges)."""
    if n.const:
        return (n.hint, n.hint)
    if n.data is None:
        return None
    if n.why is None:
        return (0, _INF)
    if n.why[0] == "range":
        return n.why[1], n.why[2]
    op, *args = n.why
    if len(args) != 2:
        return None
    ra, rb = _range(args[0]), _range(args[1])
    if ra is None or rb is None:
        return None
    if op is Op.INT_ADD:
        return (ra[0] + rb[0], ra[1] + rb[1])
    if op is Op.INT_SUB:
        return (ra[0] - rb[1], ra[1] - rb[0])
    if op is Op.INT_MUL and ra[0] >= 0 and rb[0] >= 0:
        return (ra[0] * rb[0], 0 if 0 in (ra[1], rb[1]) else ra[1] * rb[1])
    return None


def _static(n: SymGuard) -> bool | None:
    """A data-dependent bool's value when every value of its unbacked sizes gives the same one.

    `u0 < 0` is False and `u0 + 1 != 0` True for every size u0; `u0 == 1` is unknown (None).
    """
    if n.const:
        return bool(n.hint)
    if n.why is None:
        return None
    op, *args = n.why
    if op is Op.BOOL_NOT:
        v = _static(args[0])
        return None if v is None else not v
    if op is Op.BOOL_AND or op is Op.BOOL_OR:
        a, b = _static(args[0]), _static(args[1])
        short = op is Op.BOOL_OR  # NOTE: the value that decides the whole (True for or)
        if short in (a, b):
            return short
        return (not short) if a is not None and b is not None else None
    ra, rb = (_range(args[0]), _range(args[1])) if len(args) == 2 else (None, None)
    if ra is None or rb is None:
        return None
    (a0, a1), (b0, b1) = ra, rb
    if op is Op.INT_LT or op is Op.INT_GE:
        lt = True if a1 < b0 else False if a0 >= b1 else None
        return lt if op is Op.INT_LT or lt is None else not lt
    if op is Op.INT_LE or op is Op.INT_GT:
        le = True if a1 <= b0 else False if a0 > b1 else None
        return le if op is Op.INT_LE or le is None else not le
    if op is Op.INT_EQ or op is Op.INT_NE:
        eq = False if a1 < b0 or b1 < a0 else True if a0 == a1 == b0 == b1 else None
        return eq if op is Op.INT_EQ or eq is None else not eq
    return None


class _Observed:
    """A size or stride whose comparisons are guards (for the contiguity rules below)."""

    __slots__ = ("node",)

    def __init__(self, node: SymGuard):
        self.node = node

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        o = other.node if isinstance(other, _Observed) else self.node._wrap(other)
        return self.node.eq(o).guard_bool("", 0)

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        return not self == other

    def __lt__(self, other: object) -> bool:
        o = other.node if isinstance(other, _Observed) else self.node._wrap(other)
        return self.node.lt(o).guard_bool("", 0)

    def __mul__(self, other: Any) -> "_Observed":
        o = other.node if isinstance(other, _Observed) else self.node._wrap(other)
        return _Observed(self.node.mul(o))

    __rmul__ = __mul__
    __hash__ = None  # type: ignore[assignment]


def _contiguous(sizes: list[Any], strides: list[Any]) -> bool:
    """`TensorImpl::compute_contiguous`: works on ints and on `_Observed` alike."""
    expected: Any = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size == 0:
            return True
        if size == 1:
            continue
        if stride != expected:
            return False
        expected = size * expected
    return True


def _non_overlapping_and_dense(sizes: list[Any], strides: list[Any]) -> bool:
    """`TensorImpl::compute_non_overlapping_and_dense`: dims sorted by stride must tile densely."""
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    order = sorted(range(len(sizes)), key=lambda i: (_hint(strides[i]), _hint(sizes[i])))
    expected: Any = 1
    for i in order:
        if sizes[i] == 1:
            continue
        if strides[i] != expected:
            return False
        expected = sizes[i] * expected
    return True


def _hint(v: Any) -> Any:
    return v.node.hint if isinstance(v, _Observed) else v
