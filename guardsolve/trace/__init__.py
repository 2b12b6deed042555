"""trace: run a user function on traced tensors and record every shape decision it makes.

Takes in: a function or `nn.Module` and example tensors. Gives out: a `Trace` whose graph is a
tensor trace, one `bool_bailout` per shape decision, each node with the user's source line.
`replay` compiles a trace back to Python; `gcpause` pauses the garbage collector around hot loops.

>>> import torch, guardsolve
>>> print(guardsolve.trace(lambda x: x if x.shape[0] > 2 else -x, torch.ones(4)).graph)
x = var_placeholder(name=x, rank=1)
s0 = var_size(x)
i0 = size_index(s0, index=0)
i1 = int_const(val=2)
i2 = int_gt(i0, i1)
bool_bailout(i2, expect=True)
"""
