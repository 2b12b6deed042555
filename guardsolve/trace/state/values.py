"""How a value read as state is classed: a plain value compared by value, an object by identity, a
container looked into up to `MAX_DEPTH`; `Attrs`, an object's attributes read by key.
"""

from __future__ import annotations

import enum
import types
from typing import Any
import torch


STATIC_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
                   torch.memory_format, enum.Enum)


OBJECTS = (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
            type, types.MethodWrapperType, types.WrapperDescriptorType, torch._ops.OpOverload,
            torch._ops.OpOverloadPacket)


MAX_DEPTH = 4  # NOTE: containers and objects nested deeper are compared by identity only (said in `notes`)


LENGTH = object()  # NOTE: a read's key: how many items its owner holds (a `__dict__` read whole)


class Attrs:
    """An object's attributes read by key, as a leaf reads a dict (`owner[key]`): the owner of a
    read from a class (`kind` "class": its own `__dict__`, which `vars()` gives only as a copy
    of its view), a function's `__defaults__` and `__kwdefaults__` (`kind` "function"), a
    `functools.partial`'s function and arguments (`kind` "partial").

    >>> class C:
    ...     scale = 2.0
    >>> a = Attrs(C, "class")
    >>> a["scale"], "scale" in a
    (2.0, True)
    """

    __slots__ = ("obj", "kind")

    def __init__(self, obj: Any, kind: str) -> None:
        self.obj, self.kind = obj, kind

    def __getitem__(self, key: str) -> Any:
        return self.obj.__dict__[key] if self.kind == "class" else getattr(self.obj, key)

    def __contains__(self, key: str) -> bool:
        return key in self.obj.__dict__ if self.kind == "class" else hasattr(self.obj, key)

    def __repr__(self) -> str:
        return f"Attrs({getattr(self.obj, '__qualname__', type(self.obj).__name__)}, {self.kind!r})"


def is_static(v: Any) -> bool:
    """A plain immutable value, compared by type and value (a tuple of such values too)."""
    if isinstance(v, STATIC_SCALARS):
        return not isinstance(v, float) or v == v
    if type(v) in (tuple, torch.Size) or isinstance(v, tuple) and hasattr(type(v), "_fields"):
        return all(is_static(x) for x in v)
    return False
