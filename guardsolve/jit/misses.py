"""Why a call missed every entry, built only when asked: a small description of its inputs (`Miss`)."""

from __future__ import annotations

from typing import Any, Sequence
import torch
from guardsolve.jit.entry import Entry


class _TensorDesc:
    """What a miss remembers of a tensor argument: enough to explain it, never its data."""

    __slots__ = ("shape", "dtype", "device", "layout", "requires_grad", "_stride", "_offset", "_contiguous")

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype, self.device, self.layout = tuple(t.shape), t.dtype, t.device, t.layout
        self.requires_grad = t.requires_grad
        strided = t.layout is torch.strided
        self._stride = tuple(t.stride()) if strided else ()
        self._offset = t.storage_offset() if strided else 0
        self._contiguous = t.is_contiguous() if strided else False

    def dim(self) -> int:
        return len(self.shape)

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def __repr__(self) -> str:
        return f"tensor(shape={list(self.shape)}, dtype={self.dtype})"

    def stride(self) -> tuple[int, ...]:
        return self._stride

    def size(self, dim: int | None = None) -> Any:
        """As `Tensor.size`: a layout guard reads `x.size()[2]` (Inductor's stride guards)."""
        return torch.Size(self.shape) if dim is None else self.shape[dim]

    def storage_offset(self) -> int:
        return self._offset

    def is_contiguous(self) -> bool:
        return self._contiguous


def _describe(v: Any) -> Any:
    return _TensorDesc(v) if isinstance(v, torch.Tensor) else v


class Miss:
    """One miss: the entries it was checked against and a description of its inputs; the
    reasons are built on first read."""

    __slots__ = ("entries", "names", "desc", "state", "note", "variants", "_text", "_stale")

    def __init__(self, entries: tuple[Entry, ...], names: tuple[str, ...], values: Sequence[Any],
                 state: dict[str, Any]):
        self.entries, self.names, self.state = entries, names, state
        self.variants = tuple(e.variants for e in entries)  # NOTE: as they were: a miss may add one
        self.desc = tuple(_describe(v) for v in values)
        # NOTE: whether each entry's state check failed at the miss (cheap: the fast check first);
        # what failed is named when the reasons are read
        self._stale = tuple(e.state is not None and not e.state() for e in entries)
        self.note: str | None = None
        self._text: tuple[str, ...] | None = None

    def reasons(self) -> tuple[str, ...]:
        if self._text is None:
            out = [f"entry {i}: {self._why(e, stale, vs)}"
                   for i, (e, stale, vs) in enumerate(zip(self.entries, self._stale, self.variants))] \
                or ["no entries yet"]
            if self.note:
                out.append(self.note)
            self._text = tuple(out)
        return self._text

    def _why(self, e: Entry, stale: bool, variants: tuple[Any, ...]) -> str:
        if e.names != self.names:
            return f"arguments ({', '.join(self.names)}) differ from the traced ({', '.join(e.names)})"
        if e.trace is None and len(variants) > 1:  # NOTE: loaded: its guards are variant 0's
            return "no loaded variant's check holds: " + "; ".join(
                f"variant {j}: {v.guards.explain_failure(*self.desc, state=self.state)}" for j, v in enumerate(variants))
        why = e.guards.explain_failure(*self.desc, state=self.state)
        if why == "all guards hold" and stale:
            now = e.state.failure() if e.state is not None else None
            return f"the state it read changed: {now or 'since changed back'}"
        if why == "all guards hold" and variants and e.autograd is None:
            # NOTE: the trace fits; what the backend assumed does not (a stride, a 0/1 size)
            fails = [f"variant {j}: {_variant_failure(v, self.desc, self.state)}" for j, v in enumerate(variants)]
            lead = "its trace's guards hold; " if e.trace is not None else ""
            return f"{lead}no compiled variant's check holds: " + "; ".join(fails)
        if why == "all guards hold":
            return "all guards hold (it was published or changed after this call looked)"
        return why


def _variant_failure(v: Any, desc: tuple[Any, ...], state: dict[str, Any]) -> str:
    """Why a compiled variant did not serve a call whose trace's guards held: the guard its check
    failed; or, where every guard holds, that its segments' data took another path (named in the
    reason before, where the run stopped) or that it was added after the call looked."""
    why = v.guards.explain_failure(*desc, state=state)
    if why != "all guards hold":
        return why
    if getattr(v, "segments", None) is not None:
        return "its sizes hold; the call's data took a path its segments do not run (see where it stopped)"
    return "all guards hold (it was compiled after this call looked)"
