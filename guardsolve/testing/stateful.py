"""Programs with state, and changes to that state, for the entries' differential fuzzer."""

from __future__ import annotations

import functools
import random
from typing import Any, Callable


# NOTE: ops whose lowering or meta kernel specializes on sizes (Inductor's adaptive pools read
# their windows from the size; a pad, a cumsum, a sort): (name, fn of a [B, C, L] tensor)
_SIZED: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("adaptive_avg_pool1d(4)", lambda x: __import__("torch").nn.functional.adaptive_avg_pool1d(x, 4)),
    ("adaptive_max_pool1d(3)", lambda x: __import__("torch").nn.functional.adaptive_max_pool1d(x, 3)),
    ("interpolate(scale 2)", lambda x: __import__("torch").nn.functional.interpolate(x, scale_factor=2.0)),
    ("pad(1, 2)", lambda x: __import__("torch").nn.functional.pad(x, (1, 2))),
    ("cumsum(-1)", lambda x: x.cumsum(-1)),
    ("sort(-1)", lambda x: x.sort(-1).values),
    ("sum(-1, keepdim)", lambda x: x.sum(-1, keepdim=True)),
    ("unfold(-1, 2, 1)", lambda x: x.unfold(-1, 2, 1).mean(-1)),
    ("conv_transpose1d", lambda x: __import__("torch").nn.functional.conv_transpose1d(
        x, __import__("torch").ones(x.shape[1], 2, 3) * 0.1)),
)


SHARED: dict[str, Any] = {"shift": 0.25, "k": 1.5}  # NOTE: module state the programs read; the fuzzer rebinds it


_STATEFUL = """
class Stateful(nn.Module):
    \"\"\"A module whose forward reads every kind of state an entry must check.\"\"\"

    def __init__(self, channels, sized, cfg):
        super().__init__()
        self.proj = nn.Conv1d(channels, channels, 1)
        self.act = nn.ReLU()
        self.register_buffer("offset", torch.randn(channels, 1))
        self.table = torch.randn(channels, 1)  # a plain tensor attribute
        self.scale = 1.0
        self.flag = True
        self.cfg = cfg
        self.sized = sized

    def forward(self, x):
        y = self.act(self.proj(x)) * self.scale + self.offset
        if self.flag:
            y = y + self.table * self.cfg["bias"]
        if self.training:
            y = y * 0.5
        return self.sized(y) * SHARED["k"] + SHARED["shift"]
"""


@functools.lru_cache(maxsize=1)
def _stateful_class() -> type:
    """The programs' class, compiled as user code is, in a module of its own
    (`guardsolve_stateful_program`, registered in `sys.modules` as an imported module is, so
    that a saved entry names its globals), made once per process."""
    import sys
    import types

    import torch
    import torch.nn as nn

    module = types.ModuleType("guardsolve_stateful_program")
    module.__dict__.update(torch=torch, nn=nn, SHARED=SHARED)
    exec(compile(_STATEFUL, "<stateful program>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    return module.Stateful


@functools.lru_cache(maxsize=None)
def _residual_class() -> type:
    import torch

    class ResidualBlock(torch.nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)
            self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.BatchNorm2d(c)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)

    return ResidualBlock


def residual_block(c: int) -> Any:
    """A resnet's basic block at `c` channels (conv, batch norm, relu, twice, plus the input):
    the tests' conv nets are built of it.

    >>> import torch
    >>> residual_block(3)(torch.zeros(1, 3, 4, 4)).shape
    torch.Size([1, 3, 4, 4])
    """
    return _residual_class()(c)


def random_stateful_program(rng: random.Random) -> tuple[str, Any, Callable[[], tuple[Any, ...]]]:
    """A module over [B, C, L] inputs that reads parameters, a buffer, a plain tensor attribute,
    a submodule, floats, a flag, a dict entry, `training` and this module's `SHARED` globals,
    then one op whose lowering specializes on sizes; and a maker of random inputs.

    >>> name, m, make = random_stateful_program(random.Random(0))
    >>> tuple(m(*make()).shape[:2]) == tuple(make()[0].shape[:2])
    True
    """
    import torch

    channels = rng.choice([1, 2, 3])
    sized_name, sized = rng.choice(_SIZED)
    m = _stateful_class()(channels, sized, {"bias": rng.choice([0.5, 1.0, 2.0])}).eval()
    m.requires_grad_(False)

    def make() -> tuple[Any, ...]:
        return (torch.randn(rng.choice([1, 2, 3]), channels, rng.choice([4, 5, 8, 9, 16, 17])),)

    return f"Stateful(C={channels}) -> {sized_name}", m, make


def random_state_change(rng: random.Random, m: Any) -> str:
    """Change one piece of the state `random_stateful_program`'s module reads; returns what."""
    import torch
    import torch.nn as nn

    c = m.proj.weight.shape[0]
    choice = rng.randrange(11)
    match choice:
        case 0:
            m.proj.weight = nn.Parameter(torch.randn(c, c, 1), requires_grad=False)
            return "weight replaced"
        case 1:
            m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True)
            m.requires_grad_(False)
            return "load_state_dict(assign=True)"
        case 2:
            m.offset = torch.randn(c, 1)
            return "buffer replaced"
        case 3:
            m.act = nn.Tanh() if isinstance(m.act, nn.ReLU) else nn.ReLU()
            return "submodule swapped"
        case 4:
            m.scale = rng.choice([0.5, 2.0, 1, 3.0])
            return f"scale = {m.scale!r}"
        case 5:
            m.flag = not m.flag
            return f"flag = {m.flag}"
        case 6:
            m.cfg["bias"] = rng.choice([-1.0, 0.5, 3.0])
            return f"cfg['bias'] = {m.cfg['bias']}"
        case 7:
            SHARED["shift"] = rng.choice([-0.5, 0.25, 1.0])
            return f"SHARED['shift'] = {SHARED['shift']}"
        case 8:
            m.train(not m.training)
            return "train()" if m.training else "eval()"
        case 9:
            m.table = torch.randn(c, 1)
            return "plain tensor attribute replaced"
        case _:
            with torch.no_grad():
                m.proj.weight.mul_(0.5)
            return "weight scaled in place"
