"""`Trace`: what one run of a function on traced tensors recorded (its graph, output structure,
constants and static guards), and `OutRef`, a traced value's name in its output structure.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable
import torch
from guardsolve.errors import TraceError
from guardsolve.ir.graph import Graph
from guardsolve.ir.signature import Param
from guardsolve.trace.static import StaticGuard


@dataclass
class Trace:
    """A recorded trace: the tensor-trace `graph`, the guard graph recorded alongside it, and the
    concrete `output` of the run.

    `constants` are the tensors the trace uses that are not inputs (module parameters,
    captured tensors), by their `var_param` name; `out_spec` is the output structure with
    `OutRef(name)` in place of each traced value; `static` what the trace assumed besides sizes
    (each tensor input's dtype, device, layout, requires_grad, its strides where the trace
    observed them), checked before the size guards.
    """

    graph: Graph
    output: Any
    signature: tuple[Param, ...]
    fn: Callable[..., Any] | None = None
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    out_spec: Any = None
    guards: Graph | None = None
    static: tuple[StaticGuard, ...] = ()
    notes: tuple[str, ...] = ()
    opaque: bool = False  # the output holds traced values inside objects a replay cannot rebuild
    # NOTE: the example inputs themselves, so that `simplify` can trace again at other sizes
    # (`solve.explore`); `guarded` drops them once its entry is made
    inputs: tuple[Any, ...] | None = field(default=None, repr=False)
    value_guards: bool = False
    # NOTE: the calls and guard graph as recorded, for probes that replay single calls
    # (`trace.local`); dropped with `inputs`
    recorded: Any = field(default=None, repr=False)
    seconds: float = 0.0  # NOTE: how long `trace` took (exploring other routes is budgeted against it)
    # NOTE: why a replay cannot give eager's values (a random op after a reseed inside the
    # function); `guarded` serves such a call from the trace's own run and keeps no entry
    unreplayable: str | None = None
    # NOTE: an op that ran in the other grad mode than the call's (`torch.no_grad()` inside), in
    # words: a training variant, one joint graph, would differentiate through it
    grad_switch: str | None = None
    # NOTE: an eager output was copied into its shape rule's strides while tracing: the trace's
    # own outputs hold eager's values, maybe not its layout (`guarded` replays such a call)
    relaid: bool = False

    def __repr__(self) -> str:
        """Short: what was traced and at which shapes, not the output tensor.

        >>> import torch
        >>> from guardsolve.trace.tracer import trace
        >>> trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
        <Trace of <lambda> at a=[4], b=[4]: 3 nodes, 4 bailouts>
        """
        name = getattr(self.fn, "__name__", None) or type(self.fn).__name__ if self.fn is not None else "a graph"
        shapes = ", ".join(f"{p.name}={list(v.shape)}" if isinstance(v, torch.Tensor) else f"{p.name}={v}"
                           for p, v in zip(self.signature, self.inputs or ())) if self.inputs else \
            ", ".join(f"{p.name}" for p in self.signature)
        bailouts = len(self.guards.bailouts()) if self.guards is not None else 0
        return f"<Trace of {name} at {shapes}: {len(self.graph)} nodes, {bailouts} bailouts>"

    def guard_graph(self) -> Graph:
        """The guard graph: the one recorded while tracing (equal to `guard_graph(self.graph)`)."""
        if self.guards is not None:
            return self.guards
        from guardsolve.guards.shape import guard_graph

        return guard_graph(self.graph)


def parameter_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names of fn's first `n` positional parameters (`*args` become `args_0`, ...; a
    builtin without a signature, `torch.cov`, takes `*args`).

    >>> parameter_names(torch.cov, 1), parameter_names(lambda x, *ys: x, 3)
    (['args_0'], ['x', 'ys_0', 'ys_1'])
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # NOTE: no signature to read: whatever it takes, by position
        return [f"args_{i}" for i in range(n)]
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names.extend(f"{p.name}_{i}" for i in range(n - len(names)))
    if len(names) < n:
        raise TraceError(f"{getattr(fn, '__name__', fn)} takes {len(names)} positional arguments, "
                         f"but {n} example inputs were given")
    return names[:n]


@dataclass(frozen=True)
class OutRef:
    """A traced value's name inside `Trace.out_spec`."""

    name: str
