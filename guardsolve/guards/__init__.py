"""guards: reinterpret a tensor trace as guards over the input dims, and put guards in normal form.

Takes in: a tensor trace (or a guard graph). Gives out: a guard graph of int/bool nodes over the
input dims (`shape.guard_graph`), its atoms as linear relations (`normalize`, `expr`), and the one
place where Python and z3 disagree on `//`, `%` and division by zero (`semantics`).

>>> import torch, guardsolve
>>> print(guardsolve.guard_graph(guardsolve.trace(lambda x: x if x.shape[0] > 2 else -x, torch.ones(4)).graph))
x0 = int_placeholder(name=x0)
i0 = int_const(val=2)
i1 = int_gt(x0, i0)
bool_bailout(i1, expect=True)
"""
