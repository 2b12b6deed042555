"""While any trace runs, `torch.compiler.is_compiling()` and `is_exporting()` answer True."""

from __future__ import annotations

from typing import Any, ContextManager
from guardsolve.patching import Patch, active, patched


def presents_as_tracing() -> ContextManager[None]:
    """Library code asks `torch.compiler.is_compiling()` / `is_exporting()` to skip fast paths
    that read tensor data (transformers' mask helpers, `nn.MultiheadAttention`'s fast path);
    guardsolve answers as non-strict torch.export does while any trace runs.

    The flags are torch's process-wide state, so concurrent traces share one count of how
    many are running (`guardsolve.patching`); the last one out restores them.

        >>> import torch
        >>> with presents_as_tracing():
        ...     inside = torch.compiler.is_compiling()
        >>> inside, torch.compiler.is_compiling()
        (True, False)
    """
    import torch.compiler as tc

    return patched(*(Patch(tc, flag, _answers_true) for flag in _TRACING_FLAGS))


_TRACING_FLAGS = ("_is_compiling_flag", "_is_exporting_flag")


def _answers_true(original: Any) -> bool:
    return True


def tracing_now() -> bool:
    """Whether any trace runs now, in any thread (`presents_as_tracing` is held)."""
    import torch.compiler as tc

    return active(tc, _TRACING_FLAGS[0]) > 0
