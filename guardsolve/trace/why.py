"""Why a probe at other sizes does not record the trace, in the user's words (`Why`).

A probe is named by the user's line and the op where it stops or first records another node
(`node_op` says what a trace node is, as its user knows it); trace line numbers come after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guardsolve.ir.ops import Op


@dataclass(frozen=True)
class Why:
    """Why a probe does not record the trace, in the user's words: `text` (the whole reason)
    names `loc` (the user's line where the probe stops or first records another node) and
    `op` (the torch op there, or what the program itself did: `a read of .shape`), where known.

    >>> str(Why("stops at f.py:3: aten.add.Tensor's shape rule rejects these sizes", None, "aten.add.Tensor"))
    "stops at f.py:3: aten.add.Tensor's shape rule rejects these sizes"
    """

    text: str
    loc: Any = None  # a `SourceLoc`
    op: str | None = None

    def __str__(self) -> str:
        return self.text


def node_op(node: Any) -> str:
    """What recorded trace node `node`, as its user knows it: the torch op, or what the
    program's own code did (a size read, arithmetic on sizes, a test of its own).

    >>> from guardsolve.ir.node import Node
    >>> node_op(Node(Op.SIZE_INDEX, ("s0",), ("i0",), {"index": 1}))
    'a read of .shape[1]'
    """
    match node.op:
        case Op.ATEN:
            return str(node.params["fn"])
        case Op.SIZE_INDEX:
            return f"a read of .shape[{node.params['index']}]"
        case Op.VAR_SIZE:
            return "a read of .shape"
        case Op.BOOL_BAILOUT:
            return "the program's own test of a size"
        case Op.VAR_PLACEHOLDER | Op.VAR_PARAM | Op.INT_ARG:
            return "an input"
        case _:
            return f"the program's own arithmetic on sizes ({node.op.value})"


def node_loc(nodes: Any, index: int) -> Any:
    """The user's line of trace node `index` of `nodes`: its own, else the nearest one before
    it that has one (a constant the program made records none)."""
    for n in reversed(nodes[:index + 1]):
        loc = n.meta.get("loc") if n.meta else None
        if loc is not None:
            return loc
    return None
