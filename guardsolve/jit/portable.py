"""An entry's state check, saved with it and rebuilt in another process (`jit/store.py`).

A state check (`trace/state/`) binds objects of this process: a module's `__dict__`, its
`_parameters`, a globals dict, a closure cell. Saved, each bound object is named by how to
reach it again from what the new process has: the guarded module (a submodule by its
qualified name, then one of its dicts), the guarded function (its closure cells, its
defaults), or an importable module's globals; a container inside one of those by its key.
Expected values are saved as values (plain values), as tensor metadata (dtype, device,
shape, strides, requires_grad), or as the type or name of an object (a submodule of the same
class, a function of the same qualified name). On load, each leaf is read from the live
objects: an object of the saved kind becomes the expected one, anything else a leaf that
fails, so the loaded entry serves only where the state it was compiled for holds.

>>> import torch
>>> from guardsolve.trace.state import StateCheck, recording
>>> m = torch.nn.Linear(2, 2)
>>> with recording(m) as rec:
...     _ = m(torch.ones(1, 2))
>>> spec = state_spec(StateCheck.of(rec), m)
>>> check = restore_state(spec, m)
>>> check(), len(check) == len(spec["leaves"])
(True, True)
>>> m.weight = torch.nn.Parameter(torch.zeros(2, 3))
>>> check.failure()
'self.weight: a float32 tensor [2, 2], requires_grad=True (the entry reads it at each call) failed (found a float32 tensor [2, 3], requires_grad=True)'
"""

from __future__ import annotations

import hashlib
import sys
import types
from typing import Any, Callable

import torch

from guardsolve.trace.state import Attrs, Leaf, StateCheck, leaf_matches, tensor_meta


class NotPortable(Exception):
    """The state check reads something another process cannot find again (said in the message)."""


def _roots(fn: Callable[..., Any]) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    if isinstance(fn, torch.nn.Module):
        for q, m in fn.named_modules(remove_duplicate=False):
            out.setdefault(id(m.__dict__), ("module", q, None))
            for i, c in enumerate(type(m).__mro__):  # NOTE: a module's classes, by where they are (a script's
                out.setdefault(id(c), ("attrs_mro", q, i))  # `__main__.MLP` is another module's class elsewhere)
            for slot in ("_parameters", "_buffers", "_modules"):
                d = m.__dict__.get(slot)
                if d is not None:
                    out.setdefault(id(d), ("module", q, slot))
        return out
    inner = getattr(fn, "__func__", fn)
    for i, cell in enumerate(getattr(inner, "__closure__", None) or ()):
        out[id(cell)] = ("cell", i)
    if getattr(inner, "__defaults__", None) is not None:
        out[id(inner.__defaults__)] = ("defaults",)
    if getattr(inner, "__kwdefaults__", None) is not None:
        out[id(inner.__kwdefaults__)] = ("kwdefaults",)
    return out


def _root_of(obj: Any, roots: dict[int, tuple[Any, ...]], fn: Any = None) -> tuple[Any, ...] | None:
    how = roots.get(id(obj))
    if how is not None:
        return how
    if isinstance(obj, Attrs):
        if obj.obj is fn or obj.obj is getattr(fn, "__func__", fn):
            return ("attrs", obj.kind, None, None)
        if obj.kind == "class" and id(obj.obj) in roots:
            return roots[id(obj.obj)]
        module, qualname = getattr(obj.obj, "__module__", None), getattr(obj.obj, "__qualname__", None)
        if obj.kind != "partial" and isinstance(module, str) and isinstance(qualname, str) \
                and _lookup(module, qualname) is obj.obj:
            return ("attrs", obj.kind, module, qualname)
        if obj.kind == "function" and isinstance(fn, torch.nn.Module):
            how = _class_cell(obj.obj, fn)  # NOTE: a function a decorator wrapped: where its wrapper holds it
            return None if how is None else (*how, obj.kind)
        return None
    if isinstance(obj, dict):
        name = obj.get("__name__")
        mod = sys.modules.get(name) if isinstance(name, str) else None
        if mod is not None and getattr(mod, "__dict__", None) is obj:
            return ("globals", name)
    return _class_cell(obj, fn) if isinstance(fn, torch.nn.Module) else None


def _class_cell(obj: Any, fn: torch.nn.Module) -> tuple[Any, ...] | None:
    """A closure cell, `__defaults__` or `__kwdefaults__` of a method of the class of one of
    `fn`'s modules, or of a function in such a method's cells, or such a function (a method decorators wrapped, as
    transformers wraps `forward`), by where it is: ("class_cell", the submodule's qualified
    name, the class's index in its MRO, the attribute, the cells' indices from the method in,
    then "cell", "defaults", "kwdefaults" or, for such a function itself, "function"); or None."""
    def path(f: Any, depth: int) -> tuple[Any, ...] | None:
        if f is obj:
            return ("function",)
        if getattr(f, "__defaults__", None) is obj:
            return ("defaults",)
        if getattr(f, "__kwdefaults__", None) is obj:
            return ("kwdefaults",)
        for j, cell in enumerate(getattr(f, "__closure__", None) or ()):
            if cell is obj:
                return (j, "cell")
            try:
                inner = cell.cell_contents
            except ValueError:  # NOTE: an empty cell
                continue
            if depth and isinstance(inner, types.FunctionType):
                rest = path(inner, depth - 1)
                if rest is not None:
                    return (j, *rest)
        return None

    if not isinstance(obj, (types.CellType, tuple, dict, types.FunctionType)):
        return None
    for q, m in fn.named_modules(remove_duplicate=False):
        for i, c in enumerate(type(m).__mro__):
            for attr, v in vars(c).items():
                f = _descriptor_function(v) or v
                found = path(f, 4) if isinstance(f, types.FunctionType) else None
                if found is not None:
                    return ("class_cell", q, i, attr, found)
    return None


def _lookup(module: str, qualname: str) -> Any:
    """The object named `qualname` in the imported module `module`, or None."""
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None) if part != "<locals>" else None
    return obj


def code_digest(code: types.CodeType, h: Any) -> None:
    """Feed a code object (and the code objects it holds) to the hash `h` (the store's fingerprints too)."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            code_digest(c, h)
        else:
            h.update(repr(c).encode())


def _code(f: types.FunctionType) -> str:
    """A function's code, as the store fingerprints it (two lambdas of one module share a name)."""
    h = hashlib.sha256()
    code_digest(f.__code__, h)
    return h.hexdigest()[:24]


def _saved_expect(leaf: Leaf) -> Any:
    match leaf.kind:
        case "value":
            return leaf.expect
        case "object":
            e = leaf.expect
            if isinstance(e, types.FunctionType):
                return ("function", e.__module__, e.__qualname__, _code(e))
            if isinstance(e, (type, types.BuiltinFunctionType)):
                return ("named", getattr(e, "__module__", None), getattr(e, "__qualname__", None))
            inner = _descriptor_function(e)
            if inner is not None:  # NOTE: a class's property, staticmethod or classmethod: by its function
                return ("descriptor", inner.__module__, inner.__qualname__, _code(inner), type(e).__name__)
            if not isinstance(e, (dict, list, tuple)) and not _python_object(e):  # NOTE: containers: walked
                raise NotPortable(f"it reads {leaf.where}, a {type(e).__name__} whose state another process "
                                  "cannot compare (not a module, nor a plain Python object)")
            return ("instance", type(e).__module__, type(e).__qualname__)
    return None


_HEAPTYPE = 1 << 9  # NOTE: Py_TPFLAGS_HEAPTYPE: a class made at run time (Python's, or C's by spec)
_IMMUTABLETYPE = 1 << 8  # NOTE: Py_TPFLAGS_IMMUTABLETYPE: a C heap type (functools.partial); a Python class is mutable


def _python_object(e: Any) -> bool:
    """A module, or an object whose whole state is its `__dict__` (which the check walks): its
    classes are all defined in Python, with no `__slots__`."""
    if isinstance(e, torch.nn.Module):
        return True
    mro = [c for c in type(e).__mro__ if c is not object]
    return bool(mro) and all(c.__flags__ & _HEAPTYPE and not c.__flags__ & _IMMUTABLETYPE
                             and "__slots__" not in c.__dict__ for c in mro) and \
        isinstance(getattr(e, "__dict__", None), dict)


def state_spec(state: StateCheck, fn: Callable[..., Any]) -> dict[str, Any]:
    """The check as plain data (see the module's docstring). Raises `NotPortable`."""
    roots = _roots(fn)
    derive: list[tuple[str, tuple[Any, ...]]] = []
    for name, how in state.derive.items():
        if how[0] == "root":
            r = _root_of(state._bound[name], roots, fn)
            if r is None:
                leaf = next((x for x in state.leaves if x.owner == name), None)
                obj = state._bound[name]
                if isinstance(obj, Attrs) and obj.kind == "partial":
                    raise NotPortable(f"it reads {leaf.where if leaf else 'a partial'}, an argument a functools.partial "
                                      "binds, which another process cannot find again")
                raise NotPortable(f"it reads {leaf.where if leaf else 'an object'}, which another process cannot "
                                  "find again (not the module's, nor an importable module's global)")
            derive.append((name, r))
        else:
            derive.append((name, how))
    leaves = [(x.where, x.owner, x.key, x.kind, _saved_expect(x), x.meta) for x in state.leaves]
    if state.notes:
        raise NotPortable(f"its state check is not complete: {state.notes[0]}")
    return {"derive": derive, "leaves": leaves, "notes": list(state.notes)}


def _resolve_root(how: tuple[Any, ...], fn: Callable[..., Any]) -> Any:
    match how:
        case ("module", q, slot):
            m = fn.get_submodule(q) if q else fn  # type: ignore[union-attr]
            return m.__dict__ if slot is None else m.__dict__[slot]
        case ("cell", i):
            return getattr(fn, "__func__", fn).__closure__[i]
        case ("class_cell", q, i, attr, steps, *kind):
            m = fn.get_submodule(q) if q else fn  # type: ignore[union-attr]
            v = vars(type(m).__mro__[i])[attr]
            f = _descriptor_function(v) or v
            *cells, last = steps
            for k, j in enumerate(cells):
                if k + 1 == len(cells) and last == "cell":
                    return f.__closure__[j]
                f = f.__closure__[j].cell_contents
            match last:
                case "function":
                    return Attrs(f, kind[0])
                case "defaults":
                    return f.__defaults__
            return f.__kwdefaults__
        case ("defaults",):
            return getattr(fn, "__func__", fn).__defaults__
        case ("kwdefaults",):
            return getattr(fn, "__func__", fn).__kwdefaults__
        case ("attrs_mro", q, i):
            m = fn.get_submodule(q) if q else fn  # type: ignore[union-attr]
            return Attrs(type(m).__mro__[i], "class")
        case ("attrs", kind, None, None):
            return Attrs(fn if kind == "partial" else getattr(fn, "__func__", fn), kind)
        case ("attrs", kind, module, qualname):
            obj = _lookup(module, qualname)
            if obj is None:
                raise NotPortable(f"{module}.{qualname} is not found in this process")
            return Attrs(obj, kind)
        case ("globals", name):
            mod = sys.modules.get(name)
            if mod is None:
                raise NotPortable(f"module {name} is not imported in this process")
            return mod.__dict__
    raise NotPortable(f"unknown root {how!r}")


def _descriptor_function(e: Any) -> types.FunctionType | None:
    """The function a property (its getter), staticmethod or classmethod wraps, or None."""
    f = e.fget if isinstance(e, property) else e.__func__ if isinstance(e, (staticmethod, classmethod)) else None
    return f if isinstance(f, types.FunctionType) else None


def _fits(saved: Any, cur: Any) -> bool:
    kind, module, qualname = saved[:3]
    if kind == "descriptor":
        inner = _descriptor_function(cur)
        return (type(cur).__name__ == saved[4] and inner is not None and inner.__qualname__ == qualname
                and _code(inner) == saved[3])
    if kind == "function":
        # NOTE: by its name in its class or module and its code, not its module's name: a script's
        # functions are `__main__`'s where it runs, its own module's where another process imports it
        return isinstance(cur, types.FunctionType) and cur.__qualname__ == qualname and _code(cur) == saved[3]
    if kind == "named":
        return getattr(cur, "__module__", None) == module and getattr(cur, "__qualname__", None) == qualname
    return type(cur).__module__ == module and type(cur).__qualname__ == qualname


def restore_state(spec: dict[str, Any], fn: Callable[..., Any]) -> StateCheck:
    """The saved check over this process's objects. Raises `NotPortable` where a bound
    object cannot be found; a leaf that differs is kept, failing (the entry then misses)."""
    bound: dict[str, Any] = {}
    for name, how in spec["derive"]:
        try:
            if how[0] in ("item", "vars"):
                _, parent, key = how
                inner = bound[parent].cell_contents if key is None else bound[parent][key]
                bound[name] = vars(inner) if how[0] == "vars" else inner
            else:
                bound[name] = _resolve_root(how, fn)
        except NotPortable:
            raise
        except Exception as e:
            raise NotPortable(f"cannot find the state it read again ({type(e).__name__}: {e})") from e
    leaves: list[Leaf] = []
    tensors: dict[int, int] = {}
    for where, owner, key, kind, saved, meta in spec["leaves"]:
        probe = Leaf(where, owner, key, kind, None, meta)
        try:
            cur = eval(compile(probe.get, "<guardsolve state leaf>", "eval"), dict(bound))
        except Exception:
            cur = _MISSING
        expect: Any
        match kind:
            case "value":
                expect = saved
            case "tensor":
                ok = isinstance(cur, torch.Tensor) and tensor_meta(cur) == meta
                expect = cur if ok else _Differs()
                if ok:
                    tensors.setdefault(id(cur), len(leaves))
            case "object":
                expect = cur if cur is not _MISSING and _fits(saved, cur) else _Differs()
            case _:
                expect = None
        leaf = Leaf(where, owner, key, kind, expect, meta)
        if kind in ("length", "absent") and (cur is _MISSING or not leaf_matches(leaf, cur)):
            leaf.meta = -1 if kind == "length" else meta  # NOTE: never holds: the entry misses
            if kind == "absent":
                leaf.kind, leaf.expect = "object", _Differs()
        leaves.append(leaf)
    return StateCheck(leaves, bound, list(spec.get("notes", ())), tensors, dict(spec["derive"]))


class _Differs:
    """An expected object no live object is: its leaf fails until the state is traced again."""

    def __repr__(self) -> str:
        return "<state that differs from the saved entry's>"


_MISSING = _Differs()

__all__ = ["NotPortable", "code_digest", "restore_state", "state_spec"]
