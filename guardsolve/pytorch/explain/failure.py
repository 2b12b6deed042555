"""`CompileExplainError`: torch.compile could not be explained (its compile failed, or its guards moved)."""

from __future__ import annotations

from guardsolve.errors import GuardsolveError


class CompileExplainError(GuardsolveError):
    """torch.compile failed on the call, or compiled nothing to explain."""
