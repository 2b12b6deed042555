"""A segmented run whose data took another path than its trace (`SegmentDiverged`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardsolve.errors import GuardFailure
from guardsolve.ir.node import Node

if TYPE_CHECKING:
    from guardsolve.jit.segments.plan import Plan


class SegmentDiverged(GuardFailure):
    """A value bailout of a segmented run failed: the data took another path. `env` holds what
    the run computed so far, `at` the bailout's node, `key` what the prefix computed
    (`Plan.prefix_key`): a trace of that other path with the same prefix resumes from `env`."""

    def __init__(self, node: Node, at: int, key: int, env: dict[str, Any]) -> None:
        # NOTE: raised on the serving path (a call whose data takes another path): the message
        # is built only when read
        Exception.__init__(self)
        self.expected, self.node, self.loc, self.values = node.params["expect"], node, node.meta.get("loc"), {}
        self.at, self.key, self.env = at, key, env

    def __str__(self) -> str:
        return self._message()


def raise_diverged(node: Node, at: int, plan: "Plan", env: dict[str, Any]) -> None:
    raise SegmentDiverged(node, at, plan.prefix_key(at), env)
