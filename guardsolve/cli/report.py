"""Reports of a GuardSet: text (header + each guard with its source lines), JSON, Graphviz DOT.

JSON schema (`version` 1): see README.md, "JSON report".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from guardsolve.errors import GuardsolveError
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.solve.guardset import GuardSet

JSON_VERSION = 2  # 2: `inputs` is structured (shape and dtype per input); 1: a string


class UnprintableValueError(GuardsolveError):
    """`--format python` met a value its static guards compare against that prints no Python source."""


@dataclass
class ReportInfo:
    """What a report says besides the guards: where they came from and how they were made."""

    target: str
    inputs: str
    trace: Graph
    seconds: float
    verified: bool
    dynamic: Sequence[str] = ()
    graph_file: str | None = None  # a saved trace: its sources are lines of this file
    checked: Any = None  # with --export-check: the `export_check.ExportCheck` of the --dynamic spec
    input_specs: dict[str, Any] | None = None  # each input's shape and dtype (JSON's `inputs`)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (stage, error) of stages after the guards
    verbose: bool = False  # list each route tried, not only their counts
    # NOTE: by guard index, its sources that decide nothing on its far side (`solve.deciding`)
    idle: dict[int, Any] = field(default_factory=dict)
    mode: dict[str, Any] | None = None  # how the trace ran (`targets.trace_mode`); None for a saved graph


def mode_line(mode: dict[str, Any]) -> str:
    """How the trace ran, as the report's `mode:` line says it.

    >>> mode_line({"grad": True, "module": "eval"}), mode_line({"grad": False, "module": None})
    ('mode: grad on, eval (--no-grad: as served under torch.no_grad())', 'mode: no_grad')
    """
    text = "mode: " + ", ".join(p for p in ("grad on" if mode["grad"] else "no_grad", mode["module"]) if p)
    return text + (" (--no-grad: as served under torch.no_grad())" if mode["grad"] and mode["module"] else "")


def plural(count: int, word: str) -> str:
    """
    >>> plural(1, "guard"), plural(2, "guard"), plural(0, "bailout")
    ('1 guard', '2 guards', '0 bailouts')
    """
    return f"{count} {word}{'' if count == 1 else 's'}"


def _sources(gs: GuardSet, nodes: Sequence[int], graph_file: str | None, idle: Any = None) -> list[dict[str, Any]]:
    out = []
    for i in sorted(nodes):
        n = gs.graph.nodes[i]
        loc = n.meta.get("loc")
        quiet = {"decides_nothing_at": dict(idle.point)} if idle is not None and i in idle.sources else {}
        out.append({**quiet,
            "bailout": gs._reading(i) if i not in gs.value_guards else gs._data_decision(i),
            "bailout_raw": gs._describe(i),
            "file": loc.short_file if loc else graph_file,
            "line": loc.line if loc else n.meta.get("trace_line", n.meta.get("line")),
            "code": loc.code if loc else (str(n.meta["trace_node"]) if "trace_node" in n.meta else None),
        })
    return out


def _where(loc: Any) -> str | None:
    """`file:line` of a rejection's user line (a `SourceLoc`, or its printed form), or None."""
    if loc is None:
        return None
    return f"{loc.short_file}:{loc.line}" if hasattr(loc, "short_file") else str(loc).split("  ", 1)[0]


def json_report(gs: GuardSet, info: ReportInfo) -> str:
    """Machine-readable report (schema version 2)."""
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "target": info.target,
        "inputs": info.input_specs if info.input_specs is not None else info.inputs,
        "mode": info.mode,
        "trace_nodes": len(info.trace),
        "guard_nodes": len(gs.graph),
        "bailouts": len(gs.graph.bailouts()),
        "minimal": gs.minimal,
        "verified": info.verified,
        "seconds": round(info.seconds, 6),
        "guards": [{"guard": c.text, "kind": c.kind, "dims": list(c.dims),
                    "sources": _sources(gs, list(c.prov), info.graph_file, info.idle.get(k))} for k, c in enumerate(gs)],
        "implied": _sources(gs, sorted(gs.implied - set(gs.tautologies)), info.graph_file),
        "always_true": _sources(gs, list(gs.tautologies), info.graph_file),
        "value_guards": _sources(gs, list(gs.value_guards), info.graph_file),
        "undecided": list(gs.undecided),
        "static": [g.text for g in gs.static],
    }
    ex = gs.exploration
    if ex is not None:
        doc["paths"] = {
            "traces": ex.traces,
            "replayed": ex.replayed,
            "seconds": round(ex.seconds, 6),
            "skipped": ex.skipped,
            "merged": [{"at": dict(p.point), "changed": list(p.changed), "guards": [c.text for c in p.guards],
                        "value_flips": [f"{loc.short_file}:{loc.line}" for loc in p.value_flips],
                        "answers_otherwise": _sources(gs, gs._answered_otherwise(p.point), info.graph_file)}
                       for p in gs.paths],
            "rejected": [{"at": dict(p.point), "changed": list(p.changed), "why": str(p.why), "traced": p.like is None,
                          "decides_as": p.like, "where": _where(getattr(p.why, "loc", None)),
                          "op": getattr(p.why, "op", None), "reason": gs.rejection(p)} for p in gs.probes],
        }
    if info.dynamic:
        j = judgement(gs, info)
        doc["dynamic"] = {
            "dims": list(info.dynamic),
            "example": j.example,
            "violations": [{"guard": v.constraint.text, "dim": v.dim, "kind": v.kind, "suggestion": v.suggestion,
                            "fixes": list(v.fixes), "witness": v.witness, "sources": list(v.sources)}
                           for v in j.violations],
            "dynamic_shapes": j.spec.source if j.spec is not None else None,
            "beyond_export": beyond_export(gs, info.dynamic),
        }
        if info.checked is not None:
            doc["dynamic"]["export_check"] = {
                "exports": info.checked.rounds,
                "pins": [{"fix": p.fix, "dims": list(p.dims), "change": p.change, "guards_accept": p.before,
                          "witness": p.witness, "eager": "runs" if p.eager is None else p.eager, "note": str(p)}
                         for p in info.checked.pins],
                "dynamic_shapes": info.checked.spec.source,
            }
    if info.failures:
        doc["failures"] = [{"stage": stage, "error": msg} for stage, msg in info.failures]
    return json.dumps(doc, indent=2)


def text_report(gs: GuardSet, info: ReportInfo) -> str:
    """
    >>> import torch, guardsolve
    >>> t = guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
    >>> gs = guardsolve.simplify(t)
    >>> print(text_report(gs, ReportInfo("demo", "a=[4], b=[4]", t.graph, 0.01, False)).splitlines()[2])
    trace: 3 nodes; 4 bailouts -> 1 minimal guard
    """
    lines = [
        f"target: {info.target}",
        f"inputs: {info.inputs}",
        *([mode_line(info.mode)] if info.mode is not None else []),
        f"trace: {plural(len(info.trace), 'node')}; {plural(len(gs.graph.bailouts()), 'bailout')} -> "
        f"{plural(len(gs), 'minimal guard')}",
        f"minimal (irredundant): {'proved' if gs.minimal else 'not proved (solver undecided)'}; "
        f"equivalence and minimality {'verified by z3' if info.verified else 'not verified (run with --verify)'}; "
        f"simplified in {info.seconds * 1000:.1f} ms (imports excluded)",
        "",
    ]
    if not len(gs):
        lines.append("(no guards: every input of these ranks is accepted)")
    for k, c in enumerate(gs):
        lines += c.lines(full=info.verbose)  # NOTE: --verbose: every route of a long disjunction
        idle = info.idle.get(k)
        quiet = idle.sources if idle is not None else frozenset()
        seen: set[str] = set()
        for i in sorted(c.prov, key=lambda i: (i in quiet, i)):
            origin = gs._origin(i)
            if origin not in seen:
                seen.add(origin)
                lines.append(f"    {origin}" + (f"  ({idle.note(gs.graph.nodes[i].meta['op'])})" if i in quiet else ""))
    lines += path_lines(gs, info.verbose)
    for i in gs.value_guards:
        lines.append(f"not checkable from shapes alone: {gs._data_decision(i)}  at {gs._origin(i)}")
        lines += gs._data_lines(i)
    from guardsolve.jit.segments.outline import outline  # NOTE: the CLI's import stays light

    served = outline(info.trace) if gs.value_guards else []
    if served:
        lines += ["", "compiled (guarded(..., backend=\"inductor\")), it runs as segments cut where it reads data:"]
        lines += [f"    {s}" for s in served]
    for u in gs.undecided:
        lines.append(f"note: {u}")
    if gs.static:
        lines += ["", "checked first (not sizes):"] + [f"    {s}" for s in static_lines(gs)]
    if info.dynamic:
        lines += ["", *_dynamic_lines(gs, info)]
    lines += failure_lines(info)
    return "\n".join(lines)


def failure_lines(info: ReportInfo, prefix: str = "") -> list[str]:
    """The stages after the guards that failed, each with its error."""
    if not info.failures:
        return []
    return ["", f"{prefix}# failed after the guards were computed:"] + [f"{prefix}{stage}: {msg}" for stage, msg in info.failures]


def path_lines(gs: GuardSet, verbose: bool = False) -> list[str]:
    """The other routes tried, as one line (`verbose`: then each route merged into the guards,
    and each size that records another trace, with why)."""
    ex = gs.exploration
    if ex is None:
        return []
    if ex.skipped and not (gs.paths or gs.probes):
        return ["", f"other routes: not explored ({ex.skipped})"]
    hint = " (--verbose lists them)" if not verbose and (gs.paths or gs.probes) else ""
    lines = ["", f"other routes: {ex.summary()}{hint}"]
    if not verbose:
        return lines
    for p in gs.paths:
        asked = gs._answered_otherwise(p.point)
        where = f" — {gs._origin(asked[0])}" if asked else ""
        lines.append(f"    same trace at {p.describe()}: {gs._reading(asked[0]) if asked else 'another route'}"
                     f" answered otherwise{where}")
    for p in gs.probes:
        lines.append(f"    rejected at {p.describe()}: {gs.rejection(p)}")
    return lines


def static_lines(gs: GuardSet) -> list[str]:
    """The static guards (dtype, device, layout, ...), one line per input they speak of.

    >>> import torch, guardsolve
    >>> static_lines(guardsolve.simplify(guardsolve.trace(lambda a: a * 2, torch.ones(3))))
    ["a.dtype == torch.float32 and a.device == torch.device('cpu') and a.layout == torch.strided and not a.requires_grad"]
    """
    by_subject: dict[str, list[str]] = {}
    for g in gs.static:
        by_subject.setdefault(g.subject.split(".")[0].split("(")[0], []).append(g.text)
    return [" and ".join(texts) for texts in by_subject.values()]


def judgement(gs: GuardSet, info: ReportInfo) -> Any:
    """The --dynamic judgement, static dims at the example the trace recorded."""
    from guardsolve.pytorch.dim_questions import example_dims
    from guardsolve.pytorch.dynamic import judge_dynamic

    e = example_dims(info.trace)
    return judge_dynamic(gs, info.dynamic, e if set(gs.dims) <= set(e) else None)


def _dynamic_lines(gs: GuardSet, info: ReportInfo) -> list[str]:
    from guardsolve.pytorch.dim_questions import render_point

    j = judgement(gs, info)
    static = [d for d in gs.dims if d not in j.dynamic]
    where = "chosen by z3" if j.example_from_z3 else "of the example"
    lines = [f"# declared dynamic: {', '.join(info.dynamic)}; static at the values {where}: "
             + (", ".join(f"{d}={j.example[d]}" for d in static) or "none")]
    for v in j.violations:
        lines.append(f"violation: {v}")
        lines += [f"    {s}" for s in v.sources]
        if v.witness is not None:
            lines.append(f"    rejected by this guard: {render_point(gs, {**j.example, **v.witness})}")
    if not j.violations:
        lines.append("no guard constrains them")
    lines += [f"note: {u}" for u in j.undecided]
    lines += [f"note: {b}" for b in beyond_export(gs, info.dynamic)]
    if info.checked is not None:
        c = info.checked
        lines += ["", f"# export check: torch.export accepts the spec {'as printed' if not c.pins else 'with its pins'} "
                  f"({plural(c.rounds, 'export')})"]
        lines += [f"note: {p}" for p in c.pins]
        lines += ["", "# dynamic_shapes for torch.export.export (checked by torch.export)", c.spec.source]
    elif j.spec is not None:
        lines += ["", "# dynamic_shapes for torch.export.export", j.spec.source]
    return lines


def beyond_export(gs: GuardSet, dynamic: Sequence[str]) -> list[str]:
    """Where the trace serves sizes torch.export's spec leaves out: routes merged at a
    declared-dynamic dim of 0 or 1 (torch.export's dynamic sizes are at least 2)."""
    points = [", ".join(f"{d}={p.point[d]}" for d in dynamic if p.point.get(d, 2) < 2) for p in gs.paths]
    points = [f"({p})" if "," in p else p for p in dict.fromkeys(p for p in points if p)]
    if not points:
        return []
    return [f"the trace also serves {'; '.join(points)} (routes merged), which torch.export's spec leaves out: "
            "its dynamic sizes are at least 2"]


def export_checked(gs: GuardSet, info: ReportInfo, trace: Any) -> Any:
    """The --export-check: the --dynamic spec through torch.export, at example inputs of the
    spec's example sizes, made from the traced inputs (their dtypes and values, resized)."""
    from guardsolve.pytorch.export_check import ExportCheckError, check_with_export
    from guardsolve.solve.explore.probes import resized

    if not info.dynamic:
        raise ExportCheckError("--export-check checks the --dynamic spec: give --dynamic DIM")
    if trace is None or trace.fn is None or trace.inputs is None:
        raise ExportCheckError(f"--export-check needs a function target: {info.target} is a saved graph, "
                               "and torch.export needs the program")
    j = judgement(gs, info)
    args = [resized(v, [j.example[d] for d in p.dims]) if p.kind == "tensor" else j.example[p.name]
            for p, v in zip(trace.signature, trace.inputs)]
    return check_with_export(j, trace.fn, args)


def python_report(gs: GuardSet, info: ReportInfo) -> str:
    """The compiled check as a self-contained module: imports and the values its static guards
    compare against, then `check` (or `check_dims`).

    >>> import torch, guardsolve
    >>> t = guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
    >>> src = python_report(guardsolve.simplify(t), ReportInfo("demo", "a=[4], b=[4]", t.graph, 0.0, False))
    >>> space = {}; exec(src, space); space["check"](torch.ones(3), torch.ones(3)), space["check"](torch.ones(3), torch.ones(2))
    (True, False)
    """
    body = gs.source()
    used = _identifiers(body)
    lines = [f"# minimal guards of {info.target}, traced at {info.inputs}",
             "# generated by guardsolve: check(...) is True exactly when the traced graph may be reused", ""]
    imports = ["from torch import Tensor"] if "Tensor" in used else []
    values: list[str] = []
    for name, value in sorted(getattr(gs, "_bound", {}).items()):
        if name in used:
            _define(name, value, imports, values)
    future = ["from __future__ import annotations"] if any(v.lstrip().startswith("def ") for v in values) else []
    out = lines + future + sorted(set(imports), key=lambda i: (not i.startswith("import"), i)) + values + ["", "", body]
    text = "\n".join(out) if imports or values else "\n".join(lines + [body])
    return text + "\n".join(failure_lines(info, "# "))


def _identifiers(source: str) -> set[str]:
    import ast

    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def _define(name: str, value: Any, imports: list[str], values: list[str]) -> None:
    """Python that binds `name` to `value` in the printed module, or `UnprintableValueError`."""
    import types

    import torch

    if isinstance(value, types.ModuleType):
        imports.append(f"import {value.__name__}" + ("" if value.__name__ == name else f" as {name}"))
    elif isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        imports.append("import torch")
        values.append(f"{name} = {value}")
    elif isinstance(value, torch.device):
        imports.append("import torch")
        values.append(f"{name} = torch.device({str(value)!r})")
    elif callable(value) and str(getattr(value, "__module__", "")).startswith("guardsolve."):
        # NOTE: standalone: guardsolve's own helpers (contiguous strides, value keys) are printed inline
        import inspect
        import textwrap

        values.append("\n" + textwrap.dedent(inspect.getsource(value)).rstrip() + "\n")
        if value.__name__ != name:
            values.append(f"{name} = {value.__name__}")
    elif callable(value) and getattr(value, "__module__", None) and "<" not in getattr(value, "__qualname__", "<"):
        qual = value.__qualname__
        imports.append(f"from {value.__module__} import {qual}" + ("" if qual == name else f" as {name}"))
    elif isinstance(value, (bool, int, float, str, type(None))) or _literal(value):
        values.append(f"{name} = {value!r}")
    else:
        raise UnprintableValueError(f"the check compares against {name} = {value!r}, which has no Python "
                                    f"source form; use the library's GuardSet.check instead")


def _literal(value: Any) -> bool:
    import ast

    try:
        return bool(ast.literal_eval(repr(value)) == value)
    except (ValueError, SyntaxError):
        return False


def dot_report(gs: GuardSet) -> str:
    """Graphviz DOT: dims are nodes, equality classes clusters, other relations edges."""
    q = json.dumps
    lines = ["digraph guards {", "  rankdir=LR;", "  node [shape=ellipse, fontname=monospace];",
             "  edge [fontname=monospace];"]
    classes: dict[str, list[str]] = {}
    consts: set[int] = set()
    edges: list[str] = []
    for c in gs:
        if c.kind == "eq" and len(c.dims) == 2:
            classes.setdefault(c.dims[0], [c.dims[0]]).append(c.dims[1])
        elif len(c.dims) == 1 and c.kind != "general":
            value = int(c.text.rsplit(" ", 1)[1])
            consts.add(value)
            op = c.text.split(" ")[1]
            edges.append(f"  {q(c.dims[0])} -> {q(f'c{value}')} [label={q(op)}];")
        elif c.kind in ("order", "ne") and len(c.dims) == 2:
            attrs = "style=dashed, dir=none" if c.kind == "ne" else ""
            edges.append(f"  {q(c.dims[0])} -> {q(c.dims[1])} [label={q(c.text)}{', ' if attrs else ''}{attrs}];")
        else:
            node = f"g{len(edges)}"
            edges.append(f"  {q(node)} [shape=note, label={q(c.text)}];")
            edges += [f"  {q(node)} -> {q(d)} [dir=none, style=dotted];" for d in c.dims]
    for k, (rep, members) in enumerate(classes.items()):
        lines.append(f"  subgraph cluster_{k} {{ label={q(rep + ' class')}; style=rounded; "
                     + " ".join(q(m) + ";" for m in dict.fromkeys(members)) + " }")
    lines += [f"  {q(d)};" for d in gs.dims]
    lines += [f"  {q(f'c{v}')} [shape=box, label={q(str(v))}];" for v in sorted(consts)]
    lines += edges
    lines.append("}")
    return "\n".join(lines)


def trace_summary(t: Any, gs: GuardSet) -> str:
    """What every example prints: trace size, raw bailouts, minimal guards, their explanation."""
    nodes = len(t.graph)
    tensor_ops = sum(1 for n in t.graph if n.op is Op.ATEN)
    lines = [
        f"trace: {plural(nodes, 'node')} ({plural(tensor_ops, 'PyTorch op')}, {plural(len(t.constants), 'constant')})",
        f"bailouts: {len(t.guard_graph().bailouts())} raw -> {plural(len(gs), 'minimal guard')}",
        "",
        "# minimal guards",
        str(gs) if len(gs) else "(none: any input of these ranks is accepted)",
        "",
        "# where each guard came from",
        gs.explain(),
    ]
    return "\n".join(lines)
