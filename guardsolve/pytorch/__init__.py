"""PyTorch's own tracers in guardsolve's words, and guardsolve's guards in theirs.

`dynamic`: declared-dynamic dims judged as torch.export judges them, with a `dynamic_shapes`
spec; `export_check`: that spec run through torch.export; `sympy_guards`: the sympy expressions
of a ShapeEnv translated into a guard graph; `compile`: `explain_compile`, torch.compile's own
guards made minimal, proved and explained; `recompiles`: `watch_recompiles`.
"""
