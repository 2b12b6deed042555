"""What a judgement of declared-dynamic dims holds: its violations, each dim's member of a class,
the spec, and torch.export's conventions (sizes 0 and 1 specialized, dynamic sizes >= 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from guardsolve.solve.constraint import Constraint, DimOrder


MIN_DYNAMIC = 2  # torch.export specializes sizes 0 and 1 and assumes every dynamic size is >= 2


TIMEOUT_MS = 2000


FAR = 2 ** 40  # NOTE: a value this large that the guards accept counts as "no upper bound"


@dataclass(frozen=True)
class Violation:
    """A minimal guard (static dims substituted) that constrains declared-dynamic dims."""

    constraint: Constraint  # over declared dims; `prov` are the original guard nodes
    dim: str  # the dim the fix is about
    kind: str  # static | equal | derived | bound | divisible | excluded | general
    suggestion: str
    fixes: tuple[str, ...] = ()  # torch.export's words: `x1 = 3`, `x2 = 2*_x2`, `_x2 = Dim(...)`
    witness: dict[str, int] | None = None  # declared dims of an input rejected without the fix
    sources: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.constraint.text}: [{self.kind}] {self.suggestion}"


@dataclass(frozen=True)
class Member:
    """A declared dim as torch.export sees it: `coef * root + offset`, or static (root None)."""

    root: str | None
    coef: int
    offset: int

    def render(self) -> str:
        if self.root is None:
            return str(self.offset)
        text = self.root if self.coef == 1 else f"{self.coef}*{self.root}"
        return text if self.offset == 0 else f"{text} + {self.offset}"


@dataclass
class ExportSpec:
    """A `dynamic_shapes` spec as source code, as live `torch.export.Dim` objects, and as data."""

    source: str
    spec: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, Member] = field(default_factory=dict)  # every declared dim
    roots: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # Dim name -> (min, max)


@dataclass
class Judgement:
    """What torch.export makes of the declared dims, given the example values of the static ones."""

    dynamic: tuple[str, ...]
    example: dict[str, int]
    example_from_z3: bool
    violations: list[Violation]
    spec: ExportSpec | None
    undecided: list[str] = field(default_factory=list)
    guards: Any = field(default=None, repr=False, compare=False)  # the GuardSet judged


@dataclass
class DimClass:
    """Declared dims tied by affine equalities: member = coef * root + offset."""

    root: str
    members: dict[str, tuple[int, int]]
    stride: int = 1  # the root is `stride * t + residue` on every accepted input
    residue: int = 0
    lo: int = MIN_DYNAMIC  # range of the root
    hi: int | None = None


def dim_order(gs: Any) -> DimOrder:
    """Dims in the order of the traced signature (then any others)."""
    first = [d for p in gs.signature or () for d in p.dims]
    return DimOrder(first + [d for d in gs.dims if d not in first])
