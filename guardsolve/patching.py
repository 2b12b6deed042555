"""Every patch guardsolve makes to torch: installed while any caller holds it, undone by the last
one out, each undone in the reverse order of its installation, under one lock.

guardsolve changes a few of PyTorch's functions for the length of a trace or a compile
(Inductor's lowering of a convolution's backward, Dynamo's stack summary, `nn.Module`'s
attribute reads while a trace records, ...). Two compiles in two threads can overlap: with
plain `try/finally`, the first to finish restored PyTorch's function while the second still
compiled, and the second then restored the first's wrapper for good. Here each patched
attribute has one count: the first caller installs the replacement, the last one restores
what was there (an attribute a class only inherited is deleted again, so it is inherited as
before).

A replacement is built from the original alone (`Patch.make`) and is shared by every caller
while the count is held, so it must not capture one caller's state; a caller's own state goes
through a `contextvars.ContextVar` the replacement reads (`pytorch/oracle.py`, `pytorch/recompiles.py`).

    >>> import types
    >>> ns = types.SimpleNamespace(f=lambda x: x + 1)
    >>> twice = Patch(ns, "f", lambda f: lambda x: 2 * f(x))
    >>> with patched(twice):
    ...     with patched(twice):        # a second holder (another thread) shares the same wrapper
    ...         inner = ns.f(3)
    ...     outer = ns.f(3)             # the first holder still has it
    >>> inner, outer, ns.f(3), active(ns, "f")
    (8, 8, 4, 0)
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_MISSING = object()


@dataclass(frozen=True)
class Patch:
    """One replacement of `owner.name` (or of `owner[name]` where `item`), built by `make` from
    what is there: the raw class attribute where `owner` defines it itself (a classmethod
    object, not the bound method), else what `getattr` finds. `key` tells two different
    patches of one attribute apart (by default the `make` function): holding two at once is
    an error, not a silent stack."""

    owner: Any
    name: Any
    make: Callable[[Any], Any]
    item: bool = False
    key: Any = None

    @property
    def ident(self) -> Any:
        if self.key is not None:
            return self.key
        return (getattr(self.make, "__module__", None), getattr(self.make, "__qualname__", None) or id(self.make))

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", None) \
            or type(self.owner).__name__
        return f"{owner}[{self.name!r}]" if self.item else f"{owner}.{self.name}"


@dataclass
class _Held:
    ident: Any
    count: int
    original: Any  # what was there, or _MISSING where the class only inherited it


@dataclass
class PatchTable:
    """The patches in force, by (owner, name): the one lock every install and undo takes."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[tuple[int, Any, bool], _Held] = field(default_factory=dict)
    owners: dict[int, Any] = field(default_factory=dict)  # NOTE: keeps each owner alive while patched

    def install(self, p: Patch) -> None:
        slot = (id(p.owner), p.name, p.item)
        with self.lock:
            h = self.held.get(slot)
            if h is not None:
                if h.ident != p.ident:
                    raise RuntimeError(f"{p.describe()} is already patched by another patch: "
                                       "two different patches of one attribute cannot be held at once")
                h.count += 1
                return
            original = _read(p)
            _write(p, p.make(original if original is not _MISSING else getattr(p.owner, p.name)))
            self.held[slot] = _Held(p.ident, 1, original)
            self.owners[id(p.owner)] = p.owner

    def undo(self, p: Patch) -> None:
        slot = (id(p.owner), p.name, p.item)
        with self.lock:
            h = self.held[slot]
            h.count -= 1
            if h.count:
                return
            del self.held[slot]
            if h.original is _MISSING:
                delattr(p.owner, p.name)
            else:
                _write(p, h.original)
            if not any(s[0] == id(p.owner) for s in self.held):
                del self.owners[id(p.owner)]

    def count(self, owner: Any, name: Any, item: bool = False) -> int:
        h = self.held.get((id(owner), name, item))
        return h.count if h is not None else 0


def _read(p: Patch) -> Any:
    if p.item:
        return p.owner[p.name]
    own = getattr(p.owner, "__dict__", None)
    if isinstance(p.owner, type):
        return own.get(p.name, _MISSING) if own is not None else _MISSING
    return getattr(p.owner, p.name)


def _write(p: Patch, value: Any) -> None:
    if p.item:
        p.owner[p.name] = value
    else:
        setattr(p.owner, p.name, value)


# NOTE: torch's modules and classes are one per process, so the table of what is patched in
# them is too: this is the one piece of module-level mutable state guardsolve keeps, and it is
# only ever changed under its lock.
PATCHES = PatchTable()

# NOTE: make_fx and Inductor keep process-wide state of their own (torch.fx's patcher of the
# function being traced, ...): two compiles at once in two threads failed inside torch, so a
# compile holds this for its length (`jit/inductor/driver.py`); re-entrant for nested compiles.
COMPILING = threading.RLock()


@contextlib.contextmanager
def patched(*patches: Patch, table: PatchTable = PATCHES) -> Iterator[None]:
    """Hold `patches` for the block: installed in order (where no other holder has them yet),
    released in the reverse order; the last holder of each restores what was there."""
    done: list[Patch] = []
    try:
        for p in patches:
            table.install(p)
            done.append(p)
        yield
    finally:
        for p in reversed(done):
            table.undo(p)


def active(owner: Any, name: Any, item: bool = False, table: PatchTable = PATCHES) -> int:
    """How many holders the patch of `owner.name` has now (0: PyTorch's own is in place).

    NOTE: no lock: one dict read is atomic, and the answer is a moment's either way (it is
    read on the hit path, `trace.tracer.tracing()`)."""
    return table.count(owner, name, item)
