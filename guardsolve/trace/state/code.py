"""Which code is the program's (not PyTorch's, guardsolve's or the standard library's), and what its bytecode reads."""

from __future__ import annotations

import dis
import functools
import importlib.util
import os
import sys
import sysconfig
import types
from typing import Any


def _package_dirs(names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        for d in (spec.submodule_search_locations or ()) if spec is not None else ():
            out.append(os.path.realpath(d) + os.sep)
    return tuple(out)


# NOTE: code whose globals are not the program's state: PyTorch's, guardsolve's and its solvers'
# (which run while a recording is on: exploring other routes), the standard library's (their
# module-level names are the libraries themselves, not a model's settings)
SKIP_DIRS = _package_dirs(("torch", "guardsolve", "sympy", "mpmath", "networkx", "z3", "numpy")) + tuple(
    os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))


GENERATED = ("<guardsolve", "<readable>", "<witness>", "<eval_with_key")


SKIP_MODULES = frozenset({"torch", "guardsolve", "sympy", "mpmath", "networkx", "z3", "numpy"}) | frozenset(
    sys.stdlib_module_names)


def global_names(code: types.CodeType, module: Any) -> tuple[str, ...]:
    """The globals a code object loads, or () for code that is not the program's."""
    path = code.co_filename
    if path.startswith(GENERATED):
        return ()  # NOTE: guardsolve's generated checks and replays, torch.fx's generated forwards
    if path.startswith("<"):
        # NOTE: `python -c`, a notebook cell, a doctest are the user's; code that libraries
        # generate (a namedtuple's `__new__`, `<frozen importlib...>`) is named by its module
        top = module.split(".", 1)[0] if isinstance(module, str) else ""
        if top in SKIP_MODULES or top.startswith("namedtuple_"):
            return ()
    elif os.path.realpath(path).startswith(SKIP_DIRS):
        return ()
    return tuple(dict.fromkeys(i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"))


@functools.lru_cache(maxsize=4096)
def compares_type_with_tensor(code: types.CodeType) -> bool:
    """Whether `code` compares what `type(...)` returns with `torch.Tensor` (`type(x) is
    torch.Tensor`, `==`, `in`): each comparison, with a `type` call and a load of `Tensor` among
    the few instructions before it.

    >>> import torch
    >>> def f(x):
    ...     return 1 if type(x) is torch.Tensor else 2
    >>> def h(x):
    ...     return 1 if isinstance(x, torch.Tensor) and type(x).__name__ == "Tensor" else 2
    >>> compares_type_with_tensor(f.__code__), compares_type_with_tensor(h.__code__)
    (True, False)
    """
    ins = list(dis.get_instructions(code))
    for k, i in enumerate(ins):
        if i.opname in ("IS_OP", "COMPARE_OP", "CONTAINS_OP"):
            window = ins[max(0, k - 8):k]
            if any(w.argval == "type" and w.opname == "LOAD_GLOBAL" for w in window) and \
                    any(w.argval == "Tensor" and w.opname in ("LOAD_ATTR", "LOAD_GLOBAL") for w in window):
                return True
    return False


@functools.lru_cache(maxsize=1024)
def module_attrs(code: types.CodeType) -> dict[tuple[str, str], tuple[str, ...]]:
    """(how, name) -> the attributes `code` reads from the global (how "global") or the closure
    cell (how "cell") `name` right after loading it (`LOAD_GLOBAL cfg; LOAD_ATTR SCALE`; a
    method call's `LOAD_METHOD` too)."""
    out: dict[tuple[str, str], dict[str, None]] = {}
    prev = None
    how = {"LOAD_GLOBAL": "global", "LOAD_DEREF": "cell"}
    for i in dis.get_instructions(code):
        if prev is not None and prev.opname in how and i.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            out.setdefault((how[prev.opname], prev.argval), {})[i.argval] = None
        prev = i
    return {k: tuple(v) for k, v in out.items()}


@functools.lru_cache(maxsize=1024)
def all_global_names(code: types.CodeType) -> tuple[str, ...]:
    """The global names `code` and its nested code load (a code object is immutable: cached)."""
    out = [i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += all_global_names(c)
    return tuple(dict.fromkeys(out))
