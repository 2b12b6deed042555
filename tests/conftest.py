"""Shared helpers for the test suite, and the hypothesis profiles.

`ci` (the default) is derandomized: every run of a commit draws the same examples, so a
property test passes or fails the same way each time. `long` explores with random seeds and
10x the examples (`guardsolve.testing.examples` scales each test's count); choose it with
`HYPOTHESIS_PROFILE=long python -m pytest ...` or `python -m pytest --hypothesis-profile=long ...`.
A failure it finds becomes an `@example` case in the test, so `ci` keeps checking it.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=100,
                          print_blob=True)
settings.register_profile("long", derandomize=False, deadline=None, max_examples=1000, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
# NOTE: hypothesis's own `--hypothesis-profile` flag, when given, loads its profile after this
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _background_done() -> Iterator[None]:
    """After each test, its guarded functions' background traces have finished (at most 120 s).

    NOTE: a background trace records state reads by patching `nn.Module.__getattribute__`
    process-wide while it runs; a later test's torch.compile traced that patch and compiled no
    frame ("Dynamo does not know how to trace method `get` of class `ContextVar`")."""
    yield
    import threading
    import time

    end = time.monotonic() + 120
    for t in threading.enumerate():
        if t.name.startswith("guardsolve:") and t is not threading.current_thread():
            t.join(timeout=max(0.0, end - time.monotonic()))


# The notebook's guard graph for `a + b` on two [4] tensors, exactly as it prints it.
NOTEBOOK_GUARDS = """\
a0 = int_placeholder(name=a0)
b0 = int_placeholder(name=b0)
i0 = int_const(val=1)
i1 = int_eq(a0, i0)
bool_bailout(i1, expect=False)
i2 = int_const(val=1)
i3 = int_eq(b0, i2)
bool_bailout(i3, expect=False)
i4 = int_eq(a0, b0)
bool_bailout(i4, expect=True)
i5 = int_eq(a0, a0)
bool_bailout(i5, expect=True)
i6 = int_eq(b0, a0)
bool_bailout(i6, expect=True)"""


@pytest.fixture
def notebook_guards() -> str:
    return NOTEBOOK_GUARDS
