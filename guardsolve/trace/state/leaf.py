"""A leaf of the state check: one slot read, what it held, how it is compared and shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import torch
from guardsolve.trace.static import value_key
from guardsolve.trace.state.values import is_static


@dataclass(eq=False)
class Leaf:
    """One thing the check compares: `owner[key]` (or the cell `owner`'s contents, `key`
    None; or the container `owner` itself, for `length`) now against `expect`.
    `kind`: value | tensor | object | length | absent."""

    where: str
    owner: str  # the bound name of the dict, list, tuple or cell it is read from
    key: Any
    kind: str
    expect: Any
    meta: Any = None  # a tensor's (type, dtype, device, layout, shape, stride, requires_grad); a length; a value_key
    ptr: int | None = None  # a tensor's `data_ptr()` when the fast check was made (`has_ptr`)

    def __post_init__(self) -> None:
        if self.kind == "tensor" and has_ptr(self.expect):
            self.ptr = data_ptr(self.expect)

    @property
    def get(self) -> str:
        if self.kind == "length":
            return self.owner
        if self.kind == "absent":
            return f"{self.key!r} not in {self.owner}"
        return f"{self.owner}.cell_contents" if self.key is None else f"{self.owner}[{self.key!r}]"

    def line(self) -> str:
        match self.kind:
            case "value":
                return f"{self.where} == {self.expect!r}"
            case "tensor":
                _, dt, dev, _, shape, _, rg = self.meta
                where = f" on {dev}" if dev.type != "cpu" else ""
                return (f"{self.where}: a {str(dt).removeprefix('torch.')} tensor {list(shape)}{where}, "
                        f"requires_grad={rg} (the entry reads it at each call)")
            case "object":
                e = self.expect
                return f"{self.where} is <{e.__name__ if isinstance(e, type) else type(e).__name__}>"
            case "length":
                return f"{self.where}: {self.meta} items"
            case "absent":
                return f"{self.where} is not set on the instance (read from its class)"
        raise AssertionError(self.kind)


def tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    strided = t.layout is torch.strided
    return (type(t), t.dtype, t.device, t.layout, tuple(t.shape), tuple(t.stride()) if strided else None,
            t.requires_grad)


data_ptr = torch.Tensor.data_ptr


def has_ptr(t: Any) -> bool:
    """A dense tensor with storage of its own (a parameter, a buffer), whose `data_ptr()` says
    where its elements live; not a subclass, a sparse or a meta tensor."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout is torch.strided and not t.is_meta


def is_machinery(leaf: Leaf) -> bool:
    last = leaf.where.rsplit(".", 1)[-1]
    name = last.split("[", 1)[0]
    return leaf.kind == "absent" or (name.startswith("_") and (
        "hooks" in name or (name in MODULE_DICTS and "[" not in last)))


MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def leaf_matches(leaf: Leaf, cur: Any) -> bool:
    match leaf.kind:
        case "value":
            return cur is leaf.expect or (is_static(cur) and value_key(cur) == leaf.meta)
        case "tensor":
            # NOTE: metadata even for the same object: `requires_grad_()`, `.data =` change it in place
            return isinstance(cur, torch.Tensor) and tensor_meta(cur) == leaf.meta
        case "object":
            return cur is leaf.expect
        case "length":
            return len(cur) == leaf.meta
        case "absent":
            return cur is True
    raise AssertionError(leaf.kind)


# NOTE: the fields of `tensor_meta` a miss names when they changed (None: shown already)
_TENSOR_FIELDS = ("type", None, "device", "layout", None, "strides", None)


def _short(v: Any) -> str:
    return v.__name__ if isinstance(v, type) else str(v)


def show_found(leaf: Leaf, cur: Any) -> str:
    match leaf.kind:
        case "tensor" if isinstance(cur, torch.Tensor):
            now = tensor_meta(cur)
            _, dt, _, _, shape, _, rg = now
            text = f"a {str(dt).removeprefix('torch.')} tensor {list(shape)}, requires_grad={rg}"
            # NOTE: what the words above do not show (its type, device, layout, strides), where it changed
            # (strides only at the same shape: another shape has other strides anyway)
            same_shape = leaf.meta is not None and leaf.meta[4] == now[4]
            changed = [f"{what} {_short(a)} where the entry read {_short(b)}"
                       for what, a, b in zip(_TENSOR_FIELDS, now, leaf.meta or ())
                       if what and a != b and (what != "strides" or same_shape)]
            return text + (f" ({'; '.join(changed)})" if changed else "")
        case "object":
            return f"another {type(cur).__name__}"
        case "length":
            return f"{len(cur)} items"
        case "absent":
            return "an instance attribute"
    text = repr(cur)
    return text if len(text) <= 60 else text[:57] + "..."
