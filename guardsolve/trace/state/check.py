"""The state check: the leaves an entry depends on, checked fast by identity and exactly by value."""

from __future__ import annotations

import operator
import threading
from typing import Any, Callable
import torch
from guardsolve.trace.state.builder import LeafBuilder
from guardsolve.trace.state.leaf import Leaf, data_ptr, has_ptr, is_machinery, leaf_matches, show_found, tensor_meta
from guardsolve.trace.state.recorder import StateRecorder
from guardsolve.trace.state.values import LENGTH


def _never() -> bool:
    return False


_CHECK_NAMESPACE: dict[str, Any] = {"_all": all, "_any": any, "_map": map, "_is": operator.is_, "_len": len,
                                    "_tuple": tuple, "_rg": operator.attrgetter("requires_grad"),
                                    "_getitem": operator.getitem, "_contains": operator.contains,
                                    "_cell": operator.attrgetter("cell_contents"), "_eq": operator.eq,
                                    "_dp": torch.Tensor.data_ptr}


class StateCheck:
    """The state an entry depends on, checked on every call (see the `guardsolve.trace.state` package docstring)."""

    def __init__(self, leaves: list[Leaf], bound: dict[str, Any], notes: list[str], tensors: dict[int, int],
                 derive: dict[str, tuple[Any, ...]] | None = None):
        self.leaves = leaves
        self.derive = derive or {}
        self.notes = notes
        self.tensors = tensors  # id(tensor at record time) -> its leaf's index
        self.on_rebind: list[Callable[[dict[int, Any]], None]] = []
        self._lock = threading.Lock()
        self._bound = bound
        ns = {**bound, **_CHECK_NAMESPACE}
        self._getters = [eval(compile(f"lambda: {leaf.get}", "<guardsolve state leaf>", "eval"), ns)
                         for leaf in leaves]
        # NOTE: leaves that read one tensor (tied weights: `head.weight = emb.weight`): the trace
        # holds it once, so they must stay one tensor (untied, each needs its own constant)
        groups: dict[int, list[int]] = {}
        for i, leaf in enumerate(leaves):
            if leaf.kind == "tensor":
                groups.setdefault(id(leaf.expect), []).append(i)
        self._tied = [g for g in groups.values() if len(g) > 1]
        self._fast = self._compile()

    def _compile(self) -> Callable[[], bool]:
        """The fast check: identities, lengths, absences and `requires_grad`, each kind one pass
        that runs in C (`all(map(is_, map(getitem, owners, keys), expected))`)."""
        ns: dict[str, Any] = dict(_CHECK_NAMESPACE)
        keyed: list[Leaf] = []
        cells: list[Leaf] = []
        lens: list[Leaf] = []
        tensors: list[Leaf] = []
        absent: list[Leaf] = []
        for leaf in self.leaves:
            match leaf.kind:
                case "value" | "object" | "tensor":
                    (cells if leaf.key is None else keyed).append(leaf)
                    if leaf.kind == "tensor":
                        tensors.append(leaf)
                case "length":
                    lens.append(leaf)
                case "absent":
                    absent.append(leaf)
        bound = self._bound
        terms: list[str] = []
        if keyed:
            ns["_OW"], ns["_KY"] = tuple(bound[x.owner] for x in keyed), tuple(x.key for x in keyed)
            ns["_EX"] = tuple(x.expect for x in keyed)
            terms.append("_all(_map(_is, _map(_getitem, _OW, _KY), _EX))")
        if cells:
            ns["_CE"], ns["_CX"] = tuple(bound[x.owner] for x in cells), tuple(x.expect for x in cells)
            terms.append("_all(_map(_is, _map(_cell, _CE), _CX))")
        if lens:
            ns["_L"], ns["_N"] = tuple(bound[x.owner] for x in lens), tuple(x.meta for x in lens)
            terms.append("_tuple(_map(_len, _L)) == _N")
        if absent:
            ns["_AD"], ns["_AK"] = tuple(bound[x.owner] for x in absent), tuple(x.key for x in absent)
            terms.append("not _any(_map(_contains, _AD, _AK))")
        if tensors:
            ns["_T"], ns["_RG"] = tuple(x.expect for x in tensors), tuple(x.meta[-1] for x in tensors)
            terms.append("_all(_map(_is, _map(_rg, _T), _RG))")
            # NOTE: where each one's elements live: `.data =`, `set_()` and `swap_tensors` (what
            # `model.double()` and `model.to()` do to parameters) keep the object and replace its
            # storage, dtype and shape; a tensor with no plain storage is left to its identity
            plain = [x.expect for x in tensors if has_ptr(x.expect)]
            if plain:
                ns["_P"], ns["_DP"] = tuple(plain), tuple(data_ptr(t) for t in plain)
                terms.append("_all(_map(_eq, _map(_dp, _P), _DP))")
        body = " and ".join(terms) or "True"
        src = f"def fast():\n    try:\n        return {body}\n    except Exception:\n        return False\n"
        exec(compile(src, "<guardsolve state check>", "exec"), ns)
        return ns["fast"]

    @classmethod
    def of(cls, rec: StateRecorder) -> "StateCheck":
        b = LeafBuilder()
        for r in rec.reads.values():
            name = b.bind(r.owner, ("root",))
            if r.absent:
                b.leaves.append(Leaf(r.where, name, r.key, "absent", None))
                continue
            if r.key is LENGTH:
                b.leaves.append(Leaf(r.where, name, None, "length", r.owner, len(r.owner)))
                continue
            b.value(name, r.owner, r.key, r.value, r.where, 0, r.direct)
        return cls(b.leaves, b.bound, b.notes, b.tensors, b.derive)

    def __call__(self) -> bool:
        """Does the state still hold what the trace read? (Rebinds what changed but is equal.)"""
        return self._fast() or self._exact()

    def distrust(self) -> None:
        """Compare by value from now on, until the state holds again: something changed in place
        where the fast check does not look (`w.resize_(1)` keeps the object and its storage,
        and an artifact's input assert saw it)."""
        with self._lock:
            self._fast = _never

    def __len__(self) -> int:
        return len(self.leaves)

    def _exact(self) -> bool:
        now = []
        for leaf, get in zip(self.leaves, self._getters):
            try:
                cur = get()
            except Exception:
                return False
            if not leaf_matches(leaf, cur):
                return False
            now.append(cur)
        if self._untied(now) is not None:
            return False
        with self._lock:
            changed: dict[int, Any] = {}
            for i, (leaf, cur) in enumerate(zip(self.leaves, now)):
                if leaf.kind in ("value", "tensor") and cur is not leaf.expect:
                    leaf.expect = cur
                    if leaf.kind == "tensor":
                        leaf.meta = tensor_meta(cur)
                    changed[i] = cur
                elif leaf.kind == "tensor" and has_ptr(cur) and data_ptr(cur) != leaf.ptr:
                    changed[i] = cur  # NOTE: the same object, its storage replaced (`.data =`)
                if leaf.kind == "tensor":
                    leaf.ptr = data_ptr(cur) if has_ptr(cur) else None
            if changed or self._fast is _never:
                self._fast = self._compile()
                for listener in self.on_rebind:
                    listener(changed)
        return True

    def failure(self) -> str | None:
        """The first leaf the state fails, with what it holds now, or None."""
        now = []
        for leaf, get in zip(self.leaves, self._getters):
            try:
                cur = get()
            except Exception as e:
                return f"{leaf.line()} failed ({type(e).__name__}: {e})"
            if not leaf_matches(leaf, cur):
                return f"{leaf.line()} failed (found {show_found(leaf, cur)})"
            now.append(cur)
        return self._untied(now)

    def _untied(self, now: list[Any]) -> str | None:
        """Leaves that read one tensor and now read two (`now`: each leaf's current value), in words, or None."""
        for group in self._tied:
            first = now[group[0]]
            other = next((i for i in group[1:] if now[i] is not first), None)
            if other is not None:
                return (f"{self.leaves[group[0]].where} and {self.leaves[other].where} were one tensor when traced "
                        "(tied) and are two now")
        return None

    def lines(self) -> list[str]:
        """One line a leaf, the program's own state first; the module machinery every call of a
        module reads (hook dicts, methods not shadowed on the instance) summed up in one line."""
        own = [leaf.line() for leaf in self.leaves if not is_machinery(leaf)]
        rest = len(self.leaves) - len(own)
        return own + ([f"{rest} checks of module machinery: hook dicts and methods (not shadowed on instances)"]
                      if rest else [])

    def requires_grad(self) -> list[str]:
        """The tensors read now requiring grad, by where they were read."""
        return [leaf.where for leaf in self.leaves if leaf.kind == "tensor" and leaf.expect.requires_grad]
