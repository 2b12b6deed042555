"""The printed `dynamic_shapes` spec run through torch.export itself, narrowed where it must be.

guardsolve's guards are those of the traced program under PyTorch's meta kernels; torch.export
traces its own program (it unrolls `nn.LSTM` over time, say) and may pin or narrow a dim that
the guards leave free. `check_with_export` exports with the spec, reads torch.export's suggested
fixes from its ConstraintViolation, applies those that pin a dim or narrow a range, and exports
again (a bounded number of rounds). Each change comes back as an `ExportPin` with an input that
guardsolve's guards accept and the change rejects, and whether eager PyTorch runs it.

>>> parse_fixes(["_x2 = Dim('_x2', min=1, max=oo)", "x1 = 3", "x2 = 2*_x2", "b0 = 3*a0 + 1"])
{'_x2': ('dim', 1, None), 'x1': ('static', 3), 'x2': ('derived', '_x2', 2, 0), 'b0': ('derived', 'a0', 3, 1)}
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import z3

from guardsolve.errors import GuardsolveError
from guardsolve.pytorch.judgement import MIN_DYNAMIC, ExportSpec, Member
from guardsolve.pytorch.dim_questions import render_point
from guardsolve.pytorch.dynamic_spec import render_spec
from guardsolve.solve.smt import limit, z3_vars

EAGER_LIMIT = 2 ** 24  # NOTE: elements per witness input; a larger one is not run eagerly


class ExportCheckError(GuardsolveError):
    """torch.export cannot export the program with the spec: it fails for another reason than a
    constraint violation, or its suggested fixes do not lead to a spec it accepts."""


Fix = tuple  # ("static", v) | ("dim", min, max) | ("derived", root, coef, offset)


# -- torch.export's suggested fixes, parsed ---------------------------------------------------

def _linear(node: ast.expr) -> tuple[str | None, int, int]:
    """`2*_x2 + 1` -> ("_x2", 2, 1); an int -> (None, 0, value)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return None, 0, node.value
    if isinstance(node, ast.Name):
        return node.id, 1, 0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        r, a, b = _linear(node.operand)
        return r, -a, -b
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        (ra, aa, ba), (rb, ab, bb) = _linear(node.left), _linear(node.right)
        if isinstance(node.op, ast.Mult):
            if ra is not None and rb is not None:
                raise ValueError(f"not linear: {ast.unparse(node)}")
            return (rb, ba * ab, ba * bb) if ra is None else (ra, aa * bb, ba * bb)
        sign = 1 if isinstance(node.op, ast.Add) else -1
        if ra is not None and rb is not None:
            raise ValueError(f"two dims: {ast.unparse(node)}")
        return ra or rb, aa + sign * ab, ba + sign * bb
    raise ValueError(f"not a linear expression: {ast.unparse(node)}")


def parse_fixes(lines: Sequence[str]) -> dict[str, Fix]:
    """torch.export's fix lines (`x1 = 3`, `x2 = 2*_x2`, `_x2 = Dim('_x2', min=1, max=oo)`,
    `b0 = a0`) -> name -> fix. A line in other words raises `ValueError`."""
    out: dict[str, Fix] = {}
    for line in lines:
        name, sep, rhs = (s.strip() for s in line.partition("="))
        if not sep or not name.isidentifier():
            raise ValueError(f"not a fix: {line!r}")
        node = ast.parse(rhs.replace("oo", "None"), mode="eval").body
        if isinstance(node, ast.Call):
            kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            out[name] = ("dim", kw.get("min"), kw.get("max"))
        else:
            root, a, b = _linear(node)
            out[name] = ("static", b) if root is None else ("derived", root, a, b)
    return out


def torch_fixes(message: str) -> dict[str, Fix]:
    """The suggested fixes of a torch.export ConstraintViolation message, parsed ({} if none).

    >>> torch_fixes("Constraints violated (input1)!\\nSuggested fixes:\\n  input1 = 5\\n\\nThe error above")
    {'input1': ('static', 5)}
    """
    if "Suggested fixes:" not in message:
        return {}
    block = message.split("Suggested fixes:", 1)[1].strip("\n").split("\n\n")[0]
    return parse_fixes([line for line in block.splitlines() if line.strip()])


# -- the check ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportPin:
    """A change torch.export asked for beyond guardsolve's guards, with the input it costs."""

    fix: str  # torch.export's words: `input1 = 5`, `_x2 = Dim('_x2', max=8)`
    dims: tuple[str, ...]  # the declared dims it pins or narrows
    change: str  # what the spec says now: `input1 = 5`, `_x2 in [3, 8]`
    before: str  # what guardsolve's guards allow: `any input1`, `_x2 in [3, 16]`
    witness: dict[str, int] | None  # declared dims of an input the guards accept and the change rejects
    eager: str | None  # None: eager PyTorch runs the witness; else why not (its error, or "not run")
    point: str = ""  # the witness as inputs: `input=[2, 6, 8]`
    low: int | None = None  # a narrowed range (None for a pin)
    high: int | None = None

    def __str__(self) -> str:
        head = f"torch.export {'pins' if self.low is None else 'narrows the range to'} {self.change}" + (
            f" (asked: {self.fix})" if self.fix != self.change else "")
        if self.witness is None:
            return f"{head}; guardsolve's guards agree (z3 finds no other input they accept)"
        ran = "eager runs" if self.eager is None else f"eager: {self.eager}"
        return f"{head}; guardsolve's guards accept {self.before} (witness: {self.point} passes the guards and {ran})"


@dataclass
class ExportCheck:
    """A spec torch.export accepts as it is, and what it pinned beyond guardsolve's guards."""

    spec: ExportSpec
    pins: list[ExportPin]
    rounds: int  # exports run
    program: Any  # the `torch.export.ExportedProgram`


def as_module(fn: Callable[..., Any], names: Sequence[str]) -> Any:
    """`fn` as an `nn.Module` whose forward takes `names` (the spec's keys); a module as it is."""
    import torch

    if isinstance(fn, torch.nn.Module):
        return fn
    ns: dict[str, Any] = {"_guardsolve_fn": fn}
    exec(f"def forward(self, {', '.join(names)}):\n    return _guardsolve_fn({', '.join(names)})", ns)
    return type(getattr(fn, "__name__", "Wrapped"), (torch.nn.Module,), {"forward": ns["forward"]})()


def check_with_export(j: Any, fn: Callable[..., Any], args: Sequence[Any], max_rounds: int = 4) -> ExportCheck:
    """Export `fn` at `args` with the judgement's spec; apply torch.export's narrowing fixes until
    it accepts one (at most `max_rounds` exports)."""
    import torch

    gs, spec = j.guards, j.spec
    if spec is None or gs is None or gs.signature is None:
        raise ExportCheckError("an export check needs the traced signature (trace a function, not a guard file)")
    module = as_module(fn, [p.name for p in gs.signature])
    state = _State(j.example, dict(spec.dims), dict(spec.roots))
    pins: list[ExportPin] = []
    for round_ in range(1, max_rounds + 1):
        spec = render_spec(gs, state.dims, state.roots)
        try:
            with torch.no_grad(), _quiet():
                program = torch.export.export(module, tuple(args), dynamic_shapes=spec.spec)
            return ExportCheck(spec, pins, round_, program)
        except Exception as e:  # NOTE: torch.export raises many types; only a constraint violation has fixes
            message = str(e)
            if not _is_constraint_violation(e):
                raise ExportCheckError(f"torch.export cannot export {_name(fn)}: {type(e).__name__}: "
                                       f"{_first_nonblank_line(message)}") from e
        try:
            fixes = torch_fixes(message)
        except (ValueError, SyntaxError) as e:
            raise ExportCheckError(f"torch.export's suggested fixes are not in words guardsolve reads ({e}): "
                                   f"{_first_nonblank_line(message)}") from None
        new = state.apply(fixes)
        if not new:
            raise ExportCheckError(f"torch.export rejects the spec and none of its suggested fixes narrows it "
                                   f"({'; '.join(_fix_line(n, f) for n, f in fixes.items()) or 'none given'}): "
                                   f"{_first_nonblank_line(message)}")
        pins += [_witnessed(gs, j.example, fn, args, p, before) for p, before in new]
    raise ExportCheckError(f"torch.export still rejects the spec after {max_rounds} rounds of its own fixes")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.export without its chatter: warnings about the program (LSTM's flat weights), log
    lines, the partial graph it prints on failure. NOTE: what matters comes back as the exception."""
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)


def _is_constraint_violation(e: BaseException) -> bool:
    kind = getattr(e, "error_type", None)
    return getattr(kind, "name", "") == "CONSTRAINT_VIOLATION" or "Constraints violated" in str(e)


def _first_nonblank_line(message: str) -> str:
    return next((line.strip() for line in message.splitlines() if line.strip()), "(no message)")


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _fix_line(name: str, f: Fix) -> str:
    if f[0] == "static":
        return f"{name} = {f[1]}"
    if f[0] == "dim":
        return f"{name} = Dim({name!r}" + "".join(f", {k}={v}" for k, v in (("min", f[1]), ("max", f[2])) if v is not None) + ")"
    return f"{name} = {Member(f[1], f[2], f[3]).render()}"


# -- applying fixes -------------------------------------------------------------------------------

Affine = tuple  # (root, coef, offset): a name as `coef * root + offset`


class _State:
    """The spec being narrowed: each declared dim a `Member` of a root, each root a range."""

    def __init__(self, example: Mapping[str, int], dims: dict[str, Member], roots: dict[str, tuple[int | None, int | None]]):
        self.example, self.dims, self.roots = example, dims, roots

    def resolve(self, name: str, fixes: Mapping[str, Fix]) -> Affine | None:
        """`name` (a declared dim, a root, or a fresh root of torch.export's) in terms of our roots."""
        if name in self.dims:
            m = self.dims[name]
            return (None, 0, m.offset) if m.root is None else (m.root, m.coef, m.offset)
        if name in self.roots:
            return name, 1, 0
        # NOTE: torch.export names a fresh root (`_x2`) by the members it derives from it
        found = set()
        for n, f in fixes.items():
            if f[0] == "derived" and f[1] == name and n in self.dims and self.dims[n].root is not None:
                m, (_, a, b) = self.dims[n], f[1:]
                if a > 0 and m.coef % a == 0 and (m.offset - b) % a == 0:
                    found.add((m.root, m.coef // a, (m.offset - b) // a))
                else:
                    return None
        return found.pop() if len(found) == 1 else None

    def range(self, root: str) -> tuple[int, int | None]:
        lo, hi = self.roots[root]
        return (lo if lo is not None else self._floor(root)), hi

    def _floor(self, root: str) -> int:
        """The least root value torch.export allows by default: each member at least 2."""
        return max(math.ceil((MIN_DYNAMIC - m.offset) / m.coef) for m in self.dims.values() if m.root == root)

    def members(self, root: str) -> tuple[str, ...]:
        return tuple(d for d, m in self.dims.items() if m.root == root)

    def pin(self, root: str, value: int) -> None:
        for d, m in self.dims.items():
            if m.root == root:
                self.dims[d] = Member(None, 1, m.coef * value + m.offset)
        del self.roots[root]

    def apply(self, fixes: Mapping[str, Fix]) -> list[tuple[ExportPin, _Before]]:
        """Apply the fixes that pin or narrow; pin the dims of one that states a relation our spec
        lacks. Returns each change with the root's range before it."""
        out = []
        for name, f in sorted(fixes.items(), key=lambda kv: kv[1][0] != "static"):
            line = _fix_line(name, f)
            r = self.resolve(name, fixes)
            if f[0] == "static" and r is not None and r[0] is not None and (f[1] - r[2]) % r[1] == 0:
                out.append(self._pin(r[0], (f[1] - r[2]) // r[1], line))
            elif f[0] == "dim" and r is not None and r[0] is not None and r[1] > 0:
                root, a, b = r
                lo = math.ceil((f[1] - b) / a) if f[1] is not None else None
                hi = (f[2] - b) // a if f[2] is not None else None
                change = self._narrow(root, lo, hi, line)
                if change is not None:
                    out.append(change)
            elif f[0] == "derived" and r is not None and (rr := self.resolve(f[1], fixes)) is not None and \
                    (r[0], r[1], r[2]) == (rr[0], f[2] * rr[1], f[2] * rr[2] + f[3]):
                continue  # the relation our spec already states
            elif f[0] != "dim":
                # NOTE: a relation (or a value) our spec cannot take as a narrowing: pin what it names
                for d in [name] + ([f[1]] if f[0] == "derived" else []):
                    if d in self.dims and self.dims[d].root is not None:
                        m = self.dims[d]
                        out.append(self._pin(m.root, (self.example[d] - m.offset) // m.coef, line))
        return out

    def _before(self, root: str) -> _Before:
        lo, hi = self.range(root)
        members = {d: (m.coef, m.offset) for d, m in self.dims.items() if m.root == root}
        d, (a, b) = next(iter(members.items()))
        return _Before(root, lo, hi, members, (self.example[d] - b) // a)

    def _pin(self, root: str, value: int, line: str) -> tuple[ExportPin, _Before]:
        before = self._before(root)
        self.pin(root, value)
        change = ", ".join(f"{d} = {self.dims[d].offset}" for d in before.members)
        return ExportPin(line, tuple(before.members), change, "", None, None), before

    def _narrow(self, root: str, lo: int | None, hi: int | None, line: str) -> tuple[ExportPin, _Before] | None:
        before = self._before(root)
        new_lo = max(before.lo, lo) if lo is not None else before.lo
        new_hi = hi if before.hi is None else before.hi if hi is None else min(before.hi, hi)
        if (new_lo, new_hi) == (before.lo, before.hi):
            return None
        self.roots[root] = (None if new_lo == self._floor(root) and self.roots[root][0] is None else new_lo, new_hi)
        return ExportPin(line, tuple(before.members), f"{root} in [{new_lo}, {new_hi if new_hi is not None else 'oo'}]",
                         "", None, None, low=new_lo, high=new_hi), before


@dataclass(frozen=True)
class _Before:
    """A root's class before a change: its range, members (d -> (coef, offset)), example value."""

    root: str
    lo: int
    hi: int | None
    members: dict[str, tuple[int, int]]
    value: int

    def text(self) -> str:
        return f"{self.root} in [{self.lo}, {self.hi if self.hi is not None else 'oo'}]"


# -- witnesses ------------------------------------------------------------------------------------

def _witnessed(gs: Any, example: Mapping[str, int], fn: Callable[..., Any], args: Sequence[Any],
               pin: ExportPin, before: _Before) -> ExportPin:
    """`pin` with an input the guards accept that the change rejects, tried in eager PyTorch."""
    if before.hi is None and before.lo <= _default_lo(before):
        allowed = f"any {before.root}" if before.members == {before.root: (1, 0)} else \
            f"any {before.root} (" + ", ".join(f"{d} = {Member(before.root, a, b).render()}" for d, (a, b) in before.members.items()) + ")"
    else:
        allowed = before.text()
    point = _accepted_elsewhere(gs, example, pin, before)
    if point is None:
        return replace(pin, before=allowed)
    full = {**example, **point}
    return replace(pin, before=allowed, witness=point, eager=_eager(gs, fn, args, full), point=render_point(gs, full))


def _default_lo(before: _Before) -> int:
    return max(math.ceil((MIN_DYNAMIC - b) / a) for a, b in before.members.values())


def _accepted_elsewhere(gs: Any, example: Mapping[str, int], pin: ExportPin, before: _Before) -> dict[str, int] | None:
    """The pinned dims at another value of their root (the rest at the example) that the guards
    accept, within the range before the change and outside it after; the nearest found first."""
    ctx = z3.Context()
    var = z3_vars(ctx)
    t = z3.Int("_t", ctx)  # NOTE: the class's root, so that its members move together as the spec had them
    s = z3.Solver(ctx=ctx)
    limit(s, 2000)
    s.add(gs.to_z3(ctx), *[var(d) == v for d, v in example.items() if d not in before.members],
          *[var(d) == a * t + b for d, (a, b) in before.members.items()], t >= before.lo,
          *([t <= before.hi] if before.hi is not None else []))
    if pin.low is None:  # pinned
        outside, near = t != before.value, [before.value + 1, before.value - 1, before.value + 2]
    else:
        outside = z3.Or(t < pin.low, t > pin.high) if pin.high is not None else t < pin.low
        near = [pin.low - 1] + ([pin.high + 1] if pin.high is not None else [])
    for extra in [t == v for v in near] + [z3.BoolVal(True, ctx)]:
        if s.check(outside, extra) == z3.sat:
            m = s.model()
            return {d: m.eval(var(d), model_completion=True).as_long() for d in before.members}
    return None


def _eager(gs: Any, fn: Callable[..., Any], args: Sequence[Any], point: Mapping[str, int]) -> str | None:
    """None when `fn` runs on inputs of the point's sizes (like the example args); else why not."""
    import torch

    inputs = []
    for p, a in zip(gs.signature, args):
        if p.kind != "tensor" or not isinstance(a, torch.Tensor):
            inputs.append(point.get(p.name, a) if p.kind != "tensor" else a)
            continue
        shape = [point[d] for d in p.dims]
        if math.prod(shape) > EAGER_LIMIT:
            return "not run (too large)"
        make = torch.randn if a.dtype.is_floating_point else torch.zeros
        inputs.append(make(shape, dtype=a.dtype, device=a.device))
    try:
        with torch.no_grad():
            fn(*inputs)
    except Exception as e:  # NOTE: any failure is the answer: guardsolve's guards let in an input eager rejects
        return f"raises {type(e).__name__}: {_first_nonblank_line(str(e))}"
    return None
