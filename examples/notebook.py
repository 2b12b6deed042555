"""The seed notebook end to end: `a + b`, its guards, and the minimal set, two ways.

1. The seed's own five-op IR (`var_add`, `var_expand`, `var_size`, sizes and ints) with its
   hand-written shape rules: the teaching path. 5 bailouts -> `a0 == b0`, `a0 != 1`.
2. guardsolve's tracer, where PyTorch's own shape rules (its meta kernels and decompositions)
   decide (`aten.add.Tensor`: 4 questions); the example's path has the same minimal guards. At
   size 1 `a + b` broadcasts and records the same trace: merged, `(a0 == 1) or (a0 == b0) or (b0 == 1)`.

Run: python examples/notebook.py
"""

from __future__ import annotations

import torch

import guardsolve

# What the seed notebook records for `a + b` on two [4] tensors, in its own IR.
SEED_TRACE = """\
a = var_placeholder(name=a, rank=1)
b = var_placeholder(name=b, rank=1)
s0 = var_size(a)
s1 = var_size(b)
i0 = size_index(s0, index=0)
i1 = size_index(s1, index=0)
i2 = int_const(val=1)
i3 = int_eq(i0, i2)
bool_bailout(i3, expect=False)
i4 = int_const(val=1)
i5 = int_eq(i1, i4)
bool_bailout(i5, expect=False)
i6 = int_eq(i0, i1)
bool_bailout(i6, expect=True)
s2 = size_ctor(i0)
i7 = size_index(s0, index=0)
i8 = size_index(s2, index=0)
i9 = int_eq(i7, i8)
bool_bailout(i9, expect=True)
i10 = size_index(s1, index=0)
i11 = size_index(s2, index=0)
i12 = int_eq(i10, i11)
bool_bailout(i12, expect=True)
v0 = var_add(a, b)"""


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def seed_path() -> None:
    trace = guardsolve.Graph.parse(SEED_TRACE)
    guards = guardsolve.guard_graph(trace)
    print("# 1. the seed's IR: guard graph (the seed's shape rules)")
    print(guards)
    print("\n# printed guards")
    print("\n".join(guardsolve.print_guards(guards)))
    print("\n# re-checking the guard graph at a0=4, b0=8")
    try:
        guardsolve.run_concrete(guards, {"a0": 4, "b0": 8})
    except guardsolve.GuardFailure as e:
        print(f"GuardFailure: {e}")
    gs = guardsolve.simplify(trace)
    print(f"\n# minimal guards ({len(guards.bailouts())} bailouts -> {len(gs)} constraints)")
    print(gs)


def pytorch_path() -> None:
    torch.manual_seed(0)
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    print("\n# 2. PyTorch's rules: tensor trace")
    print(t.graph)
    guards = t.guard_graph()
    print(f"\n# printed guards ({len(guards.bailouts())} bailouts)")
    print("\n".join(guardsolve.print_guards(guards)))
    path = guardsolve.simplify(t, explore=False)
    print(f"\n# minimal guards of the example's path ({len(guards.bailouts())} bailouts -> {len(path)} constraints)")
    print(path)
    gs = guardsolve.simplify(t)
    print(f"\n# minimal guards exact to the trace ({len(gs.paths)} more routes record it)")
    print(gs)
    print("\n# where each guard came from")
    print(gs.explain())
    print("\n# certificate")
    print(gs.verify())
    print("\n# compiled check")
    print(gs.source())
    print(f"\ncheck([4], [4]) = {gs.check(torch.ones(4), torch.ones(4))}; "
          f"check([4], [8]) = {gs.check(torch.ones(4), torch.ones(8))}; "
          f"check([4], [1]) = {gs.check(torch.ones(4), torch.ones(1))}")


def main() -> None:
    seed_path()
    pytorch_path()


if __name__ == "__main__":
    main()
