"""`simplify(graph)`: the minimal, provably equivalent guard set of a trace or guard graph."""

from guardsolve.solve.simplifier import (  # noqa: F401
    DEFAULT_TIMEOUT_MS, PARALLEL_MIN_BAILOUTS, Simplifier, classify, complexity, merge_paths, parts, readable_guards,
    simplify)
