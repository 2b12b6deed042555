"""`guardsolve report --via torch.compile`: Dynamo's guards on one call, in the three formats.

text: `CompileReport`'s own print (Dynamo's count -> the minimal count, each guard with its
sources); json: `CompileReport.as_dict()` (`guards[].sources[]` as in guardsolve's own report,
plus `dynamo_guards`, `frames` and the counts); python: a standalone `check_dims` per frame,
each guard commented with its sources.
"""

from __future__ import annotations

import argparse
from typing import Any

from guardsolve.cli.targets import TargetError, describe_args, load_args


def _marks(names: list[str], args: list[Any], dims: list[str]) -> None:
    """`--dynamic x0` as `torch._dynamo.mark_dynamic(x, 0)` on the example argument."""
    import torch

    from guardsolve.ir.signature import dim_names

    sig = dim_names([(n, "tensor", a.dim()) for n, a in zip(names, args) if isinstance(a, torch.Tensor)])
    where = {d: (p.name, i) for p in sig for i, d in enumerate(p.dims)}
    for d in dims:
        if d not in where:
            raise TargetError(f"--dynamic {d}: no such dim (dims: {', '.join(where) or 'none'})")
        name, i = where[d]
        torch._dynamo.mark_dynamic(args[names.index(name)], i)


def compile_report(args: argparse.Namespace) -> str:
    from guardsolve.pytorch.explain.compile import explain_compile

    fn, names, values = load_args(args.target, args.shape, args.int, args.dtype, args.values, args.train)
    _marks(names, values, args.dynamic)
    import torch

    with torch.set_grad_enabled(bool(args.grad)):  # NOTE: no_grad unless --grad: as a model is served
        report = explain_compile(fn, *values, dynamic=None if args.dynamic else True, timeout_ms=args.timeout_ms)
    if args.verify:
        for f in report.frames:
            f.guards.verify(timeout_ms=args.timeout_ms)
    report.target = f"{args.target} at {describe_args(names, values)}"
    if args.format == "json":
        return report.json()
    if args.format == "python":
        return python_module(report)
    return report.text(args.verbose) + ("\nequivalence and minimality verified by z3" if args.verify else "")


def python_module(report: Any) -> str:
    """Each frame's minimal size guards as a standalone `check_dims_<frame>` (plain Python)."""
    lines = [f"# Dynamo's guards of {report.target}, minimal (guardsolve)",
             "# check_dims_<frame>(dims...) is True exactly when Dynamo's size guards of that frame hold", ""]
    if report.ran_eagerly:
        lines.append(f"# no frame: Dynamo runs every call eagerly ({report.eager}); to compile it: {report.setting}")
    for k, f in enumerate(report.frames):
        gs = f.guards
        lines.append(f"# frame {f.compile_id} {f.name} ({f.file}:{f.line}): {len(f.dynamo_guards)} Dynamo shape "
                     f"guards -> {len(gs)} minimal size guards; dims: "
                     + ", ".join(f"{d} = {s}" for s, d in f.names.items()))
        for c in gs:
            srcs = {str(s) for i in c.prov for s in f.sources_of(i)}
            lines.append(f"#   {c.text}  <- {'; '.join(sorted(srcs))}")
        body = gs._dims_src.replace("def check_dims(", f"def check_dims_{_ident(f.name)}{'' if k == 0 else f'_{k}'}(", 1)
        lines += [body, "", ""]
    return "\n".join(lines).rstrip() + "\n"


def _ident(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
