"""Where user code is: the user's source line of a decision, library files told apart from the program's."""

from __future__ import annotations

import functools
import linecache
import os
import sys
from typing import Any, Callable
from guardsolve.ir.node import SourceLoc


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """Is this a frame of guardsolve, torch or Python's own machinery (not user code)?"""
    if filename.startswith("<frozen") or filename.startswith("<string>"):
        return True
    if not filename.startswith("<"):
        filename = os.path.abspath(filename)
    return (filename.startswith(_PACKAGE_DIR + os.sep) or f"{os.sep}torch{os.sep}" in filename
            or f"{os.sep}contextlib.py" in filename)


def call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """Call the traced function; `user_location` looks no further out than this frame."""
    return fn(*args)


_NN_DIR = f"{os.sep}torch{os.sep}nn{os.sep}"


def user_location(memo: dict[tuple[str, int, str], SourceLoc] | None = None) -> SourceLoc | None:
    """The innermost stack frame outside guardsolve and torch, inside the traced call.

    A program that is all torch (`nn.LSTM` traced as it is) has no such frame: then the
    innermost line of `torch.nn` (the module's own call of the op), never the traced
    function's caller (a CLI, a test). `memo` keeps the locations already made (a trace asks
    for the same few lines over and over).
    """
    frame = sys._getframe(1)
    fallback = None
    while frame is not None and frame.f_code is not call_user.__code__:
        filename = frame.f_code.co_filename
        if not is_library_file(filename):
            return _loc(frame, memo)
        if fallback is None and _NN_DIR in filename:
            fallback = frame
        frame = frame.f_back  # type: ignore[assignment]
    return _loc(fallback, memo) if fallback is not None else None


def _loc(frame: Any, memo: dict[tuple[str, int, str], SourceLoc] | None) -> SourceLoc:
    filename, line, function = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
    key = (filename, line, function)
    loc = memo.get(key) if memo is not None else None
    if loc is None:
        loc = SourceLoc(filename, line, function, linecache.getline(filename, line).strip())
        if memo is not None:
            memo[key] = loc
    return loc
