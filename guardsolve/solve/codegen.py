"""Compile minimal constraints into straight-line Python, in the spirit of torch.fx codegen.

>>> from guardsolve.ir.signature import Param
>>> print(check_source(["a0 == b0", "a0 != 1"], (Param("a", "tensor", 1, ("a0",)), Param("b", "tensor", 1, ("b0",))), False))
def check(a, b):
    if not isinstance(a, Tensor) or a.dim() != 1:
        return False
    if not isinstance(b, Tensor) or b.dim() != 1:
        return False
    a0, = a.shape
    b0, = b.shape
    return (a0 == b0) and (a0 != 1)
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from guardsolve.ir.signature import Param


def _body(texts: Sequence[str], divides: bool, indent: str) -> list[str]:
    expr = " and ".join(f"({t})" for t in texts) if texts else "True"
    if not divides:
        return [f"{indent}return {expr}"]
    # NOTE: the guard graph raises on a zero divisor, i.e. rejects the input; so do we.
    return [f"{indent}try:", f"{indent}    return {expr}", f"{indent}except ZeroDivisionError:",
            f"{indent}    return False"]


def check_source(texts: Sequence[str], signature: Sequence[Param], divides: bool,
                 static: Sequence[str] = (), params: Sequence[str] | None = None) -> str:
    """Source of `check(<params>)` over the traced function's inputs: kinds and ranks, then the
    `static` guards (dtype, device, ... as Python expressions), then the size guards.

    `params` names every parameter in order when some are not traced (pinned by a static guard).
    """
    names = list(params) if params is not None else [p.name for p in signature]
    lines = [f"def check({', '.join(names)}):"]
    for p in signature:
        if p.kind == "tensor":
            lines += [f"    if not isinstance({p.name}, Tensor) or {p.name}.dim() != {p.rank}:", "        return False"]
        else:
            lines += [f"    if not isinstance({p.name}, int) or isinstance({p.name}, bool):", "        return False"]
    for src in static:
        lines += [f"    if not ({src}):", "        return False"]
    for p in signature:
        if p.kind == "tensor" and p.rank:
            lines.append(f"    {', '.join(p.dims)}, = {p.name}.shape")
    return "\n".join(lines + _body(texts, divides, "    "))


def check_dims_source(texts: Sequence[str], dims: Sequence[str], divides: bool) -> str:
    """Source of `check_dims(<dims>)` over explicit dim values."""
    return "\n".join([f"def check_dims({', '.join(dims)}):"] + _body(texts, divides, "    "))


def compile_function(source: str, name: str, bound: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Compile generated source; `bound` are the names its static guards compare against."""
    namespace: dict[str, Any] = {"Tensor": torch.Tensor, **(bound or {})}
    exec(compile(source, f"<guardsolve {name}>", "exec"), namespace)
    return namespace[name]
