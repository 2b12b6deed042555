"""The PyTorch internals the Inductor backend rests on (torch 2.13), named when they move."""

from __future__ import annotations

import torch


try:  # NOTE: PyTorch internals this backend rests on (torch 2.13); named when they move
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.source import LocalSource
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_custom_graph_passes
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
except ImportError as e:  # pragma: no cover - depends on the installed torch
    raise ImportError(f"guardsolve.jit.inductor needs torch 2.13's FakeTensor, make_fx and ShapeEnv: {e}") from e
