"""IR: text round trip, parse errors with line/column, and validation errors naming the node."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import guardsolve
from guardsolve.errors import (
    ArityError, DuplicateNameError, ParseError, TypeMismatchError, UndefinedNameError, UnknownOpError,
    UseBeforeDefinitionError,
)
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import SPECS, Op
from guardsolve.testing import random_guard_graph




def test_parse_print_round_trip_text(notebook_guards: str) -> None:
    g = Graph.parse(notebook_guards)
    assert str(g) == notebook_guards
    assert Graph.parse(str(g)) == g


def test_round_trip_of_traces() -> None:
    t = guardsolve.trace(lambda x, y: (x + y) * x - y / x, torch.randn(2, 1, 3), torch.randn(4, 1))
    assert Graph.parse(str(t.graph)) == t.graph
    gg = guardsolve.guard_graph(t.graph)
    assert Graph.parse(str(gg)) == gg


def test_guard_graph_has_no_concrete_input_values() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(37), torch.randn(37))
    # the trace keeps the example shapes (PyTorch's rules replay with them as hints) ...
    assert [line for line in str(t.graph).splitlines() if "37" in line] == [
        "a = var_placeholder(name=a, rank=1, shape=[37], dtype=float32)",
        "b = var_placeholder(name=b, rank=1, shape=[37], dtype=float32)"]
    # ... the guards never mention them
    assert "37" not in str(guardsolve.guard_graph(t.graph))


def test_comments_and_blank_lines_are_ignored() -> None:
    g = Graph.parse("# header\n\na0 = int_placeholder(name=a0)  # a dim\n")
    assert len(g) == 1


@given(st.integers(0, 10_000), st.integers(1, 12))
@settings(max_examples=150, deadline=None)
def test_round_trip_property(seed: int, n: int) -> None:
    g = random_guard_graph(random.Random(seed), n_bailouts=n)
    g.validate()
    assert Graph.parse(str(g)) == g
    assert str(Graph.parse(str(g))) == str(g)


@pytest.mark.parametrize("text, line, column, fragment", [
    ("a0 = int_placeholder(name=a0)\ni0 = int_const(val=x)", 2, 20, "expected a number"),
    ("i0 = nope(a0)", 1, 6, "unknown op 'nope'"),
    ("i0 = int_eq(a0 b0)", 1, 16, "expected ',' or ')'"),
    ("i0 = int_eq(a0, b0", 1, 19, "unexpected end of line"),
    ("i0 = int_const(val=1) extra", 1, 23, "after the closing parenthesis"),
    ("i0 = int_const(val=1, val=2)", 1, 23, "given twice"),
    ("bool_bailout(i0, expect=maybe)", 1, 25, "True or False"),
    ("i0 = int_const(value=1)", 1, 16, "has no param 'value'"),
    ("i0 = int_const(val=1)\n\ni1 = int_eq(i0, $)", 3, 17, "unexpected character '$'"),
    ("a0 = int_placeholder(name=a0)\nx, y = int_eq(a0, a0)", 2, 2, "several outputs, but only a call"),
])
def test_parse_errors_name_line_and_column(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(ParseError) as info:
        Graph.parse(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert fragment in str(info.value)
    assert f"line {line}, column {column}" in str(info.value)


@pytest.mark.parametrize("text, error, fragment", [
    ("a0 = int_placeholder(name=a0)\ni0 = int_eq(a0)", ArityError, "takes 2 inputs"),
    ("a0 = int_placeholder(name=a0)\ni0 = int_eq(a0, q)", UndefinedNameError, "'q' is not defined"),
    ("i0 = int_eq(a0, a0)\na0 = int_placeholder(name=a0)", UseBeforeDefinitionError, "used before node 1"),
    ("a0 = int_placeholder(name=a0)\na0 = int_const(val=1)", DuplicateNameError, "already defined by node 0"),
    # NOTE: a duplicate is named before an earlier fault, whichever pass meets which first
    ("i0 = int_const()\na0 = int_placeholder(name=a0)\ni1 = int_eq(a0, a0)\ni1 = int_eq(a0, a0)",
     DuplicateNameError, "'i1' is already defined by node 2"),
    ("a0 = int_placeholder(name=a0)\na0 = int_placeholder(name=a0)\ni0 = int_eq(a0, q)",
     DuplicateNameError, "'a0' is already defined by node 0"),
    ("x = var_placeholder(name=x, rank=2)\nv, v = aten.split.Tensor(x, 1)", DuplicateNameError,
     "'v' is already defined by node 1"),
    ("a = int_placeholder(name=d)\nb = int_placeholder(name=d)", DuplicateNameError, "dim 'd' is already an input"),
    ("a = int_placeholder(name=d)\nb = int_arg(name=d)", DuplicateNameError, "dim 'd' is already an input, of node 0"),
    ("a0 = int_placeholder(name=a0)\nbool_bailout(a0, expect=True)", TypeMismatchError, "should be bool, found int"),
    ("i0 = int_const(val=1)\ni1 = bool_not(i0)", TypeMismatchError, "should be bool"),
    ("a = var_placeholder(name=a, rank=1)\ni0 = size_index(a, index=0)", TypeMismatchError, "should be size"),
    ("i0 = int_const()", ArityError, "takes params ['val']"),
    ("bool_bailout = int_const(val=1)\nx = bool_bailout(bool_bailout, expect=True)", ArityError, "0 outputs"),
])
def test_validation_errors_name_the_node(text: str, error: type, fragment: str) -> None:
    g = Graph.parse(text)
    with pytest.raises(error) as info:
        g.validate()
    assert fragment in str(info.value)
    assert info.value.node is not None and str(info.value.node) in str(info.value)
    assert f"(line {info.value.node.meta['line']})" in str(info.value)  # NOTE: the file's line, 1-based


def test_unknown_op_on_a_built_node() -> None:
    g = Graph([Node("int_frobnicate", (), ("i0",))])  # type: ignore[arg-type]
    with pytest.raises(UnknownOpError, match="int_frobnicate"):
        g.validate()


def test_param_types_are_checked() -> None:
    g = Graph([Node(Op.INT_CONST, (), ("i0",), {"val": True})])
    with pytest.raises(TypeMismatchError, match="val=True should be a number"):
        g.validate()


def test_every_op_has_a_signature_and_prints() -> None:
    assert set(SPECS) == set(Op)
    for op in Op:
        assert Op(str(op)) is op


def test_fresh_names_skip_taken_ones() -> None:
    t = guardsolve.trace(lambda i0, s0: i0 + s0, torch.randn(3), torch.randn(3))
    names = [o for n in t.graph for o in n.outputs]
    assert len(names) == len(set(names))
    t.graph.validate()


def test_fresh_names_never_repeat_a_name_of_any_source() -> None:
    """`fresh` stores only the names it cannot tell from its counters: none repeats a name it
    gave before (under this or another prefix), appended, parsed, placeholder or reserved."""
    rng = random.Random(0)
    g = Graph.parse("i3 = int_placeholder(name=i3)\nx10 = int_arg(name=x10)")
    g.reserve(["i5", "v_2"])
    given = {"i3", "x10", "i5", "v_2"}
    for _ in range(400):
        kind = rng.random()
        if kind < 0.7:
            name = g.fresh(rng.choice(["i", "x", "x1", "v_", "v_1", "1"]))
        elif kind < 0.85:
            name = g.emit(Op.INT_CONST, (), val=1)
        else:
            name = f"{rng.choice(['i', 'x', 'x1'])}{rng.randrange(60)}"
            if g.taken(name):
                assert name in given
                continue
            g.emit(Op.INT_ARG, (), name=name)
        assert name not in given and g.taken(name)
        given.add(name)
    assert not any(g.taken(n) for n in ("i999", "x01", "q0", "", "x"))
    g.validate()


def test_metadata_is_outside_text_and_equality() -> None:
    t = guardsolve.trace(lambda a, b: a + b, torch.randn(2), torch.randn(2))
    loc = t.guard_graph().bailouts()[0].meta["loc"]
    assert loc.file.endswith("test_ir.py") and loc.function == "<lambda>" and "a + b" in loc.code
    assert "test_ir" not in str(t.graph)
    assert Graph.parse(str(t.graph)) == t.graph  # parsed nodes carry no loc, still equal
