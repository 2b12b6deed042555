"""What a function reaches without running: tensors requiring grad, tensors, random generators."""

from __future__ import annotations

import itertools
from typing import Any
import torch
from guardsolve.trace.state.code import all_global_names


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
        found += [(n, g[n]) for n in all_global_names(code) if n in g]
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
        found += [g[n] for n in all_global_names(code) if n in g]
    found += list(getattr(inner, "__defaults__", None) or ())
    self_ = getattr(fn, "__self__", None)
    if self_ is not None:
        found.append(self_)
    return found
