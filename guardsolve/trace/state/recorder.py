"""Recording the state a traced function reads: each read, by whom it is owned and where it is named."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator
import torch
from guardsolve.trace.state.active import ACTIVE_RECORDER
from guardsolve.trace.state.code import (GENERATED, SKIP_DIRS, SKIP_MODULES, compares_type_with_tensor, global_names,
                                         module_attrs)
from guardsolve.trace.state.hooks import module_hooks
from guardsolve.trace.state.values import Attrs, LENGTH, MAX_DEPTH, OBJECTS, STATIC_SCALARS


@dataclass(eq=False)
class Read:
    """One read: `owner` (a dict, or a cell with `key` None) held `value` under `key`;
    `where` names it for people. `absent`: the name was looked up on a module's class (the
    instance dict must keep not having it)."""

    owner: Any
    key: Any
    value: Any
    where: str
    absent: bool = False
    # NOTE: a module's hook dict: checked by its length and contents, not its identity (PyTorch
    # adds and removes hooks in place; it never rebinds the dict)
    direct: bool = False


class StateRecorder:
    """The reads of one recording, first read first (a later read of the same slot is the
    program's own write showing: `changed()` finds it)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.reads: dict[tuple[int, Any], Read] = {}
        self.names: dict[int, str] = {}  # id(module or object) -> its readable path
        self._codes: dict[types.CodeType, tuple[str, ...]] = {}
        self._funcs: set[int] = set()
        self._attrs: dict[int, Attrs] = {}  # id(class or function) -> its `Attrs` (one owner per object)
        self._class_read: set[tuple[type, str]] = set()  # NOTE: (class, name) read from a module's class
        self._user_code: dict[types.CodeType, bool] = {}  # code that read a `__dict__` -> is it the program's
        # NOTE: where the program's code compares `type(x)` with `torch.Tensor`: a traced tensor is a
        # subclass, so the trace took the other side of that comparison than eager (`compares_type_with_tensor`)
        self.type_check: str | None = None
        self._global_hooks = False
        self.tensors: dict[int, str] = {}  # id(tensor read as state) -> where (`is_state`)
        if isinstance(fn, torch.nn.Module):
            for name, m in fn.named_modules():
                self.names.setdefault(id(m), f"self.{name}" if name else "self")
        else:
            self._function(fn, getattr(fn, "__name__", "fn"))

    # -- recording ------------------------------------------------------------------------------

    def add(self, owner: Any, key: Any, value: Any, where: str, absent: bool = False, direct: bool = False) -> None:
        slot = (id(owner), key)
        if slot not in self.reads:
            self.reads[slot] = Read(owner, key, value, where, absent, direct)
            self._tensors_in(value, 0)
            if isinstance(value, (torch.nn.Module,)) or (not isinstance(value, STATIC_SCALARS + (torch.Tensor,))
                                                         and hasattr(value, "__dict__")):
                self.names.setdefault(id(value), where)
            if isinstance(value, (types.FunctionType, functools.partial)):
                self._function(value, where)

    def _tensors_in(self, v: Any, depth: int) -> None:
        """Remember the tensors a read reached (inside containers and plain objects too): ops on
        them are the program's computation on its state, recorded, not folded into constants."""
        if isinstance(v, torch.Tensor):
            self.tensors.setdefault(id(v), "")
        elif depth < MAX_DEPTH and not isinstance(v, STATIC_SCALARS + OBJECTS):
            items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else \
                getattr(v, "__dict__", {}).values() if isinstance(getattr(v, "__dict__", None), dict) else ()
            for x in list(items):
                self._tensors_in(x, depth + 1)

    def module_attr(self, m: torch.nn.Module, name: str, value: Any) -> None:
        d = m.__dict__
        base = self.names.get(id(m)) or f"<{type(m).__name__}>"
        where = f"{base}.{name}"
        if not self._global_hooks:
            # NOTE: every module call also runs the hooks registered for all modules
            self._global_hooks = True
            g = sys.modules[torch.nn.Module.__module__].__dict__
            for n in _GLOBAL_HOOKS:
                if isinstance(g.get(n), dict):
                    self.add(g, n, g[n], f"torch.nn.modules.module.{n}", direct=True)
                    self._hooks(g[n], f"torch.nn.modules.module.{n}")
        if name in d:
            self.add(d, name, value, where, direct=name in _HOOK_DICTS)
            if name in _HOOK_DICTS and isinstance(value, dict):
                self._hooks(value, where)
            if name == "_modules" and isinstance(value, dict):
                for k, sub in value.items():  # NOTE: iterated (a Sequential): named by path
                    self.names.setdefault(id(sub), f"{base}.{k}")
            return
        for slot in ("_parameters", "_buffers", "_modules"):
            inner = d.get(slot)
            if inner is not None and name in inner:
                self.add(inner, name, value, where)
                return
        # NOTE: found on the class (a method, a property, a class constant): it stays so while
        # the instance does not shadow it
        self.add(d, name, _ABSENT, where, absent=True)
        if (type(m), name) not in self._class_read:  # NOTE: each method call reads it again while tracing
            self._class_read.add((type(m), name))
            self._class_attr(type(m), name)

    def _hooks(self, hooks: dict[Any, Any], where: str) -> None:
        """What each hook of a hook dict reads besides its arguments: a function's closure cells
        and defaults; a bound method's object (`self.scale` of the object whose method it is)."""
        for k, h in list(hooks.items()):
            if isinstance(h, types.MethodType):
                self.add(self._owner(h, "function"), "__self__", h.__self__, f"{where}[{k!r}].__self__")
                self._function(h.__func__, f"{where}[{k!r}]")
            elif isinstance(h, (types.FunctionType, functools.partial)):
                self._function(h, f"{where}[{k!r}]")

    def module_dict(self, m: torch.nn.Module, caller: types.CodeType) -> None:
        """The program's own code read a module's `__dict__` (`self.__dict__.get("extra")`): which
        keys it holds, and each value, are state (PyTorch's reads, its `__getattr__`'s, are not)."""
        user = self._user_code.get(caller)
        if user is None:
            path = caller.co_filename
            user = self._user_code[caller] = not path.startswith(GENERATED) and not (
                not path.startswith("<") and os.path.realpath(path).startswith(SKIP_DIRS))
        if not user:
            return
        d = m.__dict__
        base = self.names.get(id(m)) or f"<{type(m).__name__}>"
        self.add(d, LENGTH, len(d), f"{base}.__dict__")
        for k, v in list(d.items()):
            self.add(d, k, v, f"{base}.{k}", direct=k in _HOOK_DICTS)

    def _class_attr(self, cls: type, name: str) -> None:
        """What a module read from its class, where the program's own class defines it: a value
        (`Scaled.temperature = 2.0`) the class keeps holding; a method, property or other
        descriptor (`Block.act = ...` rebinds it) the class keeps by identity. What PyTorch's and
        the standard library's classes hold is not the program's state."""
        for c in cls.__mro__:
            if name in c.__dict__:
                top = (getattr(c, "__module__", None) or "").split(".", 1)[0]
                if top not in SKIP_MODULES:
                    self.add(self._owner(c, "class"), name, c.__dict__[name], f"{c.__qualname__}.{name}")
                return

    def _owner(self, obj: Any, kind: str) -> "Attrs":
        a = self._attrs.get(id(obj))
        if a is None:
            a = self._attrs[id(obj)] = Attrs(obj, kind)
        return a

    def frame(self, frame: types.FrameType) -> None:
        code = frame.f_code
        names = self._codes.get(code)
        if names is None:
            names = self._codes[code] = global_names(code, frame.f_globals.get("__name__"))
            if self.type_check is None and names and compares_type_with_tensor(code):
                self.type_check = f"{code.co_filename}:{code.co_firstlineno} ({code.co_name})"
        if names:
            g = frame.f_globals
            module = g.get("__name__", "?")
            root = g is getattr(self.fn, "__globals__", None)
            for n in names:
                if n in g:
                    v = g[n]
                    if isinstance(v, types.ModuleType):
                        # NOTE: `torch`, `F`: rebinding a module alias is out of scope; what the
                        # code reads from the program's own modules (`cfg.SCALE`) is state
                        self._module_reads(code, n, v)
                        continue
                    fname = getattr(self.fn, "__name__", "fn")
                    self.add(g, n, v, f"{fname}.__globals__[{n!r}]" if root else f"{module}.{n}")

    def _module_reads(self, code: types.CodeType, name: str, mod: types.ModuleType, how: str = "global") -> None:
        """The attributes `code` reads from the module global (or, `how` "cell", the closure
        cell) `name` (`cfg.SCALE`), where that module is the program's own (not PyTorch's, nor
        the standard library's)."""
        top = (getattr(mod, "__name__", None) or "").split(".", 1)[0]
        if top in SKIP_MODULES or top.startswith("namedtuple_"):
            return
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            return
        for attr in module_attrs(code).get((how, name), ()):
            if attr in d and not isinstance(d[attr], types.ModuleType):
                self.add(d, attr, d[attr], f"{mod.__name__}.{attr}")

    def _function(self, f: Any, where: str) -> None:
        if id(f) in self._funcs:
            return
        self._funcs.add(id(f))
        inner = getattr(f, "__func__", f)  # NOTE: a bound method: its function's cells
        code = getattr(inner, "__code__", None)
        for name, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue  # NOTE: not yet bound: a read would raise, as eager does
            self.add(cell, None, v, name if f is self.fn else f"{where}.<closure {name}>")
            if isinstance(v, types.ModuleType):
                self._module_reads(code, name, v, "cell")
        if isinstance(f, functools.partial):
            # NOTE: its function, the arguments it adds (its keywords are a dict, changed in place)
            attrs = self._owner(f, "partial")
            for key in ("func", "args", "keywords"):
                self.add(attrs, key, getattr(f, key), f"{where}.{key}")
            self._function(f.func, f"{where}.func")
            return
        if getattr(inner, "__defaults__", None) is not None or getattr(inner, "__kwdefaults__", None) is not None:
            # NOTE: read through the function: `f.__defaults__ = (3.0,)` rebinds the tuple
            attrs = self._owner(inner, "function")
            for key in ("__defaults__", "__kwdefaults__"):
                if getattr(inner, key, None) is not None:
                    self.add(attrs, key, getattr(inner, key), f"{where}.{key}")


_ABSENT = object()


_HOOK_DICTS = frozenset({"_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks",
                         "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
                         "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                         "_load_state_dict_post_hooks"})


_GLOBAL_HOOKS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks",
                 "_global_forward_hooks", "_global_forward_hooks_always_called")


@contextlib.contextmanager
def recording(fn: Any) -> Iterator[StateRecorder]:
    """Record the state `fn` reads while the block runs (this thread only). Nested recordings
    record into the innermost."""
    rec = StateRecorder(fn)
    token = ACTIVE_RECORDER.set(rec)
    prev = sys.gettrace()

    def on_call(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            rec.frame(frame)
        return prev(frame, event, arg) if prev is not None else None

    with module_hooks():
        sys.settrace(on_call)
        try:
            yield rec
        finally:
            sys.settrace(prev)
            ACTIVE_RECORDER.reset(token)


__all__ = ["Read", "StateRecorder", "recording"]
