"""Oracle properties of simplify() over random guard graphs that use every guard op.

Each graph's bailouts expect the values seen at a random trace-time assignment (as a real
trace's do); some graphs flip expectations and may be contradictory. Half the graphs are
`signed`: negative constants and divisors, `2*x - 1` numerators, int args that may be
negative, where Python's `//` and `%` round differently from truncation.

Example counts are those of the `ci` hypothesis profile (derandomized; tests/conftest.py);
`HYPOTHESIS_PROFILE=long` draws random seeds and 10x the examples. Failures it found are the
`@example` cases below.
"""

from __future__ import annotations

import pathlib
import random

import pytest
import z3
from hypothesis import example, given, settings
from hypothesis import strategies as st

import guardsolve
from guardsolve.errors import UnsatisfiableGuardsError
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.solve.smt import graph_to_z3, z3_vars
from guardsolve.testing import accepts, examples, random_guard_graph


def graph(seed: int, n: int, tensors: int, nonlinear: bool, small: bool, signed: bool = False,
          int_args: int = 1) -> Graph:
    g = random_guard_graph(random.Random(seed), n_bailouts=n, tensors=tensors, nonlinear=nonlinear,
                           max_size=3 if small else 6, rank=3 if small else 2, signed=signed,
                           int_args=int_args)
    return with_example(g, seed)


def with_example(g: Graph, seed: int) -> Graph:
    """Some graphs carry their recording point as `meta["example"]`, as traces do (simplify then
    starts from it instead of a solver model); some carry a wrong one, which it must not trust."""
    if seed % 3 == 1:
        g.meta["example"] = dict(g.meta["trace_dims"])
    elif seed % 3 == 2:
        g.meta["example"] = {d: v + (seed >> 2) % 3 - 1 for d, v in g.meta["trace_dims"].items()}
    return g


graphs = st.builds(graph, st.integers(0, 2**32), st.integers(1, 12), st.integers(1, 3), st.booleans(),
                   st.booleans(), st.booleans(), st.integers(0, 2))


def assignments(g: Graph, seed: int, n: int = 150) -> list[dict[str, int]]:
    rng = random.Random(seed)
    names = list(g.meta["trace_dims"])
    out = [dict(g.meta["trace_dims"])]
    for _ in range(n):
        out.append({d: rng.randint(0, 7) if not d.startswith("n") else rng.randint(-6, 6) for d in names})
    return out


@given(graphs, st.integers(0, 1000))
@settings(max_examples=examples(120))
def test_agrees_with_original_on_random_sizes(g: Graph, seed: int) -> None:
    gs = guardsolve.simplify(g)
    for env in assignments(g, seed):
        assert gs.check_dims(env) == accepts(g, env), (env, str(gs))


@given(graphs)
@settings(max_examples=examples(120))
def test_z3_proves_equivalent_and_irredundant(g: Graph) -> None:
    gs = guardsolve.simplify(g)
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant
    assert set(cert.witnesses) == {str(c) for c in gs}


@given(graphs)
@settings(max_examples=examples(80))
def test_idempotent(g: Graph) -> None:
    gs = guardsolve.simplify(g)
    again = guardsolve.simplify(gs.to_graph())
    assert [str(c) for c in again] == [str(c) for c in gs]


@given(graphs, st.integers(0, 1000))
@settings(max_examples=examples(80))
def test_compiled_check_agrees_with_interpreting_the_constraints(g: Graph, seed: int) -> None:
    gs = guardsolve.simplify(g)
    small = gs.to_graph()
    for env in assignments(g, seed, 50):
        assert gs.check_dims(env) == accepts(small, env)


@given(st.integers(0, 2**32), st.integers(2, 10), st.booleans())
@settings(max_examples=examples(120))
def test_contradictions_are_reported_exactly(seed: int, n: int, signed: bool) -> None:
    g = random_guard_graph(random.Random(seed), n_bailouts=n, flip=0.3, max_size=3, signed=signed)
    var = z3_vars()
    s = z3.Solver()
    s.add(graph_to_z3(g, var), *[var(d) >= 0 for d in g.meta["trace_dims"] if not d.startswith("n")])
    truly_unsat = s.check() == z3.unsat
    try:
        gs = guardsolve.simplify(g)
    except UnsatisfiableGuardsError as e:
        assert truly_unsat and e.conflict
        return
    assert not truly_unsat
    gs.verify()


def _atoms(g: Graph) -> list:
    from guardsolve.guards.normalize import normalize

    return [a.formula for a in normalize(guardsolve.guard_graph(g)).atoms]


@given(graphs)
@settings(max_examples=examples(80))
def test_smtlib_lowering_means_what_the_api_lowering_means(g: Graph) -> None:
    from guardsolve.guards import semantics
    from guardsolve.solve.smt import formula_to_smtlib, formula_to_z3

    ctx = z3.Context()
    var = z3_vars(ctx)
    for f in _atoms(g):
        api = formula_to_z3(f, var)
        decls = "".join(f"(declare-fun |{d}| () Int)" for d in sorted(f.dims()))
        text = z3.parse_smt2_string(semantics.SMTLIB_DEFS + decls + f"(assert {formula_to_smtlib(f)})", ctx=ctx)[0]
        s = z3.Solver(ctx=ctx)
        s.add(api != text)
        assert s.check() == z3.unsat, f


@given(graphs, st.integers(0, 1000))
@settings(max_examples=examples(80))
def test_witness_points_break_exactly_one_constraint(g: Graph, seed: int) -> None:
    from guardsolve.solve.witness import Witnesses

    atoms = _atoms(g)
    if not atoms:
        return
    var = z3_vars()
    s = z3.Solver()
    sizes = {d for d in g.meta["trace_dims"] if not d.startswith("n")}
    dims = set().union(*(f.dims() for f in atoms))
    s.add(*[guardsolve.solve.smt.formula_to_z3(f, var) for f in atoms], *[var(d) >= 0 for d in dims & sizes])
    if s.check() != z3.sat:
        return
    m = s.model()
    w = Witnesses(atoms, [], sizes, {d: m.eval(var(d), model_completion=True).as_long() for d in dims})
    active = set(random.Random(seed).sample(range(len(atoms)), k=max(1, len(atoms) // 2))) | {0}
    for i in sorted(active):
        point = w.find(i, active)
        if point is None:
            continue
        at = [(var(d), z3.IntVal(v)) for d, v in point.items()]

        def holds(f: object) -> bool:  # z3 is the oracle, not the Python evaluator under test
            return z3.is_true(z3.simplify(z3.substitute(guardsolve.solve.smt.formula_to_z3(f, var), *at)))

        assert not holds(atoms[i])
        assert all(holds(atoms[j]) for j in active if j != i)
        assert all(point[d] >= 0 for d in dims & sizes)


@st.composite
def difference_graphs(draw: st.DrawFn) -> Graph:
    """Orderings with offsets, bounds and disequalities over a few dims, recorded at one point.

    This is the fragment the ordering layer decides without z3, except where a disequality
    can matter; small domains make disequalities interact with bounds.
    """
    n = draw(st.integers(3, 4))
    dims = [f"d{i}" for i in range(n)]
    point = {d: draw(st.integers(0, 2)) for d in dims}
    g = Graph()
    for d in dims:
        g.emit(Op.INT_PLACEHOLDER, (), out=d, name=d)
    ops = {Op.INT_LT: lambda a, b: a < b, Op.INT_LE: lambda a, b: a <= b, Op.INT_GE: lambda a, b: a >= b,
           Op.INT_NE: lambda a, b: a != b, Op.INT_EQ: lambda a, b: a == b}
    for _ in range(draw(st.integers(4, 12))):
        op = draw(st.sampled_from(sorted(ops, key=str)))
        a = draw(st.sampled_from(dims))
        # NOTE: boundaries pass next to the point, where bounds and disequalities interact
        if draw(st.booleans()):
            c = max(0, point[a] + draw(st.integers(-1, 1)))
            rhs, value = g.emit(Op.INT_CONST, (), val=c), c
        else:
            b = draw(st.sampled_from(dims))
            off = point[a] - point[b] + draw(st.integers(-1, 1))
            rhs = g.emit(Op.INT_ADD, (b, g.emit(Op.INT_CONST, (), val=off)))
            value = point[b] + off
        g.emit(Op.BOOL_BAILOUT, (g.emit(op, (a, rhs)),), expect=ops[op](point[a], value))
    g.meta["trace_dims"] = point
    return with_example(g, draw(st.integers(0, 11)))


@given(difference_graphs())
@settings(max_examples=examples(300))
def test_orderings_with_disequalities_are_minimal(g: Graph) -> None:
    gs = guardsolve.simplify(g)
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant


_DIV = {Op.INT_FLOORDIV: lambda a, b: a // b, Op.INT_MOD: lambda a, b: a % b}
_CMPS = {Op.INT_EQ: lambda a, b: a == b, Op.INT_NE: lambda a, b: a != b, Op.INT_LT: lambda a, b: a < b,
         Op.INT_LE: lambda a, b: a <= b, Op.INT_GT: lambda a, b: a > b, Op.INT_GE: lambda a, b: a >= b}


@st.composite
def division_graphs(draw: st.DrawFn) -> Graph:
    """`(c*x + k) // d` and `(c*x + k) % d` compared with a constant or a dim, recorded at one point.

    x is a size or an int argument (negative too), c and d may be negative and d may equal c:
    `(2*x - 1) // 2` folds to `x + (-1 // 2)`, where floor and truncation differ.
    """
    g = Graph()
    point = {d: draw(st.integers(0, 6)) for d in ("a0", "b0")} | {n: draw(st.integers(-6, 6)) for n in ("n0", "n1")}
    for d in point:
        g.emit(Op.INT_ARG if d.startswith("n") else Op.INT_PLACEHOLDER, (), out=d, name=d)

    def const(v: int) -> str:
        return g.emit(Op.INT_CONST, (), val=v)

    for _ in range(draw(st.integers(1, 4))):
        x = draw(st.sampled_from(sorted(point)))
        c, k = draw(st.sampled_from([-3, -2, -1, 2, 3])), draw(st.integers(-5, 5))
        num = g.emit(Op.INT_ADD, (g.emit(Op.INT_MUL, (const(c), x)), const(k)))
        den = draw(st.sampled_from([c, -c, 1, -1, 2, -2, 3, -3, 4, -4]))
        op = draw(st.sampled_from(sorted(_DIV, key=str)))
        value = _DIV[op](c * point[x] + k, den)
        q = g.emit(op, (num, const(den)))
        if draw(st.booleans()):
            rhs, other = const(v := value + draw(st.integers(-1, 1))), v
        else:
            y = draw(st.sampled_from(sorted(point)))
            rhs, other = y, point[y]
        cmp = draw(st.sampled_from(sorted(_CMPS, key=str)))
        g.emit(Op.BOOL_BAILOUT, (g.emit(cmp, (q, rhs)),), expect=_CMPS[cmp](value, other))
    g.meta["trace_dims"] = point
    return with_example(g, draw(st.integers(0, 11)))


def _division_example(*lines: str, **point: int) -> Graph:
    """An `@example` graph over division_graphs()'s dims, recorded at `point`."""
    head = ["a0 = int_placeholder(name=a0)", "b0 = int_placeholder(name=b0)", "n0 = int_arg(name=n0)",
            "n1 = int_arg(name=n1)"]
    g = Graph.parse("\n".join(head + list(lines)))
    g.meta["trace_dims"] = {"a0": 0, "b0": 0, "n0": 0, "n1": 0} | point
    return g


# NOTE: the cases: `n0 == -3` with `n0 // 2 == -2` is satisfiable, and
# `(2*n0 - 1) // 2 == n0 - 1` always holds (truncation would call them contradictory)
_NEG3 = _division_example("i0 = int_const(val=-3)", "i1 = int_eq(n0, i0)", "bool_bailout(i1, expect=True)",
                          "i2 = int_const(val=2)", "i3 = int_floordiv(n0, i2)", "i4 = int_const(val=-2)",
                          "i5 = int_eq(i3, i4)", "bool_bailout(i5, expect=True)", n0=-3)
_TWO_X = _division_example("i0 = int_const(val=2)", "i1 = int_mul(i0, n0)", "i2 = int_const(val=1)",
                           "i3 = int_sub(i1, i2)", "i4 = int_floordiv(i3, i0)", "i5 = int_sub(n0, i2)",
                           "i6 = int_eq(i4, i5)", "bool_bailout(i6, expect=True)", n0=-2)


@given(division_graphs(), st.integers(0, 1000))
@example(_NEG3, 0)
@example(_TWO_X, 0)
@settings(max_examples=examples(100))
def test_floor_division_and_modulo_of_negatives_agree_with_python(g: Graph, seed: int) -> None:
    """Python's `//` and `%` (negative numerators, either sign of divisor) through normalize and
    simplify: the simplified guards accept exactly what the original graph accepts."""
    gs = guardsolve.simplify(g)
    rng = random.Random(seed)
    envs = [dict(g.meta["trace_dims"])]
    envs += [{"a0": rng.randint(0, 6), "b0": rng.randint(0, 6), "n0": n0, "n1": rng.randint(-6, 6)}
             for n0 in range(-6, 7) for _ in range(4)]
    for env in envs:
        assert gs.check_dims(env) == accepts(g, env), (env, str(gs))


# -- larger sizes (slow: `python -m pytest -m slow -k larger`) ---------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_larger_random_graphs_are_exact_and_verified(seed: int) -> None:
    """Up to 8 tensors of rank 3 and 300 bailouts (the default draws have at most 12), with the
    example point, a wrong one or none (`with_example`): oracle on random sizes, z3 proofs."""
    rng = random.Random(seed)
    g = with_example(random_guard_graph(rng, n_bailouts=rng.randint(50, 300), tensors=rng.randint(3, 8), rank=3,
                                        nonlinear=seed % 2 == 0, signed=seed % 4 == 1, int_args=2), seed)
    try:
        gs = guardsolve.simplify(g)
    except UnsatisfiableGuardsError:
        pytest.fail("a graph recorded at a point is satisfiable")
    for env in assignments(g, seed, 300):
        assert gs.check_dims(env) == accepts(g, env), (env, str(gs))
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant


@pytest.mark.slow
@pytest.mark.parametrize("n", [400, 20000])
def test_scale_workload_is_exact_on_random_sizes_and_its_sample_is_verified(n: int) -> None:
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "benchmarks"))
    from workloads import scale_guard_graph

    g = scale_guard_graph(n)
    gs = guardsolve.simplify(g)
    rng = random.Random(n)
    example = g.meta["example"]
    names = sorted(example)
    accepted = 0
    for _ in range(200):
        env = dict(example)
        for d in rng.sample(names, rng.randint(1, 3)):  # NOTE: a few dims moved: some pass, some fail
            env[d] = max(0, env[d] + rng.choice([-2, -1, 1, 2, env[d]]))
        want = accepts(g, env)
        accepted += want
        assert gs.check_dims(env) == want
    assert 0 < accepted < 200
    if n <= 400:  # NOTE: z3's proof of the whole graph grows fast with its size
        cert = gs.verify(timeout_ms=60000)
        assert cert.equivalent and cert.irredundant
