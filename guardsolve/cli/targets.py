"""Resolve what the CLI is pointed at: a saved graph file, or `script.py:fn` / `pkg.mod:fn`
traced on random tensors of the given shapes."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import short_path
from guardsolve.trace.tracer import parameter_names, trace


class TargetError(GuardsolveError):
    """The CLI target or its example inputs cannot be used."""


@dataclass
class Loaded:
    """A graph to simplify and a description of where it came from."""

    graph: Graph
    target: str
    inputs: str
    from_file: bool = False


def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """`a=4,8` -> ("a", (4, 8)); `s=` is a 0-d tensor.

    >>> parse_shape("x=2,3")
    ('x', (2, 3))
    """
    name, sep, dims = spec.partition("=")
    if not sep or not name.isidentifier():
        raise TargetError(f"malformed --shape {spec!r}: expected NAME=D0,D1,... (e.g. x=4,8)")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        raise TargetError(f"malformed --shape {spec!r}: dims must be integers") from None
    if any(d < 0 for d in shape):
        raise TargetError(f"malformed --shape {spec!r}: dims must be non-negative")
    return name, shape


def parse_int(spec: str) -> tuple[str, int]:
    name, sep, value = spec.partition("=")
    try:
        if not sep or not name.isidentifier():
            raise ValueError
        return name, int(value)
    except ValueError:
        raise TargetError(f"malformed --int {spec!r}: expected NAME=VALUE (e.g. n=3)") from None


def load_callable(target: str) -> Callable[..., Any]:
    """`path/to/script.py:fn` or `package.module:fn`."""
    where, sep, attr = target.rpartition(":")
    if not sep or not attr:
        raise TargetError(f"target {target!r} is neither a graph file nor MODULE:CALLABLE")
    if where.endswith(".py"):
        if not os.path.exists(where):
            raise TargetError(f"no such file: {where}")
        name = f"_guardsolve_target_{abs(hash(os.path.abspath(where)))}"
        spec = importlib.util.spec_from_file_location(name, where)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise TargetError(f"importing {where} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise TargetError(f"cannot import module {where!r}: {type(e).__name__}: {e}") from e
    fn = getattr(module, attr, None)
    if fn is None:
        raise TargetError(f"{where} has no attribute {attr!r}")
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        fn = fn()
    elif callable(fn) and _takes_no_arguments(fn):
        made = fn()  # a factory: `def make(): return MyModel()`
        if not isinstance(made, torch.nn.Module):
            raise TargetError(f"{target} takes no arguments and does not return an nn.Module")
        fn = made
    if not callable(fn):
        raise TargetError(f"{target} is not callable")
    if isinstance(fn, torch.nn.Module):
        fn.eval()
    return fn


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_KEYWORD,) for p in params) and \
        not any(p.kind is p.VAR_POSITIONAL for p in params)


def load(target: str, shapes: Sequence[str] = (), ints: Sequence[str] = (),
         dtype: str = "float32") -> Loaded:
    """The graph of a target: read from a file, or traced on random inputs."""
    if ":" not in target or (os.path.exists(target) and not target.endswith(".py")):
        if not os.path.exists(target):
            raise TargetError(f"no such file: {target}")
        if os.path.isdir(target):
            raise TargetError(f"{target} is a directory, not a graph file")
        with open(target) as f:
            return Loaded(Graph.parse(f.read()), target, "(saved graph)", True)
    fn = load_callable(target)
    given: dict[str, Any] = {}
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise TargetError(f"unknown --dtype {dtype!r}")
    for s in shapes:
        name, shape = parse_shape(s)
        given[name] = torch.randn(shape, dtype=dt) if dt.is_floating_point else torch.zeros(shape, dtype=dt)
    for s in ints:
        name, value = parse_int(s)
        given[name] = value
    names = _params(fn, given)
    unknown = [n for n in given if n not in names]
    if unknown:
        raise TargetError(f"{target} has no parameter {unknown[0]!r} (parameters: {', '.join(names)})")
    missing = [n for n in names if n not in given]
    if missing:
        raise TargetError(f"no example input for parameter {missing[0]!r} of {target}: "
                          f"give --shape {missing[0]}=D0,D1,... or --int {missing[0]}=V")
    args = [given[n] for n in names]
    try:
        t = trace(fn, *args)
    except GuardsolveError:
        raise
    except Exception as e:
        raise TargetError(f"{target} raised while tracing: {type(e).__name__}: {e} ({_user_frame(e)})") from e
    described = ", ".join(f"{n}={list(v.shape)}" if isinstance(v, torch.Tensor) else f"{n}={v}"
                          for n, v in zip(names, args))
    return Loaded(t.graph, target, described)


def _user_frame(e: BaseException) -> str:
    """The innermost traceback frame outside guardsolve and torch, as `file:line  code`."""
    import traceback

    from guardsolve.guards.symbolic import _is_library_file

    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _is_library_file(f.filename)]
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
        raise TargetError(f"cannot read the parameters of {fn!r}") from None
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n = sum(1 for p in positional if p.default is p.empty)
    n = max([n] + [i + 1 for i, p in enumerate(positional) if p.name in given])
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        n = max(n, len(given))
    return parameter_names(fn, n)


def describe_inputs(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def write_output(text: str, path: str | None) -> None:
    if path is None:
        print(text)
        return
    try:
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
    """Dim values from `--dims a0=4,b0=8` and/or new shapes `--at a=4,8`."""
    out: dict[str, int] = {}
    for spec in dims:
        for item in spec.split(","):
            name, sep, value = item.partition("=")
            try:
                if not sep:
                    raise ValueError
                out[name.strip()] = int(value)
            except ValueError:
                raise TargetError(f"malformed --dims {spec!r}: expected a0=4,b0=8") from None
    by_param = {p.name: p for p in gs.signature or ()}
    for spec in shapes:
        name, shape = parse_shape(spec)
        p = by_param.get(name)
        if p is None or p.kind != "tensor":
            known = ", ".join(by_param) or "none (a guard graph has no tensors)"
            raise TargetError(f"--shape/--at names unknown tensor {name!r} (tensors: {known})")
        if len(shape) != p.rank:
            raise TargetError(f"{name} was traced at rank {p.rank}; {list(shape)} has rank {len(shape)}")
        out.update(zip(p.dims, shape))
    unknown = [d for d in out if d not in gs.dims]
    if unknown:
        raise TargetError(f"unknown dim {unknown[0]!r} (dims: {', '.join(gs.dims)})")
    missing = [d for d in gs.dims if d not in out]
    if missing:
        raise TargetError(f"no value for dim {missing[0]!r}: give --dims {missing[0]}=N")
    return out
