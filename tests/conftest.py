"""Shared helpers for the test suite."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


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
