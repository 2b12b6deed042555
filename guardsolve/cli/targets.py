"""Resolve what the CLI is pointed at: a saved graph file, or `script.py:fn` / `pkg.mod:fn`
traced on random tensors of the given shapes."""

from __future__ import annotations

import difflib
import importlib
import math
import os
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from guardsolve.cli.args import parse_dtypes, parse_shape, parse_values
from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import short_path
from guardsolve.trace.record import parameter_names
from guardsolve.trace.tracer import trace


class TargetError(GuardsolveError):
    """The CLI target or its example inputs cannot be used."""


@dataclass
class Loaded:
    """A graph to simplify and a description of where it came from."""

    graph: Graph
    target: str
    inputs: str
    from_file: bool = False
    trace: Any = None  # the `Trace` of a function target: its static guards (dtype, device, ...)
    input_specs: dict[str, Any] | None = None  # JSON's `inputs`: each input's shape and dtype
    # NOTE: how the trace ran: {"grad": torch.is_grad_enabled(), "module": "eval", "train" or None}
    mode: dict[str, Any] | None = None


def parse_int(spec: str) -> tuple[str, int]:
    name, sep, value = spec.partition("=")
    try:
        if not sep or not name.isidentifier():
            raise ValueError
        return name, int(value)
    except ValueError:
        raise TargetError(f"malformed --int {spec!r}: expected NAME=VALUE (e.g. n=3)") from None


def _builtin(fn: Callable[..., Any], target: str, shaped: Mapping[str, Any],
             given: Mapping[str, Any]) -> tuple[Callable[..., Any], list[str]]:
    """A function whose parameters Python cannot read (a builtin such as `torch:relu`) is traced
    through a function over the inputs named on the command line, in their order."""
    import inspect

    target_fn = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        inspect.signature(target_fn)
    except (TypeError, ValueError):
        names = list(given)
        if not names:
            raise TargetError(f"{target} is a builtin whose parameters Python cannot read: name its inputs, in "
                              "order, with --shape NAME=D0,D1,... (and --int NAME=V)") from None
        namespace: dict[str, Any] = {"_fn": fn}
        exec(f"def {target.rpartition(':')[2].replace('.', '_')}({', '.join(names)}):\n"
             f"    return _fn({', '.join(names)})", namespace)
        return next(v for k, v in namespace.items() if k != "_fn" and callable(v) and k != "__builtins__"), names
    return fn, _params(fn, given)


def load_callable(target: str, train: bool = False) -> Callable[..., Any]:
    """`path/to/script.py:fn` or `package.module:fn`; an `nn.Module` class or a factory taking no
    arguments is called to make the module, in eval mode unless `train`."""
    where, sep, attr = target.rpartition(":")
    if not sep or not attr:
        raise TargetError(f"target {target!r} is neither a graph file nor MODULE:CALLABLE")
    module = _import_file(where) if where.endswith(".py") else _import_module(where)
    fn = getattr(module, attr, None)
    if fn is None:
        close = similar_name(attr, [n for n in vars(module) if not n.startswith("_")])
        raise TargetError(f"{where} has no attribute {attr!r}" + (f"; did you mean {where}:{close}?" if close else ""))
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module) or callable(fn) and _takes_no_arguments(fn):
        fn = _construct(target, fn)
    if not callable(fn):
        raise TargetError(f"{target} is not callable")
    if isinstance(fn, torch.nn.Module):
        fn.train(train)
    elif train:
        raise TargetError(f"--train: {target} is a function, not an nn.Module: it has no training mode to set "
                          f"(name the module, or a factory that builds it)")
    return fn


def _import_file(where: str) -> Any:
    """Run a script as a module; its code keeps the path as the user wrote it, so source lines
    print that way."""
    if not os.path.exists(where):
        raise TargetError(f"no such file: {where}")
    name = f"_guardsolve_target_{abs(hash(os.path.abspath(where)))}"
    module = types.ModuleType(name)
    module.__file__ = where
    sys.modules[name] = module
    try:
        with open(where, "rb") as f:
            code = compile(f.read(), where, "exec")
        exec(code, module.__dict__)
    except Exception as e:
        del sys.modules[name]
        raise TargetError(f"importing {where} failed: {type(e).__name__}: {e}{_at(e, where)}") from e
    return module


def _import_module(where: str) -> Any:
    # NOTE: `python -m guardsolve` has the working directory on sys.path; the console script does not
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(where)
    except Exception as e:
        raise TargetError(f"cannot import module {where!r}: {type(e).__name__}: {e}") from e


def _construct(target: str, factory: Callable[..., Any]) -> Any:
    """Call an `nn.Module` class or a no-argument factory; its errors become one line."""
    try:
        made = factory()
    except Exception as e:
        name = getattr(factory, "__name__", "Model")
        hint = f"; name a factory that builds it instead, e.g. `def make(): return {name}(...)`" \
            if isinstance(e, TypeError) and "argument" in str(e) else f" ({_user_frame(e)})"
        raise TargetError(f"cannot construct {target} with no arguments: {type(e).__name__}: {e}{hint}") from e
    if not isinstance(factory, type) and not isinstance(made, torch.nn.Module):
        raise TargetError(f"{target} takes no arguments and does not return an nn.Module")
    return made


def _at(e: BaseException, where: str) -> str:
    """` (script.py:12)` for the deepest traceback frame in the user's script, if any."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == where]
    if isinstance(e, SyntaxError) and e.lineno is not None:
        return f" ({where}:{e.lineno})"
    return f" ({where}:{frames[-1].lineno})" if frames else ""


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_KEYWORD,) for p in params) and \
        not any(p.kind is p.VAR_POSITIONAL for p in params)


def _read_graph(target: str) -> Loaded:
    if not os.path.exists(target):
        raise TargetError(f"no such file: {target}")
    if os.path.isdir(target):
        raise TargetError(f"{target} is a directory, not a graph file")
    if target.endswith(".py"):
        raise TargetError(f"{target} is a Python file: name what to trace, as {target}:NAME "
                          f"({_top_level_names(target)})")
    with open(target) as f:
        text = f.read()
    graph = Graph.parse(text)
    if not len(graph):
        raise TargetError(f"{target} holds no graph (no nodes): an empty file is not a trace")
    _located(graph, target)
    return Loaded(graph, target, "(saved graph)", True)


def _located(graph: Graph, path: str) -> None:
    """Each node of a tensor trace read from `path` has its line of that file as its user line (a
    saved trace's user is its text), so guards and rejections name `path:line` and the node."""
    from guardsolve.guards.shape import is_guard_graph
    from guardsolve.ir.node import SourceLoc

    if is_guard_graph(graph):
        return  # NOTE: a guard graph's lines are named as its own (`guard graph line 4`)
    where = os.path.abspath(path)
    for n in graph.nodes:
        if isinstance(n.meta.get("line"), int) and n.meta.get("loc") is None:
            n.meta["loc"] = SourceLoc(where, n.meta["line"], "<saved graph>", str(n))


def _top_level_names(path: str) -> str:
    """The functions and classes a script defines, for the hint of a target without `:NAME`."""
    import ast

    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return "it could not be read"
    names = [n.name for n in tree.body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]
    return "it defines " + ", ".join(names) if names else "it defines no functions or classes"


def _example_tensor(name: str, shape: tuple[int, ...], dt: torch.dtype, fill: tuple[Any, ...] | None = None) -> torch.Tensor:
    """An example tensor; sizes that cannot be allocated are one clear error, not an OOM kill."""
    size = math.prod(shape) * dt.itemsize
    budget = _memory_bytes() // 2
    if size > budget:
        raise TargetError(f"--shape {name}={','.join(map(str, shape))}: the example tensor needs "
                          f"{size / 2**30:.1f} GiB, more than half of this machine's memory; "
                          f"trace at smaller sizes (the guards hold for every size they accept)")
    if fill is None:
        fill = ("randn",) if dt.is_floating_point or dt.is_complex else ("ones",) if "mask" in name.lower() \
            else ("randint", 0, 2)
    try:
        match fill:
            case ("randn",) | ("rand",) if not (dt.is_floating_point or dt.is_complex):
                raise TargetError(f"--values {name}={fill[0]}: {name} is {str(dt).removeprefix('torch.')}; "
                                  f"use randint:LO,HI, ones or zeros")
            case ("randn",):
                return torch.randn(shape, dtype=dt)
            case ("rand",):
                return torch.rand(shape, dtype=dt)
            case ("ones",):
                return torch.ones(shape, dtype=dt)
            case ("zeros",):
                return torch.zeros(shape, dtype=dt)
            case ("arange",):
                return torch.arange(math.prod(shape)).reshape(shape).to(dt)
            case ("randint", lo, hi):
                return torch.randint(lo, hi, shape).to(dt)
        raise TargetError(f"--values {name}: unknown fill {fill!r}")
    except (RuntimeError, MemoryError) as e:
        raise TargetError(f"--shape {name}={','.join(map(str, shape))}: cannot allocate the example "
                          f"tensor: {str(e).splitlines()[0]}") from None


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**40


def _named(specs: Sequence[str], flag: str, parse: Callable[[str], tuple[str, Any]],
           seen: dict[str, str]) -> dict[str, Any]:
    """`--shape`/`--int` values by parameter name; a name given twice is an error, not "last wins"."""
    out: dict[str, Any] = {}
    for spec in specs:
        name, value = parse(spec)
        if name in seen:
            raise TargetError(f"{flag} {spec!r}: {name!r} is already given by {seen[name]}")
        seen[name] = f"{flag} {spec!r}"
        out[name] = value
    return out


def load(target: str, shapes: Sequence[str] = (), ints: Sequence[str] = (),
         dtype: Sequence[str] | str = (), value_guards: bool = False, values: Sequence[str] = (),
         train: bool = False) -> Loaded:
    """The graph of a target: read from a file, or traced on example inputs."""
    if ":" not in target or (os.path.exists(target) and not target.endswith(".py")):
        return _read_graph(target)
    fn, names, args = load_args(target, shapes, ints, dtype, values, train)
    try:
        t = trace(fn, *args, value_guards=value_guards)
    except GuardsolveError as e:
        hint = _dtype_hint(e, names, args)
        if not hint:
            raise
        raise TargetError(f"{str(e).splitlines()[0]}{hint}") from e
    except Exception as e:
        raise TargetError(f"{target} raised while tracing: {type(e).__name__}: {e} ({_user_frame(e)})"
                          f"{_dtype_hint(e, names, args)}") from e
    return Loaded(t.graph, target, describe_args(names, args), trace=t, input_specs=input_specs(names, args),
                  mode=trace_mode(fn))


def trace_mode(fn: Any) -> dict[str, Any]:
    """How a trace runs now: grad mode, and a module target's train/eval mode (None for a function).

    >>> trace_mode(torch.nn.Linear(2, 2).eval())
    {'grad': True, 'module': 'eval'}
    """
    return {"grad": torch.is_grad_enabled(),
            "module": ("train" if fn.training else "eval") if isinstance(fn, torch.nn.Module) else None}


def _dtype_hint(e: BaseException, names: Sequence[str], args: Sequence[Any]) -> str:
    """`; pass --dtype ids=int64` when the failure says an integer tensor was expected."""
    text = str(e)
    if not re.search(r"\b(Long|Int)\b.*(scalar type|but got)|scalar types?:? Long|expected scalar type (Long|Int)"
                     r"|indices? (must|should) be|IndexError.*tensors used as indices", text):
        return ""
    floats = [n for n, a in zip(names, args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return ""
    return "; an integer tensor was expected: pass " + " ".join(f"--dtype {n}=int64" for n in floats[:2])


def input_specs(names: Sequence[str], args: Sequence[Any]) -> dict[str, Any]:
    """The inputs as JSON reads them: `{"x": {"shape": [3, 8], "dtype": "float32"}, "n": {"int": 3}}`."""
    out: dict[str, Any] = {}
    for n, a in zip(names, args):
        if isinstance(a, torch.Tensor):
            out[n] = {"shape": list(a.shape), "dtype": str(a.dtype).removeprefix("torch.")}
        else:
            out[n] = {"int": a} if isinstance(a, int) and not isinstance(a, bool) else {"value": repr(a)}
    return out


def describe_args(names: Sequence[str], args: Sequence[Any]) -> str:
    return ", ".join(f"{n}={list(v.shape)}" if isinstance(v, torch.Tensor) else f"{n}={v}" for n, v in zip(names, args))


def load_args(target: str, shapes: Sequence[str] = (), ints: Sequence[str] = (),
              dtype: Sequence[str] | str = (), values: Sequence[str] = (),
              train: bool = False) -> tuple[Callable[..., Any], list[str], list[Any]]:
    """A function target, its parameters' names and example arguments: tensors of each input's
    dtype (`--dtype [NAME=]DTYPE`), filled as `--values NAME=KIND` says (by default floats
    random normal, integers random in [0, 2), ones for an input named *mask*)."""
    default, per_name = parse_dtypes([dtype] if isinstance(dtype, str) else dtype)
    fills = dict(parse_values(v) for v in values)
    seen: dict[str, str] = {}
    shaped = _named(shapes, "--shape", parse_shape, seen)
    given: dict[str, Any] = {**_named(ints, "--int", parse_int, seen)}
    for flag, names_given in (("--dtype", per_name), ("--values", fills)):
        stray = [n for n in names_given if n not in shaped]
        if stray:
            raise TargetError(f"{flag} {stray[0]}=...: no --shape {stray[0]}=... names that input "
                              f"(tensors: {', '.join(shaped) or 'none'})")
    fn = load_callable(target, train)
    given.update((name, _example_tensor(name, shape, getattr(torch, per_name.get(name, default)), fills.get(name)))
                 for name, shape in shaped.items())
    fn, names = _builtin(fn, target, shaped, given)
    unknown = [n for n in given if n not in names]
    if unknown:
        raise TargetError(f"{target} has no parameter {unknown[0]!r} (parameters: {', '.join(names)})")
    missing = [n for n in names if n not in given]
    if missing:
        raise TargetError(f"no example input for parameter {missing[0]!r} of {target}: "
                          f"give --shape {missing[0]}=D0,D1,... or --int {missing[0]}=V")
    return fn, names, [given[n] for n in names]


def _user_frame(e: BaseException) -> str:
    """The innermost traceback frame outside guardsolve and torch, as `file:line  code`."""
    import traceback

    from guardsolve.guards.location import is_library_file

    frames = [f for f in traceback.extract_tb(e.__traceback__) if not is_library_file(f.filename)]
    if not frames:
        return "no user frame"
    f = frames[-1]
    return f"{short_path(f.filename)}:{f.lineno}  {f.line}"


def _params(fn: Callable[..., Any], given: Mapping[str, Any]) -> list[str]:
    """The positional parameters to trace: every required one, and optional ones (a model's
    `forward(input_ids=None, attention_mask=None, ...)`) up to the last one given."""
    import inspect

    if isinstance(fn, torch.nn.Module):
        fn = fn.forward
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise TargetError(f"cannot read the parameters of {fn!r}: name its inputs with --shape NAME=... in order") from None
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n = sum(1 for p in positional if p.default is p.empty)
    n = max([n] + [i + 1 for i, p in enumerate(positional) if p.name in given])
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        n = max(n, len(given))
    return parameter_names(fn, n)


def describe_inputs(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def similar_name(name: str, names: Sequence[str]) -> str | None:
    """The name `name` most likely meant: the same letters in another case first, then a close spelling.

    >>> similar_name("Resmlp", ["ResMLP", "make", "torch"]), similar_name("mkae", ["ResMLP", "make"])
    ('ResMLP', 'make')
    """
    same = [n for n in names if n.lower() == name.lower()]
    if same:
        return same[0]
    lowered = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[close[0]] if close else None


def write_output(text: str, path: str | None) -> None:
    """`text` to stdout, or to `path` (its missing folders made: `-o out/add.gs`)."""
    if path is None:
        print(text)
        return
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
    except OSError as e:
        raise TargetError(f"cannot write {path}: {e.strerror}") from None


def render_dot(text: str, path: str) -> None:
    """Render DOT with the Graphviz `dot` program, by the output file's extension."""
    import shutil
    import subprocess

    exe = shutil.which("dot")
    if exe is None:
        raise TargetError(f"rendering {path} needs Graphviz's `dot` program; write a .dot file instead")
    fmt = os.path.splitext(path)[1].lstrip(".") or "svg"
    done = subprocess.run([exe, f"-T{fmt}", "-o", path], input=text, text=True, capture_output=True)
    if done.returncode != 0:
        raise TargetError(f"dot failed: {done.stderr.strip().splitlines()[0] if done.stderr.strip() else done.returncode}")


def new_dims(gs: Any, dims: Sequence[str], shapes: Sequence[str]) -> dict[str, int]:
    """Dim values from `--dims a0=4,b0=8` and/or new shapes `--at a=4,8`; a dim not named keeps
    its value in the traced example."""
    out: dict[str, int] = {}
    for spec in dims:
        for item in spec.split(","):
            name, sep, value = item.partition("=")
            try:
                if not sep:
                    raise ValueError
                number = int(value)
            except ValueError:
                raise TargetError(f"malformed --dims {spec!r}: expected a0=4,b0=8") from None
            if name.strip() in out:
                raise TargetError(f"--dims {spec!r}: {name.strip()!r} is given twice")
            out[name.strip()] = number
    by_param = {p.name: p for p in gs.signature or ()}
    for spec in shapes:
        p = by_param.get(spec.partition("=")[0].strip())
        if p is not None and p.kind == "int":  # NOTE: `--at k=3` (or `--int k=3` for a saved trace): a new int
            if p.dims[0] in out:
                raise TargetError(f"--at {spec!r}: {p.dims[0]!r} is given twice")
            out[p.dims[0]] = parse_int(spec)[1]
            continue
        name, shape = parse_shape(spec)
        if p is None or p.kind != "tensor":
            known = ", ".join(q.name for q in by_param.values() if q.kind == "tensor") or \
                "none (a guard graph has no tensors)"
            raise TargetError(f"--shape/--at names unknown tensor {name!r} (tensors: {known})")
        if len(shape) != p.rank:
            raise TargetError(f"{name} was traced at rank {p.rank}; {list(shape)} has rank {len(shape)}")
        twice = [d for d in p.dims if d in out]
        if twice:
            raise TargetError(f"--shape/--at {spec!r}: {twice[0]!r} is given twice")
        out.update(zip(p.dims, shape))
    unknown = [d for d in out if d not in gs.dims]
    if unknown:
        raise TargetError(f"unknown dim {unknown[0]!r} (dims: {', '.join(gs.dims)})")
    negative = [d for d in out if d in gs.sizes and out[d] < 0]
    if negative:
        raise TargetError(f"--dims {negative[0]}={out[negative[0]]}: a size is >= 0 (only int arguments may be negative)")
    example = gs.graph.meta.get("example") or {}
    missing = [d for d in gs.dims if d not in out and d not in example]
    if missing:
        raise TargetError(f"no value for dim {missing[0]!r}: give --dims {missing[0]}=N")
    return {d: out[d] if d in out else example[d] for d in gs.dims}  # NOTE: dims not named keep the example's
