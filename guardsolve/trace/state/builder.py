"""How a recording's reads become the check's leaves: each owner bound by name, containers and plain
objects looked into."""

from __future__ import annotations

from typing import Any
import torch
from guardsolve.trace.static import value_key
from guardsolve.trace.state.code import SKIP_MODULES
from guardsolve.trace.state.leaf import Leaf, MODULE_DICTS, tensor_meta
from guardsolve.trace.state.values import Attrs, MAX_DEPTH, OBJECTS, is_static


class LeafBuilder:
    def __init__(self) -> None:
        self.leaves: list[Leaf] = []
        self.bound: dict[str, Any] = {}
        self._names: dict[int, str] = {}
        self._slots: set[tuple[int, Any]] = set()
        self.derive: dict[str, tuple[Any, ...]] = {}
        self.notes: list[str] = []
        self.tensors: dict[int, int] = {}

    def bind(self, obj: Any, how: tuple[Any, ...]) -> str:
        """The check's name for `obj`; `how` says how it was reached: ("root",) for the owner of
        a read, ("item", parent, key) for a container inside one, ("vars", parent, key) for
        the `__dict__` of an object inside one (`StateCheck.derive`, for saving the check)."""
        name = self._names.get(id(obj))
        if name is None:
            name = self._names[id(obj)] = f"_o{len(self._names)}"
            self.bound[name] = obj
            self.derive[name] = how
        return name

    def value(self, owner: str, container: Any, key: Any, v: Any, where: str, depth: int, direct: bool = False) -> None:
        slot = (id(container), key)
        if slot in self._slots:
            return  # NOTE: read twice (`self.fc.weight`, and `_parameters` walked): one leaf
        self._slots.add(slot)
        leaves = self.leaves
        if isinstance(v, torch.Tensor):
            self.tensors.setdefault(id(v), len(leaves))
            leaves.append(Leaf(where, owner, key, "tensor", v, tensor_meta(v)))
            return
        if is_static(v):
            leaves.append(Leaf(where, owner, key, "value", v, value_key(v)))
            return
        if not direct:
            leaves.append(Leaf(where, owner, key, "object", v))
        if isinstance(v, torch.nn.Module):
            # NOTE: reads of its attributes bind its dicts: say how they are reached (for saving)
            d = self.bind(v.__dict__, ("vars", owner, key))
            for slot in MODULE_DICTS:
                if isinstance(v.__dict__.get(slot), dict):
                    self.bind(v.__dict__[slot], ("item", d, slot))
        if isinstance(v, OBJECTS) or callable(v) and not hasattr(v, "__dict__") or \
                type(v).__module__.startswith("guardsolve."):
            # NOTE: a guarded function: its calls inside a trace run its function, whose own
            # reads are recorded; its cache's bookkeeping is not the program's state
            return
        if depth >= MAX_DEPTH:
            self.notes.append(f"{where}: nested {depth} deep; compared by identity only (a change inside it is not seen)")
            return
        # NOTE: a container, or a plain object's attributes (a model's config: reads of its
        # attributes are not recorded, so all of them are checked; any change misses). The
        # container itself is bound: its identity is the leaf just added
        if isinstance(v, (dict, list, tuple)):
            inner, items, label = v, list(v.items()) if isinstance(v, dict) else list(enumerate(v)), where
        elif isinstance(getattr(v, "__dict__", None), dict):
            inner, items, label = v.__dict__, list(v.__dict__.items()), None
            self._class_values(type(v), v.__dict__, where, depth)
        else:
            if not isinstance(v, (set, frozenset)):
                self.notes.append(f"{where}: a {type(v).__name__} with no __dict__, compared by identity only")
            return
        name = self.bind(inner, ("item", owner, key) if label else ("vars", owner, key))
        if not isinstance(inner, tuple):
            leaves.append(Leaf(where if label else f"{where}.__dict__", name, None, "length", inner, len(inner)))
        for k, x in items:
            if isinstance(k, (str, int)) and not isinstance(k, bool):
                self.value(name, inner, k, x, f"{where}[{k!r}]" if label else f"{where}.{k}", depth + 1)
            else:
                self.notes.append(f"{where}: a key of type {type(k).__name__} is not looked into")


    def _class_values(self, cls: type, instance: dict[str, Any], where: str, depth: int) -> None:
        """A plain object's class attributes that are plain values, where the program's own class
        defines them and the instance does not shadow them (`class Cfg: scale = 2.0`): reads on
        the object are not recorded, so each is checked, as its `__dict__` is."""
        seen: set[str] = set(instance)
        for c in cls.__mro__:
            top = (getattr(c, "__module__", None) or "").split(".", 1)[0]
            if c is object or top in SKIP_MODULES:
                continue
            attrs, owner = Attrs(c, "class"), None
            for k, x in list(c.__dict__.items()):
                if k in seen or k.startswith("__") or not is_static(x):
                    continue
                seen.add(k)
                if owner is None:
                    owner = self.bind(attrs, ("root",))  # NOTE: bound, so it lives as long as the check
                self.value(owner, attrs, k, x, f"{c.__qualname__}.{k}", depth + 1)
