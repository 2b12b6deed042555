"""How an op runs eagerly beside its trace: one intra-op thread for small tensors, the dispatch
keys it runs under, which results require grad, and their layouts.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any
import torch
from torch._ops import _len_torch_dispatch_stack_pre_dispatch
from torch.utils._python_dispatch import _disable_current_modes
from guardsolve.ir.flat import flatten, unflatten
from guardsolve.trace.traced_tensor import META, TracedTensor


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


def threads_for(real_flat: list[Any]) -> Any:
    """One thread for an eager call whose tensors are all small (see `_ONE_THREAD_BELOW`); a
    factory (no tensor argument) keeps its threads, its size is in its arguments."""
    small = False
    for a in real_flat:
        if isinstance(a, torch.Tensor):
            if a.numel() >= _ONE_THREAD_BELOW:
                return _NO_MODES
            small = True
    return _one_thread() if small else _NO_MODES


def reads_traced(args: Any) -> bool:
    """Does `.item()` read a traced tensor (computed from the inputs)? Its value is then a
    symbol of the trace, not a pinned constant: what user code decides on it is a value
    bailout (`SymGuard._traced_data`), what it passes to ops a runtime value of the replay."""
    return bool(args) and isinstance(args[0], TracedTensor)


# NOTE: keyed on the op alone (a few hundred OpOverloads); never on arguments, which hold tensors
@functools.lru_cache(maxsize=None)
def sized_by_data(func: Any) -> bool:
    """Does the op's output size or value come from tensor data (`nonzero`, `index` with a
    mask, `.item()`)? Its eager kernel computes the size its rule takes."""
    return torch.Tag.dynamic_output_shape in func.tags or torch.Tag.data_dependent_output in func.tags


@functools.lru_cache(maxsize=None)
def decomposable(func: Any) -> bool:
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


def as_eager(traced: bool) -> Any:
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


_AUTOGRAD_KEYS = tuple(getattr(torch._C.DispatchKey, k) for k in (
    "ADInplaceOrView", "AutogradOther", "AutogradNestedTensor", "AutogradCPU", "AutogradMeta", "AutogradFunctionality")
    if hasattr(torch._C.DispatchKey, k))


def grad_required(a: torch.Tensor) -> bool:
    """Eager's `requires_grad` of an op's argument (a traced tensor's as its eager counterpart's,
    where known; unknown counts as True)."""
    if isinstance(a, TracedTensor):
        if a.derived:
            return a.eager_grad is not False
        return bool(torch._C.TensorBase.requires_grad.__get__(a))  # type: ignore[attr-defined]
    return a.requires_grad


def eager_requires_grad(func: Any, flat: list[Any], spec: Any, n: int) -> list[bool] | None:
    """Which of the op's `n` outputs require grad in eager: the op run on meta tensors shaped as
    its tensor arguments, each requiring grad as eager's does, under grad mode; None where that
    run fails or gives another number of outputs."""
    if spec is None:
        return None
    args: list[Any] = []
    for a in flat:
        if isinstance(a, torch.Tensor):
            real = a.eager if isinstance(a, TracedTensor) else a
            m = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=META)
            if grad_required(a) and (real.dtype.is_floating_point or real.dtype.is_complex):
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
        with outside_modes(), torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), keep), \
                torch.enable_grad():
            m_args, m_kwargs = unflatten(args, spec)
            out = func(*m_args, **m_kwargs)
    except Exception:  # NOTE: no meta kernel, or one that needs data: the answer stays unknown
        return None
    leaves = flatten(out)[0]
    if len(leaves) != n:
        return None
    return [isinstance(x, torch.Tensor) and x.requires_grad for x in leaves]


def outside_modes() -> Any:
    """`_disable_current_modes()`, without its cost (~14 us: imports and a generator) when no
    dispatch mode is active, the usual case inside our own `__torch_dispatch__`."""
    if torch._C._len_torch_dispatch_stack() or _len_torch_dispatch_stack_pre_dispatch():
        return _disable_current_modes()
    return _NO_MODES


def layouts(flat: list[Any]) -> list[Any]:
    """The sizes, strides and offsets of the traced tensors among `flat`, by guard-graph name."""
    from guardsolve.guards.rule_base import sym_of

    return [(tuple(map(sym_of, a.symbolic.shape)), tuple(map(sym_of, a.symbolic.stride())),
             sym_of(a.symbolic.storage_offset())) for a in flat if isinstance(a, TracedTensor)]
