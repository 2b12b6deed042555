"""Routes a tensor trace's text records besides its own ops: what only tracing the function
again could find.

A live `Trace` explores by tracing its function again (`solve.explore.live.explore`). Where the
program branches to a route that records the same trace but for ops that are identities at
those sizes (GPT-2 at batch 1 skips `position_ids.expand(batch, -1)`), the saved text's replay
cannot follow: the other branch is in the program, not in the text. So the trace text records
each such route found, as its minimal guards (a guard graph over the input dims), after its
nodes; a saved trace's exploration merges a recorded route where its guards hold, as the live
trace did (`solve.explore.saved.explore_saved`).

In the text each route is a block of comments, so that a reader of the plain format skips it:

    #route at x0=1, x1=4 where x0 == 1; x1 >= 2
    #route| x0 = int_placeholder(name=x0)
    #route| ...
    #route| bool_bailout(i2, expect=True)

>>> from guardsolve.ir.graph import Graph
>>> from guardsolve.ir.ops import Op
>>> g = Graph()
>>> x0 = g.emit(Op.INT_PLACEHOLDER, (), name="x0")
>>> g.emit(Op.BOOL_BAILOUT, (g.emit(Op.INT_EQ, (x0, g.emit(Op.INT_CONST, (), val=1))),), expect=True)
>>> text = print_routes([Route({"x0": 1}, g)])
>>> print(text)
#route at x0=1
#route| x0 = int_placeholder(name=x0)
#route| i0 = int_const(val=1)
#route| i1 = int_eq(x0, i0)
#route| bool_bailout(i1, expect=True)
>>> parse_routes(text, Graph.parse)[0].point
{'x0': 1}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from guardsolve.errors import GraphError, ParseError

HEADER = "#route at "
BODY = "#route| "
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)=(-?\d+)\s*$")


@dataclass(frozen=True)
class Route:
    """A route the function took when traced again at `point`, recording the trace but for
    ops that are identities there; `guards`: its guard graph (its minimal guards, one bailout
    each), over every input dim of the trace."""

    point: Mapping[str, int]
    guards: Any  # NOTE: a `Graph` (`ir.graph` imports this module: not imported here)
    text: str = ""  # NOTE: its guards as a reader reads them (`x0 == 1; x1 >= 2`), printed after `where`

    def key(self) -> tuple[str, ...]:
        """Its guards' text (two routes with the same guards are one)."""
        return tuple(str(n) for n in self.guards.nodes)


def print_routes(routes: Sequence[Route]) -> str:
    """The comment blocks of `routes` (empty for none)."""
    lines: list[str] = []
    for r in routes:
        lines.append(HEADER + ", ".join(f"{d}={v}" for d, v in r.point.items()) + (f" where {r.text}" if r.text else ""))
        lines.extend(BODY + str(n) for n in r.guards.nodes)
    return "\n".join(lines)


def parse_routes(text: str, parse: Callable[[str], Any]) -> list[Route]:
    """The routes recorded in a trace's text (`print_routes`), their guards read by `parse`
    (`Graph.parse`); `ParseError` names the line of a malformed one."""
    routes: list[Route] = []
    point: dict[str, int] | None = None
    body: list[tuple[int, str]] = []

    def close() -> None:
        if point is None:
            return
        if not body:
            raise ParseError(f"a route without guards (`{BODY}...` lines follow `{HEADER}...`)", start, 1)
        try:
            g = parse("\n".join(line for _, line in body))
            g.validate()
        except ParseError as e:
            lineno, line = body[e.line - 1]
            raise ParseError(f"in a route's guards: {str(e).split(': ', 1)[1]}", lineno, e.column + len(BODY),
                             BODY + line) from None
        except GraphError as e:
            where = body[e.index][0] if isinstance(getattr(e, "index", None), int) else start
            raise ParseError(f"in a route's guards: {e}", where, 1) from None
        routes.append(Route(point, g, header.split(" where ", 1)[1] if " where " in header else ""))

    start, header = 0, ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if raw.startswith(HEADER):
            close()
            start, body, header = lineno, [], raw
            point = {}
            for part in raw[len(HEADER):].split(" where ", 1)[0].split(","):
                m = _ASSIGN.match(part)
                if m is None:
                    raise ParseError(f"a route's point should read `{HEADER}x0=1, x1=4`, found {part.strip()!r}",
                                     lineno, 1, raw)
                point[m.group(1)] = int(m.group(2))
        elif raw.startswith(BODY):
            if point is None:
                raise ParseError(f"a route's guards before its `{HEADER}...` line", lineno, 1, raw)
            body.append((lineno, raw[len(BODY):]))
    close()
    return routes
