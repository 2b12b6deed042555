"""Symbolic values where PyTorch takes plain ones: decided in the trace.

PyTorch's argument parser takes a plain `bool` (or `float`, `int`) for some arguments and
rejects a traced one before any op runs: transformers passes
`is_causal=query.shape[2] > 1`, a `SymBool` under the tracer, to
`scaled_dot_product_attention`, so GPT-2, BERT and DistilBERT could not be traced at sequence
length 1 ("argument 'is_causal' must be bool, not SymBool").

A trace that meets such a rejection learns the function and the kind of value (`PlainCalls.learn`)
and is run again: while traces run, each learned function is wrapped (`PlainCalls.installed`),
and the wrapper turns the symbolic values of that kind into plain ones with `bool(x)` /
`float(x)` / `int(x)`, which records the decision as a bailout (as an `if` on it would). The
call then gets the concrete value, and the guards say where it holds. Calls without such
values pass unchanged (other threads see the wrapper only while a trace runs).

What is learned is a fact about PyTorch's functions, kept for the process, as a cache is.

>>> import torch
>>> from guardsolve import simplify, trace
>>> F = torch.nn.functional
>>> sdpa = F.scaled_dot_product_attention
>>> f = lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=x.shape[1] > 1)
>>> print(simplify(trace(f, torch.randn(2, 1, 4))))
x1 <= 1
>>> F.scaled_dot_product_attention is sdpa  # restored after the trace
True
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import threading
from typing import Any, Callable, Iterator

import torch

# NOTE: where PyTorch's builtins live as Python attributes (a function may be bound in several)
_OWNERS = ("torch.nn.functional", "torch", "torch._C._nn", "torch._C._VariableFunctions", "torch.special",
           "torch.linalg", "torch.fft", "torch.Tensor")
_REJECTED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\(\): argument '[^']*' (?:\(position \d+\) )?must be "
                       r"[A-Za-z_ ]+, not Sym(?P<kind>Bool|Int|Float)\b")
_KINDS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "Bool": (torch.SymBool, bool), "Int": (torch.SymInt, int), "Float": (torch.SymFloat, float)}


class PlainCalls:
    """The learned functions (by name, with the kinds of value to make plain) and the wrappers
    installed while traces run (counted across threads: installed by the first trace, removed by
    the last)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: dict[str, set[str]] = {}
        self._depth = 0
        self._saved: dict[tuple[Any, str], Any] = {}  # NOTE: (owner, name) -> the original, while installed

    def learn(self, message: str) -> bool:
        """Learn from the parser's rejection `message`; True when it is new (a trace run
        again would go further), False when it is not such a rejection or already known.

        >>> calls = PlainCalls()
        >>> calls.learn("scaled_dot_product_attention(): argument 'is_causal' must be bool, not SymBool")
        True
        >>> calls.learn("scaled_dot_product_attention(): argument 'is_causal' must be bool, not SymBool")
        False
        """
        m = _REJECTED.search(message.strip())
        if m is None or not any(callable(getattr(_module(o), m["name"], None)) for o in _OWNERS):
            return False
        with self._lock:
            kinds = self._kinds.setdefault(m["name"], set())
            if m["kind"] in kinds:
                return False
            kinds.add(m["kind"])
            if self._depth:
                self._install(m["name"])
        return True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The learned functions wrapped, for the block."""
        with self._lock:
            if self._depth == 0:
                for name in self._kinds:
                    self._install(name)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    for (owner, name), original in self._saved.items():
                        setattr(owner, name, original)
                    self._saved.clear()

    def _install(self, name: str) -> None:
        kinds = self._kinds[name]
        for o in _OWNERS:
            owner = _module(o)
            original = getattr(owner, name, None)
            if owner is None or not callable(original) or (owner, name) in self._saved:
                continue
            self._saved[(owner, name)] = original
            setattr(owner, name, _plain_wrapper(original, kinds))


def _module(path: str) -> Any:
    """`torch._C._nn` and the like, by attribute (some are not importable submodules)."""
    head, *rest = path.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def _plain_wrapper(original: Callable[..., Any], kinds: set[str]) -> Callable[..., Any]:
    """`original`, taking the symbolic values of `kinds` as the plain values they are here (each
    conversion a decision the trace records). `kinds` is read at each call: one learned later
    applies at once."""
    @functools.wraps(original)
    def plain(*args: Any, **kwargs: Any) -> Any:
        for kind in tuple(kinds):
            sym, make = _KINDS[kind]
            if any(isinstance(a, sym) for a in args) or any(isinstance(v, sym) for v in kwargs.values()):
                args = tuple(make(a) if isinstance(a, sym) else a for a in args)
                kwargs = {k: make(v) if isinstance(v, sym) else v for k, v in kwargs.items()}
        return original(*args, **kwargs)

    plain.__guardsolve_plain__ = original  # type: ignore[attr-defined]
    return plain


PLAIN = PlainCalls()  # NOTE: a process-wide cache of facts about PyTorch's functions (see the module's docstring)

__all__ = ["PLAIN", "PlainCalls"]
