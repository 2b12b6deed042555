"""solve: `simplify()` a guard graph to its minimal `GuardSet`.

Takes in: a guard graph (or a trace). Gives out: a `GuardSet` of constraints with provenance and a
compiled check, by normalize → union-find (`unify`) → ordering layer (`order`) → z3 per component
(`smt`, `witness`). `GuardSet` lives here because `simplify` builds it and it verifies with `smt`.

>>> from guardsolve.ir.graph import Graph
>>> from guardsolve.solve.simplify import simplify
>>> print(simplify(Graph.parse("x0 = int_placeholder(name=x0)\\ni0 = int_const(val=2)\\ni1 = int_gt(x0, i0)\\nbool_bailout(i1, expect=True)")))
x0 >= 3
"""
