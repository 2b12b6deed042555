"""The readable pass's budget (`Work`: z3's time and work spent) and its proof that two forms of a
guard agree under the other guards and sizes >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence
import z3
from guardsolve.guards.expr import Formula, Rel
from guardsolve.solve.smt import RLIMIT_PER_MS, formula_to_z3, limit, z3_vars


TIMEOUT_MS = 1000


BUDGET_S = 2.0  # NOTE: the pass reads for people; past this much z3 work, the rest keep the solver's forms


@dataclass
class Work:
    """z3's own work count spent by one pass, against `BUDGET_S` seconds' worth of it on an
    idle core (`smt.RLIMIT_PER_MS`): a count, not a clock, so the forms printed do not depend
    on the machine's load.

    >>> w = Work()
    >>> x = z3.Int("x")
    >>> s = z3.Solver(); s.add(x * x == 4, x > 0)
    >>> w.check(s), w.spent > 0, w.over()
    (sat, True, False)
    """

    budget: int = int(BUDGET_S * 1000) * RLIMIT_PER_MS
    spent: int = 0

    def check(self, s: z3.Solver) -> z3.CheckSatResult:
        before = _rlimit_count(s)
        verdict = s.check()
        self.spent += max(_rlimit_count(s) - before, 0)
        return verdict

    def over(self) -> bool:
        return self.spent > self.budget


def _rlimit_count(s: z3.Solver) -> int:
    """z3's work count so far in `s`'s context (the statistic `rlimit count`; 0 before any)."""
    stats = s.statistics()
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in stats.keys() else 0


def solver_kind(f: Formula) -> str:
    """A guard's kind as the solver names it: a relation of one or two dims, coefficients 1
    (`eq`, `ne`, `order`), else `general`."""
    if isinstance(f, Rel):
        lin = f.poly.nonconst()
        if len(lin) <= 2 and all(len(m) == 1 and isinstance(m[0], str) and abs(k) == 1 for m, k in lin.items()):
            return {"eq": "eq", "ne": "ne", "le": "order"}[f.op]
    return "general"


def readable_proves(a: Formula, b: Formula, sizes: set[str], dims: Sequence[str], background: Sequence[Formula],
                    timeout_ms: int, ctx: z3.Context | None = None, work: Work | None = None) -> bool:
    """z3: `a` and `b` agree wherever the `background` holds and sizes are >= 0 (in `ctx`, a
    fresh context by default: making one costs milliseconds, so a caller with many reuses one)."""
    ctx = ctx if ctx is not None else z3.Context()
    var = z3_vars(ctx)
    s = z3.Solver(ctx=ctx)
    limit(s, timeout_ms)
    s.add(*(var(d) >= 0 for d in dims if d in sizes), *(formula_to_z3(f, var) for f in background))
    s.add(formula_to_z3(a, var) != formula_to_z3(b, var))
    return (work.check(s) if work is not None else s.check()) == z3.unsat
