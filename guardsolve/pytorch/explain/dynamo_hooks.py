"""How `explain_compile` runs Dynamo: dims marked dynamic, weak marks, callers named in its
guard locations, its logs quiet.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from typing import Any, Callable, Iterator, Sequence
import torch
from guardsolve.patching import Patch, patched


def dynamic_marks(args: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """id of each argument tensor -> the dims `mark_dynamic` marked."""
    return {id(a): tuple(sorted(a._dynamo_dynamic_indices)) for a in args
            if isinstance(a, torch.Tensor) and getattr(a, "_dynamo_dynamic_indices", None)}


@contextlib.contextmanager
def weakened_marks(args: Sequence[Any]) -> Iterator[None]:
    """mark_dynamic turned into maybe_mark_dynamic for one compile (so a specialization compiles
    and can be explained), restored after."""
    saved = []
    for a in args:
        if isinstance(a, torch.Tensor) and getattr(a, "_dynamo_dynamic_indices", None):
            saved.append((a, set(a._dynamo_dynamic_indices)))
            weak = getattr(a, "_dynamo_weak_dynamic_indices", set())
            a._dynamo_weak_dynamic_indices = weak | a._dynamo_dynamic_indices
            del a._dynamo_dynamic_indices
    try:
        yield
    finally:
        for a, dims in saved:
            a._dynamo_dynamic_indices = dims
            del a._dynamo_weak_dynamic_indices


@contextlib.contextmanager
def callers_in_slocs() -> Iterator[None]:
    """While Dynamo compiles: a guard whose user location is a library line (an `nn.Module`'s
    `forward` inlined) names the user's line that called into it too, first.

    NOTE: Dynamo's `ShapeEnv._get_stack_summary` keeps the innermost frame of the inlined stack;
    the rest is in `TracingContext.extract_stack()`. The user line comes first, the library line
    after it (`x = self.act(x)  # f.py:19 in forward; via return F.relu(...)  # activation.py:143 in forward`).
    """
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with patched(Patch(ShapeEnv, "_get_stack_summary", _with_callers)):
        yield


def _with_callers(original: Callable[..., Any]) -> Callable[..., Any]:
    """Dynamo's `ShapeEnv._get_stack_summary`, naming the user's calling line before a library line."""
    from torch._guards import SLoc, TracingContext
    from torch.fx.experimental.symbolic_shapes import uninteresting_files
    from torch.utils._traceback import format_frame

    from guardsolve.guards.location import is_library_file

    def summary(self: Any, is_debug: bool = False, framework_loc: str | None = None) -> Any:
        if framework_loc is None:
            # NOTE: Dynamo names the innermost frame outside its own files as where PyTorch decided
            # (`_subclasses/fake_impls.py:1811 in conv`); from here that would be this wrapper
            frame = sys._getframe(1)
            skipped = uninteresting_files()
            while frame is not None and frame.f_code.co_filename in skipped:
                frame = frame.f_back
            if frame is not None:
                framework_loc = format_frame(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno,
                                                                    frame.f_code.co_name))
            del frame
        sloc, extra = original(self, is_debug, framework_loc)
        try:
            stack = TracingContext.extract_stack()
            inner = stack[-1] if stack else None
            user = next((f for f in reversed(stack) if not is_library_file(f.filename)), None)
            if sloc.maybe_user_loc and inner is not None and user is not None and user is not inner \
                    and is_library_file(inner.filename) and format_frame(inner, line=True) == sloc.maybe_user_loc:
                sloc = SLoc(sloc.framework_loc, f"{format_frame(user, line=True)}; via {sloc.maybe_user_loc}")
        except Exception:  # NOTE: an attribution only: Dynamo's own location stays
            pass
        return sloc, extra

    return summary


@contextlib.contextmanager
def quiet_dynamo() -> Iterator[None]:
    """Dynamo logs a failed compile at ERROR on top of raising it; we report it ourselves."""
    logger = logging.getLogger("torch._guards")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
