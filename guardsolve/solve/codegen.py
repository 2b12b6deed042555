"""Compile minimal constraints into straight-line Python, in the spirit of torch.fx codegen.

>>> from guardsolve.ir.signature import Param
>>> print(check_source(["a0 == b0", "a0 != 1"], (Param("a", "tensor", 1, ("a0",)), Param("b", "tensor", 1, ("b0",))), False,
...                    ["a.dtype is _s_a_dtype", "b.dtype is _s_b_dtype"]))
def check(a, b):
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        return False
    try:
        a0, = a.shape
        b0, = b.shape
    except ValueError:
        return False
    if not (a.dtype is _s_a_dtype and b.dtype is _s_b_dtype):
        return False
    return (a0 == b0) and (a0 != 1)

Each stage is one conjunction (a check is a few microseconds; each statement costs): the
kinds, the ranks (unpacking a shape of another rank raises), the static guards, the sizes.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from guardsolve.ir.signature import Param


# The names the generated code reads besides its parameters and dims
_INTERNAL = ("isinstance", "Tensor", "int", "bool", "ValueError", "ZeroDivisionError", "_M", "_arity", "_more", "_named")


def _aliases(taken: Iterable[str]) -> dict[str, str]:
    """Each internal name, or an alias of it where a parameter or dim has the name
    (`def f(Tensor, isinstance)`): the generated code binds the aliases first (`_prelude`).

    >>> _aliases(["a0", "Tensor"])["Tensor"], _aliases(["a0"])["Tensor"]
    ('Tensor_', 'Tensor')
    """
    taken = set(taken)
    out = {}
    for name in _INTERNAL:
        alias = name
        while alias in taken:
            alias += "_"
        out[name] = alias
        taken.add(alias)
    return out


def _prelude(n: dict[str, str]) -> list[str]:
    return [f"{alias} = {name}" for name, alias in n.items() if alias != name and name not in ("_more", "_named")]


def _body(texts: Sequence[str], divides: bool, indent: str, n: dict[str, str]) -> list[str]:
    expr = " and ".join(f"({t})" for t in texts) if texts else "True"
    if not divides:
        return [f"{indent}return {expr}"]
    # NOTE: the guard graph raises on a zero divisor, i.e. rejects the input; so do we.
    return [f"{indent}try:", f"{indent}    return {expr}", f"{indent}except {n['ZeroDivisionError']}:",
            f"{indent}    return False"]


def check_source(texts: Sequence[str], signature: Sequence[Param], divides: bool,
                 static: Sequence[str] = (), params: Sequence[str] | None = None, arity: bool = False) -> str:
    """Source of `check(<params>)` over the traced function's inputs: kinds and ranks, then the
    `static` guards (dtype, device, ... as Python expressions), then the size guards.

    `params` names every parameter in order when some are not traced (pinned by a static guard).
    With `arity`, a call with missing or extra arguments returns `_arity(given, extra, named)`
    (which the namespace binds; `GuardSet`'s raises) instead of failing with a TypeError.
    """
    names = list(params) if params is not None else [p.name for p in signature]
    n = _aliases(names + [d for p in signature for d in p.dims])
    M, inst = n["_M"], n["isinstance"]
    lines = _prelude(n) + [f"def check({', '.join(names)}):"]
    if arity:
        # NOTE: the public entry point itself (no wrapper): a call with other arguments gets
        # `_arity`'s error, not a TypeError (a sentinel, compared by identity: no tensor `==`)
        more, named = n["_more"], n["_named"]
        lines = _prelude(n) + [
            f"def check({''.join(f'{a}={M}, ' for a in names)}*{more}, **{named}):",
            f"    if {more} or {named}{''.join(f' or {a} is {M}' for a in names)}:",
            f"        return {n['_arity']}(({', '.join(names)}{',' if len(names) == 1 else ''}), {more}, {named})"]
    kinds = [f"{inst}({p.name}, {n['Tensor']})" + (" and not " + p.name + ".shape" if not p.rank else "")
             if p.kind == "tensor" else f"{inst}({p.name}, {n['int']}) and not {inst}({p.name}, {n['bool']})"
             for p in signature]
    lines += _all(kinds)
    unpack = [f"{', '.join(p.dims)}, = {p.name}.shape" for p in signature if p.kind == "tensor" and p.rank]
    if unpack:
        lines += ["    try:", *(f"        {u}" for u in unpack), f"    except {n['ValueError']}:", "        return False"]
    lines += _all(list(static))
    return "\n".join(lines + _body(texts, divides, "    ", n))


def _all(conditions: list[str]) -> list[str]:
    if not conditions:
        return []
    return [f"    if not ({' and '.join(conditions)}):", "        return False"]


def check_dims_source(texts: Sequence[str], dims: Sequence[str], divides: bool) -> str:
    """Source of `check_dims(<dims>)` over explicit dim values."""
    n = _aliases(dims)
    return "\n".join(_prelude(n) + [f"def check_dims({', '.join(dims)}):"] + _body(texts, divides, "    ", n))


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()  # NOTE: the default of every `check` parameter (an immutable sentinel)


def compile_function(source: str, name: str, bound: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Compile generated source; `bound` are the names its static guards compare against."""
    namespace: dict[str, Any] = {"Tensor": torch.Tensor, "_M": MISSING, **(bound or {})}
    exec(compile(source, f"<guardsolve {name}>", "exec"), namespace)
    return namespace[name]
