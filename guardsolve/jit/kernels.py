"""Inductor's generated code run without Inductor: saved with a variant, loaded in another process.

A compiled variant is a Python module that Inductor wrote (its `call(args)`) and the C++ it
built into shared libraries. `CompiledArtifact.load` in a new process imports Inductor's
compiler (about 3 s here), probes the CPU's vector instructions by compiling test programs
(about 1.8 s) and looks the graph up in Inductor's cache, rebuilding the C++ with gcc where
that cache is cold (10-16 s). The module itself needs none of that: `import torch`, a few
names from Inductor's runtime, and its kernels.

`capture(call)`, in the process that compiled: the module's source, each kernel's built
library (keyed by what built it: the arguments of `async_compile.cpp_pybinding`, or of
`CppWrapperCodeCache.load_pybinding` for a C++ wrapper), where each extern kernel it calls
lives in torch (`extern_kernels.addmm` is `torch.addmm`), and the CPU's features.
`load(saved)`, in any process: the libraries are written to a private temporary folder and
imported as Inductor imports them; the source runs with small stand-ins for the names it
imports from Inductor (`_standins`). Where this does not apply (another CPU, an import with
no stand-in, a library that does not load) it raises `NotDirect`, and the store loads the
artifact through Inductor instead.

>>> source = "from torch._inductor.codegen.memory_planning import _align as align\\ncall = align"
>>> run_module(source, standins(lambda key: None, {}))["call"](65)
128
>>> run_module("from torch._inductor.compile_fx import compile_fx", standins(lambda key: None, {}))
Traceback (most recent call last):
...
guardsolve.jit.kernels.NotDirect: its code imports compile_fx from torch._inductor.compile_fx, which a loaded entry does not import
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import importlib.util
import os
import platform
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

import guardsolve.jit.backward  # noqa: F401  (registers `guardsolve::max_pool2d_backward`, which training kernels call)

# NOTE: modules a loaded entry never imports (Inductor's compiler and what it pulls in); the
# names the generated code takes from them come from `standins`
_HEAVY = ("torch._inductor", "torch._dynamo", "torch._functorch", "triton")


class NotDirect(Exception):
    """The generated code cannot run without Inductor here (said in the message)."""


def _key(what: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """A kernel's name in the saved data: a hash of the call that built it."""
    return hashlib.sha256(repr((what, args, sorted(kwargs.items()))).encode()).hexdigest()


# -- stand-ins for what the generated module imports from Inductor -------------------------------


class _AsyncCompile:
    """`AsyncCompile` as the generated module uses it: each kernel it asks for is a saved one."""

    def __init__(self, kernel: Callable[[str], Any]) -> None:
        self._kernel = kernel

    def cpp_pybinding(self, *args: Any, **kwargs: Any) -> Any:
        return self._kernel(_key("cpp_pybinding", args, kwargs))

    def wait(self, scope: Any) -> None:
        return None  # NOTE: every kernel is already loaded


@dataclass(frozen=True)
class _CppWrapperCodeCache:
    """`CppWrapperCodeCache` as a generated C++ wrapper module uses it: its library is the saved one."""

    kernel: Callable[[str], Any]

    def load_pybinding(self, *args: Any, **kwargs: Any) -> Any:
        return self.kernel(_key("load_pybinding", args, kwargs))


def _align(nbytes: int) -> int:
    """Inductor's `_align` (torch/_inductor/utils.py): round up to a multiple of 64 bytes."""
    return (nbytes + 63) & -64


@contextlib.contextmanager
def _maybe_profile(should_profile: bool, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """Inductor's `maybe_profile` (torch/_inductor/utils.py)."""
    if should_profile:
        with torch.profiler.profile(*args, **kwargs) as p:
            yield p
    else:
        yield


def _run_intermediate_hooks(name: str, val: Any) -> None:
    """Inductor's hooks, where a program registered any (registering imports `torch._inductor.hooks`)."""
    hooks = sys.modules.get("torch._inductor.hooks")
    if hooks is not None:
        hooks.run_intermediate_hooks(name, val)


def standins(kernel: Callable[[str], Any], externs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Module -> name -> value, for each name a generated module imports from Inductor.
    `kernel(key)` gives a built kernel; `externs` the extern kernels its code calls."""
    return {
        "torch._inductor.async_compile": {"AsyncCompile": lambda: _AsyncCompile(kernel)},
        "torch._inductor.codecache": {"CppWrapperCodeCache": _CppWrapperCodeCache(kernel)},
        "torch._inductor.select_algorithm": {"extern_kernels": types.SimpleNamespace(**externs)},
        "torch._inductor.codegen.memory_planning": {"_align": _align},
        "torch._inductor.utils": {"maybe_profile": _maybe_profile},
        "torch._inductor.hooks": {"run_intermediate_hooks": _run_intermediate_hooks},
    }


def _heavy(name: str) -> bool:
    return any(name == h or name.startswith(h + ".") for h in _HEAVY)


def run_module(source: str, table: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Run a generated module's source with `table`'s stand-ins for its imports from Inductor;
    its namespace. Raises `NotDirect` for an import of Inductor's that has no stand-in."""

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and _heavy(name):
            names = table.get(name)
            missing = [n for n in fromlist or ("",) if names is None or n not in names]
            if missing:
                what = f"{missing[0]} from {name}" if missing[0] else name
                raise NotDirect(f"its code imports {what}, which a loaded entry does not import")
            module = types.ModuleType(name)
            module.__dict__.update(names or {})
            return module
        return builtins.__import__(name, globals, locals, fromlist, level)

    ns: dict[str, Any] = {"__builtins__": {**builtins.__dict__, "__import__": importer},
                          "__name__": "guardsolve_inductor_module"}
    try:
        exec(compile(source, "<Inductor's generated module, loaded by guardsolve>", "exec"), ns)
    except NotDirect:
        raise
    except Exception as e:
        raise NotDirect(f"its generated module does not run without Inductor ({type(e).__name__}: {e})") from e
    return ns


# -- the CPU ------------------------------------------------------------------------------------


def _cpu() -> tuple[str, frozenset[str]]:
    """The machine and its CPU's features (Linux: /proc/cpuinfo's flags): Inductor builds with
    `-march=native`, so a library runs on a CPU with at least the features it was built on."""
    flags: frozenset[str] = frozenset()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags = frozenset(value.split())
                    break
    return platform.machine(), flags


# -- saving -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pending:
    key: str


def _torch_path(obj: Any) -> str | None:
    """Where an extern kernel lives in torch (`torch.addmm`, `torch.ops.mkldnn._linear_pointwise.binary`)."""
    paths = []
    if isinstance(obj, torch._ops.OpOverload):
        paths.append(f"torch.ops.{obj._schema.name.replace('::', '.')}.{obj._overloadname}")
    elif isinstance(obj, torch._ops.OpOverloadPacket):
        paths.append(f"torch.ops.{obj._qualified_op_name.replace('::', '.')}")
    name = getattr(obj, "__name__", None)
    if isinstance(name, str):
        paths.append(f"torch.{name}")
    for p in paths:
        with contextlib.suppress(AttributeError):
            if _resolve(p) is obj:
                return p
    return None


def _resolve(path: str) -> Any:
    obj: Any = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _externs(tree: ast.AST, real: Any) -> dict[str, str]:
    """Each `extern_kernels.NAME` the code reads, by where it lives in torch."""
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
             and n.value.id == "extern_kernels"]
    uses = sum(isinstance(n, ast.Name) and n.id == "extern_kernels" for n in ast.walk(tree))
    if uses != len(reads):
        raise NotDirect("its code uses extern_kernels other than by reading an attribute")
    out: dict[str, str] = {}
    for name in sorted({n.attr for n in reads}):
        path = _torch_path(getattr(real, name, None))
        if path is None:
            raise NotDirect(f"its extern kernel {name} is not one of torch's functions or ops")
        out[name] = path
    return out


def capture(call: Callable[..., Any]) -> dict[str, Any]:
    """What `load` needs to run `call` (a generated module's `call(args)`, as `direct_call`
    finds it) in another process. Raises `NotDirect`."""
    g = getattr(call, "__func__", call).__globals__
    if g.get("call") != call:
        raise NotDirect("its entry point is not its generated module's call")
    machine, cpu = _cpu()
    if not cpu:
        raise NotDirect("this platform does not say its CPU's features (/proc/cpuinfo)")
    try:
        with open(g["__file__"]) as f:
            source = f.read()
    except (KeyError, OSError) as e:
        raise NotDirect(f"its generated module's source cannot be read ({type(e).__name__}: {e})") from e
    tree = ast.parse(source)
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and _heavy(f"{n.value.id}.{n.attr}"):
            raise NotDirect(f"its code reads {n.value.id}.{n.attr}")
    asked: list[str] = []

    def pending(key: str) -> _Pending:
        asked.append(key)
        return _Pending(key)

    ns = run_module(source, standins(pending, {}))
    kernels: dict[str, tuple[str, bytes]] = {}
    for name, v in ns.items():
        if isinstance(v, _Pending):
            built = g.get(name)
            path = getattr(getattr(built, "__self__", None), "__file__", None)
            if not isinstance(built, types.BuiltinFunctionType) or not isinstance(path, str):
                raise NotDirect(f"its kernel {name} is not a function of a loaded library")
            with open(path, "rb") as f:
                kernels[v.key] = (built.__name__, f.read())
    if set(asked) != set(kernels):
        raise NotDirect("its code builds a kernel it does not keep in its namespace")
    return {"source": source, "kernels": kernels, "externs": _externs(tree, g.get("extern_kernels")),
            "machine": machine, "cpu": cpu}


# -- loading ------------------------------------------------------------------------------------


def _import_library(folder: str, entry: str, data: bytes) -> Any:
    """A kernel library imported as Inductor imports it (a Python extension whose init reads
    where torch's tensor-data function is), once per process for the same bytes.

    NOTE: an extension module is never unloaded, and each import of a new file maps it anew (5
    to 6 memory maps): a process that loaded saved entries again and again (150 programs
    sharing one `cache_dir`, each offered every entry) reached the kernel's limit of 65,530
    maps in 2 minutes, and the next allocation failed (a segfault in z3's context creation).
    The module is registered in `sys.modules` under the hash of its bytes, so the same library
    loads once; its kernels keep no state of their own."""
    name = f"guardsolve_kernel_{hashlib.sha256(data).hexdigest()[:32]}.{entry}"
    known = sys.modules.get(name)
    if known is not None:
        return getattr(known, entry)
    path = os.path.join(folder, f"{name.split('.')[0]}.so")
    with open(path, "wb") as f:
        f.write(data)
    os.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = str(
        torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr)  # type: ignore[attr-defined]
    # NOTE: the module's last name picks its init function (PyInit_kernel, PyInit_inductor_entry_cpp)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotDirect(f"its library {name[18:30]} is not an importable extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return getattr(module, entry)


def load(saved: Mapping[str, Any]) -> Callable[[list[Any]], Any]:
    """The generated module's `call(args)`, run without Inductor. Raises `NotDirect`."""
    machine, cpu = _cpu()
    if machine != saved["machine"] or not cpu >= saved["cpu"]:
        lacks = sorted(saved["cpu"] - cpu)[:5]
        raise NotDirect(f"its kernels were built for another CPU ({saved['machine']}; this {machine} lacks "
                        f"{', '.join(lacks) or 'nothing'})")
    try:
        externs = {name: _resolve(path) for name, path in saved["externs"].items()}
    except AttributeError as e:
        raise NotDirect(f"an extern kernel it calls is not in this torch ({e})") from e
    loaded: dict[str, Any] = {}
    try:
        # NOTE: a library stays mapped once imported: its file is removed right after
        with tempfile.TemporaryDirectory(prefix="guardsolve-kernels-") as folder:
            for key, (entry, data) in saved["kernels"].items():
                loaded[key] = _import_library(folder, entry, data)
    except (ImportError, OSError) as e:
        raise NotDirect(f"its kernels do not load here ({type(e).__name__}: {e})") from e

    def kernel(key: str) -> Any:
        if key not in loaded:
            raise NotDirect("its code builds a kernel that was not saved")
        return loaded[key]

    call = run_module(saved["source"], standins(kernel, externs)).get("call")
    if not callable(call):
        raise NotDirect("its generated module has no call")
    return call


__all__ = ["NotDirect", "capture", "load", "run_module", "standins"]
