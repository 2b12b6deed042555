"""What Inductor assumed, read back and named: the ShapeEnv's guards over the trace's symbols,
and the exact sizes and layouts where a guard cannot be translated.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Mapping, Sequence
import sympy
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.jit.variant import BackendGuard
from guardsolve.pytorch.sympy_guards import TranslationError, emit_bool, parse_guard
from guardsolve.solve.guardset import GuardSet
from guardsolve.solve.tograph import emit_bailout
from guardsolve.trace.static import StaticGuard
from guardsolve.trace.record import Trace
from guardsolve.jit.inductor.internals import DimDynamic, FakeTensorMode, LocalSource, ShapeEnv, StatelessSymbolicContext, fx_config


# NOTE: (function that added the guard, file suffix) -> what it means, for `explain()`. A guard
# from elsewhere is named by its function and file. Rule table: add a row, not a branch.
_WHY: tuple[tuple[str, str], ...] = (
    ("need_use_acc_helper", "Inductor: float sum reduction over at most 4096 elements (its accumulator helper)"),
    ("_index_dtype", "guardsolve's max pooling: an image plane's flat indices fit int32"),
    ("meta_mm", "make_fx re-trace: mm's inner sizes agree"),
    ("meta_addmm", "make_fx re-trace: addmm's sizes agree"),
    ("meta_bmm", "make_fx re-trace: bmm's sizes agree"),
    ("infer_size", "make_fx re-trace: broadcasting"),
    ("broadcast_shapes", "make_fx re-trace: broadcasting"),
    ("_broadcast_shapes", "make_fx re-trace: broadcasting"),
    ("is_contiguous", "Inductor: the layout of a tensor"),
)


@contextlib.contextmanager
def size_oblivious() -> Any:
    """Size-oblivious reasoning for backed sizes, for this compile only (a global flag of
    PyTorch's: guardsolve's own tracing must not run under it)."""
    with fx_config.patch(backed_size_oblivious=True):
        yield


def fake_inputs(mode: FakeTensorMode, se: ShapeEnv, t: Trace, values: Sequence[Any],
           train: bool = False) -> tuple[list[Any], dict[str, str]]:
    """A fake per traced input (every size a symbol with range [0, inf), even 0 and 1; a Python
    int a symbol too) and the symbols' names in the trace's dims. With `train`, a fake requires
    grad where its input does (AOTAutograd differentiates with respect to those)."""
    fakes: list[Any] = []
    dims: dict[str, str] = {}
    for p, v in zip(t.signature, values):
        src = LocalSource(p.name)
        if p.kind == "int":
            sym = se.create_symbol(int(v), src, dynamic_dim=DimDynamic.DYNAMIC, positive=None)  # NOTE: ints may be negative
            fakes.append(se.create_symintnode(sym, hint=int(v), source=src))
            dims[f"L[{p.name!r}]"] = p.dims[0]
            continue
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * v.dim())
        fake = mode.from_tensor(v.detach(), symbolic_context=ctx, source=src)
        fakes.append(fake.requires_grad_(True) if train and v.requires_grad else fake)
        for i, d in enumerate(p.dims):
            dims[f"L[{p.name!r}].size()[{i}]"] = d
    return fakes, dims


def _why(guard: Any) -> str:
    sloc = getattr(guard, "sloc", None)
    frame = getattr(sloc, "framework_loc", None)
    name, path = getattr(frame, "name", ""), getattr(frame, "filename", "")
    for fn, text in _WHY:
        if name == fn:
            return text
    if frame is not None:
        short = path.split(f"torch{os.sep}", 1)[-1]
        where = "Inductor" if "_inductor" in path else "make_fx re-trace"
        return f"{where}: {name} (torch/{short}:{getattr(frame, 'lineno', '?')})"
    return "Inductor's ShapeEnv"


def _attribution(se: ShapeEnv, symbols: Mapping[Any, str]) -> list[tuple[Any, str]]:
    """Each ShapeEnv guard as a sympy condition over the trace's dims, with what made it."""
    sub = {s: sympy.Symbol(d, integer=True) for s, d in symbols.items()}
    out = []
    for g in getattr(se, "guards", ()):
        try:
            out.append((g.expr.xreplace(sub), _why(g)))
        except Exception:  # NOTE: attribution only names a guard; it never decides one
            continue
    return out


def read_guards(se: ShapeEnv, fakes: Sequence[Any], t: Trace, dims: Mapping[str, str],
                 graph: Graph) -> tuple[list[BackendGuard], list[StaticGuard]]:
    """What the backend assumed: size guards emitted as bailouts of `graph`; layout guards
    (strides, storage offset) as static guards over the inputs' names. Raises
    `TranslationError` for a guard with no exact translation."""
    sources = [LocalSource(p.name) for p in t.signature]
    leaves = se.produce_guards(list(fakes), sources, ignore_static=False)
    # NOTE: the symbols as created (a symbol a guard replaced by a constant still names it)
    symbols = {sym: dims[src] for src, sym in getattr(se, "source_to_var", {}).items() if src in dims}
    named = _attribution(se, symbols)
    dim_symbols: dict[str, sympy.Symbol] = {}
    names: dict[Any, str] = {}

    def symbol(source: str) -> Any:
        d = dims.get(source)
        if d is None:
            raise TranslationError(f"reads {source}, which is not a size of the trace's inputs")
        if d not in dim_symbols:
            dim_symbols[d] = sympy.Symbol(d, integer=True)
            names[dim_symbols[d]] = graph.emit(Op.INT_PLACEHOLDER if d in _sizes(t) else Op.INT_ARG, (), name=d) \
                if d not in _declared(graph) else d
        return dim_symbols[d]

    backend: list[BackendGuard] = []
    static: list[StaticGuard] = []
    for leaf in leaves:
        text = _rename(leaf, t)
        if ".stride()" in leaf or ".storage_offset()" in leaf:
            # NOTE: a miss reports the left side's value (`failed (found 1)`), not the comparison's
            sides = re.split(r" (?:==|<=|>=|<|>|!=) ", text)
            subject = next((x for x in sides if not x.strip().lstrip("-").isdigit()), text) if len(sides) == 2 else text
            static.append(StaticGuard(text, text, subject))
            backend.append(BackendGuard(text, "Inductor: the layout of a tensor input", "layout"))
            continue
        expr = parse_guard(leaf, symbol)
        why = next((w for e, w in named if e == expr), None)
        if why is None:
            why = _range_why(expr) or "Inductor's ShapeEnv"
        cond = emit_bool(graph, expr, names)
        graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"origin": why, "backend": text})
        backend.append(BackendGuard(text, why, "size"))
    return backend, static


def _range_why(expr: Any) -> str | None:
    if isinstance(expr, (sympy.LessThan, sympy.GreaterThan, sympy.StrictLessThan, sympy.StrictGreaterThan)):
        if any(a.is_Integer for a in expr.args) and len(expr.free_symbols) == 1:
            return "Inductor: the range its ShapeEnv gives this size"
    return None


def _sizes(t: Trace) -> set[str]:
    return {d for p in t.signature if p.kind == "tensor" for d in p.dims}


def _declared(g: Graph) -> set[str]:
    return {n.params["name"] for n in g.nodes if n.op in (Op.INT_PLACEHOLDER, Op.INT_ARG)}


def _rename(leaf: str, t: Trace) -> str:
    """Dynamo's `L['x']` as the parameter `x` (the check's own argument)."""
    for p in t.signature:
        leaf = leaf.replace(f"L[{p.name!r}]", p.name)
    return leaf


def trace_part(trace_gs: GuardSet) -> Graph:
    """The trace's minimal guards as a guard graph, each bailout keeping its source line."""
    g = Graph(meta={"signature": trace_gs.signature})
    for d in trace_gs.dims:
        g.emit(Op.INT_PLACEHOLDER if d in trace_gs.sizes else Op.INT_ARG, (), name=d)
    for c in trace_gs.constraints:
        emit_bailout(g, c.formula)
        meta: dict[str, Any] = {}
        if c.prov:
            src = trace_gs.graph.nodes[min(c.prov)].meta
            meta = {k: src[k] for k in ("loc", "op", "origin") if k in src}
        meta.setdefault("origin", "the trace's guards")
        g.nodes[-1].meta = {**g.nodes[-1].meta, **meta}
    return g


def exact_guards(t: Trace, values: Sequence[Any], graph: Graph) -> list[BackendGuard]:
    """Pin every size (and int) to the example's: the fallback when a backend guard cannot be read."""
    out = []
    declared = _declared(graph)
    for p, v in zip(t.signature, values):
        vals = [int(v)] if p.kind == "int" else list(v.shape)
        for d, x in zip(p.dims, vals):
            if d not in declared:
                graph.emit(Op.INT_PLACEHOLDER if p.kind == "tensor" else Op.INT_ARG, (), name=d)
                declared.add(d)
            cond = graph.emit(Op.INT_EQ, (d, graph.emit(Op.INT_CONST, (), val=int(x))))
            graph.emit(Op.BOOL_BAILOUT, (cond,), expect=True, meta={"origin": "the example's sizes (a backend guard was not translated)"})
            out.append(BackendGuard(f"{d} == {x}", "the example's sizes (a backend guard was not translated)", "size"))
    return out


def exact_layout(t: Trace, values: Sequence[Any]) -> list[StaticGuard]:
    out = []
    for p, v in zip(t.signature, values):
        if p.kind == "tensor":
            st, off = tuple(v.stride()), v.storage_offset()
            text = f"{p.name}.stride() == {st} and {p.name}.storage_offset() == {off}"
            out.append(StaticGuard(text, text, f"({p.name}.stride(), {p.name}.storage_offset())"))
    return out
