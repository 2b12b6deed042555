"""The operations of a `SymGuard` that pin the branch taken (floats, powers, extrema, rounding)."""

from __future__ import annotations

from typing import Any, Callable
from guardsolve.guards.sym_facts import INF, Observed, contiguous, non_overlapping_and_dense, range_of, scaled_fraction, stand_in, static
from guardsolve.guards.sym_tables import FOLD, TO_FLOAT
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardsolve.guards.symbolic import SymGuard


class SpecializingOps:
    """The operations of a `SymGuard` whose result pins the branch taken: floats, divisions and powers
    that leave the integers, extrema, bit operations, rounding, contiguity; mixed into `SymGuard`."""

    # -- specializing operations (a guard that pins the branch taken) ------------------------

    def _specialized(self, name: str, other: "SymGuard") -> "SymGuard":
        if name in ("sym_min", "sym_max"):
            if (self.data or other.data) and static(self.le(other)) is None:
                return self._extremum(name, other)
            keep_self = (self.le(other) if name == "sym_min" else self.ge(other)).guard_bool("", 0)
            return self if keep_self else other
        if name in TO_FLOAT or self.pytype is float or other.pytype is float:
            return self._float(FOLD[name], other)
        return self._wrap(FOLD[name](self._pin(), other._pin()))

    def _float(self, fn: Callable[[Any, Any], Any], other: "SymGuard") -> "SymGuard":
        """`fn(self, other)` where a float takes part: pinned in user code (the trace has no
        floats); inside a shape rule, a float (or a comparison of one) that pins its sizes only
        once something reads its value. A rule often computes a float it never reads for the
        shape (`pinv`'s default `rtol = eps * max(m, n)`, an `upsample`'s `scale = in / out` for
        its indices): the sizes stay free.

        >>> from guardsolve.ir.ops import Op
        >>> from guardsolve.guards.recorder import Recorder
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
            out = type(self)(self.rec, stand_in(fn, self, other), float, None)
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
        node = type(self)(self.rec, value, type(value), None)

        def pin() -> None:
            self._pin()
            other._pin()

        node.lazy = pin
        node.ratio = scaled_fraction(fn, self, other)
        return node

    def _extremum(self, name: str, other: "SymGuard") -> "SymGuard":
        """`min`/`max` of an unbacked size that no bound decides (PyTorch keeps `Max(u0, 1)`
        symbolic; its contiguity checks take it): a fresh unbacked value within their bounds."""
        pick = min if name == "sym_min" else max
        out = self.rec.unbacked("", pick(self.hint, other.hint))
        out.data = self.data or other.data
        ra, rb = range_of(self), range_of(other)
        if ra is not None and rb is not None:
            out.why = ("range", pick(ra[0], rb[0]), pick(ra[1], rb[1]))
        else:
            out.why = ("range", -INF, INF)
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
        node = type(self)(self.rec, float(self.hint), float, None)
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
        >>> from guardsolve.guards.recorder import Recorder
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
        return self._deferred(sizes, strides, contiguous)

    def is_non_overlapping_and_dense_indicator(self, sizes: list["SymGuard"], strides: list["SymGuard"]) -> "SymGuard":
        return self._deferred(sizes, strides, non_overlapping_and_dense, int)

    def _deferred(self, sizes: list["SymGuard"], strides: list["SymGuard"],
                  rule: Callable[[list[Any], list[Any]], bool], as_type: type = bool) -> "SymGuard":
        hint = rule([s.hint for s in sizes], [s.hint for s in strides])
        if all(s.const for s in sizes) and all(s.const for s in strides):
            return self._wrap(as_type(hint))
        rec = self.rec

        def decide() -> None:
            if not rec.muted:
                rec.layout_observed = True
            rule([Observed(s) for s in sizes], [Observed(s) for s in strides])

        if as_type is int:  # NOTE: an int indicator is compared, not guarded: decide now
            decide()
            return self._wrap(int(hint))
        return type(self).deferred(rec, hint, decide)
