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
    VAR_SUB = "var_sub"
    VAR_MUL = "var_mul"
    VAR_DIV = "var_div"
    VAR_SIZE = "var_size"
    VAR_EXPAND = "var_expand"
    VAR_PARAM = "var_param"
    VAR_UNARY = "var_unary"
    VAR_BINARY = "var_binary"
    VAR_SCALAR = "var_scalar"
    VAR_WHERE = "var_where"
    VAR_REDUCE = "var_reduce"
    VAR_SOFTMAX = "var_softmax"
    VAR_MATMUL = "var_matmul"
    VAR_RESHAPE = "var_reshape"
    VAR_PERMUTE = "var_permute"
    VAR_CAT = "var_cat"
    VAR_SLICE = "var_slice"
    VAR_SELECT = "var_select"
    VAR_CONV2D = "var_conv2d"
    VAR_LAYER_NORM = "var_layer_norm"
    VAR_EMBEDDING = "var_embedding"
    VAR_TO_BOOL = "var_to_bool"
    BOOL_OPAQUE = "bool_opaque"

    def __str__(self) -> str:
        return self.value


class Ints(tuple):  # type: ignore[type-arg]
    """Param type: a list of ints, printed `[0, 2]`."""


class Number(float):
    """Param type: an int or float literal from the traced code (kept as written)."""


@dataclass(frozen=True)
class OpSpec:
    """Signature of an op: fixed input types, optional variadic tail, result, params.

    `choices` restricts str params (e.g. the torch function a `var_unary` applies).
    """

    inputs: tuple[Type, ...]
    result: Type | None
    params: Mapping[str, type] = field(default_factory=dict)
    variadic: Type | None = None
    choices: Mapping[str, frozenset[str]] = field(default_factory=dict)


UNARY_FNS = frozenset({"neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "gelu", "gelu_tanh"})
BINARY_FNS = frozenset({"pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"})
SCALAR_FNS = BINARY_FNS | {"add", "sub", "mul", "div"}
REDUCE_FNS = frozenset({"sum", "mean", "amax", "amin"})


_I, _B, _S, _T = Type.INT, Type.BOOL, Type.SIZE, Type.TENSOR


def _binary(t: Type, r: Type) -> OpSpec:
    return OpSpec((t, t), r)


INT_ARITH = frozenset({Op.INT_ADD, Op.INT_SUB, Op.INT_MUL, Op.INT_FLOORDIV, Op.INT_MOD})
INT_COMPARE = frozenset({Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE})
BOOL_LOGIC = frozenset({Op.BOOL_NOT, Op.BOOL_AND, Op.BOOL_OR})
TENSOR_ELEMENTWISE = frozenset({Op.VAR_ADD, Op.VAR_SUB, Op.VAR_MUL, Op.VAR_DIV, Op.VAR_BINARY})
# Tensor ops whose result has the shape of their first input.
SAME_SHAPE = frozenset({Op.VAR_UNARY, Op.VAR_SCALAR, Op.VAR_SOFTMAX, Op.VAR_LAYER_NORM})
PLACEHOLDERS = frozenset({Op.INT_PLACEHOLDER, Op.INT_ARG, Op.VAR_PLACEHOLDER})
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
    Op.INT_CONST: OpSpec((), _I, {"val": int}),
    Op.INT_PLACEHOLDER: OpSpec((), _I, {"name": str}),
    Op.INT_ARG: OpSpec((), _I, {"name": str}),
    **{op: _binary(_I, _I) for op in INT_ARITH},
    **{op: _binary(_I, _B) for op in INT_COMPARE},
    Op.SIZE_INDEX: OpSpec((_S,), _I, {"index": int}),
    Op.SIZE_CTOR: OpSpec((), _S, variadic=_I),
    Op.VAR_PLACEHOLDER: OpSpec((), _T, {"name": str, "rank": int}),
    **{op: _binary(_T, _T) for op in TENSOR_ELEMENTWISE},
    Op.VAR_SIZE: OpSpec((_T,), _S),
    Op.VAR_EXPAND: OpSpec((_T, _S), _T),
    Op.VAR_PARAM: OpSpec((), _T, {"name": str, "shape": Ints}),
    Op.VAR_UNARY: OpSpec((_T,), _T, {"fn": str}, choices={"fn": UNARY_FNS}),
    Op.VAR_BINARY: OpSpec((_T, _T), _T, {"fn": str}, choices={"fn": BINARY_FNS}),
    Op.VAR_SCALAR: OpSpec((_T,), _T, {"fn": str, "value": Number, "reverse": bool}, choices={"fn": SCALAR_FNS}),
    Op.VAR_WHERE: OpSpec((_T, _T, _T), _T),
    Op.VAR_REDUCE: OpSpec((_T,), _T, {"fn": str, "dims": Ints, "keepdim": bool}, choices={"fn": REDUCE_FNS}),
    Op.VAR_SOFTMAX: OpSpec((_T,), _T, {"dim": int, "log": bool}),
    Op.VAR_MATMUL: OpSpec((_T, _T), _T),
    Op.VAR_RESHAPE: OpSpec((_T, _S), _T),
    Op.VAR_PERMUTE: OpSpec((_T,), _T, {"dims": Ints}),
    Op.VAR_CAT: OpSpec((_T,), _T, {"dim": int}, variadic=_T),
    Op.VAR_SLICE: OpSpec((_T, _I, _I), _T, {"dim": int, "step": int}),
    Op.VAR_SELECT: OpSpec((_T, _I), _T, {"dim": int}),
    Op.VAR_CONV2D: OpSpec((_T, _T, _S), _T, {"stride": Ints, "padding": Ints, "dilation": Ints, "groups": int}),
    Op.VAR_LAYER_NORM: OpSpec((_T,), _T, {"ndim": int, "eps": Number}),
    Op.VAR_EMBEDDING: OpSpec((_T, _T), _T),
    Op.VAR_TO_BOOL: OpSpec((_T,), _B),
    Op.BOOL_OPAQUE: OpSpec((), _B, {"name": str}),
}

assert set(SPECS) == set(Op), "every op needs a signature"


def lookup(name: str) -> Op | None:
    """The op spelled `name` in the text format, or None."""
    try:
        return Op(name)
    except ValueError:
        return None
