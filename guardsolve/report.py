"""The text report: header, then each minimal guard with the source lines it came from."""

from __future__ import annotations

from typing import Any

from guardsolve.guardset import GuardSet


def text_report(gs: GuardSet, target: str, inputs: str, seconds: float, verified: bool) -> str:
    """
    >>> import torch, guardsolve
    >>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)).graph)
    >>> print(text_report(gs, "demo", "a=[4], b=[4]", 0.01, False).splitlines()[2])
    guards: 5 bailouts -> 2 minimal constraints (irredundant: yes; z3-verified: no)
    """
    bailouts = len(gs.graph.bailouts())
    nodes = len(gs.graph)
    lines = [
        f"target: {target}",
        f"inputs: {inputs}",
        f"guards: {bailouts} bailouts -> {len(gs)} minimal constraints "
        f"(irredundant: {'yes' if gs.minimal else 'not proved'}; z3-verified: {'yes' if verified else 'no'})",
        f"guard graph: {nodes} nodes; simplified in {seconds * 1000:.1f} ms",
        "",
    ]
    if not len(gs):
        lines.append("(no guards: every input of this rank is accepted)")
    for c in gs:
        lines.append(c.text)
        seen: set[str] = set()
        for i in sorted(c.prov):
            origin = gs._origin(i)
            if origin not in seen:
                seen.add(origin)
                lines.append(f"    {origin}")
    for u in gs.undecided:
        lines.append(f"note: {u}")
    return "\n".join(lines)


def trace_summary(t: Any, gs: GuardSet) -> str:
    """What every example prints: trace size, raw bailouts, minimal guards, their explanation."""
    nodes = len(t.graph)
    tensor_ops = sum(1 for n in t.graph if n.op.value.startswith("var_") and n.op.value not in
                     ("var_placeholder", "var_param", "var_size"))
    lines = [
        f"trace: {nodes} nodes ({tensor_ops} tensor ops, {len(t.constants)} constants)",
        f"bailouts: {len(t.graph.bailouts())} raw -> {len(gs)} minimal guards",
        "",
        "# minimal guards",
        str(gs) if len(gs) else "(none: any input of these ranks is accepted)",
        "",
        "# where each guard came from",
        gs.explain(),
    ]
    return "\n".join(lines)
