"""C++ composites that read sizes as plain ints, re-traced through PyTorch's Python decompositions.

A trace keeps composites whole (`aten.upsample_bilinear2d.vec`). Under `make_fx` over
symbolic FakeTensors (`tracing_mode="fake"`), such an op runs its C++ composite kernel
(Autograd dispatches before a mode sees it), and some of those kernels read their input's
sizes as plain ints: the upsample family's `.vec` overloads call
`compute_output_size(input.sizes(), ...)`, so FakeTensor answers `aten.size` with ints and
every dim is pinned to the example ("at make_fx re-trace: wrapper
(torch/utils/_stats.py:29)"), or, where a size argument is already a SymInt, the kernel
fails ("SymIntArrayRef expected to contain only concrete integers").

PyTorch registers Python decompositions for them (`torch/_decomp/decompositions.py`,
`py_impl(CompositeImplicitAutograd)`) that compute the output size as an expression of the
input's (`in * 2` for a scale of 2, `sym_int(in * s)` otherwise). They run under the Python
dispatcher, which torch.compile always traces with; the decompositions' own calls need it too
(an index's meta expands to SymInt sizes). `retrace_scope` turns it on for a re-trace whose
trace calls one of these ops, and for no other: a trace without them re-traces as before.

>>> ops = symbolic_composites()
>>> "aten.upsample_nearest2d.vec" in ops, "aten.matmul.default" in ops
(True, False)
>>> type(retrace_scope(["aten.add.Tensor"])).__name__
'nullcontext'

Some ops that are no composites also read their input's sizes as ints without the Python
dispatcher (`constant_pad_nd`); a trace calling one re-traces under it too.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable

import torch

try:  # NOTE: PyTorch internals (torch 2.13): the Python dispatcher and the key decompositions register under
    from torch._C import DispatchKey
    from torch._dispatch.python import enable_python_dispatcher
except ImportError as e:  # pragma: no cover - depends on the installed torch
    raise ImportError(f"guardsolve.jit.decompose needs torch 2.13's Python dispatcher: {e}") from e

# NOTE: the op packets whose CompositeImplicitAutograd overloads read `input.sizes()` as ints
# (aten/src/ATen/native/UpSample*.cpp, `compute_output_size`): re-traced at symbolic sizes,
# each pinned every dim or failed. Rule table: add a packet, not a branch.
_PACKETS: tuple[str, ...] = (
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "_upsample_lanczos2d_aa",
)


# NOTE: ops whose kernels, without the Python dispatcher, read sizes as ints (FakeTensor answers
# `aten.size` with ints): `constant_pad_nd` (and `pad`, which calls it) pinned both dims of a
# causal LM's labels, padded by one for the shift (transformers' `ForCausalLMLoss`); under the
# Python dispatcher its meta runs at symbolic sizes. Rule table: add an op, not a branch.
_NEED_PYTHON_DISPATCHER: frozenset[str] = frozenset({"aten.pad.default", "aten.constant_pad_nd.default"})


def symbolic_composites() -> frozenset[str]:
    """The overloads of `_PACKETS` that are C++ composites with a Python decomposition
    registered for the Python dispatcher, spelled as a trace spells an op
    (`aten.upsample_nearest2d.vec`). Read from PyTorch's own registrations."""
    out: set[str] = set()
    for name in _PACKETS:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:  # NOTE: an op this torch build lacks decomposes nothing
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if DispatchKey.CompositeImplicitAutograd in op.py_kernels:
                out.add(str(op))
    return frozenset(out)


def retrace_scope(ops: Iterable[str]) -> contextlib.AbstractContextManager[Any]:
    """The Python dispatcher where `ops` (a trace's, as `symbolic_composites` spells them) include one
    of the composites or an op of `_NEED_PYTHON_DISPATCHER`, else nothing."""
    wanted = symbolic_composites() | _NEED_PYTHON_DISPATCHER
    return enable_python_dispatcher() if any(op in wanted for op in ops) else contextlib.nullcontext()


__all__ = ["retrace_scope", "symbolic_composites"]
