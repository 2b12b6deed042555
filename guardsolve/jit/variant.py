"""A compiled variant as it is called: its check, what the backend assumed, and its runner.

Nothing here imports Inductor's compiler, sympy or the tracer: a process that only loads saved
entries (`jit/store.py`) builds its variants from this module, and `jit/inductor/` (the
compiler side) builds them from it too.

>>> from guardsolve.trace.record import OutRef
>>> r = runner(lambda a, c: [a * c], ["a"], [torch.full((1,), 3.0)], ["v0"], (OutRef("v0"), 1))
>>> r(torch.ones(1))
(tensor([3.]), 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from guardsolve.jit.counter import Counter
from guardsolve.solve.certify import Certificate
from guardsolve.solve.guardset import GuardSet


@dataclass(frozen=True)
class BackendGuard:
    """One assumption of the backend: its text over the inputs' names and what made it."""

    text: str
    why: str
    kind: str  # "size" (a guard over sizes, simplified with the trace's) | "layout" (strides, offset)

    def __str__(self) -> str:
        return f"{self.text}  ({self.why})"


@dataclass(eq=False)
class Variant:
    """One compiled artifact of a trace and its check (trace guards and backend guards, minimal
    and proven). `run` takes the trace's inputs and returns the traced function's output."""

    guards: GuardSet
    run: Callable[..., Any]
    backend: tuple[BackendGuard, ...]
    compile_s: float
    certificate: Certificate | None
    artifact: bytes | None = field(default=None, repr=False)  # the saved artifact, for the store
    exact_example: bool = False  # a guard could not be translated: the variant serves its example's sizes only
    loaded: bool = False
    plain: bool = False  # no mutation, no output aliasing an input: Inductor's call is run directly
    # NOTE: a forward and a backward (AOTAutograd's), for calls in grad mode: its constants are the
    # live tensors, not detached copies, so gradients reach the parameters
    train: bool = False
    extra: tuple[str, ...] = ()  # expressions over the inputs passed after the constants (their sizes)
    # NOTE: for the store, Inductor's generated code and built kernels (`jit/kernels.py`), which a
    # later process runs without importing Inductor; or why it cannot (it then loads `artifact`
    # through Inductor); None where nothing is saved
    direct: dict[str, Any] | str | None = field(default=None, repr=False)
    # NOTE: a trace that reads tensor data runs as segments (`jit/segments.Segmented`); `run` is
    # their glue, and `compiles` counts the segments compiled
    segments: Any = field(default=None, repr=False)
    compiles: int = 1
    _hits: Counter = field(default_factory=Counter, repr=False)
    # NOTE: the compiled check, bound once: every call of the guarded function reads it
    check: Callable[..., bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        c = self.guards.entry_check
        assert c is not None
        self.check = c

    @property
    def hits(self) -> int:
        return self._hits.value

    def count_hit(self) -> None:
        """One more call served by this one (a thread-safe counter)."""
        self._hits.inc()

    def explain(self) -> str:
        """Both parts of the check with their sources: the trace's lines, and what Inductor assumed."""
        out = [self.guards.explain()]
        if self.backend:
            out.append("assumed by the backend (read back from its ShapeEnv, simplified with the trace's guards):")
            out += [f"    {g}" for g in self.backend]
        if self.segments is not None:
            out.append(self.segments.explain())
        if self.exact_example:
            out.append("a backend guard could not be translated: this variant serves its example's sizes only")
        return "\n".join(out)


def runner(artifact: Callable[..., Any], inputs: Sequence[str], consts: Sequence[torch.Tensor],
           outs: Sequence[str], out_spec: Any, boxed: bool = False, extra: Sequence[str] = ()) -> Callable[..., Any]:
    """`run(*inputs)`: the artifact over the inputs, the constants and the `extra` expressions
    over the inputs (a training graph's sizes), its flat outputs rebuilt into the traced
    function's output structure. `boxed`: the artifact takes one list (Inductor's own calling
    convention, `direct_call`).

    >>> from guardsolve.trace.record import OutRef
    >>> r = runner(lambda a, c: [a + c], ["a"], [torch.ones(1)], ["v0"], {"y": OutRef("v0")})
    >>> r(torch.ones(1))
    {'y': tensor([2.])}
    """
    from guardsolve.trace.replay import spec_source

    ns: dict[str, Any] = {"_art": artifact}
    cnames = []
    for i, c in enumerate(consts):
        ns[f"_c{i}"] = c
        cnames.append(f"_c{i}")
    result = spec_source(out_spec, ns)
    got = "".join(f"{o}, " for o in outs)
    args = ", ".join([*inputs, *cnames, *extra])
    call = f"_art([{args}])" if boxed else f"_art({args})"
    lines = [f"def run({', '.join(inputs)}):",
             f"    {got} = {call}" if outs else f"    {call}",
             f"    return {result}"]
    src = "\n".join(lines)
    exec(compile(src, "<guardsolve inductor run>", "exec"), ns)
    fn = ns["run"]
    fn.__source__ = src
    return fn


__all__ = ["BackendGuard", "Variant", "runner"]
