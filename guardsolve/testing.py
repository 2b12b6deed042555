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

import functools
import random
import re
from typing import Any, Callable, Iterator

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


# -- exactness oracle for traced programs ------------------------------------------------------


def perturbed_inputs(rng: random.Random, inputs: tuple[Any, ...], count: int) -> list[tuple[Any, ...]]:
    """`count` variants of `inputs` with other sizes (and int values).

    Half the variants map every distinct size value to one new value, so equal dims stay
    equal and guards that tie dims can hold; the other half change dims independently.
    """
    import torch

    def remap(v: int, table: dict[int, int]) -> int:
        if v not in table:
            table[v] = rng.choice([v, v, v + 1, 2 * v, 1, max(v - 1, 0), v + 2, rng.randint(0, 2 * v + 3)])
        return table[v]

    out: list[tuple[Any, ...]] = []
    for k in range(count):
        consistent = k % 2 == 0
        table: dict[int, int] = {}
        variant: list[Any] = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                shape = [remap(d, table) if consistent else remap(d, {}) for d in x.shape]
                variant.append(torch.randn(shape).to(x.dtype) if x.is_floating_point()
                               else torch.randint(0, 2, shape).to(x.dtype))
            elif isinstance(x, int) and not isinstance(x, bool):
                variant.append(rng.choice([x, x + 1, -x, 2 * x, 0, x - 1]) if not consistent else remap(x, table))
            else:
                variant.append(x)
        out.append(tuple(variant))
    return out


def boundary_variants(gs: Any, inputs: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Inputs at sizes 0 and 1: each dim, each class of dims the guards hold equal (together),
    every pair of those at 1, all dims at 0 and all at 1; each named by its changes. The
    values come from `inputs` (`paths.resized`: indices stay in range).

    >>> import torch, guardsolve
    >>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)), explore=False)
    >>> [what for what, _ in boundary_variants(gs, (torch.ones(4), torch.ones(4)))]
    ['a0=0', 'a0=1', 'b0=0', 'b0=1', 'a0=0, b0=0', 'a0=1, b0=1']
    """
    import itertools

    from guardsolve.solve.explore.probes import resized
    from guardsolve.solve.explore.search import equal_classes

    example = gs.input_dims(*inputs)
    if example is None:
        return
    units = [(d,) for d in example] + equal_classes(gs)
    points = [{d: v for d in u} for u in units for v in (0, 1)]
    points += [{**{d: 1 for d in a}, **{d: 1 for d in b}} for a, b in itertools.combinations(units, 2)]
    points += [{d: v for d in example} for v in (0, 1)]
    seen = set()
    for change in points:
        p = {**example, **change}
        key = tuple(sorted(p.items()))
        if p == example or key in seen:
            continue
        seen.add(key)
        new = [resized(v, [p[d] for d in prm.dims]) if prm.kind == "tensor" else p[prm.name]
               for prm, v in zip(gs.signature, inputs)]
        yield ", ".join(f"{d}={p[d]}" for d in example if p[d] != example[d]), tuple(new)


def exactness_failures(fn: Callable[..., Any], inputs: tuple[Any, ...], *, count: int = 12,
                       seed: int = 0, meta_first: bool = False, explore: bool = False,
                       variants: list[tuple[Any, ...]] | None = None) -> list[str]:
    """Where `simplify(trace(fn, *inputs), explore=explore)` is not exact: shapes S (eager runs
    at S) at which the guards and a re-trace at S disagree.

    `explore=False` (the default) judges the example's path alone, which is exact by
    construction: `check(S)` must say whether re-tracing at S gives the same guard graph, i.e.
    the same bailouts (arithmetic nodes no bailout reads may differ). `explore=True` judges the
    merged routes for soundness: a failure is an S they accept where re-tracing records another
    trace (`tracer.difference`); rejecting an S of the same trace is measured by
    `benchmarks/paths.py`, not failed here (a route not explored).

    `meta_first` runs each variant under FakeTensorMode before eager and skips it where
    PyTorch's meta rules reject its shapes: some eager kernels check less than their meta
    rules (`aten.native_batch_norm` with running statistics of another size writes out of
    bounds), and an arbitrary op's sizes must not crash the process that sweeps them."""
    from guardsolve.ir.printer import print_guards
    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.divergence import difference
    from guardsolve.trace.tracer import trace

    t = trace(fn, *inputs)
    gs = simplify(t, explore=explore)
    reference = print_guards(t.guard_graph())
    failures: list[str] = []
    for variant in perturbed_inputs(random.Random(seed), inputs, count) if variants is None else variants:
        if meta_first and _meta_rejects(fn, variant):
            continue
        try:
            fn(*variant)
        except Exception:
            continue  # NOTE: eager itself rejects these sizes: nothing to compare
        try:
            u = trace(fn, *variant)
            same = difference(t, u) is None if explore else print_guards(u.guard_graph()) == reference
        except Exception:  # NOTE: no trace at S (user code fails on symbolic sizes): not the same
            same = False
        accepted = gs.check(*variant)
        if accepted != same and (accepted or not explore):
            shapes = [list(v.shape) if hasattr(v, "shape") else v for v in variant]
            failures.append(f"{shapes}: check says {accepted}, re-trace says {'same' if same else 'different'}")
    return failures


def _meta_rejects(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> bool:
    """Does `fn` fail at these shapes under FakeTensorMode with an error of its own (not one
    that says FakeTensor cannot run an op, which tells nothing about the shapes)?"""
    import logging

    import torch
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode, UnsupportedOperatorException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)  # NOTE: FakeTensor logs every meta failure with its traceback
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fn(*[mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in inputs])
    except (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException,
            GuardOnDataDependentSymNode, NotImplementedError):
        return False
    except Exception:
        return True
    finally:
        log.setLevel(level)
    return False


def size_variants(inputs: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The example's tensors at other sizes: each dim to 0, 1, 2, v-1, v+1 and 2v; each class
    of dims of equal example size moved together to those values, and apart (one member moved
    alone, which the per-dim changes already cover). Values are taken from the example's own
    (indices stay in range), each variant named by its changes.

    >>> import torch
    >>> [what for what, _ in size_variants((torch.ones(2), torch.ones(2)))][:4]
    ['a0=0', 'a0=1', 'a0=3', 'a0=4']
    """
    import torch

    from guardsolve.solve.explore.probes import resized

    dims = [(i, d, int(x.shape[d])) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) for d in range(x.dim())]

    def name(i: int, d: int) -> str:
        return f"{chr(ord('a') + i) if i < 26 else f'arg{i}_'}{d}"

    def values(v: int) -> list[int]:
        return sorted({0, 1, 2, max(v - 1, 0), v + 1, 2 * v} - {v})

    seen: set[tuple[Any, ...]] = set()

    def at(change: dict[tuple[int, int], int]) -> tuple[Any, ...] | None:
        key = tuple(sorted(change.items()))
        if key in seen:
            return None
        seen.add(key)
        return tuple(resized(x, [change.get((i, d), n) for d, n in enumerate(x.shape)])
                     if isinstance(x, torch.Tensor) else x for i, x in enumerate(inputs))

    for i, d, v in dims:
        for w in values(v):
            new = at({(i, d): w})
            if new is not None:
                yield f"{name(i, d)}={w}", new
    classes: dict[int, list[tuple[int, int]]] = {}
    for i, d, v in dims:
        classes.setdefault(v, []).append((i, d))
    for v, members in classes.items():
        if len(members) < 2:
            continue
        for w in values(v):
            new = at({m: w for m in members})
            if new is not None:
                yield ", ".join(f"{name(i, d)}={w}" for i, d in members), new


# -- random programs and eager's outcomes (the JIT's differential tests) ------------------------

_UNARY: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("sin", lambda x: x.sin()), ("relu", lambda x: x.relu()), ("sum(-1, keepdim)", lambda x: x.sum(-1, keepdim=True)),
    ("softmax(-1)", lambda x: x.softmax(-1)), ("view(b, -1)", lambda x: x.view(x.shape[0], -1)),
    ("t().contiguous()", lambda x: x.transpose(0, 1).contiguous()), ("* 2", lambda x: x * 2),
    ("mean(0)", lambda x: x.mean(0)), ("[:, :2]", lambda x: x[:, :2]), ("exp().log1p()", lambda x: x.exp().log1p()),
)
_BINARY: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
    ("a + b", lambda a, b: a + b), ("a * b", lambda a, b: a * b), ("cat([a, b])", lambda a, b: __import__("torch").cat([a, b])),
    ("a @ b.T", lambda a, b: a @ b.transpose(0, 1)), ("where(a > b, a, b)", lambda a, b: __import__("torch").where(a > b, a, b)),
)


def random_program(rng: random.Random) -> tuple[str, Callable[..., Any], tuple[Any, ...]]:
    """A small random program of two 2-D tensors (a binary op, then up to three unary ones:
    broadcasts, reductions, views, slices, matmul) with example inputs; its name says what it runs.

    >>> name, fn, inputs = random_program(random.Random(1))
    >>> isinstance(name, str), len(inputs)
    (True, 2)
    """
    import torch

    b_name, binary = rng.choice(_BINARY)
    unary = [rng.choice(_UNARY) for _ in range(rng.randint(0, 3))]

    def program(a: Any, b: Any) -> Any:
        z = binary(a, b)
        for _, u in unary:
            z = u(z)
        return z

    shape = lambda: (rng.choice([1, 2, 3, 4, 6]), rng.choice([1, 2, 3, 5]))  # noqa: E731
    a = shape()
    b = a if rng.random() < 0.5 else shape()
    name = " -> ".join([b_name, *[n for n, _ in unary]]) + f" at {list(a)}, {list(b)}"
    return name, program, (torch.randn(*a), torch.randn(*b))


def outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    """("ok", value) or ("raises", "Type: message") of one call."""
    try:
        return ("ok", fn(*args))
    except Exception as e:  # NOTE: the outcome is compared, not handled
        return ("raises", f"{type(e).__name__}: {e}")


def same_outcome(expected: tuple[str, Any], got: tuple[str, Any], atol: float = 1e-4) -> str | None:
    """None when `got` is eager's `expected`: the same values (tensors close, same shape and
    dtype) or an error of the same type; else what differs."""
    import torch
    from torch.utils._pytree import tree_flatten

    if expected[0] != got[0]:
        return f"eager {expected[0]} ({str(expected[1])[:120]}), got {got[0]} ({str(got[1])[:120]})"
    if expected[0] == "raises":
        e_type, g_type = expected[1].split(":")[0], got[1].split(":")[0]
        return None if e_type == g_type else f"eager raises {expected[1][:120]}, got {got[1][:120]}"
    fe, se = tree_flatten(expected[1])
    fg, sg = tree_flatten(got[1])
    if se != sg:
        return f"output structure {sg} where eager has {se}"
    for i, (x, y) in enumerate(zip(fe, fg)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return f"output {i}: {getattr(y, 'shape', y)} where eager has {tuple(x.shape)} {x.dtype}"
            if not torch.allclose(x, y, atol=atol, rtol=atol, equal_nan=True):
                return f"output {i}: values differ by {(x - y).abs().max().item():.3g}"
        elif x != y:
            return f"output {i}: {y!r} where eager has {x!r}"
    return None


# -- programs with state, and changes to it (the entries' differential fuzzer) ------------------

# NOTE: ops whose lowering or meta kernel specializes on sizes (Inductor's adaptive pools read
# their windows from the size; a pad, a cumsum, a sort): (name, fn of a [B, C, L] tensor)
_SIZED: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("adaptive_avg_pool1d(4)", lambda x: __import__("torch").nn.functional.adaptive_avg_pool1d(x, 4)),
    ("adaptive_max_pool1d(3)", lambda x: __import__("torch").nn.functional.adaptive_max_pool1d(x, 3)),
    ("interpolate(scale 2)", lambda x: __import__("torch").nn.functional.interpolate(x, scale_factor=2.0)),
    ("pad(1, 2)", lambda x: __import__("torch").nn.functional.pad(x, (1, 2))),
    ("cumsum(-1)", lambda x: x.cumsum(-1)),
    ("sort(-1)", lambda x: x.sort(-1).values),
    ("sum(-1, keepdim)", lambda x: x.sum(-1, keepdim=True)),
    ("unfold(-1, 2, 1)", lambda x: x.unfold(-1, 2, 1).mean(-1)),
    ("conv_transpose1d", lambda x: __import__("torch").nn.functional.conv_transpose1d(
        x, __import__("torch").ones(x.shape[1], 2, 3) * 0.1)),
)

SHARED: dict[str, Any] = {"shift": 0.25, "k": 1.5}  # NOTE: module state the programs read; the fuzzer rebinds it


_STATEFUL = """
class Stateful(nn.Module):
    \"\"\"A module whose forward reads every kind of state an entry must check.\"\"\"

    def __init__(self, channels, sized, cfg):
        super().__init__()
        self.proj = nn.Conv1d(channels, channels, 1)
        self.act = nn.ReLU()
        self.register_buffer("offset", torch.randn(channels, 1))
        self.table = torch.randn(channels, 1)  # a plain tensor attribute
        self.scale = 1.0
        self.flag = True
        self.cfg = cfg
        self.sized = sized

    def forward(self, x):
        y = self.act(self.proj(x)) * self.scale + self.offset
        if self.flag:
            y = y + self.table * self.cfg["bias"]
        if self.training:
            y = y * 0.5
        return self.sized(y) * SHARED["k"] + SHARED["shift"]
"""


@functools.lru_cache(maxsize=1)
def _stateful_class() -> type:
    """The programs' class, compiled as user code is, in a module of its own
    (`guardsolve_stateful_program`, registered in `sys.modules` as an imported module is, so
    that a saved entry names its globals), made once per process."""
    import sys
    import types

    import torch
    import torch.nn as nn

    module = types.ModuleType("guardsolve_stateful_program")
    module.__dict__.update(torch=torch, nn=nn, SHARED=SHARED)
    exec(compile(_STATEFUL, "<stateful program>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    return module.Stateful


@functools.lru_cache(maxsize=None)
def _residual_class() -> type:
    import torch

    class ResidualBlock(torch.nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)
            self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)

    return ResidualBlock


def residual_block(c: int) -> Any:
    """A resnet's basic block at `c` channels (conv, batch norm, relu, twice, plus the input):
    the tests' conv nets are built of it.

    >>> import torch
    >>> residual_block(3)(torch.zeros(1, 3, 4, 4)).shape
    torch.Size([1, 3, 4, 4])
    """
    return _residual_class()(c)


def random_stateful_program(rng: random.Random) -> tuple[str, Any, Callable[[], tuple[Any, ...]]]:
    """A module over [B, C, L] inputs that reads parameters, a buffer, a plain tensor attribute,
    a submodule, floats, a flag, a dict entry, `training` and this module's `SHARED` globals,
    then one op whose lowering specializes on sizes; and a maker of random inputs.

    >>> name, m, make = random_stateful_program(random.Random(0))
    >>> tuple(m(*make()).shape[:2]) == tuple(make()[0].shape[:2])
    True
    """
    import torch

    channels = rng.choice([1, 2, 3])
    sized_name, sized = rng.choice(_SIZED)
    m = _stateful_class()(channels, sized, {"bias": rng.choice([0.5, 1.0, 2.0])}).eval()
    m.requires_grad_(False)

    def make() -> tuple[Any, ...]:
        return (torch.randn(rng.choice([1, 2, 3]), channels, rng.choice([4, 5, 8, 9, 16, 17])),)

    return f"Stateful(C={channels}) -> {sized_name}", m, make


def random_state_change(rng: random.Random, m: Any) -> str:
    """Change one piece of the state `random_stateful_program`'s module reads; returns what."""
    import torch
    import torch.nn as nn

    c = m.proj.weight.shape[0]
    choice = rng.randrange(11)
    match choice:
        case 0:
            m.proj.weight = nn.Parameter(torch.randn(c, c, 1), requires_grad=False)
            return "weight replaced"
        case 1:
            m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True)
            m.requires_grad_(False)
            return "load_state_dict(assign=True)"
        case 2:
            m.offset = torch.randn(c, 1)
            return "buffer replaced"
        case 3:
            m.act = nn.Tanh() if isinstance(m.act, nn.ReLU) else nn.ReLU()
            return "submodule swapped"
        case 4:
            m.scale = rng.choice([0.5, 2.0, 1, 3.0])
            return f"scale = {m.scale!r}"
        case 5:
            m.flag = not m.flag
            return f"flag = {m.flag}"
        case 6:
            m.cfg["bias"] = rng.choice([-1.0, 0.5, 3.0])
            return f"cfg['bias'] = {m.cfg['bias']}"
        case 7:
            SHARED["shift"] = rng.choice([-0.5, 0.25, 1.0])
            return f"SHARED['shift'] = {SHARED['shift']}"
        case 8:
            m.train(not m.training)
            return "train()" if m.training else "eval()"
        case 9:
            m.table = torch.randn(c, 1)
            return "plain tensor attribute replaced"
        case _:
            with torch.no_grad():
                m.proj.weight.mul_(0.5)
            return "weight scaled in place"


# -- training side by side with eager (the JIT's training differential tests) --------------------


def _relative(a: Any, b: Any) -> float:
    """max |a - b| / max(1, max |b|): a relative difference that does not blow up near 0."""
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return float("inf")
    if not a.numel():
        return 0.0
    scale = max(1.0, b.abs().max().item())
    return ((a - b).abs().max().item()) / scale


def train_side_by_side(make_model: Callable[[], Any], batches: list[tuple[Any, ...]],
                       make_opt: Callable[[Any], Any], loss_fn: Callable[..., Any],
                       wrap: Callable[[Any], Callable[..., Any]]) -> tuple[float, Any]:
    """Train two copies of `make_model()` on the same `batches`, one called eagerly, one through
    `wrap(model)`, each with its own `make_opt(params)`: `loss = loss_fn(out, *batch[1:])`,
    `loss.backward()`, `opt.step()`, `opt.zero_grad()`. Returns the largest relative difference
    (`_relative`) over every step's loss, gradients, parameters and buffers (batch norm's
    running statistics and `num_batches_tracked` too), and the wrapped function.

    >>> import torch
    >>> worst, _ = train_side_by_side(lambda: torch.nn.Linear(3, 2), [(torch.randn(4, 3), torch.randn(4, 2))],
    ...                               lambda p: torch.optim.SGD(p, lr=0.1), torch.nn.functional.mse_loss, lambda m: m)
    >>> worst
    0.0
    """
    import copy

    import torch

    torch.manual_seed(0)
    ours = make_model()
    ref = copy.deepcopy(ours)
    fast = wrap(ours)
    opt_ours, opt_ref = make_opt(ours.parameters()), make_opt(ref.parameters())
    worst = 0.0
    for batch in batches:
        x, rest = batch[0], batch[1:]
        l_ours = loss_fn(fast(x), *rest)
        l_ours.backward()
        l_ref = loss_fn(ref(x), *rest)
        l_ref.backward()
        worst = max(worst, _relative(l_ours, l_ref))
        for p, q in zip(ours.parameters(), ref.parameters()):
            if (p.grad is None) != (q.grad is None):
                return float("inf"), fast
            if p.grad is not None:
                worst = max(worst, _relative(p.grad, q.grad))
        opt_ours.step()
        opt_ref.step()
        opt_ours.zero_grad()
        opt_ref.zero_grad()
        for p, q in zip(list(ours.parameters()) + list(ours.buffers()), list(ref.parameters()) + list(ref.buffers())):
            worst = max(worst, _relative(p, q))
    return worst, fast
