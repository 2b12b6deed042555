"""Dynamo's shape guards in guardsolve's words: its printed guard code as sympy, and sympy as
guard-graph nodes.

Dynamo checks shape guards on entry as Python code printed from sympy (`2 <= L['x'].size()[0]`,
`(L['x'].size()[0]//2) == L['y'].size()[0]`). `parse_guard` reads that code back into sympy,
with torch's own function classes (`FloorDiv`, `PythonMod`, `CeilToInt(IntTrueDiv(..))`, `Max`,
...) and one symbol per source; `emit_bool` lowers a sympy condition into int/bool nodes of a
guard graph. `Max`, `Min`, `Abs` and `Where` have no node of their own: a condition over them is
split into cases (`max(a, b) <= c` is `(a >= b and a <= c) or (a < b and b <= c)`), which is
exact. A construct with no integer meaning (a float, `sqrt`, `math.isnan`) raises
`TranslationError` naming it; nothing is dropped.

>>> from guardsolve.ir.graph import Graph
>>> from guardsolve.ir.ops import Op
>>> e = parse_guard("(L['x'].size()[0]//2) == L['y'].size()[0]", sympy.Symbol)
>>> e
Eq((L['x'].size()[0]//2), L['y'].size()[0])
>>> g = Graph()
>>> names = {s: g.emit(Op.INT_PLACEHOLDER, (), name=n) for s, n in zip(sorted(e.free_symbols, key=str), ("x0", "y0"))}
>>> g.emit(Op.BOOL_BAILOUT, (emit_bool(g, e, names),), expect=True)
>>> print(g)
x0 = int_placeholder(name=x0)
y0 = int_placeholder(name=y0)
i0 = int_const(val=2)
i1 = int_floordiv(x0, i0)
i2 = int_eq(i1, y0)
bool_bailout(i2, expect=True)
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Mapping

import sympy
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op

try:
    from torch.utils._sympy import functions as F
except ImportError as e:  # pragma: no cover - depends on the installed torch
    raise ImportError(f"guardsolve.pytorch needs torch.utils._sympy.functions (torch 2.13): {e}") from e


class TranslationError(GuardsolveError):
    """A Dynamo guard uses a construct with no exact integer meaning here; names it."""


_RELATIONS: dict[type, Op] = {
    sympy.Eq: Op.INT_EQ, sympy.Ne: Op.INT_NE, sympy.StrictLessThan: Op.INT_LT,
    sympy.LessThan: Op.INT_LE, sympy.StrictGreaterThan: Op.INT_GT, sympy.GreaterThan: Op.INT_GE,
}
_SELECTS = (F.Max, F.Min, sympy.Max, sympy.Min, sympy.Abs, F.Where)


def _what(e: Any) -> str:
    return f"{type(e).__name__} ({e})"


# -- sympy -> guard graph ---------------------------------------------------------------------


def _innermost_select(e: sympy.Basic) -> sympy.Basic | None:
    """A Max/Min/Abs/Where in `e` with none inside its own arguments."""
    for arg in e.args:
        found = _innermost_select(arg)
        if found is not None:
            return found
    return e if isinstance(e, _SELECTS) else None


def _cases(sel: sympy.Basic) -> list[tuple[list[sympy.Basic], sympy.Basic]]:
    """The value of a select term case by case: (conditions, value)."""
    if isinstance(sel, sympy.Abs):
        a = sel.args[0]
        return [([sympy.Ge(a, 0)], a), ([sympy.Lt(a, 0)], -a)]
    if isinstance(sel, F.Where):
        c, p, q = sel.args
        return [([c], p), ([sympy.Not(c)], q)]
    args = list(sel.args)
    bigger = sympy.Ge if isinstance(sel, (F.Max, sympy.Max)) else sympy.Le
    return [([bigger(a, b, evaluate=False) for b in args if b is not a], a) for a in args]


def emit_bool(g: Graph, e: Any, names: Mapping[Any, str]) -> str:
    """Bool nodes of `g` computing the sympy condition `e`; symbols are graph names via `names`."""
    if isinstance(e, BooleanTrue) or e is True:
        return g.emit(Op.BOOL_CONST, (), val=True)
    if isinstance(e, BooleanFalse) or e is False:
        return g.emit(Op.BOOL_CONST, (), val=False)
    if isinstance(e, (sympy.And, sympy.Or)):
        op = Op.BOOL_AND if isinstance(e, sympy.And) else Op.BOOL_OR
        parts = [emit_bool(g, a, names) for a in e.args]
        acc = parts[0]
        for p in parts[1:]:
            acc = g.emit(op, (acc, p))
        return acc
    if isinstance(e, sympy.Not):
        return g.emit(Op.BOOL_NOT, (emit_bool(g, e.args[0], names),))
    if isinstance(e, tuple(_RELATIONS)):
        sel = _innermost_select(e)
        if sel is not None:
            # NOTE: exact: one case holds for every input, and in it the select term is that value
            alts = [sympy.And(*conds, e.xreplace({sel: v}), evaluate=False) for conds, v in _cases(sel)]
            return emit_bool(g, sympy.Or(*alts, evaluate=False), names)
        return g.emit(_RELATIONS[type(e)], (emit_int(g, e.args[0], names), emit_int(g, e.args[1], names)))
    raise TranslationError(f"cannot translate the condition {_what(e)}: not a comparison of integers")


def _const(g: Graph, v: int) -> str:
    return g.emit(Op.INT_CONST, (), val=int(v))


def _fold(g: Graph, op: Op, parts: list[str]) -> str:
    acc = parts[0]
    for p in parts[1:]:
        acc = g.emit(op, (acc, p))
    return acc


def _div_parts(e: sympy.Basic) -> tuple[sympy.Basic, sympy.Basic] | None:
    """`a / b` as (a, b) when `e` is a true division of integers (`IntTrueDiv`, or sympy's
    `a * (1/k)` with a rational coefficient)."""
    if isinstance(e, F.IntTrueDiv):
        return e.args[0], e.args[1]
    if isinstance(e, sympy.Rational) and not isinstance(e, sympy.Integer):
        return sympy.Integer(e.p), sympy.Integer(e.q)
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if isinstance(coeff, sympy.Rational) and coeff.q != 1:
            return sympy.Integer(coeff.p) * rest, sympy.Integer(coeff.q)
    return None


def emit_int(g: Graph, e: Any, names: Mapping[Any, str]) -> str:
    """Int nodes of `g` computing the integer sympy expression `e`."""
    if isinstance(e, (int, sympy.Integer)) and not isinstance(e, bool):
        return _const(g, int(e))
    if isinstance(e, sympy.Symbol):
        if e not in names:
            raise TranslationError(f"the symbol {e} has no input dim (known: {', '.join(map(str, names)) or 'none'})")
        return names[e]
    if isinstance(e, sympy.Add):
        return _fold(g, Op.INT_ADD, [emit_int(g, a, names) for a in e.args])
    if isinstance(e, sympy.Mul):
        if _div_parts(e) is not None:
            raise TranslationError(f"cannot translate {_what(e)}: a true division outside floor/ceil")
        return _fold(g, Op.INT_MUL, [emit_int(g, a, names) for a in e.args])
    if isinstance(e, (sympy.Pow, F.PowByNatural)):
        base, exp = e.args
        if not (isinstance(exp, sympy.Integer) and 0 <= int(exp) <= 64):
            raise TranslationError(f"cannot translate {_what(e)}: the exponent is not a small natural constant")
        b = emit_int(g, base, names)
        return _fold(g, Op.INT_MUL, [b] * int(exp)) if int(exp) else _const(g, 1)
    if isinstance(e, (F.FloorDiv, F.CleanDiv)):
        return g.emit(Op.INT_FLOORDIV, (emit_int(g, e.args[0], names), emit_int(g, e.args[1], names)))
    if isinstance(e, (F.PythonMod, F.Mod, sympy.Mod)):
        return g.emit(Op.INT_MOD, (emit_int(g, e.args[0], names), emit_int(g, e.args[1], names)))
    if isinstance(e, F.ModularIndexing):
        x, d, m = (emit_int(g, a, names) for a in e.args)
        return g.emit(Op.INT_MOD, (g.emit(Op.INT_FLOORDIV, (x, d)), m))
    if isinstance(e, (F.LShift, F.RShift)) and isinstance(e.args[1], sympy.Integer) and 0 <= int(e.args[1]) <= 62:
        a, k = emit_int(g, e.args[0], names), _const(g, 2 ** int(e.args[1]))
        return g.emit(Op.INT_MUL if isinstance(e, F.LShift) else Op.INT_FLOORDIV, (a, k))
    if isinstance(e, F.Identity):
        return emit_int(g, e.args[0], names)
    if isinstance(e, (F.FloorToInt, sympy.floor, F.CeilToInt, sympy.ceiling)):
        arg = e.args[0]
        parts = _div_parts(arg)
        if parts is None:
            if getattr(arg, "is_integer", False):
                return emit_int(g, arg, names)
            raise TranslationError(f"cannot translate {_what(e)}: its argument is not a division of integers")
        a, b = (emit_int(g, p, names) for p in parts)
        if isinstance(e, (F.FloorToInt, sympy.floor)):
            return g.emit(Op.INT_FLOORDIV, (a, b))
        # NOTE: ceil(a / b) == -((-a) // b), Python's floor division
        zero = _const(g, 0)
        return g.emit(Op.INT_SUB, (zero, g.emit(Op.INT_FLOORDIV, (g.emit(Op.INT_SUB, (zero, a)), b))))
    if isinstance(e, _SELECTS):
        raise TranslationError(f"cannot translate {_what(e)} outside a comparison")
    raise TranslationError(f"cannot translate {_what(e)}: no integer rule for {type(e).__name__}")


# -- Dynamo's guard code -> sympy -------------------------------------------------------------


def is_source(node: ast.expr) -> bool:
    """A chain of subscripts, attributes and calls rooted at `L` (frame locals) or `G` (globals):
    one value Dynamo reads, as `L['x'].size()[0]`."""
    while True:
        match node:
            case ast.Subscript(value=v) | ast.Attribute(value=v):
                node = v
            case ast.Call(func=f):
                node = f
            case ast.Name(id=name):
                return name in ("L", "G")
            case _:
                return False


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: F.FloorDiv, ast.Mod: F.PythonMod, ast.Div: F.IntTrueDiv,
    ast.Pow: sympy.Pow, ast.LShift: F.LShift, ast.RShift: F.RShift,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne, ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge,
}
_CALLS: dict[str, Callable[..., Any]] = {
    "max": F.Max, "min": F.Min, "abs": sympy.Abs, "math.ceil": F.CeilToInt, "math.floor": F.FloorToInt,
    "math.trunc": F.TruncToInt,
}


def parse_guard(code: str, symbol: Callable[[str], Any]) -> Any:
    """Dynamo's guard code as a sympy expression; `symbol(source_text)` gives each source's symbol.

    >>> parse_guard("2 <= L['x'].size()[0] <= 8", sympy.Symbol)
    (2 <= L['x'].size()[0]) & (L['x'].size()[0] <= 8)
    """
    try:
        tree = ast.parse(code, mode="eval").body
    except SyntaxError as e:
        raise TranslationError(f"cannot read Dynamo's guard {code!r}: {e.msg}") from None

    def walk(n: ast.expr) -> Any:
        if is_source(n):
            return symbol(ast.unparse(n))
        match n:
            case ast.Constant(value=bool() as v):
                return sympy.true if v else sympy.false
            case ast.Constant(value=int() as v):
                return sympy.Integer(v)
            case ast.BinOp(left=a, op=op, right=b) if type(op) in _BINARY:
                return _BINARY[type(op)](walk(a), walk(b))
            case ast.UnaryOp(op=ast.USub(), operand=a):
                return -walk(a)
            case ast.UnaryOp(op=ast.UAdd(), operand=a):
                return walk(a)
            case ast.UnaryOp(op=ast.Not(), operand=a):
                return sympy.Not(walk(a))
            case ast.BoolOp(op=op, values=vs):
                return (sympy.And if isinstance(op, ast.And) else sympy.Or)(*map(walk, vs))
            case ast.Compare(left=left, ops=ops, comparators=rights) if all(type(o) in _COMPARE for o in ops):
                terms = [walk(left), *map(walk, rights)]
                rels = [_COMPARE[type(o)](terms[i], terms[i + 1]) for i, o in enumerate(ops)]
                return rels[0] if len(rels) == 1 else sympy.And(*rels)
            case ast.Call(func=f, args=args, keywords=[]) if ast.unparse(f) in _CALLS:
                return _CALLS[ast.unparse(f)](*map(walk, args))
        raise TranslationError(f"cannot translate {ast.unparse(n)!r} in Dynamo's guard {code!r}")

    return walk(tree)
