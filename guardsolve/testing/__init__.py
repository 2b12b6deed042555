"""Helpers for guardsolve's tests and benchmarks: random guard graphs (`graphs`), the exactness
oracle for traced programs (`exactness`), random programs and eager's outcomes (`programs`),
stateful programs and changes to their state (`stateful`), training beside eager (`training`)."""

from __future__ import annotations

from guardsolve.testing.exactness import boundary_variants, exactness_failures, perturbed_inputs, size_variants
from guardsolve.testing.graphs import accepts, examples, pieces_guard_graph, random_guard_graph
from guardsolve.testing.programs import outcome, random_program, same_outcome
from guardsolve.testing.stateful import SHARED, random_state_change, random_stateful_program, residual_block
from guardsolve.testing.training import train_side_by_side

__all__ = ["SHARED", "accepts", "boundary_variants", "examples", "exactness_failures", "outcome", "perturbed_inputs",
           "pieces_guard_graph", "random_guard_graph", "random_program", "random_state_change",
           "random_stateful_program", "residual_block", "same_outcome", "size_variants", "train_side_by_side"]
