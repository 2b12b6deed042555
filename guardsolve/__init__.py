"""guardsolve: small, exact, fast guards for traced PyTorch programs.

The public names load on first use (PEP 562), so `import guardsolve` and the command line's
`--help` do not pay for importing torch and z3.

>>> import guardsolve
>>> issubclass(guardsolve.UnsatisfiableGuardsError, guardsolve.GuardsolveError)
True
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

# NOTE: name -> defining module; `__getattr__` imports the module on first access.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys([
        "DataDependentError", "GraphError", "GuardFailure", "GuardsolveError", "ParseError", "SolverError",
        "TraceError", "UnsatisfiableGuardsError", "UnsupportedOpError", "VerificationError", "EagerError",
    ], "guardsolve.errors"),
    "run_concrete": "guardsolve.ir.concrete",
    "guard_graph": "guardsolve.guards.shape",
    "Graph": "guardsolve.ir.graph",
    "Node": "guardsolve.ir.node", "SourceLoc": "guardsolve.ir.node",
    "Op": "guardsolve.ir.ops", "Type": "guardsolve.ir.ops",
    "print_guards": "guardsolve.ir.printer",
    "run_trace": "guardsolve.trace.replay",
    "Trace": "guardsolve.trace.tracer", "trace": "guardsolve.trace.tracer",
    "Certificate": "guardsolve.solve.guardset", "GuardSet": "guardsolve.solve.guardset",
    "simplify": "guardsolve.solve.simplify",
    "CacheInfo": "guardsolve.jit.cache", "GuardedFunction": "guardsolve.jit.cache", "guarded": "guardsolve.jit.cache",
    "Example": "guardsolve.jit.cache", "Served": "guardsolve.jit.cache", "Entry": "guardsolve.jit.cache",
    "Variant": "guardsolve.jit.variant", "CompileFailure": "guardsolve.jit.inductor",
    "CompileReport": "guardsolve.pytorch.compile", "explain_compile": "guardsolve.pytorch.compile",
    "CompileExplainError": "guardsolve.pytorch.compile",
    "RecompileLog": "guardsolve.pytorch.recompiles", "watch_recompiles": "guardsolve.pytorch.recompiles",
    "export_spec": "guardsolve.pytorch.dynamic", "judge_dynamic": "guardsolve.pytorch.dynamic",
    "violations": "guardsolve.pytorch.dynamic",
    "trace_summary": "guardsolve.cli.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'guardsolve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # NOTE: cache it, so the next access is a plain module lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package module: importing the subpackage `guardsolve.trace` must not shadow `trace()`."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "trace" and isinstance(value, types.ModuleType):
            return  # NOTE: the import system binds subpackages on their parent; `trace` is the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:
    from guardsolve.cli.report import trace_summary
    from guardsolve.jit.cache import CacheInfo, Entry, Example, GuardedFunction, Served, guarded
    from guardsolve.jit.inductor import CompileFailure
    from guardsolve.jit.variant import Variant
    from guardsolve.errors import (
        DataDependentError, EagerError, GraphError, GuardFailure, GuardsolveError, ParseError, SolverError, TraceError,
        UnsatisfiableGuardsError, UnsupportedOpError, VerificationError,
    )
    from guardsolve.guards.shape import guard_graph
    from guardsolve.ir.concrete import run_concrete
    from guardsolve.ir.graph import Graph
    from guardsolve.ir.node import Node, SourceLoc
    from guardsolve.ir.ops import Op, Type
    from guardsolve.ir.printer import print_guards
    from guardsolve.pytorch.compile import CompileExplainError, CompileReport, explain_compile
    from guardsolve.pytorch.dynamic import export_spec, judge_dynamic, violations
    from guardsolve.pytorch.recompiles import RecompileLog, watch_recompiles
    from guardsolve.solve.guardset import Certificate, GuardSet
    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.replay import run_trace
    from guardsolve.trace.tracer import Trace, trace
