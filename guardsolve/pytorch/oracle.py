"""Dynamo as the oracle of `explain_compile`: does the compiled function run an input without
recompiling? Asked through the public `torch.compiler.set_stance("fail_on_recompile")`.

`dynamo_calls(report, *args)` runs `report.compiled(*args)` under that stance and returns each
frame Dynamo entered, with the arguments that frame got and whether Dynamo's cache took them.
A frame after a graph break gets values computed inside the function, so its guards are
checked against what it actually received.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from guardsolve.patching import Patch, patched


@dataclass
class FrameCall:
    """One frame Dynamo entered: its code's name, its arguments, and whether it ran without recompiling."""

    name: str
    f_locals: dict[str, Any]
    accepted: bool


def _key(code: Any) -> tuple[str, str, int]:
    return (code.co_name, code.co_filename, code.co_firstlineno)


def dynamo_calls(report: Any, *args: Any) -> list[FrameCall]:
    """Run the compiled function on `args` under `fail_on_recompile`: the frames it entered."""
    keys = {_key(f.code): f.name for f in report.frames}
    calls: list[FrameCall] = []

    @torch._dynamo.disable
    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and _key(frame.f_code) in keys:
            calls.append(FrameCall(frame.f_code.co_name, dict(frame.f_locals), True))

    refusals: list[FrameCall] = []
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with _refusals(keys, refusals), torch.compiler.set_stance("fail_on_recompile"):
            report.compiled(*args)
    except RuntimeError as e:
        if "fail_on_recompile" not in str(e) or not refusals:
            raise
        calls.append(refusals[-1])
    finally:
        sys.setprofile(previous)
    return calls


@contextlib.contextmanager
def _refusals(keys: dict[tuple[str, str, int], str], out: list[FrameCall]) -> Iterator[None]:
    """Record the frame Dynamo refuses, with its arguments, while its frame is alive.

    NOTE: `fail_on_recompile`'s callback raises with the frame gone (its `_PyInterpreterFrame`
    dangles after the callback), but it first asks `guards.get_and_maybe_log_recompilation_reasons`
    (looked up on the module at each call) why the cache missed: wrapped here, for this call only.
    """
    from torch._dynamo import guards

    token = _LISTENING.set((keys, out))
    try:
        with patched(Patch(guards, "get_and_maybe_log_recompilation_reasons", _recording_refusals)):
            yield
    finally:
        _LISTENING.reset(token)


# NOTE: the frames this thread's `_refusals` listens for, and where it records them; the
# patched function is shared by every holder, so each caller's own list is found here.
_LISTENING: contextvars.ContextVar[tuple[dict[tuple[str, str, int], str], list[FrameCall]] | None] = \
    contextvars.ContextVar("guardsolve_oracle_refusals", default=None)


def _recording_refusals(original: Callable[..., Any]) -> Callable[..., Any]:
    """Dynamo's `get_and_maybe_log_recompilation_reasons`, recording the refused frame first."""
    def reasons(cache_entries: Any, frame: Any, *a: Any, **k: Any) -> Any:
        listening = _LISTENING.get()
        if listening is not None and _key(frame.f_code) in listening[0]:
            listening[1].append(FrameCall(frame.f_code.co_name, dict(frame.f_locals), False))
        return original(cache_entries, frame, *a, **k)

    return reasons


def agrees(report: Any, *args: Any) -> list[str]:
    """Where the report's guards disagree with Dynamo on `args` (empty: they agree on every frame)."""
    out = []
    for call in dynamo_calls(report, *args):
        frame = report.frame(call.name)
        values = frame.arguments(call.f_locals)
        ours = frame.guards.check(*values)
        if ours != call.accepted:
            shapes = {k: tuple(v.shape) if isinstance(v, torch.Tensor) else v for k, v in zip(frame.params, values)}
            out.append(f"frame {frame.name}: guardsolve {'accepts' if ours else 'rejects'} {shapes}, "
                       f"Dynamo {'runs it' if call.accepted else 'recompiles'}")
    return out
