"""A trace Inductor cannot serve (`CompileFailure`), and one compile route's failure at a named stage."""

from __future__ import annotations

from guardsolve.errors import GuardsolveError


class CompileFailure(GuardsolveError):
    """A trace Inductor cannot serve (a size returned as output, an op it rejects, a failed
    compile); the call runs eagerly and the reason is counted."""


class RouteFailed(Exception):
    """One route of `compile_variant` that failed, at `stage` ("make_fx" or "inductor")."""

    def __init__(self, stage: str, text: str) -> None:
        super().__init__(text)
        self.stage = stage
