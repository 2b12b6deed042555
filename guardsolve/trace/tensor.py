"""The traced tensor: a real `torch.Tensor` subclass whose sizes are SymInts over `SymGuard`s.

A `TracedTensor` is a wrapper (`_make_wrapper_subclass`, as FakeTensor and subclass_zoo's
wrappers are): it carries the real tensor the trace computes and a meta tensor whose sizes
are symbolic. While `trace` runs, `TracingMode` sees every aten op, including factories like
`torch.zeros(x.shape[0], 4)`: it runs the op on the real tensors (the output), runs PyTorch's
shape rule on the meta tensors (the symbolic sizes, and a guard for every decision), and
records the call in the tensor trace:

    v1 = aten.mul.Tensor(x, 2)
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import zlib

import torch
from torch._ops import _len_torch_dispatch_stack_pre_dispatch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from guardsolve.errors import DataDependentError, GuardsolveError, TraceError, UnsupportedOpError, eager_error
from guardsolve.ir.aten import Ref, qualified_name, refs
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Args, Kwargs, Op, OpName
from guardsolve.guards.rules import takes_device
from guardsolve.guards.symbolic import Recorder, SymGuard, recorded_answer
from guardsolve.trace.state.active import is_state


_aten = torch.ops.aten
# Ops that hand tensor data to Python: a value bailout, or an error without value guards.
_ITEM = frozenset({_aten._local_scalar_dense.default, _aten.item.default})
_READS_DATA = {_aten._local_scalar_dense.default: ".item()", _aten.item.default: ".item()", _aten.is_nonzero.default: "bool(tensor)",
               _aten.equal.default: "torch.equal"}
_META = torch.device("meta")


# Views that need compatible strides (eager raises otherwise): the trace holds only for inputs
# laid out as the example's.
# NOTE: `as_strided` and `set_` are not among them: they replace a tensor's strides without
# reading them, their sizes are their arguments, and a replay runs them on the new input itself.
_LAYOUT_OPS = frozenset(f for f in (
    _aten.view.default, _aten.view.dtype, _aten._unsafe_view.default, _aten._reshape_alias.default,
    _aten.view_as_complex.default, _aten._mkldnn_reshape.default))


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


def _name_data_sizes(rec: Recorder, m: torch.Tensor, name: str) -> None:
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
        laid = _laid_out_as(real, meta)
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


class TracingMode(TorchDispatchMode):
    """Sees every aten op while a trace runs: real result, PyTorch's shape rule, a trace node."""

    def __init__(self, rec: Recorder, names: dict[int, str]) -> None:
        super().__init__()
        self.rec = rec
        self.names = names  # id(tensor) -> a readable name for constants (module paths)
        self.constants: dict[str, torch.Tensor] = {}
        self._const_names: dict[int, str] = {}
        self._made: dict[int, weakref.ref[torch.Tensor]] = {}  # tensors untraced ops made during the trace
        self._const_meta: dict[int, torch.Tensor] = {}
        # NOTE: the CPU generator's state after the last recorded random op (at first, as the
        # trace starts): a random op that finds another state follows a reseed (`manual_seed`)
        # or a random call the trace does not record, which no replay reproduces
        self._rng = torch.default_generator.get_state()
        self.reseeded: str | None = None  # why a replay cannot draw eager's random values, if so
        # NOTE: the grad mode the trace started in, and the first recorded op that ran in the other
        # (`with torch.no_grad():` inside a training forward): a joint graph would differentiate it
        self._grad = torch.is_grad_enabled()
        self.grad_switch: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        rec = self.rec
        outer = rec.depth == 0
        record = outer and rec.calls is not None
        if outer:
            rec.loc = rec.location()
            rec.op = func  # NOTE: the op whose shape rule asks what is recorded now
            rec.unbacked_at = rec._unbacked
            if record:
                assert rec.trace is not None
                rec.capture, rec.pending, first = [], None, len(rec.trace.nodes)
        rec.depth += 1
        try:
            # NOTE: without value guards `.item()` is an unbacked value (torch.export's too):
            # recorded, computed again by a replay, and any decision on it raises
            # NOTE: `item` arrives whole (below autograd): eager's kernel checks it has one element,
            # and its rule (the composite over `_local_scalar_dense`) makes that a guard
            if func in _READS_DATA and (func not in _ITEM or rec.value_guards and not _reads_traced(args)):
                return self._read_data(func, args, kwargs or {})
            out = self._call(func, args, kwargs or {})
            if record:
                assert rec.calls is not None and rec.trace is not None
                # NOTE: the call's own nodes, the constants it uses first (`var_param`) aside
                ops = [i for i in range(first, len(rec.trace.nodes)) if rec.trace.nodes[i].op is Op.ATEN]
                if ops or rec.capture:
                    pending = rec.pending if len(ops) == 1 else None  # NOTE: a composite's parts: not one rule
                    rec.calls.append(Call(func, ops[0] if ops else first, len(ops), rec.loc, rec.capture,
                                          *(pending if pending is not None and len(pending) == 5
                                            else (None, None, None, None, None))))
            return out
        finally:
            rec.depth -= 1
            if outer:
                rec.loc = rec.op = None
                if record:
                    rec.capture = rec.pending = None

    # -- one op ---------------------------------------------------------------------------

    def _call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        rec = self.rec
        flat, spec = flatten((args, kwargs))
        # NOTE: one pass over the arguments: whose they are, whether any is traced (ops on
        # module parameters and buffers are recorded too, not folded into new constants, so a
        # replay sees in-place updates of the weights), and their eager values
        mine = foreign = traced = False
        poisoned: TracedTensor | None = None
        real_flat = []
        for a in flat:
            if isinstance(a, TracedTensor):
                traced = True
                if a.rec is rec:
                    mine = True
                    if a.poisoned and poisoned is None:
                        poisoned = a
                else:
                    foreign = True
                real_flat.append(a.eager)
            elif isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
                node = a.node
                if isinstance(node, SymGuard) and (isinstance(a, torch.SymInt) or node.data is not None):
                    if node.rec is rec:
                        mine = True
                    else:
                        foreign = True
                if node.is_symbolic() and (isinstance(a, torch.SymInt) or node.data is not None):
                    traced = True
                real_flat.append(node.hint)
            else:
                if isinstance(a, torch.Tensor) and (id(a) in self.names or is_state(a)):
                    traced = True  # NOTE: a parameter, or a tensor the program read as state
                real_flat.append(a)
        if foreign and not mine:  # NOTE: another trace's business (one starting inside this one)
            with _outside_modes():
                return func(*args, **kwargs)
        if foreign:
            raise TraceError(f"{qualified_name(func)}: an input belongs to a different trace; values cannot "
                             f"cross traces{self._at()}")
        if poisoned is not None:
            raise UnsupportedOpError(qualified_name(func), f"its input {poisoned.tname} {poisoned.poisoned}",
                                     self._where())
        real_args, real_kwargs = unflatten(real_flat, spec)

        seeded = traced and self.reseeded is None and torch.Tag.nondeterministic_seeded in func.tags
        if self.reseeded is None and any(isinstance(a, torch.Generator) for a in flat):
            # NOTE: a generator of the program's own: a replay neither draws from it nor advances it
            # (a draw of constant shape was a constant of the trace: each call gave the first draw)
            self.reseeded = f"{qualified_name(func)} draws from a torch.Generator the program passes{self._at()}"
        if traced and self.grad_switch is None and torch.is_grad_enabled() is not self._grad:
            self.grad_switch = (f"{qualified_name(func)} runs with grad mode {'on' if not self._grad else 'off'} inside "
                                f"a function called with it {'on' if self._grad else 'off'}{self._at()}")

        def eager() -> Any:
            if seeded and not torch.equal(torch.default_generator.get_state(), self._rng):
                self.reseeded = (f"the random op {qualified_name(func)} draws from a generator state set outside "
                                 f"the trace (torch.manual_seed, or a random call it does not record){self._at()}")
            try:
                # NOTE: an enclosing trace must not see our inner work, and eager's kernels run as
                # eager picks them (no Python decompositions: `lstm`'s takes mkldnn at batch 0)
                with _outside_modes(), _as_eager(traced), _threads_for(real_flat):
                    return func(*real_args, **real_kwargs)
            except Exception as e:
                raise eager_error(e, self._at()) from e
            finally:
                if seeded:
                    self._rng = torch.default_generator.get_state()

        if rec.meta_first and traced and not _sized_by_data(func):
            # NOTE: a trace at sizes the user never called (`solve.paths`): the shape rule first,
            # so no eager kernel runs at sizes its rule rejects (eager `native_batch_norm` writes
            # out of bounds where its meta rule raises). Not for an op whose output size the
            # data decides: its rule reads that size from eager's output (without it, a stand-in
            # that eager's disagrees with, and the probe failed where the trace is the same)
            done, meta_out = self._meta_call(func, args, kwargs, flat, spec, None)
            if done:
                return meta_out
            real_out = eager()
        else:
            real_out = eager()
            if not traced:
                # NOTE: made here (a C++ composite's `scalar_tensor(n)`, a factory of constant
                # sizes): a constant whose value this trace decides, unlike a captured tensor
                for x in flatten(real_out)[0]:
                    if isinstance(x, torch.Tensor):
                        self._made[id(x)] = weakref.ref(x)
                return real_out
            done, meta_out = self._meta_call(func, args, kwargs, flat, spec, real_out)
            if done:
                return meta_out
        template = unflatten([self._template(a) for a in flat], spec)
        return self._wrap(func, real_out, meta_out, template, flat, spec)

    def _meta_call(self, func: Any, args: Any, kwargs: dict[str, Any], flat: list[Any], spec: Any,
                   real_out: Any) -> tuple[bool, Any]:
        """PyTorch's shape rule on the meta stand-ins: (False, its output), or (True, the op's
        result) where a CompositeImplicit op decomposed over the traced tensors instead."""
        if func in _LAYOUT_OPS:
            self.rec.layout_observed = True
        metas = [self._meta(a) for a in flat]
        meta_args, meta_kwargs = unflatten(metas, spec)
        if takes_device(func):
            meta_kwargs = {**meta_kwargs, "device": _META}
        # NOTE: an in-place op that changes a tensor's sizes or strides (`t_`, `resize_`) changes
        # the meta inputs recorded for earlier calls: no call of this trace replays alone then
        mutable = self.rec.calls is not None and func._schema.is_mutable
        before = _layouts(flat) if mutable else None
        try:
            self.rec.real = real_out
            with _outside_modes():
                meta_out = self.rec.rules(func, meta_args, meta_kwargs)
            if mutable and before != _layouts(flat):
                self.rec.local_blocked = f"{qualified_name(func)} changes a tensor's sizes or strides in place"
            if self.rec.depth == 1 and self.rec.calls is not None:
                self.rec.pending = (metas, spec, [a.tname if isinstance(a, TracedTensor) else None for a in flat],
                                    meta_out)
        except UnsupportedOpError as e:
            if str(e).endswith(self._where()):
                raise
            raise UnsupportedOpError(qualified_name(func), e.reason, self._where()) from e
        except GuardsolveError:
            raise
        except Exception as e:
            if _decomposable(func) and (real_out is not None or self.rec.meta_first):
                # NOTE: a CompositeImplicit op whose decomposition fails on meta tensors (it reads
                # an argument's data: `narrow(x, 0, t, 2)`, `tensor_split(x, t)`; PyTorch's `_refs`
                # refuse `hinge_embedding_loss`'s integer reduction) decomposes here instead, over
                # the traced tensors: its parts are traced ops (eager's own kernels, as its eager
                # composite calls them). In a probe's meta-first order too, as a fresh trace
                # would: each part's own rule still runs before its kernel
                self.rec.real = None
                with self:
                    return True, func.decompose(*args, **kwargs)
            from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

            if (isinstance(e, (DataDependentOutputException, DynamicOutputShapeException))
                    or torch.Tag.dynamic_output_shape in func.tags):
                raise DataDependentError(f"{qualified_name(func)}: its output shape depends on tensor data"
                                         f"{self._at()}") from e
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if real_out is None:  # NOTE: a probe's meta-first order: the sizes themselves may be wrong
                raise UnsupportedOpError(qualified_name(func), f"its shape rule rejects these sizes "
                                         f"({type(e).__name__}: {first})", self._where()) from e
            raise UnsupportedOpError(qualified_name(func), f"PyTorch's shape rule fails over symbolic sizes "
                                     f"({type(e).__name__}: {first})", self._where()) from e
        finally:
            self.rec.real = None
        return False, meta_out

    def _wrap(self, func: Any, real_out: Any, meta_out: Any, template: Any, flat: list[Any], spec: Any = None) -> Any:
        rec = self.rec
        assert rec.trace is not None
        real_leaves, out_spec = flatten(real_out)
        meta_leaves, _ = flatten(meta_out)
        if len(real_leaves) != len(meta_leaves):
            raise UnsupportedOpError(qualified_name(func), "PyTorch's shape rule returns a different structure "
                                     "than eager", self._where())
        inputs = {id(a.eager): a for a in flat if isinstance(a, TracedTensor)}
        may_grad = torch.is_grad_enabled() and any(_requires_grad(a) for a in flat if isinstance(a, torch.Tensor))
        grads = _eager_requires_grad(func, flat, spec, len(real_leaves)) if may_grad else None
        aliases: list[bool] = []  # NOTE: eager handed an input back as this output (`trace.local` checks it)
        names: list[str] = []
        out: list[Any] = []
        for k, (r, m) in enumerate(zip(real_leaves, meta_leaves)):
            if r is None and isinstance(m, torch.Tensor):
                # NOTE: an output eager leaves undefined (mkldnn's workspace): named, as the
                # shape rule's output is, so a replay binds the same names
                names.append(rec.trace.fresh("v"))
                out.append(None)
            elif isinstance(r, torch.Tensor):
                name = rec.trace.fresh("v")
                names.append(name)
                same = inputs.get(id(r))
                aliases.append(same is not None)
                disagree = _disagreement(func, r, m)
                if disagree is None:
                    # NOTE: a trace records no autograd graph: its outputs do not require grad (a
                    # view of a parameter would, and its wrapper's autograd metadata would then
                    # clash with the view PyTorch makes of it on our way out)
                    if same is not None:
                        out.append(same)
                    else:
                        made = TracedTensor(r, m, name, rec, requires_grad=False)
                        if rec._unbacked > rec.unbacked_at:
                            _name_data_sizes(rec, m, name)
                        if may_grad:
                            made.derived = True
                            made.eager_grad = None if grads is None else grads[k]
                        out.append(made)
                else:
                    # NOTE: e.g. native_batch_norm's saved statistics in eval mode: eager's CPU
                    # kernel returns them empty, the meta rule full-size. Such an output traces
                    # only as long as nothing uses it, its sizes included: reading one raises.
                    why = f"{disagree}; guardsolve cannot trace uses of it"
                    sizes = [torch.SymInt(rec.unbacked("", n, f"a size of {name}, whose {why}")) for n in r.shape]
                    strides = [torch.SymInt(rec.unbacked("", s, f"a stride of {name}, whose {why}")) for s in r.stride()]
                    with _outside_modes():
                        stand_in = torch.empty_strided(sizes, strides, dtype=r.dtype, device=_META)
                    t = TracedTensor(r, stand_in, name, rec)
                    t.poisoned = why
                    out.append(t)
            elif isinstance(m, (torch.SymInt, torch.SymBool, torch.SymFloat)) and m.node.is_symbolic():
                node = m.node
                if isinstance(node, SymGuard) and node.data is not None and node.t is None and node.origin is None:
                    # NOTE: a value the op reads from tensor data (`.item()`): named by this
                    # call, so user code and later ops refer to it and a replay recomputes it
                    node.t = rec.trace.fresh("v")
                    names.append(node.t)
                    out.append(m)
                    continue
                raise UnsupportedOpError(qualified_name(func), "returns a symbolic scalar, which guardsolve "
                                         "does not trace", self._where())
            else:
                if r is not None and rec.calls is not None:
                    # NOTE: eager's value reaches user code unrecorded (`is_same_size`): only a
                    # fresh trace sees what user code does with it at other sizes
                    rec.local_blocked = f"{qualified_name(func)} hands eager's {type(r).__name__} to Python"
                out.append(r)
        args, kwargs = template
        # NOTE: an op that counted a size from data (`nonzero`): a decision on its outputs' sizes
        # is a value bailout (`guards.shape.value_bailouts`), and a compiled entry cuts there
        by_data = rec._unbacked > rec.unbacked_at
        node = Node(Op.ATEN, tuple(refs(template)), tuple(names),
                    {"fn": OpName(qualified_name(func)), "args": Args(args), "kwargs": Kwargs(kwargs)},
                    {"loc": rec.loc, **({"data_sized": True} if by_data else {})})
        rec.trace.append(node)
        if rec.pending is not None and rec.depth == 1:
            rec.pending = (*rec.pending[:4], aliases)
        return unflatten(out, out_spec)

    def _read_data(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        (t, *_rest) = args
        what = _READS_DATA[func]
        tensors = [a for a in flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        if not any(isinstance(a, TracedTensor) for a in tensors):
            # NOTE: data of tensors the trace made from constants is the trace's own; a captured
            # tensor's (a buffer's `float(self.n)`) is state whose value a later call may change:
            # it is read through the trace, so its value bailout is checked at each call
            if all(self._made_here(a) for a in tensors):
                return func(*args, **kwargs)
            if not isinstance(t, TracedTensor) and isinstance(t, torch.Tensor):
                t = self._call(_aten.alias.default, (t,), {})
                args = (t, *_rest)
        if not self.rec.value_guards:
            raise DataDependentError(f"{what} reads tensor data, which shape guards cannot check{self._at()}; "
                                     "pass value_guards=True to trace() or guarded() (--value-guards on the command line) "
                                     "to record a value bailout")
        flat, spec = flatten((args, kwargs))
        real_args, real_kwargs = unflatten([self._real(a) for a in flat], spec)
        with _outside_modes():
            value = func(*real_args, **real_kwargs)
        rec = self.rec
        assert rec.trace is not None
        probe = t if func not in _ITEM else self._call(_aten.eq.Scalar, (t, value), {})
        if func is _aten.equal.default:
            probe = self._call(_aten.eq.Tensor, tuple(args), {})
            probe = self._call(_aten.all.default, (probe,), {})
        loc = rec.loc
        flag = rec.trace.emit(Op.VAR_TO_BOOL, (probe.tname,), meta={"loc": loc})
        expect = True if func in _ITEM else bool(value)
        recorded = recorded_answer(rec.trace) if func not in _ITEM else None
        if recorded is not None and recorded != expect:
            # NOTE: a trace at other sizes (a probe) takes the example's answer to a decision on
            # data: the data drawn at those sizes must not decide their size guards (a replay
            # checks the value bailout on real data); the flip is noted for the report
            rec.trace.meta.setdefault("value_flips", []).append(loc)
            expect = value = recorded
        rec.trace.emit(Op.BOOL_BAILOUT, (flag,), meta={"loc": loc}, expect=expect)
        opaque = rec.guards.emit(Op.BOOL_OPAQUE, (), meta={"loc": loc}, name=flag)
        rec.g_bailout(opaque, expect, loc)
        return value

    # -- arguments ------------------------------------------------------------------------

    def _real(self, a: Any) -> Any:
        if isinstance(a, TracedTensor):
            return a.eager
        if isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return a.node.hint
        return a

    def _meta(self, a: Any) -> Any:
        if isinstance(a, TracedTensor):
            return a.symbolic
        if isinstance(a, torch.Tensor):
            m = self._const_meta.get(id(a))
            if m is None:
                m = self._const_meta[id(a)] = torch.empty_strided(
                    a.shape, a.stride(), dtype=a.dtype, device=_META)
            return m
        if isinstance(a, torch.device):
            return _META
        return a

    def _template(self, a: Any) -> Any:
        if isinstance(a, TracedTensor):
            return Ref(a.tname)
        if isinstance(a, torch.Tensor):
            return Ref(self.constant(a))
        if isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            node = a.node
            return Ref(self.rec.t_name(node)) if node.is_symbolic() else node.hint
        return a

    def _made_here(self, t: torch.Tensor) -> bool:
        """Whether the trace made `t` (a tensor of constants it computed), not captured it."""
        made = self._made.get(id(t))
        return made is not None and made() is t

    def constant(self, t: torch.Tensor) -> str:
        """The trace name of a tensor that is not an input (a parameter, a captured tensor)."""
        name = self._const_names.get(id(t))
        if name is None:
            rec = self.rec
            assert rec.trace is not None
            base = "".join(c if c.isalnum() or c == "_" else "_" for c in self.names.get(id(t), "const"))
            base = base if base.isidentifier() else "p_" + base
            name = base if base != "const" and not rec.trace.taken(base) else rec.trace.fresh(base + ("" if base == "const" else "_"))
            # NOTE: a small tensor made during the trace (a C++ composite's `scalar_tensor(n)` of
            # a size it read as an int: `cov`'s observation count) carries its value's checksum,
            # so a trace at other sizes whose constant differs is another trace. A captured
            # tensor (a parameter, running statistics an op updates in place) is the same
            # object in every trace: its name stands for it.
            made = self._made.get(id(t))
            crc = _checksum(t) if made is not None and made() is t else None
            extra = {} if crc is None else {"crc": crc}
            rec.trace.emit(Op.VAR_PARAM, (), out=name, name=name, shape=tuple(t.shape), dtype=dtype_name(t.dtype),
                           **extra)
            self._const_names[id(t)] = name
            self.constants[name] = t
        return name

    def _at(self) -> str:
        loc = self.rec.loc
        return f" — {loc}" if loc is not None else ""

    def _where(self) -> str:
        return str(self.rec.loc) if self.rec.loc is not None else ""


class PresentsAsTracing:
    """Library code asks `torch.compiler.is_compiling()` / `is_exporting()` to skip fast paths
    that read tensor data (transformers' mask helpers, `nn.MultiheadAttention`'s fast path);
    guardsolve answers as non-strict torch.export does while any trace runs.

    The flags are torch's process-wide state, so concurrent traces share one count of how
    many are running; the last one out restores them.
    """

    _FLAGS = ("_is_compiling_flag", "_is_exporting_flag")
    _lock = threading.Lock()
    _active = [0]  # NOTE: mirrors torch's global flags; mutated only under the lock
    _saved: list[Any] = []

    def __enter__(self) -> None:
        import torch.compiler as tc

        with self._lock:
            if self._active[0] == 0:
                type(self)._saved = [getattr(tc, f) for f in self._FLAGS]
                for f in self._FLAGS:
                    setattr(tc, f, True)
            self._active[0] += 1

    def __exit__(self, *exc: Any) -> None:
        import torch.compiler as tc

        with self._lock:
            self._active[0] -= 1
            if self._active[0] == 0:
                for f, v in zip(self._FLAGS, self._saved):
                    setattr(tc, f, v)


_NO_MODES = contextlib.nullcontext()
# NOTE: an eager kernel on tensors this small gains nothing from intra-op threads, and loses
# much when another process holds a core: oneDNN's and MKL's OpenMP regions wait at their
# barriers for a thread the scheduler has parked (nn.LSTM's mkldnn_rnn_layer on a (2, 5, 8)
# input: 0.2 ms alone, ~90 ms with the other core busy; a whole LSTM trace 18 -> 120 ms).
# make_fx runs no kernels, so a loaded machine made guardsolve look slower than it.
_ONE_THREAD_BELOW = 1 << 16  # elements of the largest tensor argument


class _one_thread:
    """Intra-op parallelism off while small eager calls run, restored after the last one.

    `torch.set_num_threads` is process-wide state: concurrent traces share one count of the
    calls running, the first saves the setting (read while no trace holds it at 1) and the
    last restores it. Other threads' kernels meanwhile run on one thread too; a thread that
    starts using intra-op parallelism inside such a window keeps PyTorch's count of 1 (a
    speed effect only).
    """

    _lock = threading.Lock()
    _active = [0]  # NOTE: mirrors torch's global setting; mutated only under the lock
    _saved = [1]

    def __enter__(self) -> None:
        with self._lock:
            if self._active[0] == 0:
                self._saved[0] = torch.get_num_threads()
                if self._saved[0] != 1:
                    torch.set_num_threads(1)
            self._active[0] += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active[0] -= 1
            if self._active[0] == 0 and self._saved[0] != 1:
                torch.set_num_threads(self._saved[0])


def _threads_for(real_flat: list[Any]) -> Any:
    """One thread for an eager call whose tensors are all small (see `_ONE_THREAD_BELOW`); a
    factory (no tensor argument) keeps its threads, its size is in its arguments."""
    small = False
    for a in real_flat:
        if isinstance(a, torch.Tensor):
            if a.numel() >= _ONE_THREAD_BELOW:
                return _NO_MODES
            small = True
    return _one_thread() if small else _NO_MODES


def _reads_traced(args: Any) -> bool:
    """Does `.item()` read a traced tensor (computed from the inputs)? Its value is then a
    symbol of the trace, not a pinned constant: what user code decides on it is a value
    bailout (`SymGuard._traced_data`), what it passes to ops a runtime value of the replay."""
    return bool(args) and isinstance(args[0], TracedTensor)


# NOTE: keyed on the op alone (a few hundred OpOverloads); never on arguments, which hold tensors
@functools.lru_cache(maxsize=None)
def _sized_by_data(func: Any) -> bool:
    """Does the op's output size or value come from tensor data (`nonzero`, `index` with a
    mask, `.item()`)? Its eager kernel computes the size its rule takes."""
    return torch.Tag.dynamic_output_shape in func.tags or torch.Tag.data_dependent_output in func.tags


@functools.lru_cache(maxsize=None)
def _decomposable(func: Any) -> bool:
    """Is `func` a CompositeImplicit op (no kernel of its own for the CPU)?"""
    name = func.name()
    return (func._can_decompose()
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, torch._C.DispatchKey.CPU)
            and not torch._C._dispatch_has_kernel_for_dispatch_key(name, torch._C.DispatchKey.CompositeExplicitAutograd))


_K = torch._C.DispatchKey
# NOTE: keys PyTorch excludes inside `__torch_dispatch__` (every key above Python) that change
# what a kernel computes: lazy conjugate and negative bits, and zero tensors
_EAGER_KEYS = (torch._C.DispatchKeySet(_K.Conjugate) | torch._C.DispatchKeySet(_K.Negative)
               | torch._C.DispatchKeySet(_K.ZeroTensor))
_VIEW_KEYS = _EAGER_KEYS | torch._C.DispatchKeySet(_K.ADInplaceOrView)


def _as_eager(traced: bool) -> Any:
    """Eager's dispatch for a real call made from inside the mode.

    Inside `__torch_dispatch__` PyTorch excludes every key above Python. An op that reaches us
    whole (`fft_hfft2`, any CompositeImplicit op) runs its composite on the real tensors: a lazy
    conjugate it makes inside would never be resolved (wrong values), and an in-place update of
    a view it makes would skip ADInplaceOrView (`rnn_tanh`: values off by 1e-7). The real call
    runs with those keys back, and without PyTorch's Python dispatcher (its Python
    decompositions are shape rules, not eager's kernels: `lstm`'s takes mkldnn at batch 0).
    """
    include = torch._C._dispatch_tls_local_include_set().remove(_K.PythonDispatcher)
    # NOTE: ADInplaceOrView only where the outputs are wrapped in traced tensors: an output we
    # hand back as it is (an op on parameters alone: `weight.chunk(3)`) gets PyTorch's view
    # metadata on our way out, and already having it from inside is an error
    exclude = torch._C._dispatch_tls_local_exclude_set() - (_VIEW_KEYS if traced else _EAGER_KEYS)
    return torch._C._ForceDispatchKeyGuard(include, exclude)


_HOOKS = frozenset({"register_hook", "retain_grad"})
_AUTOGRAD_KEYS = tuple(getattr(torch._C.DispatchKey, k) for k in (
    "ADInplaceOrView", "AutogradOther", "AutogradNestedTensor", "AutogradCPU", "AutogradMeta", "AutogradFunctionality")
    if hasattr(torch._C.DispatchKey, k))


def _requires_grad(a: torch.Tensor) -> bool:
    """Eager's `requires_grad` of an op's argument (a traced tensor's as its eager counterpart's,
    where known; unknown counts as True)."""
    if isinstance(a, TracedTensor):
        if a.derived:
            return a.eager_grad is not False
        return bool(torch._C.TensorBase.requires_grad.__get__(a))  # type: ignore[attr-defined]
    return a.requires_grad


def _eager_requires_grad(func: Any, flat: list[Any], spec: Any, n: int) -> list[bool] | None:
    """Which of the op's `n` outputs require grad in eager: the op run on meta tensors shaped as
    its tensor arguments, each requiring grad as eager's does, under grad mode; None where that
    run fails or gives another number of outputs."""
    if spec is None:
        return None
    args: list[Any] = []
    for a in flat:
        if isinstance(a, torch.Tensor):
            real = a.eager if isinstance(a, TracedTensor) else a
            m = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=_META)
            if _requires_grad(a) and (real.dtype.is_floating_point or real.dtype.is_complex):
                m.requires_grad_(True)
            args.append(m)
        elif isinstance(a, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            args.append(a.node.hint)
        else:
            args.append(a)
    # NOTE: inside `__torch_dispatch__` autograd's keys are excluded (dispatch is below it): the
    # meta run includes them again, so autograd decides its outputs' `requires_grad`
    keep = torch._C._dispatch_tls_local_exclude_set()
    for key in _AUTOGRAD_KEYS:
        keep = keep.remove(key)
    try:
        with _outside_modes(), torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), keep), \
                torch.enable_grad():
            m_args, m_kwargs = unflatten(args, spec)
            out = func(*m_args, **m_kwargs)
    except Exception:  # NOTE: no meta kernel, or one that needs data: the answer stays unknown
        return None
    leaves = flatten(out)[0]
    if len(leaves) != n:
        return None
    return [isinstance(x, torch.Tensor) and x.requires_grad for x in leaves]


def _outside_modes() -> Any:
    """`_disable_current_modes()`, without its cost (~14 us: imports and a generator) when no
    dispatch mode is active, the usual case inside our own `__torch_dispatch__`."""
    if torch._C._len_torch_dispatch_stack() or _len_torch_dispatch_stack_pre_dispatch():
        return _disable_current_modes()
    return _NO_MODES


def _layouts(flat: list[Any]) -> list[Any]:
    """The sizes, strides and offsets of the traced tensors among `flat`, by guard-graph name."""
    from guardsolve.guards.rule_base import sym_of

    return [(tuple(map(sym_of, a.symbolic.shape)), tuple(map(sym_of, a.symbolic.stride())),
             sym_of(a.symbolic.storage_offset())) for a in flat if isinstance(a, TracedTensor)]


@dataclass(eq=False)
class Call:
    """One torch call of a trace: the op nodes it recorded (`nodes` of them, the first at index
    `first` of the trace), the user line, the decisions its shape rule made (`asked`: guard-graph
    name, answer), and, when it recorded one node through one rule, that rule's meta inputs
    (`flat`, unflattened by `spec`; `names`: the trace's name of each traced one) and outputs,
    and which outputs eager's kernel handed back as an input (else None: a composite decomposed
    over traced tensors, whose parts are calls of their own)."""

    func: Any
    first: int
    nodes: int
    loc: Any
    asked: list[tuple[str, bool]]
    flat: list[Any] | None = None
    spec: Any = None
    names: list[str | None] | None = None
    out: Any = None
    aliased: list[bool] | None = None  # each tensor output: eager handed an input back as it


def dtype_name(dtype: torch.dtype) -> str:
    """`float32` for `torch.float32`."""
    return str(dtype).removeprefix("torch.")


def _hints(sizes: Any) -> tuple[int, ...]:
    return tuple(s.node.hint if isinstance(s, torch.SymInt) else s for s in sizes)


def _laid_out_as(real: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """`real`, copied into the strides the traced tensor claims where they differ.

    NOTE: PyTorch's C++ composites decide from the wrapper's strides (`indices.contiguous()`
    is a no-op on a tensor that says it is contiguous) and then run kernels on the eager
    tensor; `_embedding_bag_forward_only` on strided indices computes garbage. A traced input is
    contiguous (its meta tensor is), and an output has the strides PyTorch's shape rule gives,
    so the eager tensor is made to agree. A copy no longer aliases the original: an in-place
    update of a non-contiguous input changes only the trace's copy.
    """
    if real.dim() != meta.dim() or tuple(real.shape) != _hints(meta.shape) or real.numel() <= 1:
        return real
    strides = _hints(meta.stride())
    if all(st == rs or sz == 1 for st, rs, sz in zip(strides, real.stride(), real.shape)):
        return real
    with _disable_current_modes():
        return torch.empty_strided(real.shape, strides, dtype=real.dtype, device=real.device).copy_(real)


def _disagreement(func: Any, real: torch.Tensor, meta: Any) -> str | None:
    """How PyTorch's shape rule and eager disagree on an output's sizes and dtype, or None."""
    if not isinstance(meta, torch.Tensor):
        return f"PyTorch's shape rule returns {type(meta).__name__} where eager returns a tensor"
    hints = _hints(meta.shape)
    if hints != tuple(real.shape) or meta.dtype != real.dtype:
        return (f"{qualified_name(func)}'s shape rule gives {list(hints)} {meta.dtype}, "
                f"eager {list(real.shape)} {real.dtype}")
    return None


SMALL_CONSTANT = 64  # elements: a captured tensor up to this size is compared by value across traces


def _checksum(t: torch.Tensor) -> int | None:
    """A checksum of a small dense CPU tensor's values (None for a larger or other one).

    >>> _checksum(torch.tensor(2)) == _checksum(torch.tensor(2)), _checksum(torch.tensor(2)) == _checksum(torch.tensor(3))
    (True, False)
    """
    if t.numel() > SMALL_CONSTANT or t.device.type != "cpu" or t.layout is not torch.strided or t.is_quantized:
        return None
    try:
        data = t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
    except (RuntimeError, TypeError):  # NOTE: a dtype numpy lacks, a tensor subclass
        return None
    return zlib.crc32(data + repr((tuple(t.shape), t.dtype)).encode())
