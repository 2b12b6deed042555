"""Guards read at a glance (`solve.readable`): each printed form is what the constraint means,
proven equivalent under the other guards, and the set accepts exactly what it did."""

from __future__ import annotations

import itertools
import random

import pytest
import z3

import guardsolve
from guardsolve.guards.expr import Poly, rel
from guardsolve.solve.readable import readable_formula
from guardsolve.solve.smt import formula_to_z3, z3_vars
from guardsolve.testing import accepts, random_guard_graph


def _solver_cases():  # type: ignore[no-untyped-def]
    """tests/test_solver_cases.py's `exact` (grid oracle plus z3 proof) and `texts`."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent / "test_solver_cases.py"
    spec = importlib.util.spec_from_file_location("_solver_cases", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_cases = _solver_cases()
exact, texts = _cases.exact, _cases.texts


@pytest.mark.parametrize("asserts, expected", [
    # the findings of issue 29, with the other guards that held x2 up
    (["(((((x0 - 1) // 2) // 2) // 2) // 2) // 2 != 0", "x0 >= 1"], ["x0 >= 33"]),
    (["(x0 - 2) // 2 != 0", "x0 >= 2"], ["x0 >= 4"]),
    (["((x0 - 2) // 2) + ((x0 - 2) // 2)*((y0 - 2) // 2) + ((y0 - 2) // 2) == 63"], ["(x0 // 2)*(y0 // 2) == 64"]),
    # a range, a residue, an exclusion
    (["(x0 + 3) // 4 == 2"], ["x0 <= 8", "x0 >= 5"]),  # decided as two bounds before z3
    (["(x0 // 4) * 4 == x0"], ["x0 % 4 == 0"]),
    (["x0 // 3 != 1"], ["(x0 <= 2) or (x0 >= 6)"]),  # decided as bounds before z3
    (["(3 * ((x0 // 4) % 4)) % 4 <= 0"], ["x0 % 16 <= 3"]),  # like Swin's window padding: a run of residues
    # a varying divisor, read under the guard that keeps it non-zero
    (["x0 % (x0 // 2) == 0", "x0 >= 6"], ["x0 >= 6", "x0 % 2 == 0"]),
])
def test_forms_read_as_what_they_mean(asserts: list[str], expected: list[str]) -> None:
    assert exact(asserts, sizes="x0 y0", ints="", hi=70 if "63" in asserts[0] else 40) == expected


def test_a_form_needs_its_background() -> None:
    """`(x - 1) // 2 // 2 // 2 // 2 // 2 != 0` holds at x = 0 too (floor of -1): alone it is not `x >= 33`."""
    x = Poly.var("x0")
    f = rel("ne", x - Poly.const(1), Poly.const(0))
    assert readable_formula(f, {"x0"}, ["x0"]) is None  # linear already: nothing shorter to say


@pytest.mark.parametrize("seed", range(120))
def test_printed_forms_keep_the_set_on_random_graphs(seed: int) -> None:
    """Random guard graphs with divisions: the printed set accepts exactly what the graph does
    (every point of a grid), z3 proves each printed form equal to the solver's under the others,
    and `verify()` covers the printed forms."""
    rng = random.Random(seed)
    g = random_guard_graph(rng, n_bailouts=4, tensors=1, rank=2, int_args=0, max_size=9)
    try:
        gs = guardsolve.simplify(g)
    except guardsolve.UnsatisfiableGuardsError:
        return
    plain = guardsolve.simplify(g, readable=False)
    for env in (dict(zip(("a0", "a1"), v)) for v in itertools.product(range(14), repeat=2)):
        assert gs.check_dims(env) == plain.check_dims(env) == accepts(g, env), (env, texts(gs), texts(plain))
    ctx = z3.Context()
    var = z3_vars(ctx)
    s = z3.Solver(ctx=ctx)
    s.add(*(var(d) >= 0 for d in gs.dims))
    true = z3.BoolVal(True, ctx)
    s.add(z3.And(true, *[formula_to_z3(c.formula, var) for c in gs]) != z3.And(true, *[formula_to_z3(c.formula, var) for c in plain]))
    assert s.check() == z3.unsat
    assert gs.verify().equivalent


@pytest.mark.slow
def test_swin_pins_its_image_size_in_four_short_guards() -> None:
    """Issue 29's Swin (window attention that pads to a multiple of the window): its nested
    divisions pin H = W = 32; the guards say so in four short lines, proved minimal."""
    import time

    import torch

    transformers = pytest.importorskip("transformers")
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                  window_size=4)
    model = transformers.SwinModel(cfg).eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        gs = guardsolve.simplify(guardsolve.trace(model, torch.randn(2, 3, 32, 32)))
    seconds = time.perf_counter() - t0
    assert sorted(c.text for c in gs) == ["pixel_values0 >= 2", "pixel_values1 == 3", "pixel_values2 == 32",
                                          "pixel_values3 == 32"]
    assert gs.minimal and gs.verify().equivalent
    assert seconds < 30  # NOTE: 1.3 s here; a loose bound on a shared machine (benchmarks/nested.py measures it)


def test_periodic_equal_decides_as_z3_does() -> None:
    """The solver-free decision of closed forms (`periodic_equal`) answers as z3 does, on random
    one-dim comparisons of nested divisions by constants against bounds and ranges."""
    import random

    from guardsolve.guards.expr import Div, Poly, disj, rel
    from guardsolve.solve.one_dim import periodic_equal
    from guardsolve.solve.proving import readable_proves

    rng = random.Random(29)
    X, K = Poly.var("x"), Poly.const
    decided = 0
    for _ in range(150):
        p = X.scale(rng.choice([1, 2, 3])) + K(rng.randint(-6, 6))
        for _ in range(rng.randint(1, 2)):
            kind = rng.choice(["floordiv", "mod"])
            p = Poly.var(Div(kind, p, K(rng.choice([2, 3, 4])))) + K(rng.randint(-3, 3))
        f = rel(rng.choice(["eq", "ne", "le", "ge"]), p, K(rng.randint(-2, 4)))
        lo, hi = sorted(rng.sample(range(0, 12), 2))
        g = rng.choice([rel("ge", X, K(lo)), rel("le", X, K(hi)), disj([rel("lt", X, K(lo)), rel("ge", X, K(hi))])])
        got = periodic_equal(f, g, "x")
        assert got is not None, f
        assert got == readable_proves(f, g, {"x"}, ["x"], [], 5000), (f, g)
        decided += got
    assert decided > 0  # NOTE: some pairs agree, so both answers are exercised


# -- many routes (issue 49, item 9) -----------------------------------------------------------

# NOTE: OpInfo's first sample of take_along_dim (torch.testing's op_db; benchmarks/paths.py
# --only take_along_dim): its C++ composite reads sizes as ints, so each route pins its own
TAKE_ALONG_INDEX = [[0, 4, 1, 3, 1], [0, 4, 1, 3, 1], [1, 1, 0, 0, 3], [3, 3, 3, 4, 4], [4, 0, 4, 2, 2]]


def _equal_by_z3(a: list, b: list, sizes: set[str]) -> bool:
    ctx = z3.Context()
    var = z3_vars(ctx)
    s = z3.Solver(ctx=ctx)
    dims = {d for f in a + b for d in f.dims()}
    s.add(*(var(d) >= 0 for d in dims if d in sizes))
    s.add(z3.And([formula_to_z3(f, var) for f in a]) != z3.And([formula_to_z3(f, var) for f in b]))
    return s.check() == z3.unsat


def _disjuncts(line: str) -> int:
    return line.count(" or ") + 1


def test_take_along_dims_merged_routes_print_as_the_examples_route_and_a_count() -> None:
    """43 routes, each pinning its own sizes, have no short equivalent: the guard stays whole
    (its check is the same), and prints as the example's route and how many more; every
    printed line joins at most MAX_DISJUNCTS parts. `explain(verbose=True)` lists every route,
    and the routes it prints, read as Python, accept exactly what the unprinted guard does."""
    import torch

    from guardsolve.solve.constraint import DimOrder, render_formula
    from guardsolve.solve.cases import MAX_DISJUNCTS
    from guardsolve.solve.one_dim import holds

    torch.manual_seed(0)
    x, index = torch.randn(5, 5), torch.tensor(TAKE_ALONG_INDEX)
    t = guardsolve.trace(lambda a, i: torch.take_along_dim(a, i, 0), x, index)
    gs = guardsolve.simplify(t)
    raw = guardsolve.simplify(t, readable=False)
    (wide,) = [c for c in raw if c.formula.__class__.__name__ == "Or" and len(c.formula.args) > MAX_DISJUNCTS]
    printed = str(gs).splitlines()
    assert all(_disjuncts(line) <= MAX_DISJUNCTS for line in printed), printed
    n = len(wide.formula.args)
    assert printed[0] == f"one of {n} routes over a0, a1, i0, i1; the example's:", printed
    example = {"a0": 5, "a1": 5, "i0": 5, "i1": 5}
    assert n > 30 and all(eval(p, {}, dict(example)) for p in printed[1].strip().split(", ")), printed
    assert printed[2] == f"    (or one of {n - 1} more: explain(verbose=True) lists them)"
    # the same set, by z3 and at sample points; the printed route holds at the example and implies the guard
    sizes = set(gs.sizes)
    assert _equal_by_z3([c.formula for c in gs], [c.formula for c in raw], sizes)
    (c,) = [c for c in gs if c.shown]
    route = [f for f in c.formula.args if ", ".join(sorted(printed[1].strip().split(", "))) ==
             ", ".join(sorted(render_formula(f, DimOrder(list(c.dims))).replace("(", "").replace(")", "")
                              .split(" and ")))]
    assert len(route) == 1 and holds(route[0], example)
    assert _equal_by_z3([route[0]], [route[0], c.formula], sizes)  # NOTE: the route implies the guard
    verbose = gs.explain(verbose=True).splitlines()
    at = verbose.index(f"one of {n}:")
    rows = [r.strip() for r in verbose[at + 1:at + 1 + n]]
    rng = random.Random(0)
    for _ in range(600):
        point = {d: rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]) for d in c.dims}
        listed = any(all(eval(p, {}, dict(point)) for p in r.split(", ")) for r in rows)
        assert gs.check_dims(point) == raw.check_dims(point) == listed == holds(wide.formula, point), point
    assert repr(gs).endswith(f"one of {n} routes over a0, a1, i0, i1>")


def test_routes_split_by_a_dim_print_one_guard_per_case() -> None:
    """Twelve routes, four for each of x0 in {0, 1} and x0 >= 2: a guard per case of x0, each
    of four routes, proven equivalent (z3), and equal at every point of a grid."""
    from guardsolve.guards.expr import conj, disj
    from guardsolve.solve.constraint import Constraint, DimOrder, render_formula
    from guardsolve.solve.cases import MAX_DISJUNCTS, many_routes
    from guardsolve.solve.one_dim import holds

    x, y, z, K = Poly.var("x0"), Poly.var("y0"), Poly.var("z0"), Poly.const
    cases = [rel("eq", x, K(0)), rel("eq", x, K(1)), rel("ge", x, K(2))]
    f = disj(conj([case, rel("eq", y, K(k + i)), rel("ge", z, K(k))]) for i, case in enumerate(cases) for k in range(4))
    order = DimOrder(["x0", "y0", "z0"])
    c = Constraint("general", f, render_formula(f, order), frozenset({7}), ("x0", "y0", "z0"))
    out = many_routes([c], {"x0", "y0", "z0"}, ["x0", "y0", "z0"], None)
    assert len(out) == 3 and all(_disjuncts(g.text) <= MAX_DISJUNCTS and not g.shown and g.prov == {7} for g in out)
    assert "(x0 != 0) or " in out[0].text + out[1].text + out[2].text
    assert _equal_by_z3([g.formula for g in out], [f], {"x0", "y0", "z0"})
    for point in itertools.product(range(6), repeat=3):
        env = dict(zip(["x0", "y0", "z0"], point))
        assert all(eval(g.text, {}, dict(env)) for g in out) == holds(f, env), env


def test_routes_that_share_conjuncts_print_them_once() -> None:
    """`(A and B) or (A and C) ...` is `A` and `B or C ...`: A a guard of its own."""
    from guardsolve.guards.expr import conj, disj
    from guardsolve.solve.constraint import Constraint, DimOrder, render_formula
    from guardsolve.solve.cases import many_routes

    x, y, K = Poly.var("x0"), Poly.var("y0"), Poly.const
    f = disj(conj([rel("eq", x, y), rel("eq", y, K(k * k))]) for k in range(10))
    c = Constraint("general", f, render_formula(f, DimOrder(["x0", "y0"])), frozenset(), ("x0", "y0"))
    out = many_routes([c], {"x0", "y0"}, ["x0", "y0"], {"x0": 4, "y0": 4})
    assert out[0].text == "x0 == y0" and out[0].kind == "eq"
    assert _equal_by_z3([g.formula for g in out], [f], {"x0", "y0"})
    assert out[1].lines() == ["one of 10 routes over y0; the example's:", "    y0 == 4",
                              "    (or one of 9 more: explain(verbose=True) lists them)"]
