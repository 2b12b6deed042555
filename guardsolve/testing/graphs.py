"""Random guard graphs over every guard op, for property tests and benchmarks.

Bailouts expect the value seen at a random "trace-time" assignment, as a real trace would,
so the graph is satisfiable unless `flip` asks for some expectations to be inverted. With
`signed=True` the graph also reaches Python's `//` and `%` of negatives: negative constants,
negative divisors, numerators such as `2*x - 1`, and int arguments from -5 to 5.

>>> import random
>>> g = random_guard_graph(random.Random(0), n_bailouts=3)
>>> sum(1 for n in g if n.op is Op.BOOL_BAILOUT)
3
>>> g = random_guard_graph(random.Random(4), n_bailouts=12, signed=True)
>>> any(n.op is Op.INT_CONST and n.params["val"] < 0 for n in g)
True
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable
from guardsolve.errors import GuardFailure, InterpretError
from guardsolve.ir.concrete import run_concrete
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op


_CMP = [Op.INT_EQ, Op.INT_NE, Op.INT_LT, Op.INT_LE, Op.INT_GT, Op.INT_GE]


_PY: dict[Op, Callable[[Any, Any], Any]] = {
    Op.INT_ADD: lambda a, b: a + b, Op.INT_SUB: lambda a, b: a - b, Op.INT_MUL: lambda a, b: a * b,
    Op.INT_FLOORDIV: lambda a, b: a // b, Op.INT_MOD: lambda a, b: a % b,
    Op.INT_EQ: lambda a, b: a == b, Op.INT_NE: lambda a, b: a != b, Op.INT_LT: lambda a, b: a < b,
    Op.INT_LE: lambda a, b: a <= b, Op.INT_GT: lambda a, b: a > b, Op.INT_GE: lambda a, b: a >= b,
    Op.BOOL_AND: lambda a, b: a and b, Op.BOOL_OR: lambda a, b: a or b,
}


class _Builder:
    def __init__(self, rng: random.Random, dims: dict[str, int], nonlinear: bool, signed: bool = False):
        self.rng, self.dims, self.nonlinear, self.signed = rng, dims, nonlinear, signed
        self.g = Graph()
        self.val: dict[str, Any] = {}

    def emit(self, op: Op, inputs: tuple[str, ...], value: Any, **params: Any) -> str:
        name = self.g.emit(op, inputs, **params)
        self.val[name] = value
        return name

    def const(self, lo: int = 0, hi: int = 4) -> str:
        if self.signed:
            lo = -hi
        v = self.rng.randint(lo, hi)
        return self.emit(Op.INT_CONST, (), v, val=v)

    def divisor(self, coef: int = 1) -> str:
        """A non-zero constant; signed: negative too, and often the numerator's coefficient
        (`(2*x - 1) // 2` folds to `x + (-1 // 2)`, the constant's floor)."""
        v = self.rng.randint(1, 4)
        if self.signed and abs(coef) > 1 and self.rng.random() < 0.5:
            v = abs(coef)
        if self.signed and self.rng.random() < 0.5:
            v = -v
        return self.emit(Op.INT_CONST, (), v, val=v)

    def numerator(self, depth: int) -> tuple[str, int]:
        """Signed: often `c*x + k` (`2*x - 1`), whose floor rounds differently from truncation;
        returns the node and its coefficient c (1 otherwise)."""
        if not self.signed or self.rng.random() < 0.4:
            return self.int_expr(depth), 1
        x = self.rng.choice(list(self.dims))
        c = self.emit(Op.INT_CONST, (), v := self.rng.choice([-3, -2, 2, 3]), val=v)
        k = self.emit(Op.INT_CONST, (), v := self.rng.randint(-3, 3), val=v)
        cx = self.emit(Op.INT_MUL, (c, x), self.val[c] * self.val[x])
        return self.emit(Op.INT_ADD, (cx, k), self.val[cx] + self.val[k]), self.val[c]

    def int_expr(self, depth: int) -> str:
        r = self.rng.random()
        if depth <= 0 or r < 0.5:
            name = self.rng.choice(list(self.dims))
            return name
        if r < 0.6:
            return self.const()
        ops = [Op.INT_ADD, Op.INT_SUB] + ([Op.INT_MUL, Op.INT_FLOORDIV, Op.INT_MOD] if self.nonlinear else [])
        if self.signed and self.nonlinear:
            ops += [Op.INT_FLOORDIV, Op.INT_MOD]
        op = self.rng.choice(ops)
        if op in (Op.INT_FLOORDIV, Op.INT_MOD):
            a, coef = self.numerator(depth - 1)
            b = self.divisor(coef) if self.rng.random() < 0.7 else self.int_expr(0)
            if self.val[b] == 0:
                b = self.divisor(coef)
        else:
            a = self.int_expr(depth - 1)
            b = self.int_expr(depth - 1) if self.rng.random() < 0.6 else self.const()
        return self.emit(op, (a, b), _PY[op](self.val[a], self.val[b]))

    def bool_expr(self, depth: int) -> str:
        r = self.rng.random()
        if depth > 0 and r < 0.15:
            a = self.bool_expr(depth - 1)
            return self.emit(Op.BOOL_NOT, (a,), not self.val[a])
        if depth > 0 and r < 0.3:
            op = self.rng.choice([Op.BOOL_AND, Op.BOOL_OR])
            a, b = self.bool_expr(depth - 1), self.bool_expr(depth - 1)
            return self.emit(op, (a, b), _PY[op](self.val[a], self.val[b]))
        if depth > 0 and r < 0.33:
            v = self.rng.random() < 0.5
            return self.emit(Op.BOOL_CONST, (), v, val=v)
        op = self.rng.choice(_CMP)
        a = self.int_expr(1)
        b = self.int_expr(1) if self.rng.random() < 0.6 else self.const(0, 5)
        return self.emit(op, (a, b), _PY[op](self.val[a], self.val[b]))


def accepts(graph: Graph, env: dict[str, int]) -> bool:
    """The oracle: does the original guard graph, interpreted concretely, accept these dims?
    A division by zero rejects; any other interpreter error is a bug and propagates.

    >>> g = random_guard_graph(random.Random(0), n_bailouts=3)
    >>> accepts(g, dict(g.meta["trace_dims"]))
    True
    """
    try:
        run_concrete(graph, env)
        return True
    except GuardFailure:
        return False
    except InterpretError as e:
        if isinstance(e.__cause__, ZeroDivisionError):
            return False
        raise


def random_guard_graph(rng: random.Random, *, n_bailouts: int = 6, tensors: int = 2, rank: int = 2,
                       int_args: int = 1, nonlinear: bool = True, flip: float = 0.0,
                       max_size: int = 6, signed: bool = False) -> Graph:
    """A guard graph over dims `a0, a1, b0, ...` (and int args `n0`, ...).

    `signed` adds negative constants and divisors, `c*x + k` numerators and wider int args
    (the draws without it are unchanged, so seeds keep their graphs).
    """
    dims: dict[str, int] = {}
    pool = [rng.randint(0, max_size) for _ in range(3)]
    b = _Builder(rng, dims, nonlinear, signed)
    for t in range(tensors):
        for d in range(rank):
            name = f"{'abcdefgh'[t]}{d}"
            dims[name] = rng.choice(pool) if rng.random() < 0.6 else rng.randint(0, max_size)
            b.emit(Op.INT_PLACEHOLDER, (), dims[name], name=name)
    for i in range(int_args):
        name = f"n{i}"
        dims[name] = rng.randint(-5, 5) if signed else rng.randint(-3, 3)
        b.emit(Op.INT_ARG, (), dims[name], name=name)
    for _ in range(n_bailouts):
        x = b.bool_expr(2)
        expect = bool(b.val[x])
        if rng.random() < flip:
            expect = not expect
        b.g.emit(Op.BOOL_BAILOUT, (x,), expect=expect)
    b.g.meta["trace_dims"] = dict(dims)
    return b.g


def pieces_guard_graph(rng: random.Random, count: int, *, interleave: bool = False,
                       link: bool = False) -> Graph:
    """`count` random guard graphs over their own dims (`p3_a0`, ...), one after another, or
    with their lines `interleave`d (each piece's in its order). `link` adds bailouts that read
    one shared constant from several pieces, a bailout over constants only, and a last one
    relating the first and the last piece (they then form one component).

    >>> g = pieces_guard_graph(random.Random(1), 3, interleave=True, link=True)
    >>> sorted({d.split("_")[0] for d in g.meta["trace_dims"]})
    ['p0', 'p1', 'p2']
    """
    lines: list[list[str]] = []
    dims: dict[str, int] = {}
    for k in range(count):
        g = random_guard_graph(rng, n_bailouts=rng.randint(3, 12), tensors=rng.randint(1, 3), int_args=1,
                               nonlinear=k % 2 == 0, signed=k % 3 == 1)
        lines.append(re.sub(r"\b[a-z]\d+\b", lambda m: f"p{k}_{m.group(0)}", str(g)).splitlines())
        dims.update({f"p{k}_{d}": v for d, v in g.meta["trace_dims"].items()})
    if interleave:
        defs = [ln for piece in lines for ln in piece if "placeholder(" in ln or "int_arg(" in ln]
        rest = [[ln for ln in piece if ln not in defs] for piece in lines]
        order = [k for k, piece in enumerate(rest) for _ in piece]
        rng.shuffle(order)
        taken = [iter(piece) for piece in rest]
        text = defs + [next(taken[k]) for k in order]
    else:
        text = [ln for piece in lines for ln in piece]
    if link:
        text += ["s_one = int_const(val=1)", "s_two = int_const(val=2)", "s_c = int_lt(s_one, s_two)",
                 "bool_bailout(s_c, expect=True)"]
        for k in range(0, count, 2):
            x = f"p{k}_{sorted(d for d in dims if d.startswith(f'p{k}_'))[0].split('_', 1)[1]}"
            text += [f"s_x{k} = int_ge(s_one, {x})", f"bool_bailout(s_x{k}, expect={1 >= dims[x]})"]
        first, last = (sorted(d for d in dims if d.startswith(f"p{k}_"))[0] for k in (0, count - 1))
        text += [f"s_l = int_le({first}, {last})", f"bool_bailout(s_l, expect={dims[first] <= dims[last]})"]
    out = Graph.parse("\n".join(text))
    out.meta["trace_dims"] = dims
    return out


def examples(n: int) -> int:
    """A property test's example count: `n` under the default hypothesis profile (`ci`, 100
    examples), scaled by the loaded profile's `max_examples` / 100 (`long`: 10n; tests/conftest.py)."""
    from hypothesis import settings

    return max(1, n * settings.default.max_examples // 100)
