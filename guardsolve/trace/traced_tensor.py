"""`TracedTensor`: a real `torch.Tensor` subclass carrying its meta twin, whose sizes are SymInts over `SymGuard`s."""

from __future__ import annotations

from typing import Any
import torch
from guardsolve.errors import DataDependentError, TraceError, UnsupportedOpError
from guardsolve.ir.ops import Op
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.trace.op_checks import laid_out_as


META = torch.device("meta")


def symint(v: Any) -> Any:
    """A SymInt over `v` when it is a `SymGuard`, else `v`."""
    return torch.SymInt(v) if isinstance(v, SymGuard) and not v.const else (v.hint if isinstance(v, SymGuard) else v)


def _aliased(rec: Recorder, size: Any, name: str, kind: Op, index: int = 0) -> Any:
    """A size, stride or offset of a traced tensor, remembering which tensor and dim user code
    reads it from."""
    if isinstance(size, torch.SymInt) and isinstance(size.node, SymGuard) and not size.node.const:
        node = size.node
        alias = SymGuard(rec, node.hint, int, node.g, origin=(name, kind, index))
        alias.data = node.data
        return torch.SymInt(alias)
    return size


def name_data_sizes(rec: Recorder, m: torch.Tensor, name: str) -> None:
    """Remember, for each size of `m` an op counted from data, that tensor `name` has it at
    that dim (the first such tensor keeps it)."""
    for i, d in enumerate(m.shape):
        node = d.node if isinstance(d, torch.SymInt) else None
        if isinstance(node, SymGuard) and node.data is not None and node.g is not None:
            rec.data_sizes.setdefault(node.g, (name, Op.VAR_SIZE, i))


class TracedTensor(torch.Tensor):
    """A tensor of a trace: `eager` (what eager PyTorch computes), `symbolic` (a meta tensor over
    symbolic sizes), `tname` (its name in the tensor trace)."""

    eager: torch.Tensor
    symbolic: torch.Tensor
    tname: str
    rec: Recorder
    poisoned: str  # why this output cannot be used (its shape rule disagrees with eager), or ""

    @staticmethod
    def __new__(cls, real: torch.Tensor, meta: torch.Tensor, name: str, rec: Recorder,
                requires_grad: bool | None = None) -> "TracedTensor":
        laid = laid_out_as(real, meta)
        if laid is not real:
            rec.relaid, real = True, laid
        sizes = [_aliased(rec, s, name, Op.VAR_SIZE, i) for i, s in enumerate(meta.shape)]
        strides = [_aliased(rec, s, name, Op.VAR_STRIDE, i) for i, s in enumerate(meta.stride())]
        offset = _aliased(rec, meta.storage_offset(), name, Op.VAR_STORAGE_OFFSET)
        muted, rec.muted = rec.muted, True  # NOTE: PyTorch's checks on our stand-in, not on user code
        try:
            # NOTE: the storage size is the meta tensor's (a view's is its base's, as in eager);
            # left out, PyTorch computes it again from the sizes, ~14 size operations a tensor.
            out = torch.Tensor._make_wrapper_subclass(
                cls, sizes, strides=strides, storage_offset=offset, dtype=real.dtype,
                device=real.device, layout=real.layout,
                requires_grad=real.requires_grad if requires_grad is None else requires_grad,
                storage_size=meta.untyped_storage().nbytes())
        finally:
            rec.muted = muted
        # NOTE: composites read the lazy conjugate / negative bits from the wrapper
        # (`_fft_c2r` clones a conjugated input first); without them the kernel gets a
        # conjugate view it does not resolve.
        if real.is_conj():
            torch._C._set_conj(out, True)
        if real.is_neg():
            torch._C._set_neg(out, True)
        out.eager, out.symbolic, out.tname, out.rec = real, meta, name, rec
        out.poisoned = ""
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    # NOTE: autograd facts of a tensor an op made. A trace records no autograd graph, so the
    # wrapper of an op's output never requires grad, where eager's may (grad mode on, an input
    # requiring grad): a program branching on it (`if h.requires_grad: h.register_hook(...)`)
    # would take the other branch, silently. Where eager's may (`derived`: the op ran in grad
    # mode on an input that requires grad or may), reading them raises, and the call runs
    # eagerly; otherwise eager's answer is the wrapper's (no grad, a leaf, no grad_fn).
    derived: bool = False  # an op's output whose eager counterpart may require grad
    # NOTE: whether it does: the op run again on meta tensors under grad mode, its inputs requiring
    # grad as eager's do (autograd's own answer: a factory `*_like`, `detach`, an integer output
    # do not); None where that run failed
    eager_grad: bool | None = None

    def _eager_grad(self, what: str) -> bool:
        """Eager's `requires_grad` of this tensor; raises where it is not known."""
        if not self.derived or self.rec.muted:
            return bool(torch._C.TensorBase.requires_grad.__get__(self))  # type: ignore[attr-defined]
        if self.eager_grad is None or (what == "grad_fn" and self.eager_grad):
            loc = self.rec.location()
            why = ("the program hooks the gradient of a tensor it computed in grad mode" if what in _HOOKS else
                   "the program reads an autograd fact of a tensor it computed in grad mode")
            raise UnsupportedOpError(f"Tensor.{what}", f"{why}, which a trace does not record",
                                     str(loc) if loc is not None else "")
        return self.eager_grad

    @property  # type: ignore[misc]
    def requires_grad(self) -> bool:  # type: ignore[override]
        return self._eager_grad("requires_grad")

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        torch._C.TensorBase.requires_grad.__set__(self, value)  # type: ignore[attr-defined]

    @property  # type: ignore[misc]
    def grad_fn(self) -> Any:  # type: ignore[override]
        self._eager_grad("grad_fn")
        return torch._C.TensorBase.grad_fn.__get__(self)  # type: ignore[attr-defined]

    @property  # type: ignore[misc]
    def is_leaf(self) -> bool:  # type: ignore[override]
        return not self._eager_grad("is_leaf")

    def register_hook(self, hook: Any) -> Any:  # type: ignore[override]
        """A hook on a tensor whose eager counterpart requires grad would be dropped (a trace has
        no autograd graph): raises, and the call runs eagerly; else PyTorch's own error."""
        if self._eager_grad("register_hook"):
            self.eager_grad = None
            self._eager_grad("register_hook")
        return super().register_hook(hook)

    def retain_grad(self) -> None:  # type: ignore[override]
        if self._eager_grad("retain_grad"):
            self.eager_grad = None
            self._eager_grad("retain_grad")
        return super().retain_grad()

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise TraceError(f"{func}: a traced tensor was used outside its trace")

    def __repr__(self) -> str:  # type: ignore[override]
        return f"TracedTensor({self.tname}, {self.eager!r})"

    def __str__(self) -> str:  # type: ignore[override]
        # NOTE: `print(x)`, `str(x)` in the program: a string of its values, which no guard checks
        # (and a replay would not print): the call runs eagerly
        raise DataDependentError(f"str() of {self.tname} reads its values (print, str or an f-string of a tensor)")

    def __format__(self, spec: str) -> str:  # type: ignore[override]
        raise DataDependentError(f"format() of {self.tname} reads its values (an f-string of a tensor)")

    # NOTE: a size user code reads (a constant one too: a plain int, with no trace node) is one
    # the rest of the trace may be computed from: a probe's replay must not change it (`trace.local`)
    def _seen(self) -> None:
        rec = self.rec
        if rec.depth == 0 and not rec.muted:
            rec.sizes_seen.add(self.tname)

    def size(self, *args: Any) -> Any:  # type: ignore[override]
        self._seen()
        return super().size(*args)

    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        self._seen()
        return super().shape

    def numel(self) -> Any:  # type: ignore[override]
        self._seen()
        return super().numel()

    def nelement(self) -> Any:  # type: ignore[override]
        self._seen()
        return super().nelement()

    @property
    def nbytes(self) -> Any:  # type: ignore[override]
        self._seen()
        return super().nbytes

    # NOTE: indexing reads sizes in C++ (bounds, and a slice of the whole dim is no slice)
    def __getitem__(self, index: Any) -> Any:
        self._seen()
        return super().__getitem__(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._seen()
        super().__setitem__(index, value)

    # NOTE: a stride, contiguity or storage offset user code reads is a fact about the input's
    # layout the trace now depends on; the cache checks it (the values may be constants here).
    def stride(self, *args: Any) -> Any:  # type: ignore[override]
        self.rec.strides_read = self.rec.user_layout = True
        return super().stride(*args)

    def storage_offset(self) -> Any:  # type: ignore[override]
        self.rec.strides_read = self.rec.user_layout = True
        return super().storage_offset()

    def data_ptr(self) -> int:  # type: ignore[override]
        self.rec.strides_read = self.rec.user_layout = True
        return self.eager.data_ptr()

    def is_contiguous(self, *args: Any, **kwargs: Any) -> bool:  # type: ignore[override]
        self.rec.layout_observed = self.rec.user_layout = True
        return super().is_contiguous(*args, **kwargs)

    def tolist(self) -> Any:  # type: ignore[override]
        """Tensor data as Python values: a value guard that the data is what it was."""
        values = self.eager.tolist()
        bool((self == torch.tensor(values, dtype=self.dtype)).all())
        return values


# NOTE: PyTorch's argument parser names a wrong argument's type by its class name ("must be tuple
# of Tensors, not Tensor"): a traced tensor is a Tensor to the user's code, and its errors read so.
TracedTensor.__name__ = "Tensor"


_HOOKS = frozenset({"register_hook", "retain_grad"})
