"""The Inductor backend: a trace compiled by Inductor behind one proven check.

The modules, in the order a compile takes them: `driver` (`compile_variant`: the trace
replayed under make_fx, compiled, checked and simplified into a `Variant`), `internals` (the
PyTorch internals it reads), `backend_guards` (what Inductor assumed, read back and named),
`standalone` (calling Inductor), `artifacts` (what a compiled artifact holds), `crosscheck`
and `points` (the artifact against eager, at its example and at far points), `failure`.
"""

from __future__ import annotations

from guardsolve.jit.inductor.artifacts import direct_call, keep_saved_tensors, load_artifact
from guardsolve.jit.inductor.driver import compile_variant, flat_program
from guardsolve.jit.inductor.failure import CompileFailure
from guardsolve.jit.inductor.points import sizes_accepted
from guardsolve.jit.variant import BackendGuard, Variant, runner

__all__ = ["BackendGuard", "CompileFailure", "Variant", "compile_variant", "direct_call", "flat_program",
           "keep_saved_tensors", "load_artifact", "runner", "sizes_accepted"]
