"""What the shape rules share: aten's op namespace, the meta device, type promotion's kinds, `sym_of`."""

from __future__ import annotations

from typing import Any
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND
from guardsolve.guards.symbolic import SymGuard


aten = torch.ops.aten


META_DEVICE = torch.device("meta")


PROMOTION = ELEMENTWISE_TYPE_PROMOTION_KIND


def sym_of(v: Any) -> Any:
    """A size's identity: its guard-graph name, or its value when static; None when neither."""
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        node = v.node
        if not isinstance(node, SymGuard) or node.lazy is not None:
            return None
        return node.hint if node.const else node.g
    return v
