"""ir: the ANF graph every stage reads and writes (ops table, `Node`/`Graph`, text form, one walker).

Takes in: `Graph.emit` calls or the text format. Gives out: a validated `Graph`, printed one node a
line, that `interp.interpret` runs under a rule table (concrete values, printing, z3 lowering).
Imports only `guardsolve.errors`.

>>> from guardsolve.ir.graph import Graph
>>> print(Graph.parse("x0 = int_placeholder(name=x0)\\ni0 = int_const(val=2)\\ni1 = int_gt(x0, i0)"))
x0 = int_placeholder(name=x0)
i0 = int_const(val=2)
i1 = int_gt(x0, i0)
"""
