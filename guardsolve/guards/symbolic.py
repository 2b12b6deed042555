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

from typing import TYPE_CHECKING, Any, Callable
from torch.fx.experimental.sym_node import SymNode
from guardsolve.errors import DataDependentError
from guardsolve.ir.ops import Op
from guardsolve.guards.specializing import SpecializingOps
from guardsolve.guards.sym_facts import UNBACKED, UnbackedEnv, recorded_answer, stand_in, static
from guardsolve.guards.sym_tables import BINARY, DIVIDES, FOLD, SELF, SELF_TRUE, identity

if TYPE_CHECKING:
    from guardsolve.guards.recorder import Recorder


def _method(name: str) -> Callable[["SymGuard", "SymGuard"], "SymGuard"]:
    """The SymNode method `name` (`add`, `eq`, ...): `_binary` with the op and its Python fold."""
    op, fn = BINARY[name]

    def method(self: "SymGuard", other: "SymGuard") -> "SymGuard":
        return self._binary(op, fn, other)

    method.__name__ = method.__qualname__ = name
    return method


# What a value `.item()` reads is (the same object in every value computed from one).
ITEM_DATA = "a value .item() or bool(tensor) reads from tensor data"


class SymGuard(SpecializingOps, SymNode):
    """A PyTorch SymNode whose value is known (the hint) and whose every use is recorded.

    `g` is the name in the guard graph (None for a constant), `t` the name in the tensor
    trace once user code has used it there, `origin` the (tensor, `var_size` / `var_stride` /
    `var_storage_offset`, dim) it was read from.
    """

    # NOTE: a subclass of torch's SymNode only so that torch's `wrap_node` unwraps constants
    # (`x.constant`) into plain Python numbers; nothing of ShapeEnv's node is used.
    @property
    def shape_env(self) -> "UnbackedEnv | None":
        """Read by torch's helpers: None makes them call guard_bool/_int; an unbacked size's
        (`UnbackedEnv`) answers `guard_or_false`/`guard_or_true` with their default."""
        return UNBACKED if self.data is not None else None

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

        >>> from guardsolve.guards.recorder import Recorder
        >>> from guardsolve.ir.graph import Graph
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

        >>> from guardsolve.guards.recorder import Recorder
        >>> from guardsolve.ir.graph import Graph
        >>> import operator
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
        the example's (a probe of `solve.explore`), the example's (the data drawn at those sizes
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
            same = identity(op, self, other)
            if same is not None:
                return same
        elif self.g == other.g and op in SELF:
            return self._wrap(op in SELF_TRUE)
        rec = self.rec
        if rec.depth:
            if op in DIVIDES and not other.const:
                cancelled = self._cancel(other, op is Op.INT_MOD)
                if cancelled is not None:
                    return cancelled
            key = (op, self.g if not self.const else rec.g_const(self.hint),
                   other.g if not other.const else rec.g_const(other.hint))
            out = rec._results.get(key)
            if out is None:
                value = fn(self.hint, other.hint) if not (self.data or other.data) else stand_in(fn, self, other)
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
        return self._binary(Op.BOOL_AND, FOLD["and_"], o) if self.pytype is bool else self._specialized("bitwise_and", o)

    def or_(self, o: "SymGuard") -> "SymGuard":
        return self._binary(Op.BOOL_OR, FOLD["or_"], o) if self.pytype is bool else self._specialized("bitwise_or", o)

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

    # -- guards: the value is observed, so the branch is recorded ----------------------------

    def guard_bool(self, file: str, line: int) -> bool:
        self._force()
        if self.data is not None and self._traced_data():
            # NOTE: a count (`nonzero`'s) is >= 0, as `static` assumes; a value `.item()` read
            # may be anything: every decision user code makes on it is a bailout
            known = static(self) if self.pytype is not float and self.data is not ITEM_DATA else None
            return self._data_bailout(bool(self.hint)) if known is None else known
        if self.pytype is float:  # NOTE: `bool(x)` of a float: forcing it pinned its sizes
            return bool(self.hint)
        if self.data is not None:
            known = static(self)
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
