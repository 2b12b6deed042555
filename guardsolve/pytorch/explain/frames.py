"""`explain_frame`: one of Dynamo's compiled frames read into a `Frame` (its guards translated,
attributed, simplified), with its specializations and their witnesses.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Sequence
import sympy
import torch
from torch.utils._sympy.printers import PythonPrinter
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import short_path
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import dim_names
from guardsolve.pytorch import dynamo as dyn
from guardsolve.pytorch.sympy_guards import TranslationError, emit_bool, parse_guard
from guardsolve.solve.simplify import simplify
from guardsolve.trace.static import StaticGuard, is_static_value, state_guards, tensor_guards, value_guard
from guardsolve.pytorch.explain.failure import CompileExplainError
from guardsolve.pytorch.explain.frame import DynamoGuard, Frame, Pin, Specialization
from guardsolve.pytorch.explain.naming import Namer, frame_inputs, origin_of, source_loc_of, static_guard
from guardsolve.pytorch.explain.provenance import GuardSource, UPPER, bounds_of, deciding_sources, sources_of, user_lines


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
    namer = Namer(c.f_locals, c.f_globals, closure)

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
                static.append(static_guard(f"{src} == {v}", f"{src} == {v}", rewrite, env))
        for i, v in enumerate(strides):
            if v is not None and arg:
                static.append(static_guard(f"{leaf.source}.stride()[{i}] == {v}", f"{leaf.source}.stride()[{i}] == {v}",
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
            static.append(static_guard(leaf.code, leaf.code, rewrite, env))
            kind = "stride" if any(_reads_layout(s) for s in srcs) or _reads_layout(leaf.code) else "other"
            dynamo_guards.append(DynamoGuard(leaf.code, kind, sources, leaf.comment, expr))
            continue
        dims = tuple((sym, names[namer.source(sym)]) for sym in expr.free_symbols if namer.source(sym) in names)
        bounds = _bounds(leaf.code, leaf.comment, namer, c.code, dims)
        if bounds:
            sources = tuple(dict.fromkeys(s for b in bounds for s in b.sources))
        elif UPPER.match(leaf.code):
            sources = deciding_sources(sources, leaf.comment)
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
                graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"loc": source_loc_of(b.sources, c.code), "dynamo": k,
                                                                        "bound": j, "origin": origin_of(b.sources)})
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
                    static.append(static_guard(f"{src} == {v}", f"{src} == {v}", rewrite, env))
            try:
                cond = emit_bool(graph, dg.expr, nodes)
            except TranslationError as e:
                raise TranslationError(f"frame {c.compile_id} ({c.name}): Dynamo's guard {dg.code!r}: {e}") from None
        else:
            continue
        graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True,
                   meta={"loc": source_loc_of(dg.sources, c.code), "dynamo": k, "origin": origin_of(dg.sources)})
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
        out.append(DynamoGuard(part, "shape", deciding_sources(sources, where) if k else sources, where, expr, dims))
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


def _shape_sources(shape: Sequence[dyn.GuardLeaf]) -> Iterator[str]:
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
