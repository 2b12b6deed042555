"""trace: run a user function on traced tensors and record every shape decision it makes.

Takes in: a function or `nn.Module` and example tensors. Gives out: a `Trace` whose graph is a
tensor trace of PyTorch ops (`aten.*` calls) and the user's own size arithmetic and branches,
each node with the user's source line, plus the guard graph PyTorch's shape rules made while it
ran. `tensor` is the traced `torch.Tensor` subclass; `replay` compiles a trace back to Python.

>>> import torch, guardsolve
>>> print(guardsolve.trace(lambda x: x if x.shape[0] > 2 else -x, torch.ones(4)).graph)
x = var_placeholder(name=x, rank=1, shape=[4], dtype=float32)
s0 = var_size(x)
i0 = size_index(s0, index=0)
i1 = int_const(val=2)
i2 = int_gt(i0, i1)
bool_bailout(i2, expect=True)
"""
