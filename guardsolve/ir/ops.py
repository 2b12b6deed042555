"""Ops are data: every op of the IR with its signature (input types, result type, params).

>>> SPECS[Op.INT_EQ].inputs
(<Type.INT: 'int'>, <Type.INT: 'int'>)
>>> Op("size_ctor").name
'SIZE_CTOR'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping


class Type(Enum):
    """The value types of the IR."""

    __hash__ = object.__hash__  # NOTE: see Op

    BOOL = "bool"
    INT = "int"
    SIZE = "size"
    TENSOR = "tensor"


class Op(Enum):
    """Every op of the IR; the value is its spelling in the text format."""

    # NOTE: members are singletons compared by identity; the identity hash is C-level, where
    # Enum's own hashes the name in Python on every dict lookup of a rule table.
    __hash__ = object.__hash__

    BOOL_BAILOUT = "bool_bailout"
    BOOL_CONST = "bool_const"
    BOOL_NOT = "bool_not"
    BOOL_AND = "bool_and"
    BOOL_OR = "bool_or"
    INT_CONST = "int_const"
    INT_PLACEHOLDER = "int_placeholder"
    INT_ARG = "int_arg"
    INT_UNBACKED = "int_unbacked"  # a size an op computed from tensor data (never in a checkable guard)
    INT_ADD = "int_add"
    INT_SUB = "int_sub"
    INT_MUL = "int_mul"
    INT_FLOORDIV = "int_floordiv"
    INT_MOD = "int_mod"
    INT_EQ = "int_eq"
    INT_NE = "int_ne"
    INT_LT = "int_lt"
    INT_LE = "int_le"
    INT_GT = "int_gt"
    INT_GE = "int_ge"
    SIZE_INDEX = "size_index"
    SIZE_CTOR = "size_ctor"
    VAR_PLACEHOLDER = "var_placeholder"
    VAR_ADD = "var_add"
    VAR_MUL = "var_mul"
    VAR_SIZE = "var_size"
    VAR_STRIDE = "var_stride"
    VAR_STORAGE_OFFSET = "var_storage_offset"
    VAR_EXPAND = "var_expand"
    VAR_PARAM = "var_param"
    VAR_TO_BOOL = "var_to_bool"
    BOOL_OPAQUE = "bool_opaque"
    ATEN = "aten"  # a call of a torch.ops overload; prints as the call, `aten.view.default(v0, [i1, -1])`

    def __str__(self) -> str:
        return self.value


class Ints(tuple):  # type: ignore[type-arg]
    """Param type: a list of ints, printed `[0, 2]`."""


class Number(float):
    """Param type: an int or float literal from the traced code (kept as written)."""


class OpName(str):
    """Param type: a qualified op overload, `aten.view.default` (resolved from `torch.ops`)."""


class Args(tuple):  # type: ignore[type-arg]
    """Param type: the positional arguments of a call, with `Ref`s to values of the trace."""


class Kwargs(dict):  # type: ignore[type-arg]
    """Param type: the keyword arguments of a call, with `Ref`s to values of the trace."""


@dataclass(frozen=True)
class OpSpec:
    """Signature of an op: fixed input types, optional variadic tail, result, params.

    `optional` params may be left out (a tensor trace records example shapes and dtypes; the
    seed notebook's IR has none). A call (`any_inputs`) takes values of any type and has one
    output per tensor it returns.
    """

    inputs: tuple[Type, ...]
    result: Type | None
    params: Mapping[str, type] = field(default_factory=dict)
    variadic: Type | None = None
    optional: Mapping[str, type] = field(default_factory=dict)
    any_inputs: bool = False


_I, _B, _S, _T = Type.INT, Type.BOOL, Type.SIZE, Type.TENSOR


def _binary(t: Type, r: Type) -> OpSpec:
    return OpSpec((t, t), r)


INT_ARITH = frozenset({Op.INT_ADD, Op.INT_SUB, Op.INT_MUL, Op.INT_FLOORDIV, Op.INT_MOD})
INT_COMPARE = frozenset({Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE})
BOOL_LOGIC = frozenset({Op.BOOL_NOT, Op.BOOL_AND, Op.BOOL_OR})
# The seed notebook's elementwise prims (no implicit broadcasting: the trace expands first).
TENSOR_ELEMENTWISE = frozenset({Op.VAR_ADD, Op.VAR_MUL})
PLACEHOLDERS = frozenset({Op.INT_PLACEHOLDER, Op.INT_ARG, Op.VAR_PLACEHOLDER})
DIM_OPS = frozenset({Op.INT_PLACEHOLDER, Op.INT_ARG})  # each names one input dim of a guard graph (`name=`)
# Ops that may appear in a guard graph (the result of guard_graph or a parsed guard file).
GUARD_OPS = INT_ARITH | INT_COMPARE | BOOL_LOGIC | {
    Op.BOOL_BAILOUT, Op.BOOL_CONST, Op.INT_CONST, Op.INT_PLACEHOLDER, Op.INT_ARG, Op.BOOL_OPAQUE,
}

SPECS: Mapping[Op, OpSpec] = {
    Op.BOOL_BAILOUT: OpSpec((_B,), None, {"expect": bool}),
    Op.BOOL_CONST: OpSpec((), _B, {"val": bool}),
    Op.BOOL_NOT: OpSpec((_B,), _B),
    Op.BOOL_AND: _binary(_B, _B),
    Op.BOOL_OR: _binary(_B, _B),
    Op.INT_CONST: OpSpec((), _I, {"val": Number}),  # NOTE: a float where a trace compares a value read from data
    Op.INT_PLACEHOLDER: OpSpec((), _I, {"name": str}),
    Op.INT_ARG: OpSpec((), _I, {"name": str}, optional={"val": int}),
    Op.INT_UNBACKED: OpSpec((), _I, {"name": str}),
    **{op: _binary(_I, _I) for op in INT_ARITH},
    **{op: _binary(_I, _B) for op in INT_COMPARE},
    Op.SIZE_INDEX: OpSpec((_S,), _I, {"index": int}),
    Op.SIZE_CTOR: OpSpec((), _S, variadic=_I),
    Op.VAR_PLACEHOLDER: OpSpec((), _T, {"name": str, "rank": int}, optional={"shape": Ints, "dtype": str}),
    **{op: _binary(_T, _T) for op in TENSOR_ELEMENTWISE},
    Op.VAR_SIZE: OpSpec((_T,), _S),
    Op.VAR_STRIDE: OpSpec((_T,), _S),
    Op.VAR_STORAGE_OFFSET: OpSpec((_T,), _I),
    Op.VAR_EXPAND: OpSpec((_T, _S), _T),
    Op.VAR_PARAM: OpSpec((), _T, {"name": str, "shape": Ints}, optional={"dtype": str, "crc": int}),
    Op.VAR_TO_BOOL: OpSpec((_T,), _B),
    Op.BOOL_OPAQUE: OpSpec((), _B, {"name": str}),
    Op.ATEN: OpSpec((), _T, {"fn": OpName, "args": Args, "kwargs": Kwargs}, any_inputs=True),
}

assert set(SPECS) == set(Op), "every op needs a signature"


def lookup(name: str) -> Op | None:
    """The op spelled `name` in the text format, or None."""
    try:
        return Op(name)
    except ValueError:
        return None
