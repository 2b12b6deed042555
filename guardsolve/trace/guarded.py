"""Guarded values: Python bools, ints and sizes that record every observation into a trace.

A guarded value holds its concrete value and its name in the trace. Arithmetic records new
nodes; turning a `GuardedBool` into a Python `bool` records a `bool_bailout` with the value
seen, so the trace knows which branch it relied on:

    i3 = int_eq(i0, i2)
    bool_bailout(i3, expect=False)
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterator

from guardsolve.errors import TraceError
from guardsolve.ir.ops import Op
from guardsolve.trace.record import Recorder


class Guarded:
    """A concrete value plus its name in the trace of `rec`."""

    __slots__ = ("value", "name", "rec")

    def __init__(self, value: Any, name: str, rec: Recorder):
        self.value = value
        self.name = name
        self.rec = rec

    def __repr__(self) -> str:
        return f"{self.name}~{self.value}"


class GuardedBool(Guarded):
    """A traced bool; observing it records a bailout."""

    __slots__ = ()

    def __bool__(self) -> bool:
        self.rec.record(Op.BOOL_BAILOUT, (self,), expect=bool(self.value))
        return bool(self.value)

    def _logic(self, op: Op, other: Any, fn: Callable[[bool, bool], bool]) -> "GuardedBool":
        other = as_bool(self.rec, other)
        return GuardedBool(fn(self.value, other.value), self.rec.record(op, (self, other)), self.rec)

    def __and__(self, other: Any) -> "GuardedBool":
        return self._logic(Op.BOOL_AND, other, operator.and_)

    def __or__(self, other: Any) -> "GuardedBool":
        return self._logic(Op.BOOL_OR, other, operator.or_)

    __rand__ = __and__
    __ror__ = __or__

    def __invert__(self) -> "GuardedBool":
        return GuardedBool(not self.value, self.rec.record(Op.BOOL_NOT, (self,)), self.rec)


def as_bool(rec: Recorder, v: Any) -> GuardedBool:
    if isinstance(v, GuardedBool):
        return v
    if isinstance(v, bool):
        return GuardedBool(v, rec.record(Op.BOOL_CONST, (), val=v), rec)
    raise TraceError(f"expected a bool, got {v!r}")


def as_int(rec: Recorder, v: Any) -> "GuardedInt":
    """Promote a Python int literal into an `int_const` node."""
    if isinstance(v, GuardedInt):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return GuardedInt(v, rec.record(Op.INT_CONST, (), val=int(v)), rec)
    raise TraceError(f"expected an int, got {type(v).__name__} {v!r}")


_ARITH: dict[Op, Callable[[int, int], int]] = {
    Op.INT_ADD: operator.add, Op.INT_SUB: operator.sub, Op.INT_MUL: operator.mul,
    Op.INT_FLOORDIV: operator.floordiv, Op.INT_MOD: operator.mod,
}
_COMPARE: dict[Op, Callable[[int, int], bool]] = {
    Op.INT_EQ: operator.eq, Op.INT_NE: operator.ne, Op.INT_LT: operator.lt,
    Op.INT_LE: operator.le, Op.INT_GT: operator.gt, Op.INT_GE: operator.ge,
}


class GuardedInt(Guarded):
    """A traced int (a size, or arithmetic on sizes).

    `canon` is the first traced int known to hold the same value by construction (the same
    dim read twice, or a dim read back from a size built from it); tracing rules use it to skip
    decisions whose outcome cannot matter, e.g. broadcasting a dim against itself.
    """

    __slots__ = ("canon",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: Any, name: str, rec: Recorder, canon: "GuardedInt | None" = None):
        super().__init__(value, name, rec)
        self.canon: GuardedInt = canon.canon if canon is not None else self

    def same_as(self, other: Any) -> bool:
        """True when `other` is this value by construction (no guard needed to know it)."""
        return isinstance(other, GuardedInt) and other.canon is self.canon

    def _arith(self, op: Op, other: Any, reverse: bool = False) -> "GuardedInt":
        if not isinstance(other, (int, GuardedInt)) or isinstance(other, bool):
            return NotImplemented  # type: ignore[return-value]
        o = as_int(self.rec, other)
        a, b = (o, self) if reverse else (self, o)
        return GuardedInt(_ARITH[op](a.value, b.value), self.rec.record(op, (a, b)), self.rec)

    def _compare(self, op: Op, other: Any) -> "GuardedBool":
        if not isinstance(other, (int, GuardedInt)) or isinstance(other, bool):
            return NotImplemented  # type: ignore[return-value]
        o = as_int(self.rec, other)
        return GuardedBool(_COMPARE[op](self.value, o.value), self.rec.record(op, (self, o)), self.rec)

    def __add__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_ADD, o)
    def __radd__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_ADD, o, True)
    def __sub__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_SUB, o)
    def __rsub__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_SUB, o, True)
    def __mul__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_MUL, o)
    def __rmul__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_MUL, o, True)
    def __floordiv__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_FLOORDIV, o)
    def __rfloordiv__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_FLOORDIV, o, True)
    def __mod__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_MOD, o)
    def __rmod__(self, o: Any) -> "GuardedInt": return self._arith(Op.INT_MOD, o, True)
    def __neg__(self) -> "GuardedInt": return self._arith(Op.INT_SUB, 0, True)
    def __pos__(self) -> "GuardedInt": return self

    def __eq__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_EQ, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_NE, o)  # type: ignore[override]
    def __lt__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_LT, o)
    def __le__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_LE, o)
    def __gt__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_GT, o)
    def __ge__(self, o: Any) -> "GuardedBool": return self._compare(Op.INT_GE, o)

    def __bool__(self) -> bool:
        return bool(self != 0)

    def specialize(self) -> int:
        """Let Python see the concrete value, recording the guard `self == value`."""
        if not (self == self.value):
            raise AssertionError("unreachable: a value equals itself")
        return int(self.value)

    __index__ = specialize
    __int__ = specialize


class GuardedSize(Guarded):
    """A traced shape. Its length is static (traces are rank specialized).

    A size built with `make` knows its items, so reading a dim back is known to equal it.
    """

    __slots__ = ("items", "_read")

    def __init__(self, value: Any, name: str, rec: Recorder, items: "tuple[GuardedInt, ...] | None" = None):
        super().__init__(value, name, rec)
        self.items = items
        self._read: dict[int, GuardedInt] = {}

    @staticmethod
    def make(rec: Recorder, items: list[Any]) -> "GuardedSize":
        dims = [as_int(rec, d) for d in items]
        return GuardedSize(tuple(d.value for d in dims), rec.record(Op.SIZE_CTOR, tuple(dims)), rec, tuple(dims))

    def __len__(self) -> int:
        return len(self.value)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return GuardedSize.make(self.rec, [self[i] for i in range(len(self))[index]])
        i = operator.index(index)
        if not -len(self) <= i < len(self):
            raise IndexError(f"size index {i} out of range for rank {len(self)}")
        i %= len(self)
        canon = self.items[i] if self.items is not None else self._read.get(i)
        out = GuardedInt(self.value[i], self.rec.record(Op.SIZE_INDEX, (self,), index=i), self.rec, canon)
        self._read.setdefault(i, out)
        return out

    def __iter__(self) -> Iterator[GuardedInt]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        """Elementwise; records one `int_eq` bailout per dim, as the notebook does."""
        if not isinstance(other, (GuardedSize, tuple, list)):
            return NotImplemented
        if len(self) != len(other):
            return False
        for s, o in zip(self, other):
            if not (s == o):
                return False
        return True

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def numel(self) -> Any:
        n: Any = 1
        for d in self:
            n = n * d if isinstance(n, GuardedInt) else d
        return n
