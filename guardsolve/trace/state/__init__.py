"""What a traced function read besides its inputs, and the check that it still reads the same.

A trace is exact about its inputs' sizes, but the program also reads *state*: its modules'
parameters, buffers, submodules and plain attributes, globals, closure cells, the contents
of dicts and config objects those hold. `recording(fn)` records every such read while `fn`
runs (traces and exploring probes alike):

- module attributes, through a recording `nn.Module.__getattribute__` / `__getattr__`
  installed only while a recorder is active (reads by other threads are not recorded);
- globals, by the `LOAD_GLOBAL` names of each frame of code outside PyTorch and the
  standard library that runs (`sys.settrace` on the recording thread only);
- the closure cells and defaults of `fn` and of every function value read.

`StateCheck.of(recorder)` turns the reads into leaves, each a Python expression over objects
bound when the check is made, and an expected value:

>>> import torch
>>> class Scaled(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = torch.nn.Linear(2, 2)
...         self.temperature = 2.0
...     def forward(self, x):
...         return self.fc(x) / self.temperature
>>> m = Scaled()
>>> with recording(m) as rec:
...     _ = m(torch.ones(1, 2))
>>> check = StateCheck.of(rec)
>>> print("\\n".join(check.lines()))
self.fc is <Linear>
self.fc.weight: a float32 tensor [2, 2], requires_grad=True (the entry reads it at each call)
self.fc.bias: a float32 tensor [2], requires_grad=True (the entry reads it at each call)
self.temperature == 2.0
19 checks of module machinery: hook dicts and methods (not shadowed on instances)
>>> check()
True
>>> m.temperature = 4.0
>>> check(), check.failure()
(False, 'self.temperature == 2.0 failed (found 4.0)')

The check has two speeds. The fast one compares each leaf by identity (a tensor also by
`requires_grad`): it holds while nothing was rebound. Where it fails, the exact one compares
by value: plain values by type and value, tensors by dtype, device, layout, shape, strides and
`requires_grad` (a replaced weight of the same kind passes), objects (modules, functions) by
identity. Where the exact one passes, the leaves are rebound to what they hold now, and
`on_rebind` listeners (the entry's replay and compiled variants) take the new tensors: a weight
swap is served with no new trace and no new compile.
"""

from guardsolve.trace.state.active import is_state, paused
from guardsolve.trace.state.check import StateCheck
from guardsolve.trace.state.leaf import Leaf, leaf_matches, tensor_meta
from guardsolve.trace.state.reachability import reachable_generators, reachable_grad, reachable_tensors
from guardsolve.trace.state.recorder import Read, StateRecorder, recording
from guardsolve.trace.state.values import Attrs

__all__ = ["Attrs", "Leaf", "Read", "StateCheck", "StateRecorder", "is_state", "leaf_matches", "paused",
           "reachable_generators", "reachable_grad", "reachable_tensors", "recording", "tensor_meta"]
