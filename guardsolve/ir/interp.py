"""One walker, many rule tables: `interpret(graph, table, env)`.

A rule table maps each `Op` to a function `rule(*inputs, **params)`; the walker feeds it the
values of the node's inputs and binds the result to the node's output.

>>> from guardsolve.ir.graph import Graph
>>> g = Graph.parse("x = int_arg(name=x)\\ni0 = int_const(val=2)\\ni1 = int_mul(x, i0)")
>>> table = RuleTable("demo", {Op.INT_ARG: lambda *, name: 21, Op.INT_CONST: lambda *, val: val,
...                            Op.INT_MUL: lambda a, b: a * b})
>>> interpret(g, table)["i1"]
42
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from guardsolve.errors import GuardFailure, GuardsolveError, InterpretError, MissingRuleError
from guardsolve.ir.graph import Graph
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op


@dataclass(frozen=True)
class RuleTable:
    """A named table of rules; `enter`, if given, sees each node before its rule runs."""

    name: str
    rules: Mapping[Op, Callable[..., Any]]
    enter: Callable[[Node], None] | None = None


def interpret(graph: Graph, table: RuleTable, env: dict[str, Any] | None = None,
              *, validate: bool = True, nodes: Sequence[int] | None = None) -> dict[str, Any]:
    """Run `table` over `graph` in order; return the environment of every named value.

    `nodes`: only the nodes at these indices, in this order (each reads only values of earlier ones).
    """
    if validate:
        graph.validate()
    env = {} if env is None else env
    rules = table.rules
    enter = table.enter
    for node in graph.nodes if nodes is None else map(graph.nodes.__getitem__, nodes):
        rule = rules.get(node.op)
        if rule is None:
            raise MissingRuleError(str(node.op), table.name, node)
        if enter is not None:
            enter(node)
        params = node.params
        try:
            # NOTE: most nodes have no params; a call without `**{}` is the cheaper one
            out = rule(*[env[name] for name in node.inputs], **params) if params else \
                rule(*[env[name] for name in node.inputs])
        except GuardFailure as e:
            raise e.at(node) from None
        except GuardsolveError:
            raise
        except Exception as e:
            i = next(k for k, n in enumerate(graph.nodes) if n is node)
            loc = node.meta.get("loc")
            at = f" ({loc})" if loc is not None else ""
            raise InterpretError(
                f"{table.name} rule failed while executing node {i} `{node}`{at}: {type(e).__name__}: {e}"
            ) from e
        outputs = node.outputs
        if len(outputs) == 1:
            env[outputs[0]] = out
        elif outputs:  # NOTE: a call returning several tensors binds one name each
            env.update(zip(outputs, out))
    return env
