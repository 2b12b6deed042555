"""The SymNode operations as guard-graph ops: integer arithmetic, comparisons, logic, floats,
and the identities that need no node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import operator
from typing import Any, Callable
from guardsolve.ir.ops import Op

if TYPE_CHECKING:
    from guardsolve.guards.symbolic import SymGuard


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
BINARY = _INT_OPS | _COMPARE | _LOGIC


# NOTE: the guard graph has no floats: a float computed from a size (`x.shape[-1] ** 0.5`,
# `size / 2`) specializes its int inputs, recording `x == value` the way `int(x)` does.
_FLOAT_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "truediv": operator.truediv, "int_truediv": operator.truediv, "float_truediv": operator.truediv,
    "pow": operator.pow, "float_pow": operator.pow, "pow_by_natural": operator.pow,
    "sym_min": min, "sym_max": max, "lshift": operator.lshift, "rshift": operator.rshift,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
}


FOLD = {**{k: f for k, (_, f) in BINARY.items()}, **_FLOAT_OPS}


TO_FLOAT = frozenset({"truediv", "int_truediv", "float_truediv", "float_pow"})  # a float out of ints


COMMUTATIVE = frozenset({Op.INT_ADD, Op.INT_MUL, Op.INT_EQ, Op.INT_NE, Op.BOOL_AND, Op.BOOL_OR})


# Ops that fold to a constant when both sides are the same node.
SELF_TRUE = frozenset({Op.INT_EQ, Op.INT_LE, Op.INT_GE})


_SELF_FALSE = frozenset({Op.INT_NE, Op.INT_LT, Op.INT_GT})


SELF = SELF_TRUE | _SELF_FALSE


DIVIDES = frozenset({Op.INT_FLOORDIV, Op.INT_MOD})


def identity(op: Op, a: "SymGuard", b: "SymGuard") -> "SymGuard | None":
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
