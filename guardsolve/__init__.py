"""guardsolve: small, exact, fast guards for traced PyTorch programs."""

from __future__ import annotations

from guardsolve.errors import (
    DataDependentError, GraphError, GuardFailure, GuardsolveError, ParseError, SolverError, TraceError,
    UnsatisfiableGuardsError, UnsupportedOpError, VerificationError,
)
from guardsolve.ir.concrete import run_concrete
from guardsolve.guards.shape import guard_graph
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node, SourceLoc
from guardsolve.ir.ops import Op, Type
from guardsolve.ir.printer import print_guards
from guardsolve.trace.replay import run_trace
from guardsolve.trace.tracer import Trace, trace

__all__ = [
    "DataDependentError", "Graph", "GraphError", "GuardFailure", "GuardsolveError", "Node", "Op", "ParseError",
    "SolverError", "SourceLoc", "Trace", "TraceError", "Type", "UnsatisfiableGuardsError",
    "UnsupportedOpError", "VerificationError", "guard_graph", "print_guards", "run_concrete",
    "run_trace", "trace",
]

from guardsolve.solve.guardset import Certificate, GuardSet  # noqa: E402
from guardsolve.solve.simplify import simplify  # noqa: E402
from guardsolve.cache import CacheInfo, GuardedFunction, guarded  # noqa: E402

__all__ += ["CacheInfo", "Certificate", "GuardSet", "GuardedFunction", "guarded", "simplify"]
