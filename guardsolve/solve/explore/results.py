"""What exploring finds: a `Path` (another route that records the same trace), a rejected `Probe`,
and the `Exploration` that holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from guardsolve.ir.graph import Graph


@dataclass(frozen=True)
class Path:
    """Another route through PyTorch's rules that records the same trace.

    `point`: the input dims it was found at; `changed`: the dims set away from the example;
    `graph`: its guard graph (the route's path condition); `guards`: that condition, minimal;
    `replayed`: found by `trace.local` (the calls whose decisions change run again) rather than
    by tracing the function again.
    """

    point: Mapping[str, int]
    changed: tuple[str, ...]
    graph: Graph
    guards: Any  # GuardSet
    replayed: bool = False  # found by replaying the calls whose decisions change, not a new trace
    # NOTE: decisions on tensor data (value bailouts, `SourceLoc`s) that the data drawn at `point`
    # answers otherwise: the probe took the example's answer (sizes must not depend on the data)
    value_flips: tuple[Any, ...] = ()

    def describe(self) -> str:
        return ", ".join(f"{d}={self.point[d]}" for d in self.changed)

    def how(self) -> str:
        return "replayed call by call" if self.replayed else "traced again"


@dataclass(frozen=True)
class Probe:
    """A point traced again that does not record the same trace, and why."""

    point: Mapping[str, int]
    changed: tuple[str, ...]
    why: Any  # a `trace.why.Why` (its user line and op, where known), or a plain reason
    like: str | None = None  # not traced: it makes the decisions the probe at `like` made
    replayed: bool = False  # decided by replaying the calls whose decisions change, not a new trace

    def because(self) -> str:
        """Why it is rejected, as the rest of "a fresh trace at these sizes ...": where it stops
        or records another node, by the user's line and op (`GuardSet.rejection` adds the
        decision answered otherwise, with the sizes on both sides)."""
        if self.like is None:
            return str(self.why)
        # NOTE: not `why` whole: its message quotes the sizes of the point at `like`, not this one's
        loc, op = getattr(self.why, "loc", None), getattr(self.why, "op", None)
        if loc is None or op is None:
            return f"makes the decisions the trace at {self.like} made before it was rejected (known without tracing again)"
        what = "stops" if str(self.why).startswith("stops") else "records another trace"
        return (f"{what} at {loc}: {op}, as the trace at {self.like} does (the same decisions up to there; known "
                f"without tracing again)")

    def describe(self) -> str:
        return ", ".join(f"{d}={self.point[d]}" for d in self.changed)


@dataclass
class Exploration:
    """What `explore` found: the merged paths, the rejected probes, how many traces it ran."""

    paths: list[Path] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    traces: int = 0  # points traced again (a fresh trace of the function)
    replayed: int = 0  # points probed by replaying only the calls whose decisions change (`trace.local`)
    # NOTE: of those, the ones a rule rejects on plain meta tensors (a fraction of a trace): outside
    # the probe budget, as a known region's points are
    stopped: int = 0
    seconds: float = 0.0  # NOTE: reported only: no decision reads the clock (`run_budget`)
    skipped: str | None = None  # why nothing was explored
    left: int = 0  # points queued that the run budget left unexplored
    out_of_runs: int = 0  # the run budget that ran out (probes run), or 0

    def summary(self) -> str:
        """One line: how many points were tried, merged and rejected, and how each was decided.

        >>> Exploration(paths=[], probes=[], traces=1, replayed=2, seconds=0.004).summary()
        "tried 0 points (sizes 0 and 1, each decision's other side) in 4.0 ms: 0 merged, 0 rejected"
        >>> Exploration(traces=0, replayed=7, left=65, out_of_runs=4).summary().split("; ")[-1]
        'the run budget (4 runs) left 65 queued points unexplored'
        """
        tried = len(self.paths) + len(self.probes)
        ran = self.traces + self.replayed
        how = [f"{self.replayed} replayed call by call", f"{self.traces} traced again"] if tried else []
        if tried > ran:
            how.append(f"{tried - ran} known without a run")
        return (f"tried {tried} point{'' if tried == 1 else 's'} (sizes 0 and 1, each decision's other side) in "
                f"{self.seconds * 1000:.1f} ms: "
                f"{len(self.paths)} merged, {len(self.probes)} rejected" + (f"; {', '.join(how)}" if how else "")
                + (f"; {self.skipped}" if self.skipped else "")
                + (f"; the run budget ({self.out_of_runs} run{'' if self.out_of_runs == 1 else 's'}) left "
                   f"{self.left} queued point{'' if self.left == 1 else 's'} unexplored" if self.left else ""))
