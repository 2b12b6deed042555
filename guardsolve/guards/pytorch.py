"""Reinterpret a tensor trace with PyTorch's shape rules: the guard graph, again.

Each tensor becomes a meta tensor whose sizes are SymInts over the input dims, hinted with
the example shapes the trace recorded. Each `aten.*` call runs its shape rule
(`guardsolve.guards.rules`), the user's own int arithmetic and branches replay as recorded,
and every decision is a bailout, exactly as when the trace was recorded:

>>> from guardsolve.ir.graph import Graph
>>> from guardsolve.ir.printer import print_guards
>>> g = Graph.parse("a = var_placeholder(name=a, rank=1, shape=[4], dtype=float32)\\n"
...                 "b = var_placeholder(name=b, rank=1, shape=[4], dtype=float32)\\n"
...                 "v0 = aten.mul.Tensor(a, b)")
>>> for line in print_guards(pytorch_guard_graph(g, signature_of(g)))[:3]:
...     print(line)
assert not (a0 == 1)
assert not (b0 == 1)
assert (a0 == b0)
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from guardsolve.errors import GuardFailure, GuardsolveError, TraceError, UnsupportedOpError
from guardsolve.guards.rule_cache import RuleCache
from guardsolve.guards.recorder import Recorder
from guardsolve.guards.symbolic import SymGuard
from guardsolve.ir.aten import refs, resolve, substitute
from guardsolve.ir.flat import flatten
from guardsolve.ir.graph import Graph
from guardsolve.ir.interp import RuleTable, interpret
from guardsolve.ir.node import Node
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import Param, dim_names


def signature_of(graph: Graph) -> tuple[Param, ...]:
    """The input signature of a tensor trace, from its placeholders."""
    sig = graph.meta.get("signature")
    if sig is not None:
        return sig
    kinds = [(n.params["name"], "tensor" if n.op is Op.VAR_PLACEHOLDER else "int", n.params.get("rank", 0))
             for n in graph.placeholders()]
    return dim_names(kinds)


def _sym(v: SymGuard) -> Any:
    return torch.SymInt(v)


def dtype_of(name: str, node: Node | None = None) -> torch.dtype:
    """`torch.float32` for `float32`."""
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise TraceError(f"unknown dtype {name!r}" + (f" in `{node}`" if node is not None else ""))
    return d


def meta_input(rec: Recorder, p: Param, shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous meta tensor whose sizes are the input dims of `p` (hinted with `shape`).

    Building it asks PyTorch questions (is a size 0, for the storage size); they are about
    guardsolve's stand-in, not the user's program, so they are not recorded.
    """
    sizes = [_sym(rec.input_dim(d, s, Op.INT_PLACEHOLDER, p.name, i)) for i, (d, s) in enumerate(zip(p.dims, shape))]
    rec.muted = True
    try:
        return torch.empty(sizes, dtype=dtype, device="meta")
    finally:
        rec.muted = False


class ReadsOtherwise(TraceError):
    """A replay at other sizes where user code reads another value than the trace records:
    a size the trace reads (`size_index(s3, index=2)`) that is a constant here (a fresh trace
    records `int_const(val=4)` there instead), or the other way round; or sizes a C++ composite
    read as ints (`aten.size.default(v0)`, a node with no outputs) that are other ints here.
    `node` is the trace's read, `got` and `was` what it reads here and in the trace (`_read_value`)."""

    def __init__(self, node: Node, got: Any, was: Any, loc: Any = None) -> None:
        def what(v: Any) -> str:
            if isinstance(v, tuple):
                return "[" + ", ".join("a size" if x == "symbolic" else str(x) for x in v) + "]"
            return "a size" if v == "symbolic" else f"the constant {v}"

        line = node.meta.get("line")
        at = f" at {loc}" if loc is not None else ""
        # NOTE: a node with no outputs is a C++ composite's read of sizes as ints (`aten.size.default`)
        who = "user code reads" if node.outputs else "PyTorch's C++ code reads, as ints,"
        super().__init__(f"records another trace{at}: {who} {what(got)} where the trace reads {what(was)} "
                         f"(`{node}`" + (f", trace line {line})" if line is not None else ")"))
        self.node, self.got, self.was, self.loc = node, got, was, loc


class HandsBackOtherwise(ReadsOtherwise):
    """A replay at other sizes where an op's kernel hands one of its inputs back as an output
    (`got`: those outputs) where it did not in the trace (`was`), or the other way round: user
    code then holds the input itself, and a fresh trace records another trace."""

    def __init__(self, node: Node, got: tuple[str, ...], was: tuple[str, ...], loc: Any = None) -> None:
        def what(outs: tuple[str, ...]) -> str:
            return f"hands an input back as {', '.join(outs)}" if outs else "makes new tensors"

        line = node.meta.get("line")
        at = f" at {loc}" if loc is not None else ""
        TraceError.__init__(self, f"records another trace{at}: {node.params['fn']} {what(got)} where in the trace "
                            f"it {what(was)} (`{node}`" + (f", trace line {line})" if line is not None else ")"))
        self.node, self.got, self.was, self.loc = node, got, was, loc


class _Read(tuple):  # type: ignore[type-arg]
    """A tensor's sizes or strides as user code reads them (a `var_size` or `var_stride` node)."""


def _read_value(v: Any) -> Any:
    """What user code gets from a read: "symbolic" (a trace node of its own), or the constant;
    a tuple of those for a tensor's sizes or strides.

    >>> _read_value((torch.SymInt(SymGuard(Recorder(None), 3, int, "x0")), 8))
    ('symbolic', 8)
    """
    if isinstance(v, tuple):
        return tuple(map(_read_value, v))
    if isinstance(v, torch.SymInt):
        return v.node.hint if getattr(v.node, "const", False) else "symbolic"
    return v


def _reads_as(got: Any, was: Any) -> bool:
    """Does user code read `got` here as it read `was` in the trace? A size read (`size_index`)
    must be the same (a symbol, or the same constant). Of a tensor's sizes or strides read whole
    (`var_size`), each constant stays that constant: the trace holds what user code computed
    from it (a literal argument, a test it made in Python), where a symbol records nodes."""
    if isinstance(was, tuple):
        return isinstance(got, tuple) and len(got) == len(was) and all(
            w == "symbolic" or g == w for g, w in zip(got, was))
    return got == was


class _Opaque:
    """A tensor's truth value in the guard graph: data, not shape."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def pytorch_rules(rec: Recorder, signature: tuple[Param, ...], reads: dict[str, Any] | None = None,
                  expect: dict[str, Any] | None = None) -> RuleTable:
    """Rules mapping tensors to meta tensors over SymInts and recording guards into `rec.guards`.

    `reads` collects what user code reads at each size read of the trace (`_read_value`: a
    symbol, or the constant); with `expect` (the example's), a read that differs raises
    `ReadsOtherwise`, as a fresh trace records another node there.
    """
    dims = {p.name: p for p in signature}
    current: dict[str, Any] = {}

    def read(v: Any, name: str | None = None) -> Any:
        node = current["node"]
        name, got = name or node.outputs[0], _read_value(v)
        if reads is not None:
            reads[name] = got
        if expect is not None and name in expect and not _reads_as(got, expect[name]):
            raise ReadsOtherwise(node, got, expect[name], rec.loc)
        return v

    def enter(node: Node) -> None:
        current["node"] = node
        current["index"] = current.get("index", -1) + 1
        rec.loc = node.meta.get("loc")
        rec.extra = {"trace_line": node.meta.get("line"), "trace_node": node}

    def placeholder(*, name: str, rank: int, shape: tuple[int, ...] | None = None, dtype: str = "float32") -> Any:
        if shape is None:
            raise TraceError(f"placeholder {name} has no example shape; PyTorch's shape rules need one")
        return meta_input(rec, dims[name], shape, dtype_of(dtype, current["node"]))

    def int_arg(*, name: str, val: int | None = None) -> Any:
        if val is None:
            raise TraceError(f"int argument {name} has no example value (val=...); PyTorch's shape rules need one")
        return _sym(rec.input_dim(name, val, Op.INT_ARG, None, 0))

    def param(*, name: str, shape: tuple[int, ...], dtype: str = "float32", crc: int | None = None) -> Any:
        return torch.empty(shape, dtype=dtype_of(dtype, current["node"]), device="meta")

    def call(*values: Any, fn: str, args: Any, kwargs: Any) -> Any:
        node = current["node"]
        func = resolve(fn)
        env = dict(zip(refs((args, kwargs)), values))
        a, k = substitute((tuple(args), dict(kwargs)), env.__getitem__)
        if any(x.name == "device" and x.kwarg_only for x in func._schema.arguments):
            k["device"] = torch.device("meta")
        try:
            out = rec.rules(func, a, k)
        except GuardsolveError:
            raise
        except Exception as e:
            raise UnsupportedOpError(fn, f"PyTorch's shape rule fails while replaying `{node}` "
                                     f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})",
                                     str(rec.loc or "")) from e
        if not node.outputs and not any(isinstance(x, torch.Tensor) for x in flatten(out)[0]):
            # NOTE: sizes a C++ composite read as ints (`cov`'s `aten.size.default(v0)`, which
            # pins them): what it computed from them (a `scalar_tensor(n)` constant, a literal
            # argument, how many ops it unrolled) is in the trace as at the example, so a replay
            # where they read otherwise is another trace, as a user's size read is
            read(tuple(out) if isinstance(out, (list, tuple)) else out, f"{fn}#{current['index']}")
            return out
        leaves = [x for x in flatten(out)[0] if isinstance(x, torch.Tensor) or (
            isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) and x.node.is_symbolic())]
        if len(leaves) != len(node.outputs):
            raise TraceError(f"`{node}` names {len(node.outputs)} outputs; the op returns {len(leaves)} tensors")
        if reads is not None or expect is not None:
            handed_back(node, a, k, leaves)
        return leaves[0] if len(leaves) == 1 else leaves

    def handed_back(node: Node, a: Any, k: Any, leaves: list[Any]) -> None:
        # NOTE: a kernel may hand an input back as an output at some sizes only (`broadcast_tensors`
        # of an operand already at the broadcast shape: `expand_outplace` returns it): user code
        # then holds the input itself, and a fresh trace refers to it, another trace. The meta
        # kernel makes the same decision as eager's.
        ins = [x for x in flatten((a, k))[0] if isinstance(x, torch.Tensor)]
        got = tuple(o for o, x in zip(node.outputs, leaves) if any(x is i for i in ins))
        key = f"{node.outputs[0]}#aliases"
        if got and reads is not None:
            reads[key] = got
        if expect is not None and got != expect.get(key, ()):
            raise HandsBackOtherwise(node, got, expect.get(key, ()), rec.loc)

    def bailout(b: Any, *, expect: bool) -> None:
        if isinstance(b, _Opaque):
            rec.g_bailout(b.name, expect, rec.loc)
            return
        if isinstance(b, torch.SymBool) and b.node.data is not None:
            # NOTE: a check on a value read from tensor data: the replay makes it; an opaque
            # bailout here, as the trace's own guard graph has (`SymGuard._data_bailout`)
            _pinned(b.node, expect)
            name = current["node"].inputs[0]
            rec.g_bailout(rec.guards.emit(Op.BOOL_OPAQUE, (), meta={"loc": rec.loc}, name=name), expect, rec.loc)
            return
        extra, rec.extra = rec.extra, {**rec.extra, "user": True}  # NOTE: the program's own decision, as a trace records it
        try:
            got = b.node.guard_bool("", 0) if isinstance(b, torch.SymBool) else bool(b)
        finally:
            rec.extra = extra
        if got != expect:
            raise GuardFailure(expect)

    def opaque(t: Any) -> _Opaque:
        name = current["node"].outputs[0]
        return _Opaque(rec.guards.emit(Op.BOOL_OPAQUE, (), meta={"loc": rec.loc, **rec.extra}, name=name))

    return RuleTable("pytorch shape", {
        Op.VAR_PLACEHOLDER: placeholder,
        Op.INT_ARG: int_arg,
        Op.VAR_PARAM: param,
        Op.VAR_SIZE: lambda t: read(_Read(t.shape)),
        Op.VAR_STRIDE: lambda t: read(_Read(t.stride())),
        Op.VAR_STORAGE_OFFSET: lambda t: read(t.storage_offset()),
        Op.SIZE_INDEX: lambda s, *, index: read(s[index]) if isinstance(s, _Read) else s[index],
        Op.SIZE_CTOR: lambda *ds: list(ds),
        Op.INT_CONST: lambda *, val: val,
        Op.BOOL_CONST: lambda *, val: val,
        Op.INT_ADD: operator.add, Op.INT_SUB: operator.sub, Op.INT_MUL: operator.mul,
        Op.INT_FLOORDIV: operator.floordiv, Op.INT_MOD: operator.mod,
        Op.INT_EQ: operator.eq, Op.INT_NE: operator.ne, Op.INT_LT: operator.lt, Op.INT_LE: operator.le,
        Op.INT_GT: operator.gt, Op.INT_GE: operator.ge,
        Op.BOOL_NOT: torch.sym_not, Op.BOOL_AND: operator.and_, Op.BOOL_OR: operator.or_,
        Op.BOOL_BAILOUT: bailout,
        Op.VAR_TO_BOOL: opaque,
        Op.ATEN: call,
    }, enter)


def _pinned(check: SymGuard, expect: bool) -> None:
    """A value bailout that pins a count read from data (`count == 3`, expected true: the trace
    recorded it where a shape rule needed the count as an int, `SymGuard._pin_at_op`) decides
    the count for the rules that follow, as it did while tracing."""
    if not expect or check.why is None or check.why[0] is not Op.INT_EQ:
        return
    _, a, b = check.why
    for count, value in ((a, b), (b, a)):
        if (isinstance(count, SymGuard) and count.data is not None and not count.const and count.why is None
                and isinstance(value, SymGuard) and value.const):
            count.hint, count.const = value.hint, True


def pytorch_guard_graph(graph: Graph, signature: tuple[Param, ...], *, reads: dict[str, Any] | None = None,
                        expect: dict[str, Any] | None = None) -> Graph:
    """The guard graph of a tensor trace of PyTorch ops, by replaying it with PyTorch's rules
    (`reads`, `expect`: as `pytorch_rules` takes them).

    Where the replay stops (a rule rejects the sizes, a decision of the trace is answered
    otherwise), the exception carries the guards recorded up to there (`prefix_guards`), as a
    fresh trace's does: every point that makes those decisions stops there too.
    """
    rec = Recorder(None)
    rec.rules = RuleCache(rec)
    rec.depth = 1  # NOTE: everything is recorded into the guard graph only
    rec.guards.meta["signature"] = signature
    rec.guards.reserve(d for p in signature for d in p.dims)
    try:
        # NOTE: below autograd, as the live trace's mode sees each op: a CompositeImplicit op
        # (`lstm`, `linear`) reaches its rule whole (OWN_META, the fast paths) instead of being
        # decomposed in C++ first (`lstm` unrolled over time pinned the sequence length)
        with torch._C._AutoDispatchBelowAutograd():
            interpret(graph, pytorch_rules(rec, signature, reads, expect), validate=False)
    except Exception as e:
        e.prefix_guards = rec.guards  # type: ignore[attr-defined]
        raise
    finally:
        rec.rules.close()
    return rec.guards.pruned()
