"""torch.compile's own guards, minimal, proven and explained: `explain_compile`.

`explain_compile(fn, *args)` compiles `fn` (a function or an `nn.Module`) with `torch.compile`,
calls it once, and reads every frame Dynamo compiled (a graph break makes several). Per frame:

* `dynamo_guards`: the shape guards exactly as Dynamo checks them on entry (the epilogue
  lambdas of its guard manager, with the ranges `produce_guards` adds) plus the static sizes its
  TENSOR_MATCH guards check, each with where it came from: a user line, or one of Dynamo's own
  assumptions (duck sizing, 0/1 specialization, static by default, stride, ...), named, with
  what the user can do about it;
* `guards`: a `GuardSet` over guardsolve's dim names (`x0` for `L['x'].size()[0]`), minimal
  and proven equivalent to the size guards (`guards.verify()`); Dynamo's stride guards and the
  dtype, device and requires_grad its TENSOR_MATCH checks become `guards.static`;
* `specializations`: each input dim Dynamo had a symbol for and then pinned (or a dim marked
  dynamic that it could not keep dynamic), with every guard that pins or narrows it.

Values Dynamo reads that are not arguments of the frame (a module's parameters, a global
tensor) are pinned at their current sizes by static guards; the size guards are proven
equivalent to Dynamo's with those values substituted.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import logging
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter

from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import SourceLoc, short_path
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import dim_names
from guardsolve.pytorch import dynamo as dyn
from guardsolve.pytorch.sympy_guards import TranslationError, emit_bool, parse_guard
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.simplify import simplify
from guardsolve.trace.static import StaticGuard, is_static_value, state_guards, tensor_guards, value_guard

JSON_VERSION = 1


class CompileExplainError(GuardsolveError):
    """torch.compile failed on the call, or compiled nothing to explain."""


# -- where a guard came from ----------------------------------------------------------------

FIXES = {
    "duck sizing": "give the inputs different example sizes, or set "
                   "torch.fx.experimental._config.use_duck_shape = False",
    "0/1 specialization": "trace an example of size >= 2, or torch._dynamo.decorators.mark_unbacked(tensor, dim)",
    "static by default": "torch._dynamo.mark_dynamic(tensor, dim), or torch.compile(..., dynamic=True)",
    "stride": "the input's strides are those of the example's layout; pass inputs of the same layout",
    "automatic dynamic": "none needed: it keeps inputs of the earlier static graph on that graph",
    "specialized": "see the specializations: the guards that pin this dim",
    "shape rule": "none: PyTorch's shape rule for the op asks it",
    "NaN specialization": "none needed: a NaN value would compile a graph of its own",
    "Dynamo's own": "see Dynamo's comment (TORCH_LOGS=guards)",
    "symbol replacement": "mark the dims dynamic with different example sizes (TORCH_LOGS=+dynamic shows the replacement)",
}


@dataclass(frozen=True)
class GuardSource:
    """Where one Dynamo guard came from: a user line, or a named assumption (with a fix)."""

    assumption: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    code: str | None = None
    detail: str | None = None
    # NOTE: where PyTorch itself decided a bound of a size on this line (the framework location of
    # Dynamo's comment, `_subclasses/fake_impls.py:1811 in conv`), with that line's code
    decided: str | None = None

    @property
    def fix(self) -> str | None:
        return FIXES.get(self.assumption) if self.assumption else None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" + (f"  {self.code}" if self.code else "") if self.file else ""
        if self.assumption is None:
            return where + (f" — decided in PyTorch at {self.decided}" if self.decided else "")
        text = f"Dynamo's assumption: {self.assumption}" + (f" ({self.detail})" if self.detail else "")
        return text + (f"; first used at {where}" if where else "")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "line": self.line, "code": self.code}
        if self.decided:
            d["decided_in"] = self.decided
        if self.assumption:
            d.update(assumption=self.assumption, fix=self.fix)
            if self.detail:
                d["detail"] = self.detail
        return d


_FILE = r"(?P<file><[^>]+>|[^\s:#]+):(?P<line>\d+) in (?P<fn>[\w<>.]+)"
# NOTE: `) and ` joins two of Dynamo's locations; `; via ` a user line and the library line it
# called (`_callers_in_slocs`)
_LOC = re.compile(r"(?:^|\) and |; via )(?P<code>.*?)\s+# " + _FILE)
_FRAMEWORK = re.compile("^" + _FILE)


def _file(printed: str, code: Any) -> str:
    """Dynamo prints a shortened path; the frame's own file when it is that one."""
    full = getattr(code, "co_filename", "")
    if not full:
        return printed
    return short_path(full) if full.endswith(printed.lstrip(".")) or printed.endswith(short_path(full)) else printed


def user_lines(comment: str, code: Any = None) -> list[GuardSource]:
    """The user lines in one of Dynamo's verbose comments (`if x.shape[0] > 5:  # f.py:3 in f (...)`).

    >>> [str(s) for s in user_lines("if n > 5:  # f.py:3 in f (_dynamo/variables/tensor.py:2606 in evaluate_expr)")]
    ['f.py:3  if n > 5:']
    """
    return [GuardSource(None, _file(m["file"], code), int(m["line"]), m["fn"], m["code"].strip() or None)
            for m in _LOC.finditer(comment)]


def sources_of(comment: str, code: str, frame_code: Any = None) -> tuple[GuardSource, ...]:
    """Every source of a guard from Dynamo's verbose comment: a user line or a named assumption.

    >>> [s.assumption for s in sources_of("duck sizing added this equality because these variables had the same size 3", "")]
    ['duck sizing']
    >>> [s.assumption for s in sources_of("(unknown var s17, please file a bug)", "L['y'].size()[0] == 2*L['x'].size()[0]")]
    ['symbol replacement']
    """
    lines = user_lines(comment, frame_code)
    if "duck sizing" in comment:
        m = re.search(r"the same size (\d+)", comment)
        return (GuardSource("duck sizing", detail=f"the example sizes were equal ({m[1]})" if m else None),)
    if "0/1 specialization" in comment:
        # NOTE: one of the joined locations is where Dynamo made the symbol ("first use"); the
        # others are decisions user lines made on it, sources of their own
        pieces = re.split(r"(?<=\)) and ", comment)
        made = next((p for p in pieces if "0/1 specialization" in p), comment)
        first = next(iter(user_lines(made, frame_code)), GuardSource())
        decided = [s for p in pieces if p is not made for s in user_lines(p, frame_code)]
        return (GuardSource("0/1 specialization", first.file, first.line, first.function, first.code,
                            "a dynamic size is assumed >= 2"), *dict.fromkeys(decided))
    if "NaN specialization" in comment:
        return (GuardSource("NaN specialization", detail="a float Dynamo reads is assumed not to be NaN"),)
    if "exclusion guard for automatic dynamic" in comment:
        return (GuardSource("automatic dynamic", detail="inputs of the earlier static graph stay on it"),)
    if "unknown source" in comment and (".stride()" in code or "storage_offset" in code):
        return (GuardSource("stride", detail="Dynamo ties the strides to the sizes of the example's layout"),)
    if lines:
        return tuple(lines)
    if "unknown var" in comment or "unknown source" in comment:
        return (GuardSource("symbol replacement", detail="Dynamo tied this size to another symbol's expression "
                            "when it made its symbols, and recorded no line for it"),)
    fw = _FRAMEWORK.match(comment)
    if fw is not None:
        return (GuardSource("shape rule", fw["file"], int(fw["line"]), fw["fn"], detail=f"{fw['file']}:{fw['line']} in {fw['fn']}"),)
    # NOTE: never "unknown": what Dynamo said, as it said it
    return (GuardSource("Dynamo's own", detail=comment or "Dynamo recorded no source for this guard"),)


_RANGE = re.compile(r"^(?P<lo>-?\d+) <= (?P<sym>.+?) <= (?P<hi>-?\d+)$")
_UPPER = re.compile(r"^(?P<sym>.+?) <= (?P<hi>-?\d+)$")
# NOTE: one of Dynamo's locations as it ends: a user line's `# file:line in fn (framework)`, or a
# framework location alone
_SLOC_END = re.compile(r"(# \S+:\d+ in [\w<>.]+ \(.*\)|^\S+:\d+ in [\w<>.]+)$")
_DECIDED = re.compile(r"\((?P<file>[^\s()]+):(?P<line>\d+) in (?P<fn>[\w<>.]+)\)$")


def bounds_of(code: str, comment: str) -> list[tuple[str, str]]:
    """A range guard `lo <= s <= hi` as its two bounds, each with its own location: Dynamo
    tightens each bound where it does (`produce_guards` joins the two as `lower and upper`).
    Empty for any other guard.

    >>> bounds_of("2 <= L['x'].size()[0] <= 15",
    ...           "f(x)  # a.py:3 in g (0/1 specialization ...) and f(x)  # a.py:3 in g (fake_impls.py:9 in conv)")
    [("2 <= L['x'].size()[0]", 'f(x)  # a.py:3 in g (0/1 specialization ...)'), ("L['x'].size()[0] <= 15", 'f(x)  # a.py:3 in g (fake_impls.py:9 in conv)')]
    """
    m = _RANGE.match(code)
    if m is None:
        return []
    at = comment.find(" and ")
    while at >= 0:
        if _SLOC_END.search(comment[:at]):
            return [(f"{m['lo']} <= {m['sym']}", comment[:at]), (f"{m['sym']} <= {m['hi']}", comment[at + 5:])]
        at = comment.find(" and ", at + 5)
    return []


def _decided(sources: tuple[GuardSource, ...], comment: str) -> tuple[GuardSource, ...]:
    """An upper bound's sources, the innermost line naming the PyTorch function that decided it
    (`_subclasses/fake_impls.py:1811 in conv  conv_backend = torch._C._select_conv_backend(`);
    as they are where Dynamo itself decided it (a user's `if`) or named no user line."""
    m = _DECIDED.search(comment)
    users = [k for k, s in enumerate(sources) if s.assumption is None and s.file]
    if m is None or not users or m["file"].startswith("_dynamo/"):
        return sources
    import linecache
    import os

    code = linecache.getline(os.path.join(os.path.dirname(torch.__file__), m["file"]), int(m["line"])).strip()
    decided = f"torch/{m['file']}:{m['line']} in {m['fn']}" + (f"  {code}" if code else "")
    k = users[-1]
    s = sources[k]
    return (*sources[:k], GuardSource(s.assumption, s.file, s.line, s.function, s.code, s.detail, decided),
            *sources[k + 1:])


# -- one frame ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamoGuard:
    """One size guard Dynamo checks on entry, as it checks it, and where it came from.

    `kind`: "shape" (an epilogue lambda over sizes), "static size" (a size its TENSOR_MATCH
    checks) or "stride" (a shape guard over strides: a static guard here)."""

    code: str
    kind: str
    sources: tuple[GuardSource, ...]
    comment: str = ""
    expr: Any = field(default=None, compare=False)  # the sympy condition, over one symbol per source
    dims: tuple[tuple[Any, str], ...] = field(default=(), compare=False)  # its symbols that are input dims
    # NOTE: a range `2 <= s <= 15`: its lower and upper bound, each a guard with its own sources
    # (`sources` is theirs together); the guard set has a bailout per bound
    bounds: tuple["DynamoGuard", ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.code

    def as_dict(self) -> dict[str, Any]:
        out = {"code": self.code, "kind": self.kind, "sources": [s.as_dict() for s in self.sources],
               "dynamo_comment": self.comment}
        if self.bounds:
            out["bounds"] = [{"code": b.code, "sources": [s.as_dict() for s in b.sources]} for b in self.bounds]
        return out


@dataclass(frozen=True)
class Pin:
    """One guard that pins or narrows a specialized dim: its text over guardsolve's names,
    where it came from, and a witness value of the dim it rejects (the other dims as the call)."""

    text: str
    sources: tuple[GuardSource, ...]
    witness: dict[str, int] | None

    def __str__(self) -> str:
        w = f"; rejects {', '.join(f'{k}={v}' for k, v in self.witness.items())}" if self.witness else ""
        return f"{self.text}  at {'; '.join(map(str, self.sources)) or 'Dynamo'}{w}"


@dataclass(frozen=True)
class Specialization:
    """A dim Dynamo made a symbol for and then pinned to `value`; `marked`: the user marked it
    dynamic (then Dynamo's own error is `error`)."""

    dim: str
    source: str
    value: int
    marked: bool
    pins: tuple[Pin, ...]
    error: str | None = None

    def __str__(self) -> str:
        head = (f"{self.dim} ({self.source}) was marked dynamic but is specialized to {self.value}" if self.marked
                else f"{self.dim} ({self.source}) is specialized to {self.value}")
        return "\n".join([head + f", by {len(self.pins)} guard{'s' if len(self.pins) != 1 else ''}:",
                          *(f"    {p}" for p in self.pins)])

    def as_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "source": self.source, "value": self.value, "marked": self.marked,
                "error": self.error, "pins": [{"guard": p.text, "sources": [s.as_dict() for s in p.sources],
                                               "witness": p.witness} for p in self.pins]}


@dataclass
class Frame:
    """One frame Dynamo compiled: its guards as Dynamo checks them and as guardsolve reduced them."""

    name: str
    compile_id: str
    file: str
    line: int
    params: tuple[str, ...]
    dynamo_guards: list[DynamoGuard]
    guards: GuardSet
    other_guards: list[str]  # Dynamo's guards that are not about sizes (type and id matches, ...)
    specializations: list[Specialization] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # Dynamo's source -> guardsolve's dim
    code: Any = field(default=None, repr=False)  # the frame's code object
    inputs: dict[str, str] = field(default_factory=dict)  # each of `params` -> its source in the frame
    f_locals: dict[str, Any] = field(default_factory=dict, repr=False)  # the locals it was compiled for
    # NOTE: the outermost frame as the user called it, where Dynamo compiled a wrapper around it
    # (`LlamaModel.forward (modeling_llama.py:350), through its wrapper wrapped_func (...)`)
    label: str | None = None

    @property
    def title(self) -> str:
        """The frame as the report names it: `name (file:line)`, or as the user called it."""
        return self.label or f"{self.name} ({self.file}:{self.line})"

    def arguments(self, f_locals: Mapping[str, Any]) -> list[Any]:
        """The values `guards.check` takes, read from the frame's locals (`L['args'][0]`, ...)."""
        return [eval(self.inputs[p], {"L": f_locals}) for p in self.params]  # NOTE: Dynamo's own source text

    def guard_of(self, node: int) -> DynamoGuard | None:
        """The Dynamo guard one bailout of `guards.graph` translates (one bound of a range)."""
        meta = self.guards.graph.nodes[node].meta
        if meta.get("dynamo") is None:
            return None
        g = self.dynamo_guards[meta["dynamo"]]
        return g.bounds[meta["bound"]] if meta.get("bound") is not None else g

    def _code_of(self, node: int) -> str:
        """The Dynamo guard of a bailout as the report prints it: a range's bound says its range."""
        meta = self.guards.graph.nodes[node].meta
        g = self.guard_of(node)
        whole = self.dynamo_guards[meta["dynamo"]].code
        return g.code if g is None or g.code == whole else f"{g.code} (of {whole})"

    def sources_of(self, node: int) -> tuple[GuardSource, ...]:
        """The sources of one bailout of `guards.graph` (the Dynamo guard it translates)."""
        g = self.guard_of(node)
        return g.sources if g is not None else ()

    def as_dict(self) -> dict[str, Any]:
        gs = self.guards
        return {
            "frame": self.name, "called_as": self.label, "compile_id": self.compile_id, "file": self.file,
            "line": self.line,
            "params": list(self.params), "dims": self.names,
            "counts": {"dynamo": len(self.dynamo_guards), "minimal": len(gs)},
            "dynamo_guards": [g.as_dict() for g in self.dynamo_guards],
            "guards": [{"guard": c.text, "kind": c.kind, "dims": list(c.dims),
                        "sources": self._sources(sorted(c.prov))} for c in gs],
            "implied": self._sources(sorted(gs.implied - set(gs.tautologies))),
            "always_true": self._sources(sorted(gs.tautologies)),
            "static": [g.text for g in gs.static],
            "other_guards": len(self.other_guards),
            "minimal": gs.minimal,
            "specializations": [s.as_dict() for s in self.specializations],
        }

    def _sources(self, nodes: Sequence[int]) -> list[dict[str, Any]]:
        out = []
        for i in nodes:
            dg = self.guard_of(i)
            for s in (dg.sources if dg else ()):
                out.append({"bailout": self.guards._describe(i), "dynamo": dg.code if dg else None, **s.as_dict()})
        return out

    def lines(self, verbose: bool = False) -> list[str]:
        """The frame as the report prints it (`verbose`: each dropped guard, not a count per source)."""
        gs = self.guards
        sizes = sum(g.kind in ("shape", "static size") for g in self.dynamo_guards)
        out = [f"frame {self.compile_id} {self.title}: Dynamo checks "
               f"{len(self.dynamo_guards)} shape guards ({sizes} over input sizes, "
               f"{len(self.dynamo_guards) - sizes} on strides and other values) -> "
               f"{len(gs)} minimal size guard{'s' if len(gs) != 1 else ''}"
               f"{'' if gs.minimal else ' (not proved minimal: solver undecided)'}"]
        if self.names:
            out.append("  dims: " + ", ".join(f"{d} = {s}" for s, d in self.names.items()))
        if not len(gs):
            out.append("  (no size guards)")
        for c in gs:
            out.append(f"  {c.text}")
            seen: set[str] = set()
            for i in sorted(c.prov):
                dg = self.guard_of(i)
                if dg is None:
                    continue
                text = f"      Dynamo: {self._code_of(i)}  <- {'; '.join(map(str, dg.sources))}"
                if text not in seen:
                    seen.add(text)
                    out.append(text)
        for title, nodes in (("implied by the above (dropped):", sorted(gs.implied - set(gs.tautologies))),
                             ("always true (dropped):", sorted(gs.tautologies))):
            out += self._dropped(title, nodes, verbose)
        # NOTE: the grad mode is one fact of the whole call: the report's header says it, once
        static = [g for g in gs.static if not g.text.startswith(GRAD_MODE)]
        if static or self.other_guards:
            out.append(f"  static (not sizes): {len(static)}; Dynamo's other guards (types, ids, state): "
                       f"{len(self.other_guards)}")
            out += [f"      {g.text}" for g in static]
        for s in self.specializations:
            out += ["  " + line for line in str(s).splitlines()]
        return out


    def _dropped(self, title: str, nodes: Sequence[int], verbose: bool) -> list[str]:
        """Dynamo's guards the minimal ones imply, over the dims as kept guards print (`x1 >= 1`):
        grouped by source with a count and the shortest reading (`verbose`: each reading once);
        no heading when there are none."""
        gs = self.guards
        by_source: dict[str, list[str]] = {}
        for i in nodes:
            dg = self.guard_of(i)
            if dg is not None:
                readings = by_source.setdefault("; ".join(map(str, dg.sources)), [])
                if gs._reading(i) not in readings:
                    readings.append(gs._reading(i))
        lines = [f"      {r}  <- {src}" if verbose or len(rs) == 1 else
                 f"      {src}  ({len(rs)} guards, e.g. {min(rs, key=len)})"
                 for src, rs in by_source.items() for r in (rs if verbose else rs[:1])]
        return [f"  {title}", *lines] if lines else []


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


class _Namer:
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


def _static_guard(text: str, code: str, inputs: Mapping[str, str], env: Mapping[str, Any]) -> StaticGuard:
    """A guard checked as Dynamo checks it, over the check's parameters; printed with them too
    (`x.stride()[0] == x.size()[1]`; what is not an input keeps Dynamo's `L[..]`/`G[..]`)."""
    bound: dict[str, Any] = {}
    src = python_source(code, inputs, bound, env)
    shown = text
    for source, name in sorted(inputs.items(), key=lambda kv: -len(kv[0])):
        shown = shown.replace(source, name)
    return StaticGuard(shown, src, src.split(" == ")[0] if " == " in src else src, tuple(bound.items()))


def _loc(sources: Sequence[GuardSource], frame_code: Any) -> SourceLoc | None:
    for s in sources:
        if s.file is not None and s.line is not None:
            full = frame_code.co_filename if short_path(frame_code.co_filename) == s.file else s.file
            return SourceLoc(full, s.line, s.function or "", s.code or "")
    return None


def _origin(sources: Sequence[GuardSource]) -> str:
    return "; ".join(map(str, sources))


def explain_frame(c: dyn.Compiled, dynamic: bool | None, marked: Mapping[int, Sequence[int]] | None = None,
                  timeout_ms: int = 2000, outer: Sequence[Any] = (), outer_names: Sequence[str] = (),
                  example: bool = True) -> Frame:
    """One compiled frame's guards, read from its cache entry and reduced (see the module doc).

    `example`: the frame's locals are those it was compiled for (every guard holds there, so
    simplify starts from them); False for another call's locals.

    `marked`: id of a tensor -> the dims the user marked dynamic; `outer`, `outer_names`: the
    call's arguments and their names (the outermost frame takes them as its inputs)."""
    if c.entry is None:
        raise CompileExplainError(f"Dynamo installed no guards for frame {c.compile_id} ({c.name})")
    gm = c.entry.guard_manager
    closure = dict(getattr(gm, "closure_vars", None) or {})
    leaves, shape = dyn.leaves(gm)
    inputs = frame_inputs(c.code, c.f_locals, outer, outer_names)
    params = [name for name, _, _ in inputs]
    value = {name: v for name, _, v in inputs}
    source_of = {name: src for name, src, _ in inputs}
    symbolic = _symbolic_sources(c.shape_env) | set(_shape_sources(shape))
    kinds: list[tuple[str, str, int]] = []
    for name, src, v in inputs:
        if isinstance(v, torch.Tensor):
            kinds.append((name, "tensor", v.dim()))
        elif isinstance(v, int) and not isinstance(v, bool) and src in symbolic:
            kinds.append((name, "int", 0))
    signature = dim_names(kinds)
    by_name = {s.name: s for s in signature}
    names: dict[str, str] = {}
    for s in signature:
        if s.kind == "int":
            names[source_of[s.name]] = s.name
        else:
            names.update({f"{source_of[s.name]}.size()[{i}]": d for i, d in enumerate(s.dims)})
    marked_sizes = {f"{source_of[s.name]}.size()[{d}]" for s in signature if s.kind == "tensor"
                    for d in (marked or {}).get(id(value[s.name]), ())}
    env = {**closure, "L": c.f_locals, "G": c.f_globals}
    rewrite = {src: name for name, src, _ in inputs}
    namer = _Namer(c.f_locals, c.f_globals, closure)

    static: list[StaticGuard] = []
    for s in signature:
        if s.kind == "tensor":
            static += tensor_guards(s.name, value[s.name])
    for p in params:
        if p not in by_name and is_static_value(value[p]):
            static.append(value_guard(p, value[p]))
    static += state_guards()

    dynamo_guards: list[DynamoGuard] = []
    other: list[str] = []
    tensor_sources = {source_of[s.name] for s in signature if s.kind == "tensor"}
    for leaf in leaves:
        if leaf.kind != "TENSOR_MATCH":
            other.append(leaf.code)
            continue
        sizes, strides = dyn.parse_tensor_match(leaf.code)
        arg = leaf.source in tensor_sources
        for i, v in enumerate(sizes):
            if v is None:
                continue
            src = f"{leaf.source}.size()[{i}]"
            if arg:
                dynamo_guards.append(DynamoGuard(f"{src} == {v}", "static size",
                                                 _static_sources(c, src, v, dynamic, src in marked_sizes), leaf.comment))
            else:
                static.append(_static_guard(f"{src} == {v}", f"{src} == {v}", rewrite, env))
        for i, v in enumerate(strides):
            if v is not None and arg:
                static.append(_static_guard(f"{leaf.source}.stride()[{i}] == {v}", f"{leaf.source}.stride()[{i}] == {v}",
                                            rewrite, env))
    for leaf in shape:
        try:
            expr = parse_guard(leaf.code, namer.symbol)
        except TranslationError:
            expr = None
        sources = sources_of(leaf.comment, leaf.code, c.code)
        srcs = [namer.source(s) for s in expr.free_symbols] if expr is not None else []
        if expr is None or any(s not in names and _reads_layout(s) for s in srcs) or not any(s in names for s in srcs):
            # NOTE: strides, storage offsets, floats, identities: not sizes; checked as Dynamo checks them
            static.append(_static_guard(leaf.code, leaf.code, rewrite, env))
            kind = "stride" if any(_reads_layout(s) for s in srcs) or _reads_layout(leaf.code) else "other"
            dynamo_guards.append(DynamoGuard(leaf.code, kind, sources, leaf.comment, expr))
            continue
        dims = tuple((sym, names[namer.source(sym)]) for sym in expr.free_symbols if namer.source(sym) in names)
        bounds = _bounds(leaf.code, leaf.comment, namer, c.code, dims)
        if bounds:
            sources = tuple(dict.fromkeys(s for b in bounds for s in b.sources))
        elif _UPPER.match(leaf.code):
            sources = _decided(sources, leaf.comment)
        dynamo_guards.append(DynamoGuard(leaf.code, "shape", sources, leaf.comment, expr, dims, bounds))

    dynamo_guards = _first_uses(dynamo_guards)
    graph = Graph(meta={"signature": signature})
    values: dict[str, int] = {}
    for s in signature:
        vals = [int(value[s.name])] if s.kind == "int" else list(value[s.name].shape)
        for d, v in zip(s.dims, vals):
            graph.emit(Op.INT_ARG if s.kind == "int" else Op.INT_PLACEHOLDER, (), out=d, name=d)
            values[d] = int(v)
    if example:
        graph.meta["example"] = values
    nodes: dict[sympy.Symbol, str] = {}
    for k, dg in enumerate(dynamo_guards):
        if dg.kind == "static size":
            src, v = dg.code.rsplit(" == ", 1)
            cond = graph.emit(Op.INT_EQ, (names[src], graph.emit(Op.INT_CONST, (), val=int(v))))
        elif dg.kind == "shape" and dg.bounds:
            for j, b in enumerate(dg.bounds):
                cond = emit_bool(graph, b.expr, {sym: d for sym, d in dg.dims})
                graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"loc": _loc(b.sources, c.code), "dynamo": k,
                                                                        "bound": j, "origin": _origin(b.sources)})
            continue
        elif dg.kind == "shape":
            for sym in dg.expr.free_symbols:
                if sym in nodes:
                    continue
                src = namer.source(sym)
                if src in names:
                    nodes[sym] = names[src]
                else:
                    v = namer.value(src)
                    if not isinstance(v, int):
                        raise CompileExplainError(f"Dynamo's guard {dg.code!r} reads {src} = {v!r}, not an int")
                    nodes[sym] = graph.emit(Op.INT_CONST, (), val=int(v))
                    static.append(_static_guard(f"{src} == {v}", f"{src} == {v}", rewrite, env))
            try:
                cond = emit_bool(graph, dg.expr, nodes)
            except TranslationError as e:
                raise TranslationError(f"frame {c.compile_id} ({c.name}): Dynamo's guard {dg.code!r}: {e}") from None
        else:
            continue
        graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True,
                   meta={"loc": _loc(dg.sources, c.code), "dynamo": k, "origin": _origin(dg.sources)})
    gs = simplify(graph, explore=False, timeout_ms=timeout_ms, jobs=1)
    gs = gs.with_static(_dedup(static), params)
    frame = Frame(c.name, c.compile_id, short_path(c.code.co_filename), c.code.co_firstlineno, tuple(params),
                  dynamo_guards, gs, other, names=names, code=c.code, inputs=dict(source_of),
                  f_locals=c.f_locals)
    frame.specializations = _specializations(c, frame, marked_sizes)
    return frame


def _bounds(code: str, comment: str, namer: Any, frame_code: Any, dims: tuple[tuple[Any, str], ...]
            ) -> tuple[DynamoGuard, ...]:
    """A range guard over one input dim as its two bounds, each with its own sources (`bounds_of`);
    the upper bound's innermost line names the PyTorch function that decided it. Empty otherwise."""
    parts = bounds_of(code, comment)
    if not parts or len(dims) != 1:
        return ()
    out = []
    for k, (part, where) in enumerate(parts):
        try:
            expr = parse_guard(part, namer.symbol)
        except TranslationError:
            return ()
        sources = sources_of(where, part, frame_code)
        out.append(DynamoGuard(part, "shape", _decided(sources, where) if k else sources, where, expr, dims))
    return tuple(out)


def _first_uses(guards: list[DynamoGuard]) -> list[DynamoGuard]:
    """A 0/1 specialization's "first used at" as the first user line whose guards read that dim.

    NOTE: Dynamo names the line where it made the dim's symbol: the first read of any size of
    the tensor (`if x.shape[0] > 16:` for `x1`), not a line that uses this one; where every
    guard of that line reads other dims, the first line whose guards read this one is named.
    """
    used: dict[str, list[GuardSource]] = {}
    at: dict[tuple[str | None, int | None], set[str]] = {}  # a user line -> the dims its guards read
    for g in guards:
        for s in g.sources:
            if s.assumption is None and s.file is not None and s.line is not None:
                at.setdefault((s.file, s.line), set()).update(d for _, d in g.dims)
                for _, d in g.dims:
                    used.setdefault(d, []).append(s)
    def moved(g: DynamoGuard) -> DynamoGuard:
        if g.bounds:
            bounds = tuple(moved(b) for b in g.bounds)
            return DynamoGuard(g.code, g.kind, tuple(dict.fromkeys(s for b in bounds for s in b.sources)), g.comment,
                               g.expr, g.dims, bounds)
        dims = {d for _, d in g.dims}
        made = next((s for s in g.sources if s.assumption == "0/1 specialization"), None)
        firsts = sorted((s for d in dims for s in used.get(d, ())), key=lambda s: (s.file != g.sources[0].file, s.line))
        # NOTE: Dynamo's line stays unless every guard from it reads other dims only
        if made is not None and firsts and at.get((made.file, made.line), dims).isdisjoint(dims):
            f = firsts[0]
            return DynamoGuard(g.code, g.kind, tuple(
                GuardSource(s.assumption, f.file, f.line, f.function, f.code, s.detail)
                if s.assumption == "0/1 specialization" else s for s in g.sources), g.comment, g.expr, g.dims)
        return g

    return [moved(g) for g in guards]


def _dedup(static: list[StaticGuard]) -> list[StaticGuard]:
    seen: set[str] = set()
    out = []
    for g in static:
        if g.text not in seen:
            seen.add(g.text)
            out.append(g)
    return out


def _reads_layout(source: str) -> bool:
    return ".stride()" in source or ".storage_offset()" in source


def _shape_sources(shape: Sequence[dyn.Leaf]) -> Iterator[str]:
    for leaf in shape:
        yield from re.findall(r"L\['\w+'\](?:\.size\(\)\[\d+\])?", leaf.code)


def _symbolic_sources(shape_env: Any) -> set[str]:
    if shape_env is None:
        return set()
    return set(getattr(shape_env, "source_to_var", {}) or {})


def _symbol_of(shape_env: Any, source: str) -> Any:
    return (getattr(shape_env, "source_to_var", None) or {}).get(source) if shape_env is not None else None


def _static_sources(c: dyn.Compiled, src: str, value: int, dynamic: bool | None, marked: bool) -> tuple[GuardSource, ...]:
    """Why a TENSOR_MATCH size is static: pinned by user code (Dynamo made a symbol, then a
    replacement), 0/1 specialization, or static by default."""
    sym = _symbol_of(c.shape_env, src)
    if sym is not None:
        sloc = (getattr(c.shape_env, "replacements_slocs", {}) or {}).get(sym)
        found = user_lines(_sloc_text(sloc), c.code) if sloc is not None else []
        return tuple(found) or (GuardSource("specialized", detail=f"Dynamo pinned {src} to {value}"),)
    if value in (0, 1):
        return (GuardSource("0/1 specialization", detail=f"the example has {src} = {value}; "
                            "Dynamo gives sizes 0 and 1 no symbol"),)
    if marked:
        return (GuardSource("specialized", detail=f"marked dynamic, but Dynamo pinned {src} to {value}"),)
    return (GuardSource("static by default", detail="torch.compile makes a size dynamic only after it changes"
                        if dynamic is None else "dynamic=False" if dynamic is False else
                        "Dynamo kept this size static"),)


def _sloc_text(sloc: Any) -> str:
    """An `SLoc` as Dynamo prints it in a verbose comment (`user code  # file:line in fn (...)`)."""
    return str(sloc)


def _specializations(c: dyn.Compiled, frame: Frame, marked: set[str]) -> list[Specialization]:
    """Each input dim Dynamo made a symbol for and then pinned, with every guard on that
    symbol (each rejects a witness value of the dim, the other dims as the call)."""
    env = c.shape_env
    if env is None:
        return []
    out: list[Specialization] = []
    static = {dg.code.rsplit(" == ", 1)[0]: int(dg.code.rsplit(" == ", 1)[1])
              for dg in frame.dynamo_guards if dg.kind == "static size"}
    example = frame.guards.graph.meta.get("example", {})
    sym_to_dim = {sym: frame.names[src] for src, sym in (getattr(env, "source_to_var", {}) or {}).items()
                  if src in frame.names}
    for src, value in static.items():
        sym = _symbol_of(env, src)
        if sym is None:
            continue
        dim = frame.names[src]
        is_marked = src in marked
        pins = []
        for g in env.guards:
            if sym not in g.expr.free_symbols:
                continue
            text = PythonPrinter().doprint(g.expr.xreplace({s: sympy.Symbol(d) for s, d in sym_to_dim.items()}))
            pins.append(Pin(text, tuple(user_lines(_sloc_text(g.sloc), c.code)) or sources_of(_sloc_text(g.sloc), text, c.code),
                            _witness(g.expr, sym, dim, sym_to_dim, example)))
        out.append(Specialization(dim, src, value, is_marked, tuple(pins), c.error))
    return out


def _witness(expr: Any, sym: Any, dim: str, sym_to_dim: Mapping[Any, str], example: Mapping[str, int],
             span: int = 64) -> dict[str, int] | None:
    """A value of `dim` that `expr` rejects, the other dims at the call's values (searched
    outward from the example value; None when it accepts every value up to `span` away)."""
    others = {s: example[d] for s, d in sym_to_dim.items() if s != sym and d in example}
    start = example.get(dim, 2)
    for delta in range(1, span):
        for v in (start - delta, start + delta):
            if v < 0:
                continue
            try:
                ok = expr.xreplace({**others, sym: sympy.Integer(v)})
            except Exception:
                return None
            if ok in (sympy.false, False):
                return {dim: v}
    return None


# -- the report -----------------------------------------------------------------------------


@dataclass
class CompileReport:
    """Every frame Dynamo compiled for one call, outermost first (see the module doc)."""

    target: str
    frames: list[Frame]
    compiled: Callable[..., Any]  # the compiled callable these guards are Dynamo's for
    result: Any
    compile_seconds: float
    explain_seconds: float
    error: str | None = None  # Dynamo's own error on the first try (a violated mark_dynamic, say)
    grad: bool = True  # grad mode was on for the call (Dynamo guards it: the header says it once)
    eager: str | None = None  # Dynamo compiled no frame and ran the call eagerly: why, in its words
    setting: str | None = None  # the setting Dynamo's hint names (`torch._dynamo.config.allow_rnn = True`)
    unguarded: GuardSet | None = None  # where it ran eagerly: no size guard over the call's inputs

    @property
    def ran_eagerly(self) -> bool:
        """Dynamo compiled no frame: every input runs eagerly, so no guard rejects any."""
        return not self.frames

    @property
    def guards(self) -> GuardSet:
        """The outermost frame's minimal guards (none where Dynamo ran the call eagerly)."""
        if self.frames:
            return self.frames[0].guards
        assert self.unguarded is not None, "a report without frames holds the call's unguarded set"
        return self.unguarded

    @property
    def dynamo_guards(self) -> list[DynamoGuard]:
        """The outermost frame's size guards, as Dynamo checks them."""
        return self.frames[0].dynamo_guards if self.frames else []

    @property
    def specializations(self) -> list[Specialization]:
        return [s for f in self.frames for s in f.specializations]

    def frame(self, name: str) -> Frame:
        """The frame compiled from the code object named `name` (the newest, if several)."""
        for f in reversed(self.frames):
            if f.name == name:
                return f
        raise KeyError(f"no frame {name!r} (frames: {', '.join(f.name for f in self.frames)})")

    def counts(self) -> dict[str, int]:
        return {"frames": len(self.frames), "dynamo_guards": sum(len(f.dynamo_guards) for f in self.frames),
                "minimal_guards": sum(len(f.guards) for f in self.frames)}

    def __str__(self) -> str:
        return self.text()

    def text(self, verbose: bool = False) -> str:
        """The report (`verbose`: each of Dynamo's dropped guards, not a count per source line)."""
        n = self.counts()
        lines = [f"target: {self.target} (torch.compile, {grad_mode(self.grad)})",
                 f"frames: {n['frames']}; Dynamo's shape guards: {n['dynamo_guards']} -> {n['minimal_guards']} minimal; "
                 f"compiled in {self.compile_seconds:.2f} s, explained in {self.explain_seconds:.2f} s"]
        if self.error:
            lines.append(f"Dynamo refused the first compile: {self.error.splitlines()[0]}")
        if self.ran_eagerly:
            lines += ["", f"no guards: Dynamo compiled no frame of {self.target.split(' at ')[0]}: it runs every call "
                          f"eagerly, so no input recompiles",
                      f"  why: {self.eager or 'Dynamo gave no reason'}"]
            if self.setting:
                lines.append(f"  to compile it: {self.setting}")
        for f in self.frames:
            lines += ["", *f.lines(verbose)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """Per frame, a table of each minimal guard with Dynamo's guards behind it and their sources."""
        import html

        parts = [f"<div><b>{html.escape(self.target)}</b> (torch.compile): {self.counts()['dynamo_guards']} Dynamo "
                 f"shape guards &rarr; {self.counts()['minimal_guards']} minimal"]
        for f in self.frames:
            rows = []
            for c in f.guards:
                behind = {f._code_of(i): "; ".join(map(str, g.sources)) for i in sorted(c.prov)
                          if (g := f.guard_of(i)) is not None}
                rows.append(f"<tr><td><code>{html.escape(c.text)}</code></td><td>"
                            + "<br>".join(f"<code>{html.escape(d)}</code> &larr; {html.escape(s)}" for d, s in behind.items())
                            + "</td></tr>")
            parts.append(f"<p>frame {html.escape(f.compile_id)} <code>{html.escape(f.name)}</code> "
                         f"({html.escape(f.file)}:{f.line})</p><table><thead><tr><th>guard</th>"
                         f"<th>Dynamo's guards and their sources</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
        return "".join(parts) + "</div>"

    def as_dict(self) -> dict[str, Any]:
        outer = self.frames[0].as_dict() if self.frames else {"guards": [], "dynamo_guards": [], "static": [],
                                                              "minimal": True}
        return {"version": JSON_VERSION, "target": self.target, "via": "torch.compile", "counts": self.counts(),
                "ran_eagerly": {"why": self.eager, "setting": self.setting} if self.ran_eagerly else None,
                "compile_seconds": round(self.compile_seconds, 6), "explain_seconds": round(self.explain_seconds, 6),
                "error": self.error, "grad_enabled": self.grad, "guards": outer["guards"],
                "dynamo_guards": outer["dynamo_guards"],
                "static": outer["static"], "minimal": outer["minimal"], "frames": [f.as_dict() for f in self.frames]}

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


def _marks(args: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """id of each argument tensor -> the dims `mark_dynamic` marked."""
    return {id(a): tuple(sorted(a._dynamo_dynamic_indices)) for a in args
            if isinstance(a, torch.Tensor) and getattr(a, "_dynamo_dynamic_indices", None)}


@contextlib.contextmanager
def _weakened(args: Sequence[Any]) -> Iterator[None]:
    """mark_dynamic turned into maybe_mark_dynamic for one compile (so a specialization compiles
    and can be explained), restored after."""
    saved = []
    for a in args:
        if isinstance(a, torch.Tensor) and getattr(a, "_dynamo_dynamic_indices", None):
            saved.append((a, set(a._dynamo_dynamic_indices)))
            weak = getattr(a, "_dynamo_weak_dynamic_indices", set())
            a._dynamo_weak_dynamic_indices = weak | a._dynamo_dynamic_indices
            del a._dynamo_dynamic_indices
    try:
        yield
    finally:
        for a, dims in saved:
            a._dynamo_dynamic_indices = dims
            del a._dynamo_weak_dynamic_indices


@contextlib.contextmanager
def _callers_in_slocs() -> Iterator[None]:
    """While Dynamo compiles: a guard whose user location is a library line (an `nn.Module`'s
    `forward` inlined) names the user's line that called into it too, first.

    NOTE: Dynamo's `ShapeEnv._get_stack_summary` keeps the innermost frame of the inlined stack;
    the rest is in `TracingContext.extract_stack()`. The user line comes first, the library line
    after it (`x = self.act(x)  # f.py:19 in forward; via return F.relu(...)  # activation.py:143 in forward`).
    """
    from torch._guards import SLoc, TracingContext
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, uninteresting_files
    from torch.utils._traceback import format_frame

    from guardsolve.guards.symbolic import is_library_file

    original = ShapeEnv._get_stack_summary

    def summary(self: Any, is_debug: bool = False, framework_loc: str | None = None) -> Any:
        if framework_loc is None:
            # NOTE: Dynamo names the innermost frame outside its own files as where PyTorch decided
            # (`_subclasses/fake_impls.py:1811 in conv`); from here that would be this wrapper
            frame = sys._getframe(1)
            skipped = uninteresting_files()
            while frame is not None and frame.f_code.co_filename in skipped:
                frame = frame.f_back
            if frame is not None:
                framework_loc = format_frame(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno,
                                                                    frame.f_code.co_name))
            del frame
        sloc, extra = original(self, is_debug, framework_loc)
        try:
            stack = TracingContext.extract_stack()
            inner = stack[-1] if stack else None
            user = next((f for f in reversed(stack) if not is_library_file(f.filename)), None)
            if sloc.maybe_user_loc and inner is not None and user is not None and user is not inner \
                    and is_library_file(inner.filename) and format_frame(inner, line=True) == sloc.maybe_user_loc:
                sloc = SLoc(sloc.framework_loc, f"{format_frame(user, line=True)}; via {sloc.maybe_user_loc}")
        except Exception:  # NOTE: an attribution only: Dynamo's own location stays
            pass
        return sloc, extra

    ShapeEnv._get_stack_summary = summary  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShapeEnv._get_stack_summary = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _quiet_dynamo() -> Iterator[None]:
    """Dynamo logs a failed compile at ERROR on top of raising it; we report it ourselves."""
    logger = logging.getLogger("torch._guards")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _signature_names(fn: Any, n: int) -> list[str]:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(n)]
    return [p.name for p in params[:n]]


def _name(fn: Any) -> str:
    return type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))


def explain_compile(fn: Callable[..., Any], *args: Any, dynamic: bool | None = None, backend: Any = "eager",
                    timeout_ms: int = 2000, **compile_kwargs: Any) -> CompileReport:
    """Compile `fn` with `torch.compile`, call it once on `args`, and explain every frame Dynamo
    compiled: its guards as Dynamo checks them, minimal and proven equivalent, with sources.

    The compile tracks its recompiles apart from other `torch.compile` calls of the same code
    (`isolate_recompiles`); `report.compiled` is the compiled callable, for checking more inputs.
    A `mark_dynamic` that Dynamo cannot keep is explained (`report.specializations`) from a
    second compile with the marks weakened to `maybe_mark_dynamic`.
    """
    dyn.require()
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    marked = _marks(args)
    error: str | None = None
    breaks = _graph_breaks()
    cap = dyn.Capture()
    compiled = torch.compile(fn, backend=cap.backend(backend), dynamic=dynamic, isolate_recompiles=True,
                             **compile_kwargs)
    t0 = time.perf_counter()
    failed: Exception | None = None
    try:
        with _quiet_dynamo(), _callers_in_slocs():
            result = compiled(*args)
    except ConstraintViolationError as e:
        error = str(e)
        cap = dyn.Capture()
        compiled = torch.compile(fn, backend=cap.backend(backend), dynamic=dynamic, isolate_recompiles=True,
                                 **compile_kwargs)
        with _weakened(args):
            try:
                result = compiled(*args)
            except Exception as e2:
                raise CompileExplainError(f"torch.compile failed on {_name(fn)}: {type(e2).__name__}: "
                                          f"{str(e2).splitlines()[0] if str(e2) else ''}") from e2
    except GuardsolveError:
        raise
    except Exception as e:
        failed = e
    if failed is not None:
        # NOTE: outside the handler: eager's error must not take Dynamo's as its context
        eager = _eager_failure(fn, args)
        if eager is not None:
            raise eager from failed  # NOTE: the program fails in eager too: eager's words and the user's line
        cause = _root_cause(failed)
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        raise CompileExplainError(f"torch.compile failed on {_name(fn)} where eager runs: "
                                  f"{type(cause).__name__}: {first}") from failed
    compile_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    frames = []
    for c in cap.installed():
        if error is not None:
            c.error = error
        frames.append(explain_frame(c, dynamic, marked, timeout_ms, args, _signature_names(fn, len(args))))
    eager = [why for why, n in _graph_breaks().items() if n > breaks.get(why, 0)]
    if not frames and eager:
        # NOTE: Dynamo skipped every frame (an nn.LSTM while allow_rnn is False): it runs the call
        # eagerly, so no input is rejected; a report without guards says why, and the setting
        why = eager[0]
        setting = re.search(r"torch\._dynamo\.config\.\w+\s*=\s*\w+", why)
        first = why.strip().splitlines()[0]
        explained = next((ln.strip().removeprefix("Explanation:").strip().rstrip(".") for ln in why.splitlines()
                          if ln.strip().startswith("Explanation:")), "")
        return CompileReport(_name(fn), [], compiled, result, compile_seconds, time.perf_counter() - t1, error,
                             torch.is_grad_enabled(), f"{first}" + (f" ({explained})" if explained else ""),
                             setting[0].replace("=", " = ").replace("  ", " ") if setting else None,
                             _unguarded(fn, args))
    if not frames:
        raise CompileExplainError(
            f"Dynamo compiled no frame of {_name(fn)} on this call: its code already has compiled entries from "
            "another torch.compile (call torch._dynamo.reset() first), or it has no tensor work to compile")
    frames[0].label = _called_as(fn, frames[0])
    if any(_unattributed(g) for g in frames[0].dynamo_guards):
        attribute_from_trace(frames[0], fn, args)
    return CompileReport(_name(fn), frames, compiled, result, compile_seconds, time.perf_counter() - t1, error,
                         torch.is_grad_enabled())


def _called_as(fn: Any, frame: Frame) -> str | None:
    """The outermost frame as the user called it, where Dynamo compiled a wrapper's code (a
    decorator around `forward`) instead of the function's own; None where it is the same."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    code = getattr(inspect.unwrap(target), "__code__", None)
    if code is None or code is frame.code:
        return None
    name = f"{type(fn).__name__}.forward" if isinstance(fn, torch.nn.Module) else _name(fn)
    return (f"{name} ({short_path(code.co_filename)}:{code.co_firstlineno}), through its wrapper "
            f"{frame.name} ({frame.file}:{frame.line})")


def _graph_breaks() -> dict[str, int]:
    """The graph breaks Dynamo has counted in this process, each in its own words, with its
    count (its `counters`: read, never reset)."""
    from torch._dynamo.utils import counters

    return {**counters["unimplemented"], **counters["graph_break"]}


def _unguarded(fn: Any, args: Sequence[Any]) -> GuardSet:
    """No size guard over the call's inputs (named as `explain_frame` names them)."""
    names = _signature_names(fn, len(args))
    kinds = [(n, "tensor", a.dim()) if isinstance(a, torch.Tensor) else (n, "int", 0) for n, a in zip(names, args)
             if isinstance(a, torch.Tensor) or isinstance(a, int) and not isinstance(a, bool)]
    graph = Graph(meta={"signature": dim_names(kinds)})
    for p in graph.meta["signature"]:
        for d in p.dims:
            graph.emit(Op.INT_ARG if p.kind == "int" else Op.INT_PLACEHOLDER, (), out=d, name=d)
    return simplify(graph, explore=False)


def _eager_failure(fn: Callable[..., Any], args: Sequence[Any]) -> Exception | None:
    """Eager's own error for `fn(*args)` as a trace's (`errors.EagerError`: eager's type and
    message, the user's innermost line appended), or None when eager runs."""
    from guardsolve.errors import eager_error
    from guardsolve.guards.symbolic import is_library_file

    try:
        fn(*args)
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if not is_library_file(f.filename)]
        where = f" — {short_path(frames[-1].filename)}:{frames[-1].lineno}  {frames[-1].line}" if frames else ""
        return eager_error(e.with_traceback(None), where)
    return None


def _root_cause(e: BaseException) -> BaseException:
    """The innermost cause (Dynamo wraps a fake-tensor error in `TorchRuntimeError`)."""
    seen = {id(e)}
    while e.__cause__ is not None and id(e.__cause__) not in seen:
        e = e.__cause__
        seen.add(id(e))
    return e


def _unattributed(g: DynamoGuard) -> bool:
    return g.kind in ("shape", "static size") and all(s.assumption in ("Dynamo's own", "symbol replacement")
                                                      for s in g.sources)


def attribute_from_trace(frame: Frame, fn: Callable[..., Any], args: Sequence[Any]) -> None:
    """Where Dynamo names no source for a size guard, guardsolve's own trace of the same call
    does: the user lines of its bailouts that read the same dims and decide as the guard does
    at each size of those dims up to twice the example's (the outermost frame's dims are named
    as guardsolve's trace names them). A program guardsolve cannot trace keeps Dynamo's word."""
    from guardsolve.ir.interp import interpret
    from guardsolve.ir.printer import print_rules
    from guardsolve.trace.tracer import trace

    try:
        with torch.no_grad():
            graph = trace(fn, *args).guard_graph()
    except Exception:  # NOTE: an attribution only: a program guardsolve cannot trace keeps Dynamo's comment
        return
    printed = interpret(graph, print_rules([]))
    example = frame.guards.graph.meta.get("example", {})
    candidates = []
    for n in graph.bailouts():
        loc = n.meta.get("loc")
        if loc is not None:
            cond = printed[n.inputs[0]]
            candidates.append((_dims_read(graph, n), cond if n.params["expect"] else f"not {cond}", loc))
    for k, g in enumerate(frame.dynamo_guards):
        if not _unattributed(g) or g.expr is None or not g.dims:
            continue
        dims = {d for _, d in g.dims}
        points = [{**example, d: v} for d in sorted(dims) for v in range(0, 2 * example.get(d, 1) + 5)]
        found: dict[str, GuardSource] = {}
        for read, cond, loc in candidates:
            if read == dims and all(_decides(g, cond, p) for p in points):
                src = GuardSource(None, short_path(loc.file), loc.line, loc.function, loc.code or None,
                                  "from guardsolve's trace of the same call")
                found.setdefault(str(src), src)
        if found:
            frame.dynamo_guards[k] = DynamoGuard(g.code, g.kind, (*g.sources, *found.values()), g.comment, g.expr,
                                                 g.dims)


def _decides(g: DynamoGuard, cond: str, point: Mapping[str, int]) -> bool:
    """Do the Dynamo guard and a printed guardsolve bailout condition agree at `point`?"""
    try:
        ours = bool(eval(cond, {}, dict(point)))  # NOTE: the printer's Python form over dim names
    except ZeroDivisionError:
        ours = False
    except Exception:
        return False
    try:
        theirs = bool(g.expr.xreplace({sym: sympy.Integer(point[d]) for sym, d in g.dims}))
    except (TypeError, ZeroDivisionError):
        return False
    return ours == theirs


def _dims_read(graph: Graph, node: Any) -> set[str]:
    """The input dims a guard-graph node reads."""
    dims = {n.outputs[0] for n in graph.placeholders()}
    by_name = {o: n for n in graph.nodes for o in n.outputs}
    out: set[str] = set()
    stack = list(node.inputs)
    seen: set[str] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in dims:
            out.add(v)
        elif v in by_name:
            stack.extend(by_name[v].inputs)
    return out
