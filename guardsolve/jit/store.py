"""Compiled entries kept across processes: `guarded(fn, backend="inductor", cache_dir=PATH)`.

Each compiled variant is one file, `PATH/<fingerprint>/<entry>-<variant>.gse`, written
atomically (a temporary file in the same folder, then `os.replace`), so two processes sharing
the folder never read half a file. A file holds a header, the SHA-256 of its payload and the
payload: the variant's check (its minimal guards, static guards and what the backend assumed,
with their proof), the artifact Inductor saved, Inductor's generated code with its built
kernels (`jit/kernels.py`), and how to call it (the inputs' names, the state check
(`jit/portable.py`: where each tensor the entry reads lives, by module path or cell), the
output structure).

A later process runs the generated code and kernels without importing Inductor's compiler; it
loads the artifact through Inductor (`CompiledArtifact.load`: seconds, and gcc where Inductor's
own cache is cold) only where that does not apply (another CPU, a graph that needs Inductor's
runtime wrapper), saying why in `Store.through_inductor`.

The fingerprint (the folder's name) covers the format, the torch build, Python's version,
fn's code (a module's classes' source, or a function's code objects) and, for a module, the
names, shapes and dtypes of its parameters and buffers. A later process reads only the
folder of its own fingerprint. A file that is truncated, corrupted, from another fingerprint,
or whose artifact does not load is ignored with a reason (`Store.skipped`), never used.

The folder is trusted as Inductor's own cache folder is: its files are pickles, generated code
and built libraries that run on load. Do not point `cache_dir` at a folder others can write.

>>> fingerprint(lambda x: x + 1) == fingerprint(lambda x: x + 1)
True
>>> fingerprint(lambda x: x + 1) == fingerprint(lambda x: x + 2)
False
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import io
import linecache
import os
import pickle
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from guardsolve.ir.graph import SharedParams
from guardsolve.jit.portable import code_digest as _code_digest
from guardsolve.solve.guardset import GuardSet
from guardsolve.trace.static import StaticGuard

# NOTE: 2: the state check is saved with each variant; 3: Inductor's generated code and built
# kernels too (`jit/kernels.py`), run without importing Inductor
FORMAT = b"guardsolve-entry-3\n"
_GUARDSET_FIELDS = ("constraints", "graph", "dims", "sizes", "signature", "implied", "undecided", "tautologies",
                    "value_guards", "static", "params", "widened")


# -- fingerprints -------------------------------------------------------------------------------


def _source_of(obj: Any) -> str | None:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


def _class_sources(classes: Iterable[type]) -> dict[type, str | None]:
    """Each class's source (its decorators and body), each file parsed once: `inspect.getsource`
    parses a class's whole file again for each class (DistilBERT's 36 modules: 0.49 s of a
    restart's first call)."""
    out: dict[type, str | None] = {}
    files: dict[str, list[type]] = {}
    for cls in dict.fromkeys(classes):
        try:
            path = inspect.getsourcefile(cls)
        except TypeError:
            path = None
        if path is None:
            out[cls] = None
        else:
            files.setdefault(path, []).append(cls)
    for path, group in files.items():
        module = sys.modules.get(group[0].__module__)
        lines = linecache.getlines(path, getattr(module, "__dict__", None))
        try:
            nodes = _class_nodes(ast.parse("".join(lines)), "", {})
        except (SyntaxError, ValueError):
            nodes = {}
        for cls in group:
            node = nodes.get(cls.__qualname__)
            if node is None:
                out[cls] = None
                continue
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out[cls] = "".join(lines[start - 1:node.end_lineno])
    return out


def _class_nodes(node: ast.AST, prefix: str, found: dict[str, ast.ClassDef]) -> dict[str, ast.ClassDef]:
    """The class definitions under `node` by qualified name (the first of a name, as `inspect` finds it)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            found.setdefault(prefix + child.name, child)
            _class_nodes(child, f"{prefix}{child.name}.", found)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _class_nodes(child, f"{prefix}{child.name}.<locals>.", found)
        elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            _class_nodes(child, prefix, found)
    return found


def fingerprint(fn: Callable[..., Any]) -> str:
    """What an entry was compiled for: the format, torch's build, Python, fn's code and, for a
    module, its parameters' and buffers' names, shapes and dtypes (hex, 24 digits)."""
    h = hashlib.sha256()
    h.update(FORMAT)
    h.update(f"{torch.__version__} {getattr(torch.version, 'git_version', '')} {sys.version_info[:3]}".encode())
    if isinstance(fn, torch.nn.Module):
        modules = list(fn.named_modules())
        sources = _class_sources(type(m) for _, m in modules)
        for name, m in modules:
            cls = type(m)
            # NOTE: not the module's name: a class run as __main__ and imported is the same code
            h.update(f"{name}:{cls.__qualname__}".encode())
            src = sources[cls]
            if src is not None:
                h.update(src.encode())
            elif hasattr(cls.forward, "__code__"):
                _code_digest(cls.forward.__code__, h)
        for name, t in [*fn.named_parameters(), *fn.named_buffers()]:
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}:{t.requires_grad}".encode())
    else:
        h.update(f"{getattr(fn, '__qualname__', type(fn).__name__)}".encode())
        code = getattr(fn, "__code__", None)
        if code is not None:
            _code_digest(code, h)
        else:
            h.update((_source_of(type(fn)) or repr(type(fn))).encode())
    return h.hexdigest()[:24]


# -- pickling what a variant needs ----------------------------------------------------------------


@dataclass(frozen=True)
class _Rebind:
    """A static guard's value that only the running process has (a module's training flags):
    bound again from the loading function's namespace."""

    name: str


class _Pickler(pickle.Pickler):
    """Read-only mappings as dicts (shared params stay read-only); a static guard's callables as `_Rebind`."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.MappingProxyType):
            return dict, (dict(obj),)
        if type(obj) is SharedParams:  # NOTE: read-only: built whole, never item by item
            return SharedParams, (dict(obj),)
        if isinstance(obj, StaticGuard):
            values = tuple((k, _Rebind(k) if callable(v) and not isinstance(v, type) else v) for k, v in obj.values)
            return StaticGuard, (obj.text, obj.source, obj.subject, values)
        if isinstance(obj, GuardSet):
            return _guardset, ({f: getattr(obj, f) for f in _GUARDSET_FIELDS},)
        return NotImplemented


def _guardset(state: dict[str, Any]) -> GuardSet:
    return GuardSet(state["constraints"], state["graph"], state["dims"], state["sizes"], state["signature"],
                    set(state["implied"]), state["undecided"], state["tautologies"], state["value_guards"],
                    static=state["static"], params=state["params"], widened=state["widened"])


def _rebind(gs: GuardSet, namespace: Mapping[str, Any]) -> GuardSet:
    static = []
    for g in gs.static:
        values = []
        for k, v in g.values:
            if isinstance(v, _Rebind):
                if v.name not in namespace:
                    raise LookupError(f"its static guard {g.text!r} needs {v.name}, which this function lacks")
                v = namespace[v.name]
            values.append((k, v))
        static.append(StaticGuard(g.text, g.source, g.subject, tuple(values)))
    return gs.with_static(static, gs.params)


def dumps(payload: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(dict(payload))
    body = buf.getvalue()
    return FORMAT + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def loads(data: bytes) -> dict[str, Any]:
    """The payload of a file written by `dumps`; ValueError names what is wrong with it."""
    if not data.startswith(FORMAT):
        raise ValueError("not a guardsolve entry of this format (header)")
    rest = data[len(FORMAT):]
    digest, sep, body = rest.partition(b"\n")
    if not sep or len(digest) != 64:
        raise ValueError("truncated (no checksum)")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    payload = pickle.loads(body)
    if not isinstance(payload, dict):
        raise ValueError("payload is not an entry")
    return payload


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the whole new one."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- the store ----------------------------------------------------------------------------------


@dataclass
class Store:
    """One function's folder of compiled entries under `root`."""

    root: str
    fn: Callable[..., Any]
    modules: Sequence[torch.nn.Module] | None = None
    skipped: list[str] = field(default_factory=list)  # files ignored on load, with why
    load_seconds: list[float] = field(default_factory=list)  # per variant loaded
    # NOTE: variants loaded through Inductor (`CompiledArtifact.load`, which imports its compiler),
    # with why their generated code could not run without it
    through_inductor: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.folder = os.path.join(self.root, fingerprint(self.fn))

    def save(self, entry: Any, variant: Any) -> str | None:
        """Write one variant; returns why it was not saved, or None."""
        from guardsolve.jit.portable import NotPortable, state_spec

        t = entry.trace
        key = entry.key or hashlib.sha256(f"{entry.names}\n{t.graph}".encode()).hexdigest()[:16]
        entry.key = key
        if variant.artifact is None:
            return "not saved: the artifact was not kept"
        if entry.state is None:
            return "not saved: the entry has no state check"
        try:
            spec = state_spec(entry.state, self.fn)
        except NotPortable as e:
            return f"not saved: {e}"
        # NOTE: a constant is read from the state at each call (its leaf), or is one the trace
        # made from sizes (a small tensor its run computed): saved by value
        consts: list[Any] = []
        for (name, c), leaf in zip(t.constants.items(), entry.const_leaves):
            if leaf is not None:
                consts.append(("leaf", leaf))
            elif any(n.op.name == "VAR_PARAM" and n.params.get("name") == name and "crc" in n.params
                     for n in t.graph.nodes):
                consts.append(("value", c.detach().clone()))
            else:
                return (f"not saved: the trace uses the tensor {name}, which it reached by no recorded read "
                        "(its value could differ in another process)")
        # NOTE: the guards' whole texts (a long disjunction prints as one of its routes: `Constraint.shown`)
        vkey = hashlib.sha256("\n".join(c.text for c in variant.guards).encode()
                              + repr([g.text for g in variant.guards.static]).encode()
                              ).hexdigest()[:12]
        from guardsolve.jit.inductor import flat_program

        _, inputs, _, outs = flat_program(t)
        payload = {"fingerprint": os.path.basename(self.folder), "entry": key, "names": entry.names,
                   "traced": entry.traced, "guards": variant.guards, "backend": variant.backend,
                   "compile_s": variant.compile_s, "certificate": variant.certificate,
                   "exact_example": variant.exact_example, "inputs": inputs, "consts": consts, "outs": outs,
                   "state": spec,
                   "out_spec": t.out_spec, "artifact": variant.artifact, "plain": variant.plain,
                   "train": variant.train, "extra": variant.extra, "direct": variant.direct, "saved": time.time()}
        try:
            data = dumps(payload)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            return f"not saved: {type(e).__name__}: {e}"
        write_atomic(os.path.join(self.folder, f"{key}-{vkey}.gse"), data)
        return None

    def load(self, namespace: Mapping[str, Any]) -> list["LoadedEntry"]:
        """The entries of this fingerprint, each with the variants that load; the rest in `skipped`."""
        from guardsolve.jit.portable import restore_state
        from guardsolve.jit.variant import Variant, runner

        if not os.path.isdir(self.folder):
            return []
        entries: dict[str, Any] = {}
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(".gse"):
                continue
            path = os.path.join(self.folder, name)
            start = time.perf_counter()
            try:
                with open(path, "rb") as f:
                    p = loads(f.read())
                if p.get("fingerprint") != os.path.basename(self.folder):
                    raise ValueError("written for another fingerprint")
                # NOTE: one trace's variants group by the state they were compiled under too: two
                # entries of the same trace (made with a weight requiring grad, and not) are two
                # entries, each with its own state check and variants
                group = f"{p['entry']}-{hashlib.sha256(pickle.dumps(p['state'])).hexdigest()[:12]}"
                e = entries.get(group)
                state = e.state if e is not None else restore_state(p["state"], self.fn)
                leaves = tuple(c[1] if c[0] == "leaf" else None for c in p["consts"])
                gs = _rebind(p["guards"], namespace)
                train = bool(p.get("train"))
                consts = [c[1] if c[0] == "value" else _tensor_or_empty(state.leaves[c[1]].expect)
                          for c in p["consts"]]
                call, why = _direct(p)
                boxed = call is not None
                if call is None:
                    call, boxed = self._through_inductor(name, p, why)
                extra = tuple(p.get("extra", ()))
                run = runner(call, p["inputs"], consts, p["outs"], p["out_spec"], boxed=boxed, extra=extra)
            except Exception as e:  # NOTE: any failure ignores this file, with its reason; none is used
                self.skipped.append(f"{name}: {type(e).__name__}: {e}")
                continue
            v = Variant(gs, run, tuple(p["backend"]), p["compile_s"], p["certificate"], None, p["exact_example"],
                        loaded=True, plain=bool(p.get("plain")), train=train, extra=extra)
            self.load_seconds.append(time.perf_counter() - start)
            if e is None:
                e = entries[group] = LoadedEntry(p["entry"], tuple(p["names"]), p["traced"], state=state,
                                                 const_leaves=leaves)
            e.variants.append(v)
        return list(entries.values())


    def _through_inductor(self, name: str, p: Mapping[str, Any], why: str) -> tuple[Callable[..., Any], bool]:
        """The variant's artifact loaded by Inductor (it imports the compiler, and rebuilds the C++
        where Inductor's cache is cold) and whether it takes one list (its generated `call`)."""
        from guardsolve.jit.inductor import direct_call, keep_saved_tensors, load_artifact

        art = load_artifact(p["artifact"])
        if p.get("train") and not keep_saved_tensors(art):
            raise ValueError("a training variant with no AOTAutograd backward inside (PyTorch internals moved?)")
        self.through_inductor.append(f"{name} ({why})")
        call = direct_call(art, len(p["outs"])) if p.get("plain") else None
        return (art, False) if call is None else (call, True)


def _direct(p: Mapping[str, Any]) -> tuple[Callable[[list[Any]], Any] | None, str]:
    """The variant's generated code run without Inductor (`jit/kernels.py`), or None and why not."""
    saved = p.get("direct")
    if not isinstance(saved, dict):
        return None, saved if isinstance(saved, str) else "saved without its generated code"
    from guardsolve.jit.kernels import NotDirect, load

    try:
        return load(saved), ""
    except NotDirect as e:
        return None, str(e)


@dataclass
class LoadedEntry:
    """One saved entry as loaded: its key, the arguments it was traced with, its variants."""

    key: str
    names: tuple[str, ...]
    traced: tuple[int, ...] | None
    variants: list[Any] = field(default_factory=list)
    state: Any = None  # the state check, over this process's objects (`jit/portable.py`)
    const_leaves: tuple[int | None, ...] = ()


def _tensor_or_empty(v: Any) -> torch.Tensor:
    """A leaf's tensor itself (a training variant's gradients reach it; every variant reads where
    its elements live now: `inductor.compile_variant`); where the live state differs (the check
    then fails and the artifact is never called), an empty stand-in."""
    if not isinstance(v, torch.Tensor):
        return torch.empty(0)
    return v
