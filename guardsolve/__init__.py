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
    "Trace": "guardsolve.trace.record", "trace": "guardsolve.trace.tracer",
    "Certificate": "guardsolve.solve.certify", "GuardSet": "guardsolve.solve.guardset",
    "simplify": "guardsolve.solve.simplify",
    "CacheInfo": "guardsolve.jit.entry", "GuardedFunction": "guardsolve.jit.cache", "guarded": "guardsolve.jit.cache",
    "Example": "guardsolve.jit.warmup", "Served": "guardsolve.jit.served", "Entry": "guardsolve.jit.entry",
    "Variant": "guardsolve.jit.variant", "CompileFailure": "guardsolve.jit.inductor.failure",
    "CompileReport": "guardsolve.pytorch.explain.report", "explain_compile": "guardsolve.pytorch.explain.compile",
    "CompileExplainError": "guardsolve.pytorch.explain.failure",
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
    from guardsolve.jit.entry import CacheInfo, Entry
    from guardsolve.jit.warmup import Example
    from guardsolve.jit.cache import GuardedFunction, guarded
    from guardsolve.jit.served import Served
    from guardsolve.jit.inductor.failure import CompileFailure
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
    from guardsolve.pytorch.explain.failure import CompileExplainError
    from guardsolve.pytorch.explain.report import CompileReport
    from guardsolve.pytorch.explain.compile import explain_compile
    from guardsolve.pytorch.dynamic import export_spec, judge_dynamic, violations
    from guardsolve.pytorch.recompiles import RecompileLog, watch_recompiles
    from guardsolve.solve.certify import Certificate
    from guardsolve.solve.guardset import GuardSet
    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.replay import run_trace
    from guardsolve.trace.record import Trace
    from guardsolve.trace.tracer import trace
