"""The IR's parts: `Node` (one ANF node), `SourceLoc` (where user code created it), param printing.

>>> print(Node(Op.INT_EQ, ("a0", "i0"), ("i1",)))
i1 = int_eq(a0, i0)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from guardsolve.ir.aten import render_call
from guardsolve.ir.ops import Op


def short_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it; an installed package's
    file from its package down (`torch/nn/modules/rnn.py`); else unchanged."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = ".."
    if not rel.startswith(".."):
        return rel
    for marker in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


@dataclass(frozen=True)
class SourceLoc:
    """Where in user code a node was created."""

    file: str
    line: int
    function: str
    code: str = ""

    @property
    def short_file(self) -> str:
        return short_path(self.file)

    def __str__(self) -> str:
        return f"{self.short_file}:{self.line}" + (f"  {self.code}" if self.code else "")


@dataclass(eq=False, slots=True)
class Node:
    """One ANF node: `outputs = op(inputs, params)`; `meta` is outside the text and equality.

    Slotted: a large guard graph holds millions of nodes.
    """

    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)  # NOTE: read-only when `Graph.emit` shares it
    meta: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.op is Op.ATEN:
            return render_call(self.outputs, self.params["fn"], self.params["args"], self.params["kwargs"])
        outs = ", ".join(self.outputs)
        args = list(self.inputs) + [f"{k}={format_param(v)}" for k, v in self.params.items()]
        return (f"{outs} = " if outs else "") + f"{self.op}({', '.join(args)})"

    def __repr__(self) -> str:
        return f"Node({self})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (self.op, self.inputs, self.outputs, self.params) == (
            other.op, other.inputs, other.outputs, other.params)

    __hash__ = None  # type: ignore[assignment]

    @property
    def output(self) -> str:
        """The single output name of a value-producing node."""
        assert len(self.outputs) == 1, f"{self} has {len(self.outputs)} outputs"
        return self.outputs[0]


def format_param(v: Any) -> str:
    """Params print bare: `name=a`, `val=1`, `expect=False`, `dims=[0, 2]`, `value=0.5`."""
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return repr(v) if isinstance(v, float) else str(v)
