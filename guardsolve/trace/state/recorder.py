"""What a traced function read besides its inputs, and the check that it still reads the same.

A trace is exact about its inputs' sizes, but the program also reads *state*: its modules'
parameters, buffers, submodules and plain attributes, globals, closure cells, the contents
of dicts and config objects those hold. `recording(fn)` records every such read while `fn`
runs (traces and exploring probes alike):

- module attributes, through a recording `nn.Module.__getattribute__` / `__getattr__`
  installed only while a recorder is active (reads by other threads are not recorded);
- globals, by the `LOAD_GLOBAL` names of each frame of code outside PyTorch and the
  standard library that runs (`sys.settrace` on the recording thread only);
- the closure cells and defaults of `fn` and of every function value read.

`StateCheck.of(recorder)` turns the reads into leaves, each a Python expression over objects
bound when the check is made, and an expected value:

>>> import torch
>>> class Scaled(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = torch.nn.Linear(2, 2)
...         self.temperature = 2.0
...     def forward(self, x):
...         return self.fc(x) / self.temperature
>>> m = Scaled()
>>> with recording(m) as rec:
...     _ = m(torch.ones(1, 2))
>>> check = StateCheck.of(rec)
>>> print("\\n".join(check.lines()))
self.fc is <Linear>
self.fc.weight: a float32 tensor [2, 2], requires_grad=True (the entry reads it at each call)
self.fc.bias: a float32 tensor [2], requires_grad=True (the entry reads it at each call)
self.temperature == 2.0
19 checks of module machinery: hook dicts and methods (not shadowed on instances)
>>> check()
True
>>> m.temperature = 4.0
>>> check(), check.failure()
(False, 'self.temperature == 2.0 failed (found 4.0)')

The check has two speeds. The fast one compares each leaf by identity (a tensor also by
`requires_grad`): it holds while nothing was rebound. Where it fails, the exact one compares
by value: plain values by type and value, tensors by dtype, device, layout, shape, strides and
`requires_grad` (a replaced weight of the same kind passes), objects (modules, functions) by
identity. Where the exact one passes, the leaves are rebound to what they hold now, and
`on_rebind` listeners (the entry's replay and compiled variants) take the new tensors: a weight
swap is served with no new trace and no new compile.
"""

from __future__ import annotations

import contextlib
import contextvars
import dis
import enum
import functools
import itertools
import importlib.util
import operator
import os
import sys
import sysconfig
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from guardsolve.trace.static import value_key



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
_SKIP_DIRS = _package_dirs(("torch", "guardsolve", "sympy", "mpmath", "networkx", "z3", "numpy")) + tuple(
    os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
_STATIC_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
                   torch.memory_format, enum.Enum)
_OBJECTS = (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
            type, types.MethodWrapperType, types.WrapperDescriptorType, torch._ops.OpOverload,
            torch._ops.OpOverloadPacket)
MAX_DEPTH = 4  # NOTE: containers and objects nested deeper are compared by identity only (said in `notes`)

_RECORDER: contextvars.ContextVar["Recorder | None"] = contextvars.ContextVar("guardsolve_state_recorder",
                                                                             default=None)


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


class Recorder:
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
        # subclass, so the trace took the other side of that comparison than eager (`_compares_type_with_tensor`)
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
            if isinstance(value, (torch.nn.Module,)) or (not isinstance(value, _STATIC_SCALARS + (torch.Tensor,))
                                                         and hasattr(value, "__dict__")):
                self.names.setdefault(id(value), where)
            if isinstance(value, (types.FunctionType, functools.partial)):
                self._function(value, where)

    def _tensors_in(self, v: Any, depth: int) -> None:
        """Remember the tensors a read reached (inside containers and plain objects too): ops on
        them are the program's computation on its state, recorded, not folded into constants."""
        if isinstance(v, torch.Tensor):
            self.tensors.setdefault(id(v), "")
        elif depth < MAX_DEPTH and not isinstance(v, _STATIC_SCALARS + _OBJECTS):
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
            user = self._user_code[caller] = not path.startswith(_GENERATED) and not (
                not path.startswith("<") and os.path.realpath(path).startswith(_SKIP_DIRS))
        if not user:
            return
        d = m.__dict__
        base = self.names.get(id(m)) or f"<{type(m).__name__}>"
        self.add(d, _LENGTH, len(d), f"{base}.__dict__")
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
                if top not in _SKIP_MODULES:
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
            names = self._codes[code] = _global_names(code, frame.f_globals.get("__name__"))
            if self.type_check is None and names and _compares_type_with_tensor(code):
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
        if top in _SKIP_MODULES or top.startswith("namedtuple_"):
            return
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            return
        for attr in _module_attrs(code).get((how, name), ()):
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
_LENGTH = object()  # NOTE: a read's key: how many items its owner holds (a `__dict__` read whole)


def _never() -> bool:
    return False


class Attrs:
    """An object's attributes read by key, as a leaf reads a dict (`owner[key]`): the owner of a
    read from a class (`kind` "class": its own `__dict__`, which `vars()` gives only as a copy
    of its view), a function's `__defaults__` and `__kwdefaults__` (`kind` "function"), a
    `functools.partial`'s function and arguments (`kind` "partial").

    >>> class C:
    ...     scale = 2.0
    >>> a = Attrs(C, "class")
    >>> a["scale"], "scale" in a
    (2.0, True)
    """

    __slots__ = ("obj", "kind")

    def __init__(self, obj: Any, kind: str) -> None:
        self.obj, self.kind = obj, kind

    def __getitem__(self, key: str) -> Any:
        return self.obj.__dict__[key] if self.kind == "class" else getattr(self.obj, key)

    def __contains__(self, key: str) -> bool:
        return key in self.obj.__dict__ if self.kind == "class" else hasattr(self.obj, key)

    def __repr__(self) -> str:
        return f"Attrs({getattr(self.obj, '__qualname__', type(self.obj).__name__)}, {self.kind!r})"
_HOOK_DICTS = frozenset({"_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks",
                         "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
                         "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                         "_load_state_dict_post_hooks"})
_GLOBAL_HOOKS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks",
                 "_global_forward_hooks", "_global_forward_hooks_always_called")


_GENERATED = ("<guardsolve", "<readable>", "<witness>", "<eval_with_key")
_SKIP_MODULES = frozenset({"torch", "guardsolve", "sympy", "mpmath", "networkx", "z3", "numpy"}) | frozenset(
    sys.stdlib_module_names)


def _global_names(code: types.CodeType, module: Any) -> tuple[str, ...]:
    """The globals a code object loads, or () for code that is not the program's."""
    path = code.co_filename
    if path.startswith(_GENERATED):
        return ()  # NOTE: guardsolve's generated checks and replays, torch.fx's generated forwards
    if path.startswith("<"):
        # NOTE: `python -c`, a notebook cell, a doctest are the user's; code that libraries
        # generate (a namedtuple's `__new__`, `<frozen importlib...>`) is named by its module
        top = module.split(".", 1)[0] if isinstance(module, str) else ""
        if top in _SKIP_MODULES or top.startswith("namedtuple_"):
            return ()
    elif os.path.realpath(path).startswith(_SKIP_DIRS):
        return ()
    return tuple(dict.fromkeys(i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"))


@functools.lru_cache(maxsize=4096)
def _compares_type_with_tensor(code: types.CodeType) -> bool:
    """Whether `code` compares what `type(...)` returns with `torch.Tensor` (`type(x) is
    torch.Tensor`, `==`, `in`): each comparison, with a `type` call and a load of `Tensor` among
    the few instructions before it.

    >>> def f(x):
    ...     return 1 if type(x) is torch.Tensor else 2
    >>> def h(x):
    ...     return 1 if isinstance(x, torch.Tensor) and type(x).__name__ == "Tensor" else 2
    >>> _compares_type_with_tensor(f.__code__), _compares_type_with_tensor(h.__code__)
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
def _module_attrs(code: types.CodeType) -> dict[tuple[str, str], tuple[str, ...]]:
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


# -- the hooks ----------------------------------------------------------------------------------


class _ModuleHooks:
    """`nn.Module.__getattribute__` / `__getattr__` that record, and a `torch.Tensor.numpy` that
    refuses while this thread records, installed while any recorder is active in any thread (a
    count under a lock; the last one out restores PyTorch's)."""

    _lock = threading.Lock()
    _active = [0]  # NOTE: mirrors whether torch's class is patched; mutated only under the lock
    _saved: list[Any] = []
    _numpy: list[Any] = []  # NOTE: `torch.Tensor.numpy` as PyTorch defines it, while it is replaced

    def __enter__(self) -> None:
        with self._lock:
            if self._active[0] == 0:
                cls = torch.nn.Module
                type(self)._saved = [cls.__dict__.get("__getattribute__"), cls.__dict__["__getattr__"]]
                orig_getattr = cls.__dict__["__getattr__"]

                def __getattribute__(m: Any, name: str) -> Any:
                    v = object.__getattribute__(m, name)
                    if name[:2] != "__":
                        rec = _RECORDER.get()
                        if rec is not None:
                            rec.module_attr(m, name, v)
                    elif name == "__dict__":
                        rec = _RECORDER.get()
                        if rec is not None:
                            rec.module_dict(m, sys._getframe(1).f_code)
                    return v

                def __getattr__(m: Any, name: str) -> Any:
                    v = orig_getattr(m, name)
                    rec = _RECORDER.get()
                    if rec is not None:
                        rec.module_attr(m, name, v)
                    return v

                cls.__getattribute__ = __getattribute__  # type: ignore[method-assign]
                cls.__getattr__ = __getattr__  # type: ignore[method-assign]
                orig_numpy = torch.Tensor.numpy
                type(self)._numpy = [orig_numpy]

                def numpy(t: Any, *args: Any, **kwargs: Any) -> Any:
                    # NOTE: a read of the tensor's values no aten op records and no guard checks
                    # (a weight made an array and back a tensor was a constant of the trace, and
                    # its memory freed: garbage): the call runs eagerly
                    if _RECORDER.get() is not None:
                        from guardsolve.errors import DataDependentError

                        raise DataDependentError("numpy() of a tensor reads its values, which no guard checks")
                    return orig_numpy(t, *args, **kwargs)

                torch.Tensor.numpy = numpy  # type: ignore[method-assign]
            self._active[0] += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active[0] -= 1
            if self._active[0] == 0:
                cls = torch.nn.Module
                getattribute, getattr_ = self._saved
                if getattribute is None:
                    del cls.__getattribute__
                else:
                    cls.__getattribute__ = getattribute  # type: ignore[method-assign]
                cls.__getattr__ = getattr_  # type: ignore[method-assign]
                torch.Tensor.numpy = self._numpy[0]  # type: ignore[method-assign]


@contextlib.contextmanager
def recording(fn: Any) -> Iterator[Recorder]:
    """Record the state `fn` reads while the block runs (this thread only). Nested recordings
    record into the innermost."""
    rec = Recorder(fn)
    token = _RECORDER.set(rec)
    prev = sys.gettrace()

    def on_call(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            rec.frame(frame)
        return prev(frame, event, arg) if prev is not None else None

    with _ModuleHooks():
        sys.settrace(on_call)
        try:
            yield rec
        finally:
            sys.settrace(prev)
            _RECORDER.reset(token)


# -- leaves and the check -----------------------------------------------------------------------


@dataclass(eq=False)
class Leaf:
    """One thing the check compares: `owner[key]` (or the cell `owner`'s contents, `key`
    None; or the container `owner` itself, for `length`) now against `expect`.
    `kind`: value | tensor | object | length | absent."""

    where: str
    owner: str  # the bound name of the dict, list, tuple or cell it is read from
    key: Any
    kind: str
    expect: Any
    meta: Any = None  # a tensor's (type, dtype, device, layout, shape, stride, requires_grad); a length; a value_key
    ptr: int | None = None  # a tensor's `data_ptr()` when the fast check was made (`_has_ptr`)

    def __post_init__(self) -> None:
        if self.kind == "tensor" and _has_ptr(self.expect):
            self.ptr = _ptr(self.expect)

    @property
    def get(self) -> str:
        if self.kind == "length":
            return self.owner
        if self.kind == "absent":
            return f"{self.key!r} not in {self.owner}"
        return f"{self.owner}.cell_contents" if self.key is None else f"{self.owner}[{self.key!r}]"

    def line(self) -> str:
        match self.kind:
            case "value":
                return f"{self.where} == {self.expect!r}"
            case "tensor":
                _, dt, dev, _, shape, _, rg = self.meta
                where = f" on {dev}" if dev.type != "cpu" else ""
                return (f"{self.where}: a {str(dt).removeprefix('torch.')} tensor {list(shape)}{where}, "
                        f"requires_grad={rg} (the entry reads it at each call)")
            case "object":
                e = self.expect
                return f"{self.where} is <{e.__name__ if isinstance(e, type) else type(e).__name__}>"
            case "length":
                return f"{self.where}: {self.meta} items"
            case "absent":
                return f"{self.where} is not set on the instance (read from its class)"
        raise AssertionError(self.kind)


def tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    strided = t.layout is torch.strided
    return (type(t), t.dtype, t.device, t.layout, tuple(t.shape), tuple(t.stride()) if strided else None,
            t.requires_grad)


_ptr = torch.Tensor.data_ptr


def _has_ptr(t: Any) -> bool:
    """A dense tensor with storage of its own (a parameter, a buffer), whose `data_ptr()` says
    where its elements live; not a subclass, a sparse or a meta tensor."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout is torch.strided and not t.is_meta


def _is_static(v: Any) -> bool:
    """A plain immutable value, compared by type and value (a tuple of such values too)."""
    if isinstance(v, _STATIC_SCALARS):
        return not isinstance(v, float) or v == v
    if type(v) in (tuple, torch.Size) or isinstance(v, tuple) and hasattr(type(v), "_fields"):
        return all(_is_static(x) for x in v)
    return False


_CHECK_NAMESPACE: dict[str, Any] = {"_all": all, "_any": any, "_map": map, "_is": operator.is_, "_len": len,
                                    "_tuple": tuple, "_rg": operator.attrgetter("requires_grad"),
                                    "_getitem": operator.getitem, "_contains": operator.contains,
                                    "_cell": operator.attrgetter("cell_contents"), "_eq": operator.eq,
                                    "_dp": torch.Tensor.data_ptr}


class StateCheck:
    """The state an entry depends on, checked on every call (see the module's docstring)."""

    def __init__(self, leaves: list[Leaf], bound: dict[str, Any], notes: list[str], tensors: dict[int, int],
                 derive: dict[str, tuple[Any, ...]] | None = None):
        self.leaves = leaves
        self.derive = derive or {}
        self.notes = notes
        self.tensors = tensors  # id(tensor at record time) -> its leaf's index
        self.on_rebind: list[Callable[[dict[int, Any]], None]] = []
        self._lock = threading.Lock()
        self._bound = bound
        ns = {**bound, **_CHECK_NAMESPACE}
        self._getters = [eval(compile(f"lambda: {leaf.get}", "<guardsolve state leaf>", "eval"), ns)
                         for leaf in leaves]
        # NOTE: leaves that read one tensor (tied weights: `head.weight = emb.weight`): the trace
        # holds it once, so they must stay one tensor (untied, each needs its own constant)
        groups: dict[int, list[int]] = {}
        for i, leaf in enumerate(leaves):
            if leaf.kind == "tensor":
                groups.setdefault(id(leaf.expect), []).append(i)
        self._tied = [g for g in groups.values() if len(g) > 1]
        self._fast = self._compile()

    def _compile(self) -> Callable[[], bool]:
        """The fast check: identities, lengths, absences and `requires_grad`, each kind one pass
        that runs in C (`all(map(is_, map(getitem, owners, keys), expected))`)."""
        ns: dict[str, Any] = dict(_CHECK_NAMESPACE)
        keyed: list[Leaf] = []
        cells: list[Leaf] = []
        lens: list[Leaf] = []
        tensors: list[Leaf] = []
        absent: list[Leaf] = []
        for leaf in self.leaves:
            match leaf.kind:
                case "value" | "object" | "tensor":
                    (cells if leaf.key is None else keyed).append(leaf)
                    if leaf.kind == "tensor":
                        tensors.append(leaf)
                case "length":
                    lens.append(leaf)
                case "absent":
                    absent.append(leaf)
        bound = self._bound
        terms: list[str] = []
        if keyed:
            ns["_OW"], ns["_KY"] = tuple(bound[x.owner] for x in keyed), tuple(x.key for x in keyed)
            ns["_EX"] = tuple(x.expect for x in keyed)
            terms.append("_all(_map(_is, _map(_getitem, _OW, _KY), _EX))")
        if cells:
            ns["_CE"], ns["_CX"] = tuple(bound[x.owner] for x in cells), tuple(x.expect for x in cells)
            terms.append("_all(_map(_is, _map(_cell, _CE), _CX))")
        if lens:
            ns["_L"], ns["_N"] = tuple(bound[x.owner] for x in lens), tuple(x.meta for x in lens)
            terms.append("_tuple(_map(_len, _L)) == _N")
        if absent:
            ns["_AD"], ns["_AK"] = tuple(bound[x.owner] for x in absent), tuple(x.key for x in absent)
            terms.append("not _any(_map(_contains, _AD, _AK))")
        if tensors:
            ns["_T"], ns["_RG"] = tuple(x.expect for x in tensors), tuple(x.meta[-1] for x in tensors)
            terms.append("_all(_map(_is, _map(_rg, _T), _RG))")
            # NOTE: where each one's elements live: `.data =`, `set_()` and `swap_tensors` (what
            # `model.double()` and `model.to()` do to parameters) keep the object and replace its
            # storage, dtype and shape; a tensor with no plain storage is left to its identity
            plain = [x.expect for x in tensors if _has_ptr(x.expect)]
            if plain:
                ns["_P"], ns["_DP"] = tuple(plain), tuple(_ptr(t) for t in plain)
                terms.append("_all(_map(_eq, _map(_dp, _P), _DP))")
        body = " and ".join(terms) or "True"
        src = f"def fast():\n    try:\n        return {body}\n    except Exception:\n        return False\n"
        exec(compile(src, "<guardsolve state check>", "exec"), ns)
        return ns["fast"]

    @classmethod
    def of(cls, rec: Recorder) -> "StateCheck":
        b = _Builder()
        for r in rec.reads.values():
            name = b.bind(r.owner, ("root",))
            if r.absent:
                b.leaves.append(Leaf(r.where, name, r.key, "absent", None))
                continue
            if r.key is _LENGTH:
                b.leaves.append(Leaf(r.where, name, None, "length", r.owner, len(r.owner)))
                continue
            b.value(name, r.owner, r.key, r.value, r.where, 0, r.direct)
        return cls(b.leaves, b.bound, b.notes, b.tensors, b.derive)

    def __call__(self) -> bool:
        """Does the state still hold what the trace read? (Rebinds what changed but is equal.)"""
        return self._fast() or self._exact()

    def distrust(self) -> None:
        """Compare by value from now on, until the state holds again: something changed in place
        where the fast check does not look (`w.resize_(1)` keeps the object and its storage,
        and an artifact's input assert saw it)."""
        with self._lock:
            self._fast = _never

    def __len__(self) -> int:
        return len(self.leaves)

    def _exact(self) -> bool:
        now = []
        for leaf, get in zip(self.leaves, self._getters):
            try:
                cur = get()
            except Exception:
                return False
            if not leaf_matches(leaf, cur):
                return False
            now.append(cur)
        if self._untied(now) is not None:
            return False
        with self._lock:
            changed: dict[int, Any] = {}
            for i, (leaf, cur) in enumerate(zip(self.leaves, now)):
                if leaf.kind in ("value", "tensor") and cur is not leaf.expect:
                    leaf.expect = cur
                    if leaf.kind == "tensor":
                        leaf.meta = tensor_meta(cur)
                    changed[i] = cur
                elif leaf.kind == "tensor" and _has_ptr(cur) and _ptr(cur) != leaf.ptr:
                    changed[i] = cur  # NOTE: the same object, its storage replaced (`.data =`)
                if leaf.kind == "tensor":
                    leaf.ptr = _ptr(cur) if _has_ptr(cur) else None
            if changed or self._fast is _never:
                self._fast = self._compile()
                for listener in self.on_rebind:
                    listener(changed)
        return True

    def failure(self) -> str | None:
        """The first leaf the state fails, with what it holds now, or None."""
        now = []
        for leaf, get in zip(self.leaves, self._getters):
            try:
                cur = get()
            except Exception as e:
                return f"{leaf.line()} failed ({type(e).__name__}: {e})"
            if not leaf_matches(leaf, cur):
                return f"{leaf.line()} failed (found {_show(leaf, cur)})"
            now.append(cur)
        return self._untied(now)

    def _untied(self, now: list[Any]) -> str | None:
        """Leaves that read one tensor and now read two (`now`: each leaf's current value), in words, or None."""
        for group in self._tied:
            first = now[group[0]]
            other = next((i for i in group[1:] if now[i] is not first), None)
            if other is not None:
                return (f"{self.leaves[group[0]].where} and {self.leaves[other].where} were one tensor when traced "
                        "(tied) and are two now")
        return None

    def lines(self) -> list[str]:
        """One line a leaf, the program's own state first; the module machinery every call of a
        module reads (hook dicts, methods not shadowed on the instance) summed up in one line."""
        own = [leaf.line() for leaf in self.leaves if not _machinery(leaf)]
        rest = len(self.leaves) - len(own)
        return own + ([f"{rest} checks of module machinery: hook dicts and methods (not shadowed on instances)"]
                      if rest else [])

    def requires_grad(self) -> list[str]:
        """The tensors read now requiring grad, by where they were read."""
        return [leaf.where for leaf in self.leaves if leaf.kind == "tensor" and leaf.expect.requires_grad]


def _machinery(leaf: Leaf) -> bool:
    last = leaf.where.rsplit(".", 1)[-1]
    name = last.split("[", 1)[0]
    return leaf.kind == "absent" or (name.startswith("_") and (
        "hooks" in name or (name in _MODULE_DICTS and "[" not in last)))


_MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def leaf_matches(leaf: Leaf, cur: Any) -> bool:
    match leaf.kind:
        case "value":
            return cur is leaf.expect or (_is_static(cur) and value_key(cur) == leaf.meta)
        case "tensor":
            # NOTE: metadata even for the same object: `requires_grad_()`, `.data =` change it in place
            return isinstance(cur, torch.Tensor) and tensor_meta(cur) == leaf.meta
        case "object":
            return cur is leaf.expect
        case "length":
            return len(cur) == leaf.meta
        case "absent":
            return cur is True
    raise AssertionError(leaf.kind)


# NOTE: the fields of `tensor_meta` a miss names when they changed (None: shown already)
_TENSOR_FIELDS = ("type", None, "device", "layout", None, "strides", None)


def _short(v: Any) -> str:
    return v.__name__ if isinstance(v, type) else str(v)


def _show(leaf: Leaf, cur: Any) -> str:
    match leaf.kind:
        case "tensor" if isinstance(cur, torch.Tensor):
            now = tensor_meta(cur)
            _, dt, _, _, shape, _, rg = now
            text = f"a {str(dt).removeprefix('torch.')} tensor {list(shape)}, requires_grad={rg}"
            # NOTE: what the words above do not show (its type, device, layout, strides), where it changed
            # (strides only at the same shape: another shape has other strides anyway)
            same_shape = leaf.meta is not None and leaf.meta[4] == now[4]
            changed = [f"{what} {_short(a)} where the entry read {_short(b)}"
                       for what, a, b in zip(_TENSOR_FIELDS, now, leaf.meta or ())
                       if what and a != b and (what != "strides" or same_shape)]
            return text + (f" ({'; '.join(changed)})" if changed else "")
        case "object":
            return f"another {type(cur).__name__}"
        case "length":
            return f"{len(cur)} items"
        case "absent":
            return "an instance attribute"
    text = repr(cur)
    return text if len(text) <= 60 else text[:57] + "..."


class _Builder:
    def __init__(self) -> None:
        self.leaves: list[Leaf] = []
        self.bound: dict[str, Any] = {}
        self._names: dict[int, str] = {}
        self._slots: set[tuple[int, Any]] = set()
        self.derive: dict[str, tuple[Any, ...]] = {}
        self.notes: list[str] = []
        self.tensors: dict[int, int] = {}

    def bind(self, obj: Any, how: tuple[Any, ...]) -> str:
        """The check's name for `obj`; `how` says how it was reached: ("root",) for the owner of
        a read, ("item", parent, key) for a container inside one, ("vars", parent, key) for
        the `__dict__` of an object inside one (`StateCheck.derive`, for saving the check)."""
        name = self._names.get(id(obj))
        if name is None:
            name = self._names[id(obj)] = f"_o{len(self._names)}"
            self.bound[name] = obj
            self.derive[name] = how
        return name

    def value(self, owner: str, container: Any, key: Any, v: Any, where: str, depth: int, direct: bool = False) -> None:
        slot = (id(container), key)
        if slot in self._slots:
            return  # NOTE: read twice (`self.fc.weight`, and `_parameters` walked): one leaf
        self._slots.add(slot)
        leaves = self.leaves
        if isinstance(v, torch.Tensor):
            self.tensors.setdefault(id(v), len(leaves))
            leaves.append(Leaf(where, owner, key, "tensor", v, tensor_meta(v)))
            return
        if _is_static(v):
            leaves.append(Leaf(where, owner, key, "value", v, value_key(v)))
            return
        if not direct:
            leaves.append(Leaf(where, owner, key, "object", v))
        if isinstance(v, torch.nn.Module):
            # NOTE: reads of its attributes bind its dicts: say how they are reached (for saving)
            d = self.bind(v.__dict__, ("vars", owner, key))
            for slot in _MODULE_DICTS:
                if isinstance(v.__dict__.get(slot), dict):
                    self.bind(v.__dict__[slot], ("item", d, slot))
        if isinstance(v, _OBJECTS) or callable(v) and not hasattr(v, "__dict__") or \
                type(v).__module__.startswith("guardsolve."):
            # NOTE: a guarded function: its calls inside a trace run its function, whose own
            # reads are recorded; its cache's bookkeeping is not the program's state
            return
        if depth >= MAX_DEPTH:
            self.notes.append(f"{where}: nested {depth} deep; compared by identity only (a change inside it is not seen)")
            return
        # NOTE: a container, or a plain object's attributes (a model's config: reads of its
        # attributes are not recorded, so all of them are checked; any change misses). The
        # container itself is bound: its identity is the leaf just added
        if isinstance(v, (dict, list, tuple)):
            inner, items, label = v, list(v.items()) if isinstance(v, dict) else list(enumerate(v)), where
        elif isinstance(getattr(v, "__dict__", None), dict):
            inner, items, label = v.__dict__, list(v.__dict__.items()), None
            self._class_values(type(v), v.__dict__, where, depth)
        else:
            if not isinstance(v, (set, frozenset)):
                self.notes.append(f"{where}: a {type(v).__name__} with no __dict__, compared by identity only")
            return
        name = self.bind(inner, ("item", owner, key) if label else ("vars", owner, key))
        if not isinstance(inner, tuple):
            leaves.append(Leaf(where if label else f"{where}.__dict__", name, None, "length", inner, len(inner)))
        for k, x in items:
            if isinstance(k, (str, int)) and not isinstance(k, bool):
                self.value(name, inner, k, x, f"{where}[{k!r}]" if label else f"{where}.{k}", depth + 1)
            else:
                self.notes.append(f"{where}: a key of type {type(k).__name__} is not looked into")


    def _class_values(self, cls: type, instance: dict[str, Any], where: str, depth: int) -> None:
        """A plain object's class attributes that are plain values, where the program's own class
        defines them and the instance does not shadow them (`class Cfg: scale = 2.0`): reads on
        the object are not recorded, so each is checked, as its `__dict__` is."""
        seen: set[str] = set(instance)
        for c in cls.__mro__:
            top = (getattr(c, "__module__", None) or "").split(".", 1)[0]
            if c is object or top in _SKIP_MODULES:
                continue
            attrs, owner = Attrs(c, "class"), None
            for k, x in list(c.__dict__.items()):
                if k in seen or k.startswith("__") or not _is_static(x):
                    continue
                seen.add(k)
                if owner is None:
                    owner = self.bind(attrs, ("root",))  # NOTE: bound, so it lives as long as the check
                self.value(owner, attrs, k, x, f"{c.__qualname__}.{k}", depth + 1)


def is_state(t: torch.Tensor) -> bool:
    """Was `t` read as state by the recording active in this thread?"""
    rec = _RECORDER.get()
    return rec is not None and id(t) in rec.tensors


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No recording in this block (guardsolve's own walks over a module: not the program's reads)."""
    token = _RECORDER.set(None)
    try:
        yield
    finally:
        _RECORDER.reset(token)


def reachable_grad(fn: Any) -> str | None:
    """A tensor that `fn` can reach without running and that requires grad, by name, or None:
    a module's parameters and buffers; for a function, the tensors and modules in its closure
    cells, defaults and the globals its code names (a lambda over a trainable `net`).

    >>> net = torch.nn.Linear(2, 2)
    >>> reachable_grad(lambda x: net(x))
    'net.weight'
    """
    if isinstance(fn, torch.nn.Module):
        return next((f"self.{n}" for n, p in fn.named_parameters() if p.requires_grad), None)
    inner = getattr(fn, "__func__", fn)
    found: list[tuple[str, Any]] = []
    code = getattr(inner, "__code__", None)
    if code is not None:
        for name, cell in zip(code.co_freevars, inner.__closure__ or ()):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:
                continue
        g = getattr(inner, "__globals__", {})
        found += [(n, g[n]) for n in _all_global_names(code) if n in g]
    found += [(f"__defaults__[{i}]", v) for i, v in enumerate(getattr(inner, "__defaults__", None) or ())]
    self_ = getattr(fn, "__self__", None)
    if self_ is not None:
        found.append(("self", self_))
    for name, v in found:
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return name
        if isinstance(v, torch.nn.Module):
            p = next((n for n, p in v.named_parameters() if p.requires_grad), None)
            if p is not None:
                return f"{name}.{p}"
    return None


def reachable_tensors(fn: Any) -> list[torch.Tensor]:
    """The tensors `fn` can reach without running (as `reachable_grad` walks them: a module's
    parameters and buffers; a function's closure cells, defaults, the globals its code names,
    and the modules among them), each once.

    >>> bn = torch.nn.BatchNorm1d(2)
    >>> [tuple(t.shape) for t in reachable_tensors(lambda x: bn(x))]
    [(2,), (2,), (2,), (2,), ()]
    """
    out: dict[int, torch.Tensor] = {}
    for v in _reachable(fn):
        if isinstance(v, torch.Tensor):
            out.setdefault(id(v), v)
        elif isinstance(v, torch.nn.Module):
            for t in itertools.chain(v.parameters(), v.buffers()):
                out.setdefault(id(t), t)
    return list(out.values())


def reachable_generators(fn: Any) -> list[torch.Generator]:
    """The random generators of the program's own that `fn` can reach without running (as
    `reachable_tensors` walks), each once.

    >>> gen = torch.Generator()
    >>> reachable_generators(lambda x: x + torch.rand(3, generator=gen)) == [gen]
    True
    """
    out: dict[int, torch.Generator] = {}
    for v in _reachable(fn):
        held = [x for m in v.modules() for x in vars(m).values()] if isinstance(v, torch.nn.Module) else [v]
        for x in held:  # NOTE: a module's own attributes too (`self.gen`)
            if isinstance(x, torch.Generator):
                out.setdefault(id(x), x)
    return list(out.values())


def _reachable(fn: Any) -> list[Any]:
    """What `fn` reaches without running: itself where a module; a function's closure cells, the
    globals its code names, its defaults, and a bound method's object."""
    inner = getattr(fn, "__func__", fn)
    found: list[Any] = [fn] if isinstance(fn, torch.nn.Module) else []
    code = getattr(inner, "__code__", None)
    if code is not None:
        for cell in inner.__closure__ or ():
            try:
                found.append(cell.cell_contents)
            except ValueError:
                continue
        g = getattr(inner, "__globals__", {})
        found += [g[n] for n in _all_global_names(code) if n in g]
    found += list(getattr(inner, "__defaults__", None) or ())
    self_ = getattr(fn, "__self__", None)
    if self_ is not None:
        found.append(self_)
    return found


@functools.lru_cache(maxsize=1024)
def _all_global_names(code: types.CodeType) -> tuple[str, ...]:
    """The global names `code` and its nested code load (a code object is immutable: cached)."""
    out = [i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _all_global_names(c)
    return tuple(dict.fromkeys(out))


__all__ = ["is_state", "paused", "reachable_generators", "reachable_grad", "reachable_tensors", "Attrs", "Leaf", "Read", "Recorder", "StateCheck",
           "recording"]
