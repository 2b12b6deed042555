"""Parser for the graph text format: one node per line, `out = op(in, ..., key=value)`.

>>> nodes = list(parse_nodes("a0 = int_placeholder(name=a0)\\ni0 = int_const(val=1)\\ni1 = int_eq(a0, i0)"))
>>> print(nodes[2])
i1 = int_eq(a0, i0)

Blank lines and `#` comments are ignored.
"""

from __future__ import annotations

import ast
import keyword
import re
from typing import Any, Iterator

import torch

from guardsolve.errors import ParseError, UnknownOpError
from guardsolve.ir.aten import Ref, refs, resolve
from guardsolve.ir.node import Node
from guardsolve.ir.ops import SPECS, Args, Ints, Kwargs, Number, Op, OpName, lookup

_TOKEN = re.compile(
    r"\s*(?:(?P<float>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf|nan))"
    r"|(?P<int>-?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[=(),\[\]]))")


# A call of a torch op: `v2 = aten.view.default(v0, [i3, -1])`, read by `parse_call`.
_CALL = re.compile(r"\s*(?:[A-Za-z_][\w\s,]*=\s*)?[A-Za-z_]\w*\.[A-Za-z_]\w*\.")

_ENFORCED = frozenset({"name", "int", "=", "(", ")", ",", "[", "]"})


class _Line:
    """A cursor over one line, producing tokens with their column."""

    def __init__(self, text: str, lineno: int):
        self.text, self.lineno, self.pos = text, lineno, 0

    def error(self, msg: str, col: int | None = None) -> ParseError:
        return ParseError(msg, self.lineno, (self.pos if col is None else col) + 1, self.text)

    def peek(self) -> tuple[str, str, int] | None:
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            rest = self.text[self.pos:]
            if rest.strip() == "":
                return None
            col = self.pos + len(rest) - len(rest.lstrip())
            raise self.error(f"unexpected character {self.text[col]!r}", col)
        kind = m.lastgroup
        assert kind is not None
        return kind, m.group(kind), m.start(kind)

    def next(self, expect: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise self.error(f"unexpected end of line, expected {expect or 'more'}", len(self.text))
        kind, val, col = tok
        if expect in _ENFORCED and expect not in (kind, val):
            raise self.error(f"expected {expect!r}, found {val!r}", col)
        self.pos = _TOKEN.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return tok


def _check_name(cur: _Line, word: str, col: int, what: str) -> str:
    """Names become Python identifiers in replays and compiled checks: no keywords (`None`, `lambda`)."""
    if keyword.iskeyword(word):
        raise cur.error(f"{what} {word!r} is a Python keyword and cannot name a value", col)
    return word


def parse_nodes(text: str) -> Iterator[Node]:
    """Parse graph text line by line (`Graph.parse` collects the nodes); raises `ParseError`
    with line and column on malformed input."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0]
        if line.strip():
            yield parse_call(line, lineno) if _CALL.match(line) else _parse_line(_Line(line, lineno))


def _parse_line(cur: _Line) -> Node:
    outputs: tuple[str, ...] = ()
    kind, word, col = cur.next("name")
    if kind != "name":
        raise cur.error(f"expected a name, found {word!r}", col)
    tok = cur.peek()
    if tok is not None and tok[1] == ",":
        # NOTE: only a call of a PyTorch op (`v0, v1 = aten.split.Tensor(...)`) has several outputs
        raise cur.error("several outputs, but only a call of a PyTorch op (`v0, v1 = aten.split.Tensor(...)`) "
                        "has more than one", tok[2])
    if tok is not None and tok[1] == "=":
        cur.next("=")
        outputs = (_check_name(cur, word, col, "output name"),)
        kind, word, col = cur.next("name")
        if kind != "name":
            raise cur.error(f"expected an op name, found {word!r}", col)
    op = lookup(word)
    if op is None:
        raise cur.error(f"unknown op {word!r}", col)
    spec = SPECS[op]
    cur.next("(")
    inputs: list[str] = []
    params: dict[str, Any] = {}
    if cur.peek() is not None and cur.peek()[1] == ")":  # type: ignore[index]
        cur.next(")")
    else:
        while True:
            kind, word, col = cur.next("an argument")
            if kind != "name":
                raise cur.error(f"expected an argument name, found {word!r}", col)
            nxt = cur.peek()
            if nxt is not None and nxt[1] == "=":
                cur.next("=")
                ptype = spec.params.get(word) or spec.optional.get(word)
                if ptype is None:
                    raise cur.error(f"{op} has no param {word!r}", col)
                if word in params:
                    raise cur.error(f"param {word!r} given twice", col)
                start = cur.pos
                params[word] = _param_value(cur, ptype)
                if word == "name":
                    _check_name(cur, params[word], start + len(cur.text[start:]) - len(cur.text[start:].lstrip()),
                                "name")
            elif params:
                raise cur.error("positional input after a param", col)
            else:
                inputs.append(_check_name(cur, word, col, "input"))
            _, sep, col = cur.next("',' or ')'")
            if sep == ")":
                break
            if sep != ",":
                raise cur.error(f"expected ',' or ')', found {sep!r}", col)
    extra = cur.peek()
    if extra is not None:
        raise cur.error(f"unexpected {extra[1]!r} after the closing parenthesis", extra[2])
    return Node(op, tuple(inputs), outputs, params, {"line": cur.lineno})


def _param_value(cur: _Line, t: type) -> Any:
    if t is Ints:
        cur.next("[")
        items: list[int] = []
        while True:
            kind, word, col = cur.next("an integer or ']'")
            if word == "]" and not items:
                return tuple(items)
            if kind != "int":
                raise cur.error(f"expected an integer, found {word!r}", col)
            items.append(int(word))
            _, sep, col = cur.next("',' or ']'")
            if sep == "]":
                return tuple(items)
            if sep != ",":
                raise cur.error(f"expected ',' or ']', found {sep!r}", col)
    kind, word, col = cur.next("a value")
    if t is Number:
        if kind not in ("int", "float") and word not in ("inf", "nan"):
            raise cur.error(f"expected a number, found {word!r}", col)
        return int(word) if kind == "int" else float(word)
    if t is bool:
        if word not in ("True", "False"):
            raise cur.error(f"expected True or False, found {word!r}", col)
        return word == "True"
    if t is int:
        if kind != "int":
            raise cur.error(f"expected an integer, found {word!r}", col)
        return int(word)
    if kind != "name":
        raise cur.error(f"expected a name, found {word!r}", col)
    return word


def parse_call(text: str, lineno: int) -> Any:
    """Read a call line back; `ParseError` names the line and column at fault."""
    lhs, sep, rhs = text.partition("=")
    if not sep or "(" in lhs:
        lhs, rhs = "", text
    outputs = tuple(o.strip() for o in lhs.split(",")) if lhs.strip() else ()
    for o in outputs:
        if not o.isidentifier() or keyword.iskeyword(o):
            raise ParseError(f"expected an output name that is not a Python keyword, found {o!r}", lineno,
                             text.index(o) + 1, text)
    offset = len(text) - len(rhs)
    try:
        tree = ast.parse(rhs.strip(), mode="eval").body
    except SyntaxError as e:
        raise ParseError(f"malformed call: {e.msg}", lineno, offset + (e.offset or 1), text) from None
    if not isinstance(tree, ast.Call):
        raise ParseError("expected a call `ns.op.overload(...)`", lineno, offset + 1, text)
    name = _dotted(tree.func)
    if name is None:
        raise ParseError("expected an op name `ns.op.overload`", lineno, offset + 1, text)
    try:
        resolve(name)
    except UnknownOpError as e:
        raise ParseError(str(e), lineno, offset + 1, text) from None
    conv = _Literal(text, lineno, offset)
    args = Args(conv(a) for a in tree.args)
    kwargs = Kwargs({k.arg: conv(k.value) for k in tree.keywords if k.arg is not None})
    template = (args, kwargs)
    return Node(Op.ATEN, tuple(refs(template)), outputs, {"fn": OpName(name), "args": args, "kwargs": kwargs},
                {"line": lineno})


def _dotted(n: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(n, ast.Attribute):
        parts.append(n.attr)
        n = n.value
    if not isinstance(n, ast.Name):
        return None
    parts.append(n.id)
    return ".".join(reversed(parts))


class _Literal:
    """Converts an argument's syntax tree into a template value (no `eval`)."""

    def __init__(self, text: str, lineno: int, offset: int):
        self.text, self.lineno, self.offset = text, lineno, offset

    def fail(self, n: ast.AST, what: str) -> ParseError:
        return ParseError(what, self.lineno, self.offset + getattr(n, "col_offset", 0) + 1, self.text)

    def __call__(self, n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return Ref(n.id)
        if isinstance(n, ast.List):
            return [self(x) for x in n.elts]
        if isinstance(n, ast.Tuple):
            return tuple(self(x) for x in n.elts)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant):
            return -n.operand.value
        if isinstance(n, ast.Attribute):
            dotted = _dotted(n)
            if dotted is not None and dotted.startswith("torch.") and dotted.count(".") == 1:
                v = getattr(torch, dotted[6:], None)
                if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
                    return v
            raise self.fail(n, f"unknown constant {dotted or ast.unparse(n)!r}")
        if isinstance(n, ast.Call) and len(n.args) == 1 and not n.keywords and isinstance(n.args[0], ast.Constant):
            fn, arg = _dotted(n.func), n.args[0].value
            if fn == "float" and arg in ("inf", "-inf", "nan"):
                return float(arg)
            if fn == "torch.device" and isinstance(arg, str):
                return torch.device(arg)
        raise self.fail(n, f"unsupported argument syntax {ast.unparse(n)!r}")
