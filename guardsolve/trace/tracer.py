"""`trace(fn, *example_inputs)`: run a PyTorch function on guarded values and record its trace.

>>> import torch
>>> t = trace(lambda a, b: a + b, torch.ones(4), torch.ones(4))
>>> print(t.graph.nodes[0])
a = var_placeholder(name=a, rank=1)
>>> len(t.graph.bailouts())
5
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from guardsolve.errors import TraceError
from guardsolve.ir.graph import Graph
from guardsolve.ir.ops import Op
from guardsolve.ir.signature import Param, dim_names
from guardsolve.trace import torch_rules  # noqa: F401  NOTE: installs TracedTensor's torch dispatch
from guardsolve.trace.gcpause import paused_gc
from guardsolve.trace.guarded import GuardedBool, GuardedInt, GuardedSize
from guardsolve.trace.record import Recorder
from guardsolve.trace.tensor import TracedTensor


@dataclass
class Trace:
    """A recorded trace: the tensor-trace `graph` and the concrete `output` of the run.

    `constants` are the tensors the trace uses that are not inputs (module parameters,
    captured tensors), by their `var_param` name; `out_spec` is the output structure with
    `Ref(name)` in place of each traced value.
    """

    graph: Graph
    output: Any
    signature: tuple[Param, ...]
    fn: Callable[..., Any] | None = None
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    out_spec: Any = None

    def guard_graph(self) -> Graph:
        from guardsolve.guards.shape import guard_graph

        return guard_graph(self.graph)


def parameter_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names of fn's first `n` positional parameters (`*args` become `args_0`, ...)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names.extend(f"{p.name}_{i}" for i in range(n - len(names)))
    if len(names) < n:
        raise TraceError(f"{getattr(fn, '__name__', fn)} takes {len(names)} positional arguments, "
                         f"but {n} example inputs were given")
    return names[:n]


@dataclass(frozen=True)
class Ref:
    """A traced value's name inside `Trace.out_spec`."""

    name: str


def trace(fn: Callable[..., Any], *example_inputs: Any, value_guards: bool = False) -> Trace:
    """Run `fn` on guarded versions of `example_inputs`, recording a tensor trace.

    Tensors become `var_placeholder`s and Python ints `int_arg`s, named after fn's
    parameters (an `nn.Module` is traced through its `forward`; its parameters and buffers
    become constants named after their module path). Every Python observation of a shape
    becomes a `bool_bailout`. Reading tensor data (`if x.sum() > 0`, `.item()`) raises
    `DataDependentError` unless `value_guards=True`, which records a value bailout instead.
    """
    names = parameter_names(fn.forward if isinstance(fn, torch.nn.Module) else fn, len(example_inputs))
    rec = Recorder(_module_names(fn), value_guards)
    kinds: list[tuple[str, str, int]] = []
    args: list[Any] = []
    for name, value in zip(names, example_inputs):
        if isinstance(value, torch.Tensor):
            rank = value.dim()
            rec.graph.emit(Op.VAR_PLACEHOLDER, (), out=name, name=name, rank=rank)
            args.append(TracedTensor(value, name, rec))
            kinds.append((name, "tensor", rank))
        elif isinstance(value, int) and not isinstance(value, bool):
            rec.graph.emit(Op.INT_ARG, (), out=name, name=name)
            args.append(GuardedInt(value, name, rec))
            kinds.append((name, "int", 0))
        else:
            raise TraceError(f"cannot trace argument {name!r} of type {type(value).__name__}: "
                             "only torch.Tensor and int inputs are supported")
    signature = dim_names(kinds)
    rec.graph.meta["signature"] = signature
    with paused_gc():
        result = fn(*args)
    return Trace(rec.graph, unwrap(result), signature, fn, rec.constants, spec(result))


def _module_names(fn: Any) -> dict[int, str]:
    if not isinstance(fn, torch.nn.Module):
        return {}
    named = list(fn.named_parameters(remove_duplicate=True)) + list(fn.named_buffers(remove_duplicate=True))
    return {id(t): name.replace(".", "_") for name, t in named}


def spec(v: Any) -> Any:
    """The output structure with `Ref`s in place of traced values."""
    if isinstance(v, (TracedTensor, GuardedInt, GuardedBool, GuardedSize)):
        return Ref(v.name)
    if isinstance(v, tuple):
        return tuple(spec(x) for x in v)
    if isinstance(v, list):
        return [spec(x) for x in v]
    if isinstance(v, dict):
        return {k: spec(x) for k, x in v.items()}
    return v


def unwrap(v: Any) -> Any:
    """Replace guarded values in an output structure by their concrete values."""
    if isinstance(v, TracedTensor):
        return v.value
    if isinstance(v, (GuardedInt, GuardedBool)):
        return v.value
    if isinstance(v, GuardedSize):
        return torch.Size(v.value)
    if isinstance(v, tuple):
        return tuple(unwrap(x) for x in v)
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    if isinstance(v, dict):
        return {k: unwrap(x) for k, x in v.items()}
    return v
