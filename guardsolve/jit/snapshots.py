"""Undoing a trace's writes: the state a call may change, taken before and restored after (`Snapshot`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
import torch
from guardsolve.trace.state import reachable_generators, reachable_tensors


@dataclass
class Snapshot:
    """What a trace may write, copied before it runs: the tensors fn reaches that do not
    require grad (buffers), the tensor arguments that do not, and the CPU random generator's
    state. `restore()` puts them back."""

    tensors: list[tuple[torch.Tensor, torch.Tensor]]
    rng: torch.Tensor
    # NOTE: the program's own generators (an argument, a global, a closure cell) and their
    # states: a failed trace's draw from one is undone as the default generator's is
    generators: list[tuple[torch.Generator, torch.Tensor]] = field(default_factory=list)

    @staticmethod
    def take(fn: Any, values: tuple[Any, ...]) -> "Snapshot":
        seen: set[int] = set()
        kept = []
        for t in [*reachable_tensors(fn), *(v for v in values if isinstance(v, torch.Tensor))]:
            if id(t) not in seen and not t.requires_grad:
                seen.add(id(t))
                kept.append((t, t.detach().clone()))
        gens = {id(g): g for g in [*reachable_generators(fn), *(v for v in values if isinstance(v, torch.Generator))]}
        return Snapshot(kept, torch.random.get_rng_state(), [(g, g.get_state()) for g in gens.values()])

    def restore(self, rng: bool = True) -> None:
        """Put the tensors back (and, with `rng`, the random generator's state: not from a
        background thread, whose callers draw from it meanwhile)."""
        with torch.no_grad():
            for t, saved in self.tensors:
                if t.shape == saved.shape and not torch.equal(t, saved):
                    t.copy_(saved)
        if rng:
            torch.random.set_rng_state(self.rng)
            for g, state in self.generators:
                g.set_state(state)


class StateWritten(Exception):
    """The traced call changed state it read: its output, and what changed. `repeat`: a reason
    that, twice in a row, makes the function run eagerly from then on."""

    def __init__(self, output: Any, why: str, repeat: bool = True) -> None:
        super().__init__(why)
        self.output, self.why, self.repeat = output, why, repeat
