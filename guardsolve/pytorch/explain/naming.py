"""A frame's inputs named as the user wrote them, and Dynamo's guard code as Python over those names."""

from __future__ import annotations

import ast
import inspect
from typing import Any, Mapping, Sequence
import sympy
import torch
from guardsolve.ir.node import SourceLoc, short_path
from guardsolve.trace.static import StaticGuard
from guardsolve.pytorch.explain.failure import CompileExplainError
from guardsolve.pytorch.explain.provenance import GuardSource


GRAD_MODE = "torch.is_grad_enabled() is "


def grad_mode(grad: bool | None) -> str:
    """The grad mode a report's guards hold under, as its header says it.

    >>> grad_mode(False), grad_mode(True)
    ('under torch.no_grad()', 'grad mode on')
    """
    return "grad mode on" if grad else "under torch.no_grad()"


def _forward_names(module: torch.nn.Module) -> list[str]:
    try:
        return [p.name for p in inspect.signature(module.forward).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def frame_inputs(code: Any, f_locals: Mapping[str, Any], outer: Sequence[Any] = (),
            outer_names: Sequence[str] = ()) -> list[tuple[str, str, Any]]:
    """The frame's inputs a check takes, as (name, Dynamo's source, value): its parameters (a
    module's `self` aside), the elements of `*args` and the items of `**kwargs`. A frame whose
    inputs are the call's own arguments (the outermost; `torch.compile` of a module may wrap it
    in an `inner(*args, **kwargs)`) names them as the called function's signature does."""
    n = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:n])
    star = code.co_varnames[n] if code.co_flags & inspect.CO_VARARGS else None
    stars = code.co_varnames[n + (star is not None)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    out: list[tuple[str, str, Any]] = []
    for i, p in enumerate(names):
        if p not in f_locals or (i == 0 and p == "self" and isinstance(f_locals[p], torch.nn.Module)):
            continue
        out.append((p, f"L['{p}']", f_locals[p]))
    if star is not None and isinstance(f_locals.get(star), tuple):
        out += [(f"{star}_{i}", f"L['{star}'][{i}]", v) for i, v in enumerate(f_locals[star])]
    if stars is not None and isinstance(f_locals.get(stars), dict):
        out += [(str(k), f"L['{stars}'][{k!r}]", v) for k, v in f_locals[stars].items()
                if isinstance(k, str) and k.isidentifier()]
    owner = f_locals.get("self") if names and names[0] == "self" else f_locals.get("fn")
    if not names and star is not None and out and isinstance(out[0][2], torch.nn.Module):
        # NOTE: a decorator `wrapper(*args, **kwargs)` around a module's forward (transformers'
        # deprecation wrapper): `args[0]` is the module itself, not an input
        owner, out = out[0][2], out[1:]
        if not outer:
            outer = f_locals[star][1:]
    if not outer and star is not None and isinstance(owner, torch.nn.Module) and isinstance(f_locals.get(star), tuple):
        # NOTE: a wrapper around a module's forward (torch.compile's `inner(*args)`, a library's
        # decorator `wrapper(self, *args, **kwargs)`): its *args are the forward's arguments
        outer = f_locals[star]
    if isinstance(owner, torch.nn.Module) and star is not None and not outer_names:
        outer_names = _forward_names(owner)
    if outer and len(out) >= len(outer) and all(v is a for (_, _, v), a in zip(out, outer)):
        # NOTE: parameters the call left at their defaults are not inputs: Dynamo's guards on them
        # are checked against the defaults (bound values), as a call with the same arguments has them
        out = [(outer_names[i] if i < len(outer_names) else name, src, v) for i, (name, src, v) in enumerate(out[:len(outer)])]
    return out


class Namer:
    """Sources as symbols, and symbols as guard-graph names (a frame argument's dim) or pinned
    values (anything else Dynamo reads: evaluated once, pinned by a static guard)."""

    def __init__(self, f_locals: Mapping[str, Any], f_globals: Mapping[str, Any], closure: Mapping[str, Any]):
        self.env = {**closure, "L": f_locals, "G": f_globals}
        self.symbols: dict[str, sympy.Symbol] = {}
        self.pinned: dict[str, int] = {}

    def symbol(self, source: str) -> sympy.Symbol:
        if source not in self.symbols:
            self.symbols[source] = sympy.Symbol(f"_{len(self.symbols)}", integer=True)
        return self.symbols[source]

    def source(self, sym: sympy.Symbol) -> str:
        return next(s for s, v in self.symbols.items() if v == sym)

    def value(self, source: str) -> Any:
        try:
            return eval(source, dict(self.env))  # NOTE: Dynamo's own source text over L and G
        except Exception as e:
            raise CompileExplainError(f"cannot read {source} (a value Dynamo guards): {type(e).__name__}: {e}") from None


def python_source(code: str, inputs: Mapping[str, str], bound: dict[str, Any], env: Mapping[str, Any]) -> str:
    """Dynamo's guard code over the check's parameters: each input's source (`L['x']`,
    `L['args'][0]`) as the input's name, anything else Dynamo reads as a name `bound` gives its
    value (`G` the globals, `L['self']` the module, Dynamo's helpers).

    >>> python_source("L['x'].stride()[0] == L['args'][0].size()[1]", {"L['x']": "x", "L['args'][0]": "y"}, {}, {})
    'x.stride()[0] == y.size()[1]'
    """

    class Rewrite(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if isinstance(node, ast.expr) and not isinstance(node, ast.Name):
                text = ast.unparse(node)
                if text in inputs:
                    return ast.Name(id=inputs[text], ctx=ast.Load())
            return super().visit(node)

        def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == "L" and isinstance(node.slice, ast.Constant):
                name = f"_s_L_{node.slice.value}"
                bound[name] = env["L"][node.slice.value]
                return ast.Name(id=name, ctx=ast.Load())
            return self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id == "G":
                bound["_s_G"] = env["G"]
                return ast.Name(id="_s_G", ctx=ast.Load())
            if node.id in env and node.id != "L":
                bound[node.id] = env[node.id]
            return node

    return ast.unparse(Rewrite().visit(ast.parse(code, mode="eval")))


def static_guard(text: str, code: str, inputs: Mapping[str, str], env: Mapping[str, Any]) -> StaticGuard:
    """A guard checked as Dynamo checks it, over the check's parameters; printed with them too
    (`x.stride()[0] == x.size()[1]`; what is not an input keeps Dynamo's `L[..]`/`G[..]`)."""
    bound: dict[str, Any] = {}
    src = python_source(code, inputs, bound, env)
    shown = text
    for source, name in sorted(inputs.items(), key=lambda kv: -len(kv[0])):
        shown = shown.replace(source, name)
    return StaticGuard(shown, src, src.split(" == ")[0] if " == " in src else src, tuple(bound.items()))


def source_loc_of(sources: Sequence[GuardSource], frame_code: Any) -> SourceLoc | None:
    for s in sources:
        if s.file is not None and s.line is not None:
            full = frame_code.co_filename if short_path(frame_code.co_filename) == s.file else s.file
            return SourceLoc(full, s.line, s.function or "", s.code or "")
    return None


def origin_of(sources: Sequence[GuardSource]) -> str:
    return "; ".join(map(str, sources))
