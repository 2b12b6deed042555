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

import weakref
from typing import Any
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from guardsolve.errors import DataDependentError, GuardsolveError, TraceError, UnsupportedOpError, eager_error
from guardsolve.ir.aten import Ref, qualified_name, refs
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Args, Kwargs, Op, OpName
from guardsolve.guards.rules import takes_device
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.guards.sym_facts import recorded_answer
from guardsolve.trace.state.active import is_state
from guardsolve.trace.eager_run import as_eager, decomposable, eager_requires_grad, grad_required, layouts, outside_modes, reads_traced, sized_by_data, threads_for
from guardsolve.trace.op_checks import Call, disagreement, dtype_name, value_checksum
from guardsolve.trace.traced_tensor import META, TracedTensor, name_data_sizes


_aten = torch.ops.aten


# Ops that hand tensor data to Python: a value bailout, or an error without value guards.
_ITEM = frozenset({_aten._local_scalar_dense.default, _aten.item.default})


_READS_DATA = {_aten._local_scalar_dense.default: ".item()", _aten.item.default: ".item()", _aten.is_nonzero.default: "bool(tensor)",
               _aten.equal.default: "torch.equal"}


# Views that need compatible strides (eager raises otherwise): the trace holds only for inputs
# laid out as the example's.
# NOTE: `as_strided` and `set_` are not among them: they replace a tensor's strides without
# reading them, their sizes are their arguments, and a replay runs them on the new input itself.
_LAYOUT_OPS = frozenset(f for f in (
    _aten.view.default, _aten.view.dtype, _aten._unsafe_view.default, _aten._reshape_alias.default,
    _aten.view_as_complex.default, _aten._mkldnn_reshape.default))


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
            if func in _READS_DATA and (func not in _ITEM or rec.value_guards and not reads_traced(args)):
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
            with outside_modes():
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
                with outside_modes(), as_eager(traced), threads_for(real_flat):
                    return func(*real_args, **real_kwargs)
            except Exception as e:
                raise eager_error(e, self._at()) from e
            finally:
                if seeded:
                    self._rng = torch.default_generator.get_state()

        if rec.meta_first and traced and not sized_by_data(func):
            # NOTE: a trace at sizes the user never called (`solve.explore`): the shape rule first,
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
            meta_kwargs = {**meta_kwargs, "device": META}
        # NOTE: an in-place op that changes a tensor's sizes or strides (`t_`, `resize_`) changes
        # the meta inputs recorded for earlier calls: no call of this trace replays alone then
        mutable = self.rec.calls is not None and func._schema.is_mutable
        before = layouts(flat) if mutable else None
        try:
            self.rec.real = real_out
            with outside_modes():
                meta_out = self.rec.rules(func, meta_args, meta_kwargs)
            if mutable and before != layouts(flat):
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
            if decomposable(func) and (real_out is not None or self.rec.meta_first):
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
        may_grad = torch.is_grad_enabled() and any(grad_required(a) for a in flat if isinstance(a, torch.Tensor))
        grads = eager_requires_grad(func, flat, spec, len(real_leaves)) if may_grad else None
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
                disagree = disagreement(func, r, m)
                if disagree is None:
                    # NOTE: a trace records no autograd graph: its outputs do not require grad (a
                    # view of a parameter would, and its wrapper's autograd metadata would then
                    # clash with the view PyTorch makes of it on our way out)
                    if same is not None:
                        out.append(same)
                    else:
                        made = TracedTensor(r, m, name, rec, requires_grad=False)
                        if rec._unbacked > rec.unbacked_at:
                            name_data_sizes(rec, m, name)
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
                    with outside_modes():
                        stand_in = torch.empty_strided(sizes, strides, dtype=r.dtype, device=META)
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
        with outside_modes():
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
                    a.shape, a.stride(), dtype=a.dtype, device=META)
            return m
        if isinstance(a, torch.device):
            return META
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
            crc = value_checksum(t) if made is not None and made() is t else None
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
