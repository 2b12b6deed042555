"""An entry's state bound to the objects its trace read, and rebound when one is replaced."""

from __future__ import annotations

from typing import Any
from guardsolve.ir.ops import Op
from guardsolve.jit.entry import Entry, never, no_replay


def bind_state(entry: Entry) -> None:
    """Make the entry read its state's tensors where they live now: when the state check finds a
    tensor rebound (a replaced weight of the same kind), the replay, the trace's constants (which
    later variants compile with) and every compiled variant take the new one. Sets
    `entry.const_leaves` (each constant's leaf in the state check, None for one the trace made)."""
    state, t = entry.state, entry.trace
    if state is None:
        return
    if t is not None:
        made = {n.params["name"] for n in t.graph.nodes if n.op is Op.VAR_PARAM and "crc" in n.params}
        leaves = []
        for name, c in t.constants.items():
            i = state.tensors.get(id(c))
            leaves.append(i)
            if i is None and name not in made:
                state.notes.append(f"{name}: a tensor the function reached by no recorded read: the entry keeps "
                                   "using this very tensor (in-place writes are seen, a rebinding elsewhere is not)")
        entry.const_leaves = tuple(leaves)
    slots = {i: j for j, i in enumerate(entry.const_leaves) if i is not None}
    names = list(t.constants) if t is not None else []

    def rebind(changed: dict[int, Any]) -> None:
        for i, new in changed.items():
            j = slots.get(i)
            if j is None:
                continue
            if t is not None:
                t.constants[names[j]] = new
                if entry.run is not no_replay and entry.run is not never:
                    entry.run.__globals__[names[j]] = new
            for v in entry.variants:
                v.run.__globals__[f"_c{j}"] = new

    state.on_rebind.append(rebind)
