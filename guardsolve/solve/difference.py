"""The difference graph's parts: the zero node, edges `u - v <= w`, disequalities and a layer's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


Z = ""  # the zero node


INF = float("inf")


@dataclass
class Edge:
    u: str
    v: str
    w: int
    prov: set = field(default_factory=set)  # atom ids it stands for
    background: bool = False  # `x >= 0` for a size: never printed


@dataclass(frozen=True)
class Diseq:
    u: str
    v: str
    k: int  # v - u != k
    prov: frozenset


@dataclass
class OrderResult:
    edges: list[Edge]
    diseqs: list[Diseq]
    equalities: list[tuple[str, str, int, set]]  # v == u + k, with provenance
    implied: set  # atom ids implied by what is kept
    positive: Callable[[str], bool] = lambda x: False  # is `x >= 1` implied?
    lower: dict[str, float] = field(default_factory=dict)  # x >= lower[x], implied by what is kept
    upper: dict[str, float] = field(default_factory=dict)  # x <= upper[x]
