"""A trace that decides on tensor data, served as compiled segments split where the data decides.

The modules: `plan` (where a trace is cut, `Plan`), `lines` (the code a segment is made of),
`segment` (`Segment`, and `Segmented`, the chain a call runs), `build` (compiling a plan's
segments), `diverged` (a run whose data took another path), `outline` (a trace's outline),
`writes` (what a trace writes before it reads data).
"""

from __future__ import annotations

from guardsolve.jit.segments.build import build
from guardsolve.jit.segments.diverged import SegmentDiverged
from guardsolve.jit.segments.outline import outline
from guardsolve.jit.segments.plan import Plan, cut_at, has_data
from guardsolve.jit.segments.segment import Segment, Segmented
from guardsolve.jit.segments.writes import draws_random, pure, state_writes, writes_unmade

__all__ = ["Plan", "Segment", "SegmentDiverged", "Segmented", "build", "cut_at", "draws_random", "has_data",
           "outline", "pure", "state_writes", "writes_unmade"]
