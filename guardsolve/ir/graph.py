"""The ANF IR: `Graph`, an ordered list of `Node`s, its text form, and validation against the op table.

>>> g = Graph()
>>> a = g.emit(Op.INT_PLACEHOLDER, (), name="a0")
>>> one = g.emit(Op.INT_CONST, (), val=1)
>>> g.emit(Op.BOOL_BAILOUT, (g.emit(Op.INT_EQ, (a, one)),), expect=False)
>>> print(g)
a0 = int_placeholder(name=a0)
i0 = int_const(val=1)
i1 = int_eq(a0, i0)
bool_bailout(i1, expect=False)
"""

from __future__ import annotations

import itertools
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from guardsolve.errors import (
    ArityError, DuplicateNameError, GraphError, TypeMismatchError, UndefinedNameError, UnknownOpError,
    UseBeforeDefinitionError,
)
from guardsolve.ir.node import Node
from guardsolve.ir.aten import resolve
from guardsolve.ir.ops import DIM_OPS, SPECS, Args, Ints, Kwargs, Number, Op, OpName, Type
from guardsolve.ir.parse import parse_nodes

_NO_META: Mapping[str, Any] = MappingProxyType({})


class SharedParams(dict):  # type: ignore[type-arg]
    """Params that many nodes share (`Graph.emit`): read-only. A dict, not a mapping proxy,
    because rules take params as `**params`, which copies any other mapping slowly."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("these params are shared by several nodes: read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only  # type: ignore


_NO_PARAMS: Mapping[str, Any] = SharedParams()

# Ops whose params take few distinct values over millions of nodes: each graph records each
# distinct params once (read-only), keyed by the values and their types (`val=True` is not `val=1`)
_SHARED_PARAMS = frozenset({Op.INT_CONST, Op.BOOL_CONST, Op.BOOL_BAILOUT})

_PLACEHOLDERS = frozenset({Op.VAR_PLACEHOLDER, Op.INT_PLACEHOLDER, Op.INT_ARG, Op.VAR_PARAM})

# NOTE: the prefix of fresh names by result type follows the notebook: bools share `i` with ints.
PREFIX: Mapping[Type, str] = {Type.BOOL: "i", Type.INT: "i", Type.SIZE: "s", Type.TENSOR: "v"}


class Graph:
    """An ordered list of nodes that owns its name supply (no global counters)."""

    def __init__(self, nodes: list[Node] | None = None, meta: dict[str, Any] | None = None):
        self.nodes: list[Node] = []
        self.meta: dict[str, Any] = dict(meta or {})
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}
        self._params: dict[tuple[Any, ...], Mapping[str, Any]] = {}  # see `_SHARED_PARAMS`
        for n in nodes or []:
            self.append(n)

    # -- building ---------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        """A name `prefix<N>` not yet used in this graph.

        NOTE: the names a prefix that does not end in a digit hands out are not stored (millions in a
        large guard graph): its counter says which it gave (`taken`), and no other prefix makes
        them, but one that ends in a digit (`x1` makes `x10`, as `x` does), whose names are stored.

        >>> g = Graph()
        >>> [g.fresh("x"), g.fresh("x1"), g.fresh("x") and g.fresh("x")]
        ['x0', 'x10', 'x2']
        >>> g.taken("x1"), g.taken("x2"), g.taken("x3"), g.taken("x10"), g.taken("x01")
        (True, True, False, True, False)
        """
        n = self._counters.get(prefix, 0)
        if prefix and not prefix[-1].isdigit():
            while f"{prefix}{n}" in self._used:
                n += 1
            self._counters[prefix] = n + 1
            return f"{prefix}{n}"
        while self.taken(f"{prefix}{n}"):
            n += 1
        self._counters[prefix] = n + 1
        self._used.add(name := f"{prefix}{n}")
        return name

    def taken(self, name: str) -> bool:
        """Is `name` defined or reserved in this graph, or handed out by `fresh`?"""
        if name in self._used:
            return True
        k = len(name)
        while k > 0 and name[k - 1].isdigit():
            k -= 1
            num = name[k:]
            if (num == "0" or num[0] != "0") and int(num) < self._counters.get(name[:k], 0):
                return True
        return False

    def reserve(self, names: Any) -> None:
        """Keep `fresh` from handing out `names`: the input dims a recorder defines later
        (a parameter `i` has dims `i0, i1`, which are also fresh int names)."""
        self._used.update(names)

    def append(self, node: Node) -> Node:
        self.nodes.append(node)
        self._used.update(node.outputs)
        return node

    def emit(self, op: Op, inputs: tuple[str, ...] | list[str], *, out: str | None = None,
             meta: dict[str, Any] | None = None, **params: Any) -> Any:
        """Append `op(inputs, params)` and return its output name (None for a bailout)."""
        spec = SPECS[op]
        outputs: tuple[str, ...] = ()
        made = False  # NOTE: a name from `fresh` is known by its counter; any other is stored
        if spec.result is not None:
            if out is None:
                out = params.get("name") if op in (Op.VAR_PLACEHOLDER, Op.INT_PLACEHOLDER, Op.INT_ARG) else None
                if not out:
                    out, made = self.fresh(PREFIX[spec.result]), True
            outputs = (out,)
        # NOTE: a node without metadata shares one empty, read-only mapping: a large guard
        # graph holds millions of nodes, most with none; so do nodes without params, and
        # constants and bailouts share their few distinct params
        shared: Mapping[str, Any] = params
        if not params:
            shared = _NO_PARAMS
        elif op in _SHARED_PARAMS:
            key = (op, *[(k, type(v), v) for k, v in params.items()])
            try:
                shared = self._params.get(key)  # type: ignore[assignment]
                if shared is None:
                    shared = self._params[key] = SharedParams(params)
            except TypeError:  # NOTE: an unhashable value (an invalid node, which validate names)
                shared = params
        node = Node(op, tuple(inputs), outputs, shared, dict(meta) if meta else _NO_META)  # type: ignore[arg-type]
        if made:
            self.nodes.append(node)
        else:
            self.append(node)
        return outputs[0] if outputs else None

    # -- reading ----------------------------------------------------------------

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        text = "\n".join(str(n) for n in self.nodes)
        routes = self.meta.get("routes")
        if routes:  # NOTE: a tensor trace's routes found by tracing its function again (`ir.routes`)
            from guardsolve.ir.routes import print_routes

            text += "\n" + print_routes(routes)
        return text

    def __repr__(self) -> str:
        return f"<Graph of {len(self.nodes)} nodes>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return self.nodes == other.nodes

    __hash__ = None  # type: ignore[assignment]

    def pruned(self, in_place: bool = True) -> "Graph":
        """A guard graph without the nodes no bailout depends on (placeholders stay),
        renumbered `i0, i1, ...`: PyTorch computes sizes it never asks about, e.g. storage
        sizes. Only for a guard graph its recorder is done with: its nodes are reused, renamed
        in place, unless `in_place=False` (new nodes: the graph's own keep their names)."""
        need: set[str] = set()
        keep: list[Node] = []
        for n in reversed(self.nodes):
            if (n.op is Op.BOOL_BAILOUT or n.op in _PLACEHOLDERS
                    or any(o in need for o in n.outputs)):
                need.update(n.inputs)
                keep.append(n)
        g = Graph(meta=self.meta)
        taken = {n.outputs[0] for n in keep if n.op in _PLACEHOLDERS}
        fresh = (f"i{k}" for k in itertools.count() if f"i{k}" not in taken)
        rename: dict[str, str] = {}
        for n in reversed(keep):
            if not in_place:
                n = Node(n.op, n.inputs, n.outputs, n.params, n.meta)
            # NOTE: renamed in place (no new nodes): the graph being pruned is a recorder's own
            if n.inputs:
                n.inputs = tuple([rename.get(x, x) for x in n.inputs])
            if n.outputs and n.op not in _PLACEHOLDERS:
                rename[n.outputs[0]] = name = next(fresh)
                n.outputs = (name,)
            g.nodes.append(n)
            g._used.update(n.outputs)
        return g

    def bailouts(self) -> list[Node]:
        return [n for n in self.nodes if n.op is Op.BOOL_BAILOUT]

    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes if n.op in (Op.VAR_PLACEHOLDER, Op.INT_PLACEHOLDER, Op.INT_ARG)]

    @classmethod
    def parse(cls, text: str) -> "Graph":
        """Read the text format back; `Graph.parse(str(g)) == g` (and the routes a trace's text
        records, `ir.routes`, are its `meta["routes"]`)."""
        g = Graph()
        for node in parse_nodes(text):
            g.append(node)
        if "#route" in text:
            from guardsolve.ir.routes import parse_routes

            routes = parse_routes(text, Graph.parse)
            if routes:
                g.meta["routes"] = routes
        return g

    # -- checking ---------------------------------------------------------------

    def validate(self) -> dict[str, Type]:
        """Check every node against the op table; return the type of every name.

        Raises a `GraphError` subclass naming the node at fault.

        NOTE: one pass that finds duplicates as it goes; a graph at fault is checked again in
        full, duplicates first (`_validate_in_full`), so the fault it names does not depend on
        the pass (a large guard graph saves a pass and a table of every name).
        """
        try:
            return self._validate_quickly()
        except GraphError:
            self._validate_in_full()
            raise

    def _validate_quickly(self) -> dict[str, Type]:
        types: dict[str, Type] = {}
        dims: dict[str, int] = {}  # NOTE: an input dim's name -> its node
        # NOTE: the params objects found right for an op, by identity: constants and bailouts
        # share a few (`emit`), so most nodes skip the per-param checks (the nodes keep them alive)
        fine: set[tuple[Op, int]] = set()
        plain = _PLAIN
        inputs_at: dict[Any, int] = {}  # NOTE: an input tensor's name -> its node
        for i, n in enumerate(self.nodes):
            op = n.op
            if op in DIM_OPS and not _new_dim(dims, n.params.get("name"), i):
                raise DuplicateNameError("an input dim is defined twice", n, i)
            if op is Op.VAR_PLACEHOLDER:
                _check_input(n, i, inputs_at)
            shape = plain.get(op)  # type: ignore[call-overload]
            if shape is not None:
                inputs, params, outputs = shape
                ok = len(n.inputs) == len(inputs) and len(n.outputs) == outputs
                if ok:
                    for name, typ in zip(n.inputs, inputs):
                        if types.get(name) is not typ:
                            ok = False
                            break
                if ok:
                    key = (op, id(n.params))
                    if key not in fine:
                        ok = _params_ok(n.params, params)
                        if ok:
                            fine.add(key)
                if ok:
                    if not outputs:
                        continue
                    o = n.outputs[0]
                    if o not in types:
                        types[o] = SPECS[op].result  # type: ignore[assignment]
                        continue
            made = _check_node(n, i, types, {})  # NOTE: in full; it names the fault
            if len(made) != len(n.outputs) or not types.keys().isdisjoint(made):
                raise DuplicateNameError("a name is defined twice", n, i)
            types.update(made)
        return types

    def _validate_in_full(self) -> None:
        """Raise the first fault: a name defined twice, else the first node at fault."""
        defined_at: dict[str, int] = {}
        dims: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for o in n.outputs:
                if o in defined_at:
                    raise DuplicateNameError(f"name {o!r} is already defined by node {defined_at[o]}", n, i)
                defined_at[o] = i
            if n.op in DIM_OPS and not _new_dim(dims, n.params.get("name"), i):
                d = n.params["name"]
                raise DuplicateNameError(f"dim {d!r} is already an input, of node {dims[d]}", n, i)
        types: dict[str, Type] = {}
        inputs_at: dict[Any, int] = {}
        for i, n in enumerate(self.nodes):
            types.update(_check_node(n, i, types, defined_at))
            if n.op is Op.VAR_PLACEHOLDER:
                _check_input(n, i, inputs_at)


def _check_input(n: Node, i: int, inputs_at: dict[Any, int]) -> None:
    """An input tensor: its name given once in the graph, and as many sizes as its rank."""
    name, rank, shape = n.params.get("name"), n.params.get("rank"), n.params.get("shape")
    if isinstance(name, str) and inputs_at.setdefault(name, i) != i:
        raise DuplicateNameError(f"input tensor {name!r} is already defined by node {inputs_at[name]}", n, i)
    if isinstance(shape, (list, tuple)) and isinstance(rank, int) and len(shape) != rank:
        raise TypeMismatchError(f"shape={list(shape)} has {len(shape)} sizes where rank={rank}", n, i)


def _new_dim(dims: dict[Any, int], name: Any, i: int) -> bool:
    """Record input dim `name` at node i; False if another node already has it."""
    if not isinstance(name, str):
        return True  # NOTE: not a name at all: the node's own check says so
    return dims.setdefault(name, i) == i


# op -> (input types, params, outputs) of the ops `validate` checks quickly: no variadic or optional part
_PLAIN: Mapping[Op, tuple[tuple[Type, ...], Mapping[str, type], int]] = MappingProxyType({
    op: (tuple(spec.inputs), MappingProxyType(dict(spec.params)), 0 if spec.result is None else 1)
    for op, spec in SPECS.items()
    if op is not Op.ATEN and not spec.any_inputs and spec.variadic is None and not spec.optional
})

_PARAM_NAMES = {bool: "a bool", int: "an int", str: "a name", Ints: "a list of ints", Number: "a number",
                OpName: "an op overload (ns.op.overload)", Args: "a tuple of arguments", Kwargs: "a dict of arguments"}


def _param_ok(v: Any, t: type) -> bool:
    if t is Ints:
        return isinstance(v, tuple) and all(type(x) is int for x in v)
    if t is Number:
        return type(v) in (int, float)
    if t is str:
        return isinstance(v, str) and v.isidentifier()
    if t is OpName:
        return isinstance(v, str)
    if t is Args:
        return isinstance(v, tuple)
    if t is Kwargs:
        return isinstance(v, dict)
    return type(v) is t


def _params_ok(given: Mapping[str, Any], params: Mapping[str, type]) -> bool:
    """Exactly the op's params, each of its type (the common case of `_check_node`, quickly).
    False means "check the node in full", not "invalid"."""
    if given.keys() != params.keys():
        return False
    return all(_param_ok(v, params[k]) for k, v in given.items())


def _check_node(n: Node, i: int, types: Mapping[str, Type], defined_at: Mapping[str, int]) -> dict[str, Type]:
    if not isinstance(n.op, Op):
        raise UnknownOpError(f"unknown op {n.op!r}", n, i)
    spec = SPECS[n.op]
    fixed = len(spec.inputs)
    if len(n.inputs) != fixed and not spec.any_inputs and not (spec.variadic is not None and len(n.inputs) >= fixed):
        want = f"at least {fixed}" if spec.variadic is not None else str(fixed)
        raise ArityError(f"{n.op} takes {want} inputs, got {len(n.inputs)}", n, i)
    given, required = set(n.params), set(spec.params)
    if not required <= given or not given <= required | set(spec.optional):
        raise ArityError(f"{n.op} takes params {sorted(spec.params)}"
                         + (f" (optional {sorted(spec.optional)})" if spec.optional else "")
                         + f", got {sorted(n.params)}", n, i)
    for k, v in n.params.items():
        t = spec.params.get(k) or spec.optional[k]
        if not _param_ok(v, t):
            raise TypeMismatchError(f"param {k}={v!r} should be {_PARAM_NAMES.get(t, t.__name__)}", n, i)
    if n.op is Op.ATEN:
        resolve_at(n, i)
    elif len(n.outputs) != (0 if spec.result is None else 1):
        raise ArityError(f"{n.op} has {0 if spec.result is None else 1} outputs, got {len(n.outputs)}", n, i)
    for pos, name in enumerate(n.inputs):
        if name not in types:
            if name in defined_at:
                raise UseBeforeDefinitionError(f"{name!r} is used before node {defined_at[name]} defines it", n, i)
            raise UndefinedNameError(f"{name!r} is not defined", n, i)
        typ = spec.inputs[pos] if pos < fixed else spec.variadic
        if spec.any_inputs:
            if types[name] is Type.SIZE:
                raise TypeMismatchError(f"input {pos} ({name}) is a size; a call takes its ints", n, i)
            continue
        if types[name] is not typ:
            expected = typ.value if typ is not None else "?"
            raise TypeMismatchError(f"input {pos} ({name}) should be {expected}, found {types[name].value}", n, i)
    if n.op is Op.ATEN:
        returns = _returns(n)
        return {o: _SCALAR_RESULTS.get(str(returns[j].type), Type.TENSOR) if returns else Type.TENSOR
                for j, o in enumerate(n.outputs)}
    return {o: spec.result for o in n.outputs} if spec.result is not None else {}


# A call returning a Python number (`aten._local_scalar_dense`, `.item()`) names an int: the
# trace has no float ops (a float read from data is never computed with), and bool math on
# one is recorded as int ops' inputs would be.
_SCALAR_RESULTS = {"number": Type.INT, "Scalar": Type.INT, "int": Type.INT, "SymInt": Type.INT, "float": Type.INT, "bool": Type.BOOL}


def _returns(n: Node) -> list[Any]:
    returns = list(resolve(n.params["fn"])._schema.returns)
    return returns if len(returns) == len(n.outputs) else []


def resolve_at(n: Node, i: int) -> None:
    """A call names a real op overload; otherwise `UnknownOpError` names the node."""
    try:
        resolve(n.params["fn"])
    except UnknownOpError as e:
        raise UnknownOpError(str(e), n, i) from None
