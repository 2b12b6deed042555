"""Static guards: what a trace assumed about its inputs besides sizes (dtype, device, layout,
`requires_grad`, strides where observed, non-traced argument values, grad mode).

Each is a Python expression over the traced function's parameters, checked before the size
guards (as Dynamo's TENSOR_MATCH guard is checked before its shape guards):

>>> import torch
>>> for g in tensor_guards("x", torch.zeros(2, 3)):
...     print(g)
x.dtype == torch.float32
x.device == torch.device('cpu')
x.layout == torch.strided
not x.requires_grad
>>> print(value_guard("mode", "mean"))
mode == 'mean'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class StaticGuard:
    """One static guard: `text` as it prints, `source` as the compiled check evaluates it (over
    the parameters and the names `values` binds), `subject` the expression (over the same
    names) whose value a miss reports."""

    text: str
    source: str
    subject: str
    values: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.text


def _bound(prefix: str, v: Any) -> tuple[str, tuple[tuple[str, Any], ...]]:
    name = f"_s_{prefix}"
    return name, ((name, v),)


def tensor_guards(name: str, t: torch.Tensor) -> list[StaticGuard]:
    """dtype, device, layout and requires_grad of one tensor input."""
    dt, dev, lay = str(t.dtype), t.device, str(t.layout)
    n_dt, v_dt = _bound(f"{name}_dtype", t.dtype)
    n_dev, v_dev = _bound(f"{name}_device", dev)
    n_lay, v_lay = _bound(f"{name}_layout", t.layout)
    rg = t.requires_grad
    return [
        StaticGuard(f"{name}.dtype == {dt}", f"{name}.dtype is {n_dt}", f"{name}.dtype", v_dt),
        # NOTE: `x.is_cpu` is the same test for the CPU (whose device has no index), and cheaper
        StaticGuard(f"{name}.device == torch.device({str(dev)!r})",
                    f"{name}.is_cpu" if dev == torch.device("cpu") else f"{name}.device == {n_dev}",
                    f"{name}.device", v_dev),
        StaticGuard(f"{name}.layout == {lay}", f"{name}.layout is {n_lay}", f"{name}.layout", v_lay),
        StaticGuard(f"{'' if rg else 'not '}{name}.requires_grad",
                    f"{'' if rg else 'not '}{name}.requires_grad", f"{name}.requires_grad"),
    ]


def contiguous_strides(shape: Any) -> tuple[int, ...]:
    """The strides `torch.empty(shape)` has (a traced contiguous input's, as sizes vary).

    >>> contiguous_strides((2, 1, 3))
    (3, 3, 1)
    """
    out, step = [], 1
    for s in reversed(tuple(shape)):
        out.append(step)
        step *= max(s, 1)
    return tuple(reversed(out))


def layout_guard(name: str, t: torch.Tensor, exact: bool) -> StaticGuard:
    """The trace observed the layout: `x.is_contiguous()`; when user code read stride values
    (`exact`), a contiguous input's strides must be those of `torch.empty` (they were traced
    as expressions of the sizes) and its storage offset the same. A non-contiguous input was
    traced with constant strides: those, exactly."""
    if t.is_contiguous() and t.stride() == contiguous_strides(t.shape):
        if not exact:
            return StaticGuard(f"{name}.is_contiguous()", f"{name}.is_contiguous()", f"{name}.is_contiguous()")
        offset = t.storage_offset()
        return StaticGuard(f"{name}.stride() == torch.empty({name}.shape).stride() and {name}.storage_offset() == {offset}",
                           f"{name}.stride() == _contiguous_strides({name}.shape) and {name}.storage_offset() == {offset}",
                           f"({name}.stride(), {name}.storage_offset())")
    stride, offset = tuple(t.stride()), t.storage_offset()
    n_st, v_st = _bound(f"{name}_stride", stride)
    src = f"{name}.stride() == {n_st} and {name}.storage_offset() == {offset}"
    return StaticGuard(f"{name}.stride() == {stride} and {name}.storage_offset() == {offset}", src,
                       f"({name}.stride(), {name}.storage_offset())", v_st)


def int_guard(name: str) -> StaticGuard:
    """A traced Python int stays a plain int (a bool is not one)."""
    return StaticGuard(f"type({name}) is int", f"type({name}) is int", f"type({name})")


def value_key(v: Any) -> Any:
    """What a non-traced argument is compared by: its type and value, structurally (so `1`,
    `1.0` and `True` differ, as eager code may treat them differently).

    >>> value_key((1, 2.0)) == value_key((1, 2)), value_key(None) == value_key(None)
    (False, True)
    """
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(value_key(x) for x in v))
    if isinstance(v, dict):
        return (dict, tuple((value_key(k), value_key(x)) for k, x in v.items()))
    return (type(v), v)


def is_static_value(v: Any) -> bool:
    """Can a non-traced argument be pinned by equality? Tensors inside containers, NaNs and
    arbitrary objects cannot (their `==` is not identity of behaviour)."""
    if v is None or isinstance(v, (bool, int, str, bytes, torch.dtype, torch.device, torch.layout,
                                   torch.memory_format)):
        return True
    if isinstance(v, float):
        return v == v
    if isinstance(v, (tuple, list)):
        return all(is_static_value(x) for x in v)
    if isinstance(v, dict):
        return all(is_static_value(k) and is_static_value(x) for k, x in v.items())
    return False


def value_guard(name: str, v: Any) -> StaticGuard:
    """A non-traced argument (a flag, a float, a string, a tuple of ints): pinned by value."""
    if v is None or isinstance(v, bool):
        return StaticGuard(f"{name} is {v!r}", f"{name} is {v!r}", name)
    n_k, v_k = _bound(f"{name}_key", value_key(v))
    return StaticGuard(f"{name} == {v!r}", f"_value_key({name}) == {n_k}", name, v_k)


_AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """The device types `torch.autocast` is on for in this thread, each with its dtype; `()`
    where it is off (the usual call, and a falsy one: the check tests it with `not`).

    >>> autocast_state()
    ()
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     autocast_state()
    (('cpu', torch.bfloat16),)
    """
    return tuple((d, torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d))


def global_modes() -> tuple[bool, bool, bool, str]:
    """Modes a program may branch on (`if torch.is_inference_mode_enabled():`) and that choose
    kernels: inference mode, deterministic algorithms, oneDNN enabled, float32 matmul precision.

    >>> global_modes()
    (False, False, True, 'highest')
    """
    return (torch.is_inference_mode_enabled(), torch._C._get_deterministic_algorithms(),
            torch._C._get_mkldnn_enabled(), torch._C._get_float32_matmul_precision())


def modes_said(modes: tuple[bool, bool, bool, str]) -> Said:
    """`global_modes()` in words.

    >>> modes_said((False, True, True, "high"))
    inference mode off, deterministic algorithms on, oneDNN on, float32 matmul precision 'high'
    """
    onoff = ["off", "on"]
    return Said(f"inference mode {onoff[modes[0]]}, deterministic algorithms {onoff[modes[1]]}, "
                f"oneDNN {onoff[modes[2]]}, float32 matmul precision {modes[3]!r}")


def state_guards() -> list[StaticGuard]:
    """Thread-local and global torch state that changes what the same code computes: grad mode,
    the default dtype, and `global_modes()` (autocast: `autocast_guard`).

    >>> for g in state_guards():
    ...     print(g)
    torch.is_grad_enabled() is True
    torch.get_default_dtype() == torch.float32
    inference mode off, deterministic algorithms off, oneDNN on, float32 matmul precision 'highest'
    """
    grad = torch.is_grad_enabled()
    n_dd, v_dd = _bound("default_dtype", torch.get_default_dtype())
    n_gm, v_gm = _bound("global_modes", global_modes())
    return [
        StaticGuard(f"torch.is_grad_enabled() is {grad}", f"_is_grad_enabled() is {grad}",
                    "_is_grad_enabled()"),
        StaticGuard(f"torch.get_default_dtype() == {torch.get_default_dtype()}",
                    f"_get_default_dtype() is {n_dd}", "_get_default_dtype()", v_dd),
        StaticGuard(str(modes_said(global_modes())), f"_global_modes() == {n_gm}", "_modes_said(_global_modes())",
                    v_gm),
    ]


class Said(str):
    """A value a miss reports in words: its repr is its text (`found autocast off`)."""

    def __repr__(self) -> str:
        return str(self)


def autocast_said(cast: tuple[tuple[str, torch.dtype], ...]) -> Said:
    """`autocast_state()` in words.

    >>> autocast_said(()), autocast_said((("cpu", torch.bfloat16),))
    (autocast off, torch.autocast('cpu', dtype=torch.bfloat16) on)
    """
    on = ", ".join(f"torch.autocast({d!r}, dtype={dt})" for d, dt in cast)
    return Said(f"{on} on" if cast else "autocast off")


def autocast_guard() -> StaticGuard:
    """Autocast's state, on or off: a trace under `torch.autocast` records its casts, one
    without records none (and compiled kernels would not cast).

    >>> print(autocast_guard())
    torch.autocast is off
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     print(autocast_guard())
    torch.autocast('cpu', dtype=torch.bfloat16) is on, and no other
    """
    cast = autocast_state()
    if not cast:
        return StaticGuard("torch.autocast is off", "not _autocast()", "_autocast_said(_autocast())")
    n_ac, v_ac = _bound("autocast", cast)
    on = ", ".join(f"torch.autocast({d!r}, dtype={dt})" for d, dt in cast)
    return StaticGuard(f"{on} is on, and no other", f"_autocast() == {n_ac}", "_autocast_said(_autocast())", v_ac)


NAMESPACE: dict[str, Any] = {"_is_grad_enabled": torch.is_grad_enabled, "_global_modes": global_modes,
                             "_modes_said": modes_said,
                             "_get_default_dtype": torch.get_default_dtype, "_autocast": autocast_state, "_autocast_said": autocast_said,
                             "_value_key": value_key,
                             "_contiguous_strides": contiguous_strides,
                             "torch": torch}
