"""What is known of a `SymGuard` without a guard: its range, whether it is static, unbacked sizes'
answers, contiguity decided once for a tensor's sizes and strides.
"""

from __future__ import annotations

from typing import Any, Callable
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.guards.symbolic import SymGuard


class UnbackedEnv:
    """The part of PyTorch's ShapeEnv its helpers ask of an expression over an unbacked size.

    `guard_or_false(e)` / `guard_or_true(e)` (`symbolic_shapes._guard_or`) pass the default
    as `fallback_value`: by PyTorch's contract the branch it picks is valid whatever the value,
    so it needs no guard. Any other decision raises DataDependentError naming the user's line.
    """

    def evaluate_sym_node(self, node: "SymGuard", size_oblivious: bool = False, fallback_value: bool | None = None) -> bool:
        known = static(node)
        if known is not None:
            return known
        if fallback_value is not None:
            return fallback_value
        raise node._data_dependent()

    def is_unbacked_symint(self, expr: Any) -> bool:
        return True


UNBACKED = UnbackedEnv()  # NOTE: stateless


INF = float("inf")


def recorded_answer(trace: Graph) -> bool | None:
    """The answer the trace being followed recorded for the decision on data about to be
    recorded (a probe traces against the example's nodes, `tracer._Expecting`), or None."""
    expect = getattr(trace, "expect", None)
    if expect is None or len(trace.nodes) >= len(expect):
        return None
    node = expect[len(trace.nodes)]
    return bool(node.params["expect"]) if node.op is Op.BOOL_BAILOUT else None


_MAX_NUM = 1 << 20  # NOTE: a fraction's numerator and denominator at most this: the product stays exact


def scaled_fraction(fn: Callable[[Any, Any], Any], a: SymGuard, b: SymGuard) -> tuple[Any, int, int] | None:
    """`a op b` as (int, numerator, denominator) where one side is an int times a fraction
    (`SymGuard.ratio`) and the other a constant exact fraction, op a product or a quotient."""
    import operator as op

    if a.ratio is None or not b.const or isinstance(b.hint, bool) or not isinstance(b.hint, (int, float)):
        if b.ratio is not None and a.const and fn is op.mul:
            return scaled_fraction(fn, b, a)
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


def stand_in(fn: Callable[[Any, Any], Any], a: SymGuard, b: SymGuard) -> Any:
    """The hint of an operation on an unbacked size inside a shape rule: only further
    arithmetic sees it (every decision on it raises or holds for all values), so a zero
    divisor (an empty `nonzero`) gives 0 where eager has nothing to divide."""
    try:
        return fn(a.hint, b.hint)
    except ZeroDivisionError:
        return 0


def range_of(n: SymGuard) -> tuple[float, float] | None:
    """Bounds on an int that hold for every value of the unbacked sizes in it (each >= 0),
    or None: sums, differences and products of them and constants (PyTorch's value ranges)."""
    if n.const:
        return (n.hint, n.hint)
    if n.data is None:
        return None
    if n.why is None:
        return (0, INF)
    if n.why[0] == "range":
        return n.why[1], n.why[2]
    op, *args = n.why
    if len(args) != 2:
        return None
    ra, rb = range_of(args[0]), range_of(args[1])
    if ra is None or rb is None:
        return None
    if op is Op.INT_ADD:
        return (ra[0] + rb[0], ra[1] + rb[1])
    if op is Op.INT_SUB:
        return (ra[0] - rb[1], ra[1] - rb[0])
    if op is Op.INT_MUL and ra[0] >= 0 and rb[0] >= 0:
        return (ra[0] * rb[0], 0 if 0 in (ra[1], rb[1]) else ra[1] * rb[1])
    return None


def static(n: SymGuard) -> bool | None:
    """A data-dependent bool's value when every value of its unbacked sizes gives the same one.

    `u0 < 0` is False and `u0 + 1 != 0` True for every size u0; `u0 == 1` is unknown (None).
    """
    if n.const:
        return bool(n.hint)
    if n.why is None:
        return None
    op, *args = n.why
    if op is Op.BOOL_NOT:
        v = static(args[0])
        return None if v is None else not v
    if op is Op.BOOL_AND or op is Op.BOOL_OR:
        a, b = static(args[0]), static(args[1])
        short = op is Op.BOOL_OR  # NOTE: the value that decides the whole (True for or)
        if short in (a, b):
            return short
        return (not short) if a is not None and b is not None else None
    ra, rb = (range_of(args[0]), range_of(args[1])) if len(args) == 2 else (None, None)
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


class Observed:
    """A size or stride whose comparisons are guards (for the contiguity rules below)."""

    __slots__ = ("node",)

    def __init__(self, node: SymGuard):
        self.node = node

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        o = other.node if isinstance(other, Observed) else self.node._wrap(other)
        return self.node.eq(o).guard_bool("", 0)

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        return not self == other

    def __lt__(self, other: object) -> bool:
        o = other.node if isinstance(other, Observed) else self.node._wrap(other)
        return self.node.lt(o).guard_bool("", 0)

    def __mul__(self, other: Any) -> "Observed":
        o = other.node if isinstance(other, Observed) else self.node._wrap(other)
        return Observed(self.node.mul(o))

    __rmul__ = __mul__
    __hash__ = None  # type: ignore[assignment]


def contiguous(sizes: list[Any], strides: list[Any]) -> bool:
    """`TensorImpl::compute_contiguous`: works on ints and on `Observed` alike."""
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


def non_overlapping_and_dense(sizes: list[Any], strides: list[Any]) -> bool:
    """`TensorImpl::compute_non_overlapping_and_dense`: dims sorted by stride must tile densely."""
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    order = sorted(range(len(sizes)), key=lambda i: (hint_of(strides[i]), hint_of(sizes[i])))
    expected: Any = 1
    for i in order:
        if sizes[i] == 1:
            continue
        if strides[i] != expected:
            return False
        expected = sizes[i] * expected
    return True


def hint_of(v: Any) -> Any:
    return v.node.hint if isinstance(v, Observed) else v
