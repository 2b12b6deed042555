"""simplify(): each layer on small exact cases, contradictions, timeouts, and the GuardSet API."""

from __future__ import annotations

import random
import textwrap

import pytest
import torch
import z3

import guardsolve
from guardsolve import Graph, UnsatisfiableGuardsError, simplify
from guardsolve.errors import InputMismatchError, VerificationError


def guards(*lines: str, dims: str = "a0 a1 b0 b1 c0 x0", ints: str = "") -> Graph:
    """A guard graph from Python-ish asserts, built through a traced function."""
    text = [f"{d} = int_placeholder(name={d})" for d in dims.split()]
    text += [f"{d} = int_arg(name={d})" for d in ints.split()]
    return _compile(text, lines)


def _compile(text: list[str], asserts: tuple[str, ...]) -> Graph:
    g = Graph.parse("\n".join(text))
    from guardsolve.guards.expr import rel
    from guardsolve.solve.tograph import emit_bailout

    # NOTE: asserts are written `lhs OP rhs` over dims and small ints, or `not (...)`.
    for a in asserts:
        expect = not a.startswith("not ")
        body = a[4:].strip("()") if not expect else a
        for op, name in (("==", "eq"), ("!=", "ne"), ("<=", "le"), (">=", "ge"), ("<", "lt"), (">", "gt")):
            if f" {op} " in body:
                lhs, rhs = body.split(f" {op} ")
                f = rel(name, _poly(lhs), _poly(rhs))
                break
        else:
            raise AssertionError(a)
        from guardsolve.guards.expr import negate
        emit_bailout(g, f if expect else negate(f))
    return g


def _poly(s: str):  # type: ignore[no-untyped-def]
    from guardsolve.guards.expr import Poly

    total = Poly.const(0)
    for term in s.replace(" - ", " + -").split(" + "):
        sign = -1 if term.startswith("-") else 1
        p = Poly.const(sign)
        for f in (x.strip() for x in term.lstrip("-").split("*")):
            p = p * (Poly.const(int(f)) if f.isdigit() else Poly.var(f))
        total = total + p
    return total


def texts(gs: guardsolve.GuardSet) -> list[str]:
    return [str(c) for c in gs]


# -- the named cases -----------------------------------------------------------------


def test_notebook_example_gives_two_constraints() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4))
    gs = simplify(t.graph, verify=True, explore=False)
    assert texts(gs) == ["a0 == b0", "a0 != 1"]
    assert gs.minimal


def test_broadcast_4x1_plus_1x3() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4, 1), torch.randn(1, 3))
    gs = simplify(t.graph, verify=True, explore=False)
    # PyTorch's rules: b1 != 1 becomes b1 >= 2 with the output's size check, and a0 == 0 is
    # excluded by the output's numel test (a0*b1 >= 2)
    assert texts(gs) == ["a1 == 1", "b0 == 1", "b1 >= 2", "a0 != 1", "a0*b1 >= 2"]


def test_chain_of_50_adds() -> None:
    def chain(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out

    t = guardsolve.trace(chain, *[torch.randn(8) for _ in range(50)])
    gs = simplify(t.graph, verify=True, explore=False)
    assert len(t.guard_graph().bailouts()) == 100  # FakeTensor's fast path: 2 questions per add
    assert len(gs) == 50
    assert texts(gs)[:2] == ["xs_0_0 == xs_1_0", "xs_0_0 == xs_2_0"] and texts(gs)[-1] == "xs_0_0 != 1"


def test_shape_branch() -> None:
    def f(x):
        if x.shape[0] > 16:
            return x * x
        return x + x

    assert texts(simplify(guardsolve.trace(f, torch.randn(20)).graph, verify=True, explore=False)) == ["x0 >= 17"]
    # NOTE: PyTorch's infer_size would ask whether x0 == 1 even for x + x; the shape is x0's
    # for every value, so guardsolve does not ask, and x0 == 1 is accepted
    assert texts(simplify(guardsolve.trace(f, torch.randn(3)).graph, verify=True, explore=False)) == ["x0 <= 16"]


# -- layer by layer --------------------------------------------------------------------------


@pytest.mark.parametrize("asserts, expected", [
    (["a0 == a0"], []),
    (["b0 == a0", "a0 == b0"], ["a0 == b0"]),
    (["a0 == b0", "not (a0 == 1)", "not (b0 == 1)"], ["a0 == b0", "a0 != 1"]),
    (["a0 == 4", "not (a0 == 3)"], ["a0 == 4"]),
    (["a0 == 4", "b0 == a0"], ["a0 == 4", "b0 == 4"]),
    (["b0 == a0 + 3", "c0 == b0"], ["b0 == a0 + 3", "c0 == a0 + 3"]),
    (["x0 > 16", "x0 > 8"], ["x0 >= 17"]),
    (["not (x0 == 0)", "not (x0 == 1)"], ["x0 >= 2"]),
    (["x0 >= 4", "x0 <= 4"], ["x0 == 4"]),
    (["a0 <= b0", "b0 <= a0"], ["a0 == b0"]),
    (["a0 < b0", "b0 < c0", "a0 < c0"], ["a0 < b0", "b0 < c0"]),
    (["a0 <= b0 + 3", "a0 <= b0 + 5"], ["a0 <= b0 + 3"]),
    (["a0 <= b0", "not (a0 == b0)"], ["a0 < b0"]),
    (["a0 < b0", "not (a0 == b0)", "not (b0 == 0)"], ["a0 < b0"]),
    (["x0 >= 0"], []),
    (["a0 * a1 == b0", "a1 == 4"], ["a1 == 4", "4*a0 == b0"]),
    (["a0 * a1 == b0", "a1 == 1"], ["a0 == b0", "a1 == 1"]),
    (["a0 * a1 == b0", "a1 == 0"], ["a1 == 0", "b0 == 0"]),
    (["x0 <= 5", "a0 <= x0", "a0 <= 5"], ["a0 <= x0", "x0 <= 5"]),
    # x0 == 5 would force a0 == b0 == 0: the disequality makes `x0 != 5` (tightened to
    # `x0 >= 6`) redundant, which shortest paths alone cannot see (z3 decides this component)
    (["x0 >= a0 + 5", "x0 >= b0 + 5", "not (a0 == b0)", "not (x0 == 5)"],
     ["a0 <= x0 - 5", "b0 <= x0 - 5", "a0 != b0"]),
])
def test_layers(asserts: list[str], expected: list[str]) -> None:
    gs = simplify(guards(*asserts), verify=True)
    assert texts(gs) == expected


def test_modulo_and_floordiv_guards() -> None:
    g = Graph.parse(textwrap.dedent("""\
        x0 = int_placeholder(name=x0)
        b0 = int_placeholder(name=b0)
        i0 = int_const(val=8)
        i1 = int_mod(x0, i0)
        i2 = int_const(val=0)
        i3 = int_eq(i1, i2)
        bool_bailout(i3, expect=True)
        i4 = int_floordiv(x0, b0)
        i5 = int_const(val=2)
        i6 = int_eq(i4, i5)
        bool_bailout(i6, expect=True)"""))
    gs = simplify(g, verify=True)
    assert texts(gs) == ["x0 % 8 == 0", "x0 // b0 == 2"]  # b0 != 0 is implied by x0 // b0 == 2
    assert gs.check_dims({"x0": 16, "b0": 8}) and not gs.check_dims({"x0": 16, "b0": 0})
    assert not gs.check_dims({"x0": 12, "b0": 6})


def test_int_args_may_be_negative() -> None:
    gs = simplify(guards("n < 0", "n < 3", dims="", ints="n"), verify=True)
    assert texts(gs) == ["n <= -1"]


# -- contradictions --------------------------------------------------------------------------


@pytest.mark.parametrize("asserts, named", [
    (["a0 == 1", "a0 == 2"], 2),
    (["a0 == b0", "b0 == 2", "a0 == 3"], 3),
    (["a0 < b0", "b0 < a0"], 2),
    (["x0 >= 5", "x0 <= 3"], 2),
    (["a0 + 1 == 0"], 1),
    (["a0 == b0", "not (a0 == b0)"], 2),
    (["a0 <= b0", "b0 <= a0", "not (a0 == b0)"], 3),
])
def test_contradictions_name_the_constraints(asserts: list[str], named: int) -> None:
    with pytest.raises(UnsatisfiableGuardsError) as info:
        simplify(guards(*asserts))
    assert len(info.value.conflict) == named
    assert all("bool_bailout" in c for c in info.value.conflict)


def test_contradiction_found_by_z3() -> None:
    g = Graph.parse(textwrap.dedent("""\
        x0 = int_placeholder(name=x0)
        i0 = int_const(val=2)
        i1 = int_mod(x0, i0)
        i2 = int_const(val=0)
        i3 = int_eq(i1, i2)
        bool_bailout(i3, expect=True)
        i4 = int_mul(x0, i0)
        i5 = int_const(val=6)
        i6 = int_eq(i4, i5)
        bool_bailout(i6, expect=True)"""))
    with pytest.raises(UnsatisfiableGuardsError, match="line 6.*line 10|bool_bailout"):
        simplify(g)


# -- solver timeouts -------------------------------------------------------------------------

HARD = textwrap.dedent("""\
    a0 = int_placeholder(name=a0)
    a1 = int_placeholder(name=a1)
    b0 = int_placeholder(name=b0)
    b1 = int_placeholder(name=b1)
    i0 = int_mul(a0, a1)
    i1 = int_mul(b0, b1)
    i2 = int_const(val=7)
    i3 = int_add(i1, i2)
    i4 = int_eq(i0, i3)
    bool_bailout(i4, expect=True)
    i5 = int_mul(i0, i0)
    i6 = int_mul(i1, b0)
    i7 = int_le(i5, i6)
    bool_bailout(i7, expect=False)""")


def test_unknown_keeps_the_constraint(monkeypatch: pytest.MonkeyPatch) -> None:
    real = z3.Solver.check

    def check(self, *assumptions):  # type: ignore[no-untyped-def]
        return z3.unknown if len(assumptions) > 1 else real(self, *assumptions)

    monkeypatch.setattr(z3.Solver, "check", check)
    gs = simplify(Graph.parse(HARD))
    monkeypatch.undo()
    assert not gs.minimal
    assert sum("implied by the rest? solver said unknown" in u for u in gs.undecided) == 2
    assert len(gs) == 2  # both kept: sound, maybe not minimal
    _assert_equivalent(gs)


def test_tiny_timeout_stays_sound() -> None:
    gs = simplify(Graph.parse(HARD), timeout_ms=1)
    assert gs.minimal == (not gs.undecided)
    _assert_equivalent(gs)


def _assert_equivalent(gs: guardsolve.GuardSet) -> None:
    from guardsolve.solve.smt import graph_to_z3, z3_vars

    var = z3_vars()
    s = z3.Solver()
    s.add(*[var(d) >= 0 for d in gs.dims])
    s.add(graph_to_z3(gs.graph, var) != gs.to_z3())
    assert s.check() == z3.unsat


# -- the GuardSet API ------------------------------------------------------------------------


def test_constraints_are_python_expressions() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(5, 1), torch.randn(5))
    gs = simplify(t.graph, explore=False)
    rng = random.Random(0)
    for _ in range(200):
        dims = {d: rng.randint(0, 6) for d in gs.dims}
        assert gs.check_dims(dims) == all(eval(str(c), {}, dims) for c in gs)


def test_check_uses_the_traced_signature() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4))
    gs = simplify(t.graph, explore=False)
    assert gs.check(torch.randn(7), torch.randn(7))
    assert gs.check(a=torch.randn(7), b=torch.randn(7))
    assert not gs.check(torch.randn(1), torch.randn(1))
    assert not gs.check(torch.randn(7), torch.randn(6))
    assert not gs.check(torch.randn(7, 1), torch.randn(7))
    with pytest.raises(InputMismatchError, match="traced inputs"):
        gs.check(torch.randn(7))
    assert "def check(a, b):" in gs.source() and "(a0 == b0) and (a0 != 1)" in gs.source()


def test_check_dims_errors_name_the_dims() -> None:
    gs = simplify(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)).graph, explore=False)
    with pytest.raises(InputMismatchError, match="missing dims: b0"):
        gs.check_dims({"a0": 4})
    with pytest.raises(InputMismatchError, match="unknown dims: c0"):
        gs.check_dims({"a0": 4, "b0": 4, "c0": 1})


def test_parsed_guard_graph_has_no_signature() -> None:
    gs = simplify(guards("a0 == b0"))
    with pytest.raises(InputMismatchError, match="use check_dims"):
        gs.check(torch.randn(1))
    assert gs.source().startswith("def check_dims(")


def test_explain_names_source_lines() -> None:
    def f(x, y):
        assert x.shape[0] == y.shape[0]
        return x + y

    gs = simplify(guardsolve.trace(f, torch.randn(3), torch.randn(3)).graph, explore=False)
    text = gs.explain()
    assert "x0 == y0" in text and "assert x.shape[0] == y.shape[0]" in text and "test_simplify.py:" in text
    assert "from x0 == y0  at" in text  # the bailout as the condition it asserts, normalized
    assert "implied by the above (dropped): 1\n" in text and "(1 bailout, e.g. x0 >= 0)" in text
    assert "    x0 >= 0  at " in gs.explain(verbose=True)


def test_verify_raises_with_counterexample_on_a_wrong_set() -> None:
    gs = simplify(guardsolve.trace(lambda a, b: a + b, torch.randn(4), torch.randn(4)).graph, explore=False)
    wrong = guardsolve.GuardSet(gs.constraints[:1], gs.graph, gs.dims, gs.sizes, gs.signature, set(), ())
    with pytest.raises(VerificationError) as info:
        wrong.verify()
    assert info.value.counterexample["a0"] == 1


def test_idempotent_and_stable_order() -> None:
    t = guardsolve.trace(lambda a, b, c: a + b * c, torch.randn(3, 1), torch.randn(4), torch.randn(1, 4))
    gs = simplify(t.graph, explore=False)
    again = simplify(gs.to_graph())
    assert texts(again) == texts(gs)
    assert str(gs) == "\n".join(texts(gs))


def test_names_of_parameters_never_break_the_compiled_check() -> None:
    """A tensor parameter named like another's dim (`x` and `x0`), parameters and dims named
    like what the generated code reads (`Tensor`, `isinstance`, `ValueError`,
    `ZeroDivisionError`): the check still answers, through `guarded` too."""
    def h(x, x0):  # type: ignore[no-untyped-def]
        return x + x0

    gs = simplify(guardsolve.trace(h, torch.randn(4), torch.randn(4)), explore=False)
    assert [c.text for c in gs.constraints] == ["x_0 == x0_0", "x_0 != 1"]
    assert gs.check(torch.randn(4), torch.randn(4)) and not gs.check(torch.randn(4), torch.randn(5))

    def f(Tensor, isinstance):  # type: ignore[no-untyped-def]
        return Tensor + isinstance

    gs = simplify(guardsolve.trace(f, torch.randn(4), torch.randn(4)), explore=False)
    assert gs.check(torch.randn(4), torch.randn(4)) and not gs.check(torch.randn(4), torch.randn(5))
    assert not gs.check(torch.randn(4, 2), torch.randn(4))  # NOTE: the rank test catches ValueError
    fast = guardsolve.guarded(f)
    fast(torch.randn(4), torch.randn(4))
    assert fast(torch.randn(4), torch.randn(4)).shape == (4,)

    def g(ValueError, b):  # type: ignore[no-untyped-def]
        return ValueError.sum() + b

    gs = simplify(guardsolve.trace(g, torch.randn(4, 2), torch.randn(4)))
    assert gs.check(torch.randn(4, 2), torch.randn(4)) and not gs.check(torch.randn(4), torch.randn(4))
    gs = simplify(Graph.parse("a = int_placeholder(name=a)\nZeroDivisionError = int_arg(name=ZeroDivisionError)\n"
                              "i0 = int_floordiv(a, ZeroDivisionError)\ni1 = int_const(val=0)\n"
                              "i2 = int_eq(i0, i1)\nbool_bailout(i2, expect=False)"))
    assert gs.check_dims({"a": 3, "ZeroDivisionError": 1}) and not gs.check_dims({"a": 3, "ZeroDivisionError": 0})


def test_int_arg_with_its_traced_value_in_a_guard_graph() -> None:
    gs = simplify(Graph.parse("n = int_arg(name=n, val=3)\na0 = int_placeholder(name=a0)\ni1 = int_le(n, a0)\n"
                              "bool_bailout(i1, expect=True)"))
    assert [c.text for c in gs.constraints] == ["n <= a0"]
    assert gs.verify().equivalent


def test_check_dims_names_a_negative_size() -> None:
    gs = simplify(Graph.parse("a0 = int_placeholder(name=a0)\nn = int_arg(name=n)\ni0 = int_le(n, a0)\n"
                              "bool_bailout(i0, expect=True)"))
    assert gs.check_dims({"a0": 2, "n": -5}) and not gs.check_dims({"a0": 2, "n": 3})
    with pytest.raises(InputMismatchError, match="negative sizes: a0=-2"):
        gs.check_dims({"a0": -2, "n": -5})


def test_verify_goes_group_by_group_and_witnesses_break_only_their_guard() -> None:
    """`verify` on a graph of many independent parts: one proof per part, and each witness
    (its part's point with the other parts' models) fails its own constraint and no other."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from workloads import scale_guard_graph

    gs = simplify(scale_guard_graph(400))
    assert len(gs._groups()) > 10
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant and len(cert.witnesses) == len(gs.constraints)
    for c in gs.constraints:
        w = cert.witnesses[c.text]
        assert set(w) == set(gs.dims) and all(w[d] >= 0 for d in gs.sizes)
        assert [o.text for o in gs.constraints if not eval(o.text, {}, dict(w))] == [c.text]
    dropped = guardsolve.GuardSet(gs.constraints[1:], gs.graph, gs.dims, gs.sizes, None, set(), ())
    with pytest.raises(VerificationError, match="the guard set does not imply the original bailouts"):
        dropped.verify()
    doubled = guardsolve.GuardSet(gs.constraints + gs.constraints[:1], gs.graph, gs.dims, gs.sizes, None, set(), ())
    with pytest.raises(VerificationError, match="is implied by the other constraints"):
        doubled.verify()
    # NOTE: `minimal=False` (a compiled variant's proof): the duplicate is reported, not raised;
    # a guard set that does not imply the bailouts still raises
    kept = doubled.verify(minimal=False)
    assert kept.equivalent and not kept.irredundant and len(kept.witnesses) == len(gs.constraints) - 1
    with pytest.raises(VerificationError, match="the guard set does not imply the original bailouts"):
        dropped.verify(minimal=False)


def test_guard_graph_without_a_trace_does_no_trace_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """`simplify(graph)` on a guard graph of comparisons (`mixed-N`, the graph the benchmark's
    `graph` section times beside ShapeEnv): no route is explored, no readable pass runs and no
    z3 question is asked (union-find and the ordering layer decide it all); the result is the
    minimal set, proven by `verify`. Issue 49: work a trace needs must not run here."""
    import sys
    from pathlib import Path

    import guardsolve.solve.readable as readable_module
    import guardsolve.solve.simplify as simplify_module

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from workloads import mixed_guard_graph

    def forbidden(name: str):  # type: ignore[no-untyped-def]
        def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError(f"{name} ran on a guard graph without a trace")
        return fail

    g = mixed_guard_graph(200)
    with monkeypatch.context() as m:
        m.setattr(simplify_module, "merge_paths", forbidden("merge_paths"))
        m.setattr(readable_module, "readable", forbidden("readable"))
        m.setattr(z3.Solver, "check", forbidden("z3.Solver.check"))
        m.setattr(z3.Context, "__init__", forbidden("z3.Context()"))
        gs = simplify(g)
    assert len(gs) == 200 and gs.exploration is None and not gs.undecided
    cert = gs.verify()
    assert cert.equivalent and cert.irredundant
