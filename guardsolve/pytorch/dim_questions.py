"""The example point of a judgement, and the questions z3 is asked of a dim: its lowest and highest value."""

from __future__ import annotations

from typing import Any, Mapping, Sequence
import z3
from guardsolve.errors import InputMismatchError
from guardsolve.guards.expr import Formula
from guardsolve.ir.ops import Op
from guardsolve.solve.smt import formula_to_z3, limit, z3_vars
from guardsolve.pytorch.judgement import FAR, MIN_DYNAMIC, TIMEOUT_MS


def example_dims(graph: Any) -> dict[str, int]:
    """The example dims recorded in a tensor trace (placeholder shapes, int arguments)."""
    sig = {p.name: p for p in graph.meta.get("signature") or ()}
    out: dict[str, int] = {}
    for n in graph.nodes:
        if n.op is Op.VAR_PLACEHOLDER and n.params.get("shape") is not None and n.params["name"] in sig:
            out.update(zip(sig[n.params["name"]].dims, (int(v) for v in n.params["shape"])))
        elif n.op is Op.INT_ARG and "val" in n.params:
            out[n.params["name"]] = int(n.params["val"])
    return out


def render_point(gs: Any, point: Mapping[str, int]) -> str:
    """Dims as the inputs they shape: `x=[4, 3, 17, 16]` (dims by name without a signature)."""
    if gs.signature is None:
        return ", ".join(f"{d}={v}" for d, v in point.items())
    return ", ".join(f"{p.name}=[{', '.join(str(point[d]) for d in p.dims)}]" if p.kind == "tensor"
                     else f"{p.name}={point[p.name]}" for p in gs.signature)


def example_point(gs: Any, dynamic: Sequence[str], example: Any) -> tuple[dict[str, int], bool]:
    if example is not None and not isinstance(example, Mapping):
        dims = gs.input_dims(*example)
        if dims is None:
            raise InputMismatchError("the example inputs do not fit the traced signature")
        example = dims
    if example is not None:
        missing = [d for d in gs.dims if d not in example]
        if missing:
            raise InputMismatchError(f"the example has no value for {', '.join(missing)}")
        e = {d: int(example[d]) for d in gs.dims}
        bad = gs.first_failure(e)
        if bad is not None:
            raise InputMismatchError(f"the example does not satisfy the guard {bad.text}")
        return e, False
    # NOTE: without an example any accepted point will do; prefer one torch.export can trace.
    ctx = z3.Context()
    var = z3_vars(ctx)
    for floor in (MIN_DYNAMIC, 0):
        s = z3.Solver(ctx=ctx)
        limit(s, TIMEOUT_MS)
        s.add(gs.to_z3(ctx), *[var(d) >= (floor if d in dynamic else 0) for d in gs.dims if d in gs.sizes])
        if s.check() == z3.sat:
            m = s.model()
            return {d: m.eval(var(d), model_completion=True).as_long() for d in gs.dims}, True
    raise InputMismatchError("no example given, and z3 found no input the guards accept")


UNKNOWN: dict[str, int] = {}  # NOTE: the answer when z3 cannot tell; callers treat it as "maybe"


class Ask:
    """One solver over some facts and the convention; each question pushes and pops."""

    def __init__(self, formulas: Sequence[Formula], dyn: Sequence[str], timeout_ms: int, ctx: z3.Context | None = None):
        self.ctx = ctx if ctx is not None else z3.Context()
        self.var = z3_vars(self.ctx)
        self.timeout_ms = timeout_ms
        self.s = z3.Solver(ctx=self.ctx)
        limit(self.s, timeout_ms)
        self.s.add(*[formula_to_z3(f, self.var) for f in formulas], *[self.var(d) >= MIN_DYNAMIC for d in dyn])
        self.undecided: list[str] = []

    def z(self, f: Formula) -> z3.BoolRef:
        return formula_to_z3(f, self.var)

    def model(self, *extra: Any, what: str = "") -> dict[str, int] | None:
        """A point satisfying the facts and `extra`: None when there is none, `UNKNOWN` when z3
        cannot tell (compare with `is`)."""
        self.s.push()
        self.s.add(*extra)
        r = self.s.check()
        out: dict[str, int] | None = None
        if r == z3.sat:
            m = self.s.model()
            out = {str(d): m[d].as_long() for d in m.decls() if z3.is_int_value(m[d])}
        elif r == z3.unknown:
            out = UNKNOWN
            if what:
                self.undecided.append(f"{what}: {self.s.reason_unknown()}")
        self.s.pop()
        return out

    def implies(self, goal: Any) -> bool:
        """Do the facts imply `goal`? False when z3 cannot tell."""
        return self.model(z3.Not(goal)) is None

    def value(self, t: Any, model: dict[str, int], default: int) -> int:
        """The value of expression `t` in a model."""
        if model is UNKNOWN:
            return default
        v = z3.simplify(z3.substitute(t, *[(self.var(k), z3.IntVal(v, self.ctx)) for k, v in model.items()]))
        return v.as_long() if z3.is_int_value(v) else default


def lowest(ask: Ask, t: Any, start: int, floor: int, extra: Sequence[Any] = ()) -> int:
    """The least value of `t` with a model at or above `floor`, given `start` has one.

    Undecided questions count as "has a model", so the answer errs low (a wider range).
    """
    lo, hi = floor, start  # some model may have t == hi; none has t < lo
    while lo < hi:
        mid = (lo + hi) // 2
        m = ask.model(t <= mid, t >= lo, *extra)
        if m is None:
            lo = mid + 1
        else:
            hi = min(mid, ask.value(t, m, mid))
    return hi


def highest(ask: Ask, t: Any, start: int, extra: Sequence[Any] = ()) -> int | None:
    """The greatest value of `t` with a model, or None when values beyond `FAR` have one.

    Undecided questions count as "has a model", so the answer errs high (a wider range).
    """
    if ask.model(t >= FAR, *extra) is not None:
        return None
    lo, hi = start, FAR  # some model may have t == lo; none has t >= hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        m = ask.model(t >= mid, t < hi, *extra)
        if m is None:
            hi = mid
        else:
            lo = max(mid, ask.value(t, m, mid))
    return lo
