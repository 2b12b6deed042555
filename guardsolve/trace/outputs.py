"""A trace's output structure (`spec`, `unwrap`), and the modules it ran scrubbed of traced values."""

from __future__ import annotations

from typing import Any
import torch
from torch.utils._pytree import tree_map
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.trace.state.active import paused
from guardsolve.trace.traced_tensor import TracedTensor
from guardsolve.trace.record import OutRef


def _owners(fn: Any) -> list[tuple[str, torch.nn.Module]]:
    """The modules a traced call may write to: `fn`'s module tree (or its bound `self`'s)."""
    root = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(root, torch.nn.Module):
        return []
    with paused():  # NOTE: guardsolve's walk, not the program's reads
        return list(root.named_modules(remove_duplicate=True))


def scrub(fn: Any) -> list[str]:
    """Concrete values in place of traced ones in the module attributes a traced call set.

    `forward` may keep a size or a tensor it computed (transformers' Swin sets
    `self.window_size = min(input_resolution)`); left traced, every later eager call of the
    module fails. Each such attribute (in a list, tuple, dict or `torch.Size` too), and each
    buffer replaced by a traced tensor, gets the value eager would have left there: the
    example's. Returns one note per attribute changed.

    >>> import torch
    >>> from guardsolve.trace.tracer import trace
    >>> class Keeps(torch.nn.Module):
    ...     def forward(self, x):
    ...         self.width = x.shape[-1]
    ...         return x * 2
    >>> m = Keeps()
    >>> t = trace(m, torch.ones(2, 3))
    >>> type(m.width), m.width
    (<class 'int'>, 3)
    >>> print(t.notes[0])
    width: set during the trace to a traced value; holds its value at the example inputs (3)
    """
    notes: list[str] = []
    for path, m in _owners(fn):
        where = f"{path}." if path else ""
        for key, value in list(m.__dict__.items()):
            if key in ("_parameters", "_modules"):
                continue
            if key == "_buffers":
                for b, t in list(value.items()):
                    if isinstance(t, TracedTensor):
                        value[b] = t.eager
                        notes.append(f"{where}{b}: a buffer set during the trace to a traced tensor; holds its "
                                     "value at the example inputs")
                continue
            if _holds_traced(value):
                concrete = unwrap(value)
                m.__dict__[key] = concrete
                shown = " ".join((repr(concrete) if not isinstance(concrete, torch.Tensor)
                                  else f"a {list(concrete.shape)} tensor").split())
                notes.append(f"{where}{key}: set during the trace to a traced value; holds its value at the "
                             f"example inputs ({shown if len(shown) <= 60 else shown[:57] + '...'})")
    return notes


def concrete_objects(result: Any, notes: list[str]) -> bool:
    """Concrete values in place of traced ones inside the output's objects that are not
    containers (transformers' `DynamicCache`: its key and value tensors); True when there was
    one. Such an output is the example's: a replay could not rebuild it, so `guarded` keeps no
    entry for it."""
    from torch.utils._pytree import tree_flatten

    found = False
    for leaf in tree_flatten(result)[0]:
        if isinstance(leaf, (torch.Tensor, torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool, str,
                             type(None))) or not hasattr(leaf, "__dict__"):
            continue
        if _concrete_in(leaf, 0):
            found = True
            notes.append(f"the output's {type(leaf).__name__} held traced values; it holds their values at the "
                         "example inputs (a replay cannot rebuild it)")
    return found


def _concrete_in(obj: Any, depth: int) -> bool:
    """Replace traced values in `obj`'s attributes (and in their lists, dicts and objects)."""
    changed = False
    for key, value in list(vars(obj).items()):
        if _holds_traced(value):
            setattr(obj, key, unwrap(value))
            changed = True
        elif depth < 3 and isinstance(value, (list, tuple)):
            changed |= any([_concrete_in(v, depth + 1) for v in value if hasattr(v, "__dict__")
                            and not isinstance(v, torch.Tensor)])
        elif depth < 3 and hasattr(value, "__dict__") and not isinstance(value, (torch.Tensor, type)) \
                and not callable(value):
            changed |= _concrete_in(value, depth + 1)
    return changed


def _holds_traced(v: Any, depth: int = 0) -> bool:
    if isinstance(v, TracedTensor):
        return True
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return isinstance(v.node, SymGuard)
    if depth < 4 and isinstance(v, (list, tuple)):
        return any(_holds_traced(x, depth + 1) for x in v)
    if depth < 4 and isinstance(v, dict):
        return any(_holds_traced(x, depth + 1) for x in v.values())
    return False


def module_names_of(fn: Any) -> dict[int, str]:
    if not isinstance(fn, torch.nn.Module):
        return {}
    with paused():  # NOTE: guardsolve's walk, not the program's reads
        named = list(fn.named_parameters(remove_duplicate=True)) + list(fn.named_buffers(remove_duplicate=True))
    return {id(t): name for name, t in named}


def spec(v: Any, rec: Recorder) -> Any:
    """The output structure with `OutRef`s in place of traced tensors and symbolic ints."""

    def ref(x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return OutRef(x.tname)
        if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)) and x.node.is_symbolic():
            return OutRef(rec.t_name(x.node))
        return x

    return tree_map(ref, v)


def unwrap(v: Any) -> Any:
    """Replace traced values in an output structure by their concrete values."""

    def concrete(x: Any) -> Any:
        if isinstance(x, TracedTensor):
            return x.eager
        if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return x.node.hint
        if isinstance(x, torch.Size):
            return torch.Size(concrete(s) for s in x)
        return x

    out = tree_map(concrete, v)
    return torch.Size(out) if isinstance(v, torch.Size) else out
