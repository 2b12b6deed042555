"""A cache of shape rules' results, keyed by the op and its arguments' sizes, and the sizes it keeps symbolic."""

from __future__ import annotations

from typing import Any, Callable
import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_map
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.ir.ops import Op
from guardsolve.guards.data_shaped import DATA_SHAPED, READS_DATA
from guardsolve.guards.index_values import INDEX_VALUES
from guardsolve.guards.rule_base import sym_of
from guardsolve.guards.rules import shape_rule


class RuleCache:
    """Shape rules memoized within one trace: a call whose inputs have the same symbolic sizes,
    strides, dtypes and other arguments as an earlier one takes the same decisions, so its
    output and its bailouts are the earlier ones (re-recorded at the current user line).

    Within one trace a guard-graph name stands for one value, so the key decides the rule.
    Transformers repeat their layers: most calls hit. Mutating ops and outputs with a storage
    offset are never cached; a hit hands back fresh meta tensors.
    """

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.entries: dict[Any, tuple[Any, list[tuple[str, bool]]]] = {}

    def close(self) -> None:
        """Drop the memoized meta tensors when the trace ends.

        NOTE: a meta tensor's symbolic sizes are held by its C++ TensorImpl, which Python's
        collector cannot see into: recorder -> cache -> meta tensor -> SymGuard -> recorder is
        a cycle it never frees, so every trace (a failed one too) stayed in memory.
        """
        self.entries.clear()

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = self._rule(func, args, kwargs)
        values = INDEX_VALUES.get(func)
        if values is not None:
            values(out, *args, **kwargs)
        return out

    def _rule(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rec = self.rec
        # NOTE: two calls of a data-shaped op on the same shapes have different output sizes
        key = None if func._schema.is_mutable or func in DATA_SHAPED or func in READS_DATA else _key(func, args, kwargs)
        hit = self.entries.get(key) if key is not None else None
        if hit is not None:
            out, guards = hit
            for g, expect in guards:
                rec.g_bailout(g, expect, rec.loc)
            return tree_map(_fresh(rec), out)
        outer, rec.capture = rec.capture, []
        counted = rec._unbacked
        try:
            out = shape_rule(func, args, kwargs, rec)
            guards = rec.capture
            if guards and not func._schema.is_mutable:
                out = sizes_stay_symbols(rec, args, kwargs, out, guards)
        finally:
            captured, rec.capture = rec.capture, outer
            if outer is not None:
                outer.extend(captured)
        # NOTE: nor a rule that counted a size from data inside (`index` with a bool mask runs
        # `nonzero`): the next call on masks of the same shape counts its own
        if key is not None and rec._unbacked == counted and all(_cacheable(x) for x in flatten(out)[0]):
            self.entries[key] = (out, guards)
        return out


def _pinned_here(rec: Recorder, node: SymGuard, c: int, decided: list[tuple[str, bool]]) -> bool:
    """Did this rule decide `node == c` (as `node == c` true or `node != c` false)?"""
    const = rec._memo.get(("const", int, c))
    if const is None or node.g is None:
        return False
    for op, expect in ((Op.INT_EQ, True), (Op.INT_NE, False)):
        for key in ((op, node.g, const), (op, const, node.g)):
            g = rec._memo.get(key)
            if g is not None and (g, expect) in decided:
                return True
    return False


def _size_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Any]]:
    """The sizes an op's output dims may come from: each tensor argument's, each list of sizes."""
    rows: list[list[Any]] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            rows.append(list(a.shape))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(x, (int, torch.SymInt)) for x in a):
            rows.append(list(a))
        elif isinstance(a, (list, tuple)):
            rows.extend(list(x.shape) for x in a if isinstance(x, torch.Tensor))
    return rows


def sizes_stay_symbols(rec: Recorder, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                       decided: list[tuple[str, bool]]) -> Any:
    """`out` with each output size that PyTorch's rule made a constant 0 or 1 because a symbol
    was that value put back as that symbol.

    A rule that finds `x0 == 1` picks either side: a broadcast of `[x0, 8]` with a `[1, 8]`
    weight takes the weight's 1, `w.expand(x0, -1)` keeps `w`'s own 1. The value is the same
    (the rule's decision is a bailout of the trace), but a constant flows on: user code that
    reads the size records `1` where any other batch records a symbol, and later rules skip
    ops at a size known to be 1. The symbol is the one at the same place from the right in a
    tensor argument or a list of sizes, decided equal to that constant by this rule; where
    none or several are, the constant stays. So batch 1 records the trace batch 2 records.
    """
    leaves, spec = flatten(out)
    if not any(isinstance(m, torch.Tensor) and any(type(s) is int and s in (0, 1) for s in m.shape)
               for m in leaves):
        return out
    rows = _size_rows(args, kwargs)
    changed = False
    for k, m in enumerate(leaves):
        if not isinstance(m, torch.Tensor) or m.device.type != "meta":
            continue
        sizes = list(m.shape)
        moved = False
        for i, s in enumerate(sizes):
            if type(s) is not int or s not in (0, 1):
                continue
            found: dict[str, Any] = {}
            for row in rows:
                j = i - (len(sizes) - len(row))
                x = row[j] if 0 <= j < len(row) else None
                if (isinstance(x, torch.SymInt) and isinstance(x.node, SymGuard) and not x.node.const
                        and x.node.lazy is None and x.node.data is None and x.node.hint == s
                        and _pinned_here(rec, x.node, s, decided)):
                    found[x.node.g] = x
            if len(found) == 1:
                sizes[i] = next(iter(found.values()))
                moved = True
        if moved:
            muted, rec.muted = rec.muted, True  # NOTE: a new view of our stand-in asks nothing of user code
            try:
                with _disable_current_modes():
                    leaves[k] = m.as_strided(sizes, m.stride(), m.storage_offset())
            finally:
                rec.muted = muted
            changed = True
    return unflatten(leaves, spec) if changed else out


def _key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    flat, spec = flatten((args, kwargs))
    parts: list[Any] = [func, spec, torch.is_grad_enabled()]
    for a in flat:
        if isinstance(a, torch.Tensor):
            part = (tuple(map(sym_of, a.shape)), tuple(map(sym_of, a.stride())), sym_of(a.storage_offset()), a.dtype,
                    a.device, a.layout)
            if None in part[0] or None in part[1] or part[2] is None:
                return None
        elif isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            part = ("sym", sym_of(a))
            if part[1] is None:
                return None
        elif a is None or isinstance(a, (int, float, bool, str, torch.dtype, torch.device, torch.layout,
                                         torch.memory_format)):
            part = (type(a), a)
        else:
            return None
        parts.append(part)
    return tuple(parts)


def _cacheable(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return sym_of(x.storage_offset()) == 0 and None not in map(sym_of, x.shape) and None not in map(sym_of, x.stride())
    return not isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat))


def _fresh(rec: Recorder) -> Callable[[Any], Any]:
    def make(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        muted, rec.muted = rec.muted, True  # NOTE: building a stand-in asks nothing of user code
        try:
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        finally:
            rec.muted = muted

    return make
