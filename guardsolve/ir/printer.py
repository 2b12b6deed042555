"""The print interpretation: a graph's bailouts as readable Python asserts.

>>> from guardsolve.ir.graph import Graph
>>> g = Graph.parse("a0 = int_placeholder(name=a0)\\ni0 = int_const(val=1)\\n"
...                 "i1 = int_eq(a0, i0)\\nbool_bailout(i1, expect=False)")
>>> print_guards(g)
['assert not (a0 == 1)']
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.ops import Op

_INFIX: Mapping[Op, str] = {
    Op.INT_ADD: "+", Op.INT_SUB: "-", Op.INT_MUL: "*", Op.INT_FLOORDIV: "//", Op.INT_MOD: "%",
    Op.INT_EQ: "==", Op.INT_NE: "!=", Op.INT_LT: "<", Op.INT_LE: "<=", Op.INT_GT: ">",
    Op.INT_GE: ">=", Op.BOOL_AND: "and", Op.BOOL_OR: "or",
}


def _infix(sym: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a} {sym} {b})"


def print_rules(lines: list[str]) -> RuleTable:
    """Rules that render values as Python source; bailouts append an assert to `lines`."""
    return RuleTable("print", {
        **{op: _infix(sym) for op, sym in _INFIX.items()},
        Op.BOOL_BAILOUT: lambda b, *, expect: lines.append(f"assert {b}" if expect else f"assert not {b}"),
        Op.BOOL_CONST: lambda *, val: str(val),
        Op.BOOL_NOT: lambda b: f"(not {b})",
        Op.INT_CONST: lambda *, val: str(val),
        Op.INT_PLACEHOLDER: lambda *, name: name,
        Op.INT_ARG: lambda *, name, val=None: name,
        Op.VAR_PLACEHOLDER: lambda *, name, rank: name,
        Op.VAR_SIZE: lambda a: f"{a}.shape",
        Op.SIZE_INDEX: lambda s, *, index: f"{s}[{index}]",
        Op.SIZE_CTOR: lambda *dims: "(" + "".join(f"{d}, " for d in dims).rstrip() + ")",
        Op.VAR_EXPAND: lambda a, size: f"{a}.expand{size}",
        **{op: _infix(sym) for op, sym in {Op.VAR_ADD: "+", Op.VAR_MUL: "*"}.items()},
        **{op: _call(op) for op in Op if op.value.startswith("var_") and op not in _EXPLICIT},
        Op.BOOL_OPAQUE: lambda *, name: f"bool({name})",
    })


_EXPLICIT = frozenset({Op.VAR_PLACEHOLDER, Op.VAR_SIZE, Op.VAR_EXPAND, Op.VAR_ADD, Op.VAR_MUL})


def _call(op: Op) -> Callable[..., str]:
    """Any other tensor op prints as a call: `var_reduce(x, fn=sum, ...)`."""
    def rule(*args: Any, **params: Any) -> str:
        from guardsolve.ir.node import format_param

        return f"{op}(" + ", ".join([str(a) for a in args] + [f"{k}={format_param(v)}" for k, v in params.items()]) + ")"
    return rule


def print_guards(graph: Graph) -> list[str]:
    """One `assert` line per bailout, in order."""
    lines: list[str] = []
    interpret(graph, print_rules(lines))
    return lines
