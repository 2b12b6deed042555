"""The one place where Python's integer semantics meet z3's.

* Floor division and modulo. Python rounds `a // b` toward negative infinity and gives
  `a % b` the sign of `b`. SMT-LIB `div`/`mod` are Euclidean (the remainder is never
  negative). They agree when `b > 0`; for `b < 0`, `a // b == (-a) // (-b)`, which z3 computes
  exactly since `-b > 0`.
* Division by zero. Python raises, so a guard graph that divides by zero rejects the input.
  z3 leaves `a / 0` unspecified; we make it total (0) and add `b != 0` as a guard of its own
  wherever a division occurs (see `guardsolve.guards.normalize`), so the meaning is exact either way.
* The same two functions in SMT-LIB text (`SMTLIB_DEFS`), for lowering many formulas in one
  parser call; `tests/test_simplify.py` proves both lowerings equal.

>>> import z3
>>> a, b = z3.Ints("a b")
>>> s = z3.Solver(); s.add(a == -7, b == 2)
>>> s.check(); m = s.model(); (m.eval(floordiv(a, b)), m.eval(mod(a, b)))
sat
(-4, 1)
>>> s = z3.Solver(); s.add(a == 7, b == -2); s.check(); m = s.model(); (m.eval(floordiv(a, b)), m.eval(mod(a, b)))
sat
(-4, -1)
"""

from __future__ import annotations

import z3


def floordiv(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """Python's `a // b` (0 when `b == 0`, which a separate guard excludes)."""
    if z3.is_int_value(b):
        v = b.as_long()
        if v > 0:
            return a / b
        if v < 0:
            return (-a) / (-b)
        return z3.IntVal(0, a.ctx)
    return z3.If(b > 0, a / b, z3.If(b < 0, (-a) / (-b), z3.IntVal(0, a.ctx)))


def mod(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """Python's `a % b`: `a - b * (a // b)`."""
    return a - b * floordiv(a, b)


SMTLIB_DEFS = (
    "(define-fun py_floordiv ((a Int) (b Int)) Int"
    " (ite (> b 0) (div a b) (ite (< b 0) (div (- a) (- b)) 0)))"
    "(define-fun py_mod ((a Int) (b Int)) Int (- a (* b (py_floordiv a b))))"
)
