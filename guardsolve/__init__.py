"""guardsolve: small, exact, fast guards for traced PyTorch programs."""

from __future__ import annotations

from guardsolve.concrete import run_concrete, run_trace
from guardsolve.errors import (
    GraphError, GuardFailure, GuardsolveError, ParseError, SolverError, TraceError,
    UnsatisfiableGuardsError, UnsupportedOpError, VerificationError,
)
from guardsolve.guards import guard_graph
from guardsolve.ir import Graph, Node, SourceLoc
from guardsolve.ops import Op, Type
from guardsolve.printer import print_guards
from guardsolve.tensor import DataDependentError
from guardsolve.tracer import Trace, trace

__all__ = [
    "DataDependentError", "Graph", "GraphError", "GuardFailure", "GuardsolveError", "Node", "Op", "ParseError",
    "SolverError", "SourceLoc", "Trace", "TraceError", "Type", "UnsatisfiableGuardsError",
    "UnsupportedOpError", "VerificationError", "guard_graph", "print_guards", "run_concrete",
    "run_trace", "trace",
]

from guardsolve.guardset import Certificate, GuardSet  # noqa: E402
from guardsolve.simplify import simplify  # noqa: E402
from guardsolve.cache import CacheInfo, GuardedFunction, guarded  # noqa: E402

__all__ += ["CacheInfo", "Certificate", "GuardSet", "GuardedFunction", "guarded", "simplify"]
