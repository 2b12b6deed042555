"""Calling Inductor: `standalone_compile` with a fresh cache key, symbolic input asserts dropped,
scalars and outputs made tensors.
"""

from __future__ import annotations

import contextlib
import operator
import uuid
from typing import Any, Callable
import sympy
import torch
from guardsolve.jit.backward import conv_backward_layouts, decompositions, two_pass_variances
from guardsolve.jit.layout import conv_formats, squeeze_views
from guardsolve.patching import Patch, patched
from guardsolve.jit.inductor.artifacts import keep_saved_tensors
from guardsolve.jit.inductor.backend_guards import size_oblivious
from guardsolve.jit.inductor.failure import CompileFailure
from guardsolve.jit.inductor.internals import CustomGraphPass, get_custom_graph_passes


# NOTE: from this many ops on, the kernels are called from a C++ wrapper (`cpp_wrapper`):
# Python's cost per kernel call (~1-2 us) dominates a small input's hit (GPT-2 tiny: 278 ->
# 168 us), while the wrapper's C++ build costs seconds, which a graph of a few ops never
# earns back (an MLP's hit is 16 us either way).
CPP_WRAPPER_MIN_OPS = 40


class _FreshKey(CustomGraphPass):
    """A post-grad pass that changes nothing and whose uuid, part of Inductor's and
    AOTAutograd's cache keys, no other compile has: its compile misses both caches."""

    def __init__(self) -> None:
        self._uuid = uuid.uuid4().hex

    def __call__(self, graph: torch.fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return self._uuid


@contextlib.contextmanager
def _inputs_checked() -> Any:
    """While it holds, Inductor's generated code asserts no size or stride of an input whose
    size is symbolic: such an input is one of the trace's, and the variant's own check, which
    runs before every call, holds its sizes (the guards) and its strides (the layout guards).
    A constant (a weight, a buffer: static sizes) keeps its assert: a `resize_` in place keeps
    the object and its storage, which is all the state check compares, and the assert turns
    the call into a miss. A backward graph asserts none of its inputs: they are the tensors
    its forward saved, laid out as that forward's compiled code wrote them (Inductor compiles
    the backward against the strides the forward's compile reports), and autograd's version
    counters reject one changed in place before the backward runs; and the output gradients,
    which AOTAutograd copies into the memory format the backward was compiled for. Extern
    kernels' outputs (a convolution's) keep their asserts: ATen lays those out at run time.

    NOTE: measured on the MoE routing program of benchmarks/JIT.md (4 tokens, 3 compiled segments): 24 asserts a
    call, 0.46 us each under cProfile."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    with patched(Patch(PythonWrapperCodegen, "codegen_input_size_asserts", _symbolic_asserts_dropped)):
        yield


def _symbolic_asserts_dropped(original: Callable[..., Any]) -> Callable[..., Any]:
    """Inductor's `codegen_input_size_asserts`, less the asserts of inputs with symbolic sizes."""
    from torch._inductor.virtualized import V

    def codegen(self: Any) -> None:
        original(self)
        for name, buf in V.graph.graph_inputs.items():
            if name in self._pending_input_asserts and (V.graph.is_backward or any(
                    isinstance(d, sympy.Expr) and d.free_symbols for d in buf.get_size())):
                del self._pending_input_asserts[name]

    return codegen


def standalone_compiled(gm: Any, inputs: list[Any], oblivious: bool, threads: int | None, cpp: bool,
                train: bool = False) -> Any:
    """`standalone_compile` of the re-traced graph, its lowering run in this call (never a cache hit)."""
    from torch._inductor import config

    scope = size_oblivious() if oblivious else contextlib.nullcontext()
    # NOTE: a cache hit would not run lowering, so the guards lowering adds would not reach this
    # ShapeEnv, which `read_guards` reads. Inductor's FX graph cache (and AOTAutograd's, which
    # serves it) keys an entry by the graph and its inputs' symbolic sizes, and the guards an
    # entry keeps (`guards_expr`) cover only inputs that are SymInts: make_fx's graph has none
    # (its sizes live in tensors), so an entry compiled at one size is served at any other. An
    # audio encoder's `AdaptiveAvgPool1d` compiled at length 400 (guard `(s2 - 1) // 8 == 49`)
    # was served at 800 without the guard, with 400's pooling windows: 3 of 6 calls wrong. A key
    # no other compile has gives the same answer cold or warm, in any process. Disabling the
    # caches (`fx_graph_cache=False`) would do the same but loses `CompiledArtifact.save`, which
    # saves what the caches record. Cost, warm cache directory, one thread: an MLP or `x.sin() + y`
    # 0.01 s (a hit) -> 0.09-0.12 s; the encoder's variants 0.27 s -> 2.2-4.0 s (lowering's sympy
    # work; C++ builds stay cached, keyed by their source). `cache_dir` keeps variants across
    # processes without Inductor's cache.
    passes = (*get_custom_graph_passes(config.post_grad_custom_post_pass), _FreshKey())
    patch: dict[str, Any] = {"post_grad_custom_post_pass": passes}
    if cpp:
        patch["cpp_wrapper"] = True
    if threads is not None:
        patch["cpp.threads"] = threads
    if train:
        # NOTE: layout optimization (channels-last convolutions) restrides the backward's saved
        # activations to the strides the forward's kernels chose at the example's sizes, which
        # pinned a conv net's height and width (`8 * W == 64`); AOTAutograd assumes it off for
        # dynamic shapes, which its detection does not see in a graph whose sizes live in tensors
        patch["layout_optimization"] = False
    # NOTE: a donated buffer (a saved activation the backward frees as it goes) makes
    # `backward(retain_graph=True)` and a second backward raise, which eager allows
    donate = torch._functorch.config.patch(donated_buffer=False) if train else contextlib.nullcontext()
    # NOTE: a training graph's lowerings at symbolic sizes (`jit/backward.py`): a conv net's
    # backward pinned its image sizes, and its pooling and batch norm ran slower than Inductor's
    # static kernels
    lowered = contextlib.ExitStack()
    if train:
        lowered.enter_context(conv_backward_layouts())
        lowered.enter_context(two_pass_variances())
    with scope, config.patch(patch), donate, conv_formats(), squeeze_views(), _inputs_checked(), lowered:
        options = {"decompositions": decompositions(train)}
        artifact = torch._inductor.standalone_compile(gm, inputs, dynamic_shapes="from_graph", options=options)
    if train and not keep_saved_tensors(artifact):
        raise CompileFailure("no AOTAutograd backward found in the compiled artifact (PyTorch internals moved?)")
    return artifact


_SYMFLOAT_OPS = {operator.truediv: torch.ops.aten.div.Tensor, operator.mul: torch.ops.aten.mul.Tensor,
                 operator.add: torch.ops.aten.add.Tensor, operator.sub: torch.ops.aten.sub.Tensor}


def scalars_as_tensors(gm: Any) -> None:
    """A float computed from sizes in Python (a decomposition's `scale = in_size / out_size`,
    a `SymFloat`) used as an op's scalar, computed instead as a 0-d float64 tensor from the sizes.

    Inductor's pass that turns such floats into tensors (`_tensorify_python_scalars`) finds a
    size symbol only where a graph node reads it: a size computed from another op's output
    (`interpolate(pos, size=avg_pool2d(x, 4).shape[-2:])`) names the input's symbol, which no
    node reads, and the pass raised `KeyError: s0`. A 0-d float64 tensor in place of a
    Python float keeps each op's result dtype (a 0-d tensor does not promote a float tensor) and
    its double-precision value."""
    def as_tensor(arg: Any, before: Any) -> Any:
        if isinstance(arg, torch.fx.Node) and "tensor" in arg.meta:
            return arg.meta["tensor"]  # NOTE: a float this pass already made a tensor
        with gm.graph.inserting_before(before):
            v = arg.meta["val"] if isinstance(arg, torch.fx.Node) else arg
            t = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (arg,), {"dtype": torch.float64})
            t.meta["val"] = torch.ops.aten.scalar_tensor.default(v, dtype=torch.float64)
        return t

    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _SYMFLOAT_OPS or not isinstance(n.meta.get("val"), torch.SymFloat):
            continue
        if not all(isinstance(a, (torch.fx.Node, int, float)) for a in n.args):
            continue
        a, b = (as_tensor(x, n) for x in n.args)
        with gm.graph.inserting_before(n):
            t = gm.graph.call_function(_SYMFLOAT_OPS[n.target], (a, b))
            t.meta["val"] = _SYMFLOAT_OPS[n.target](a.meta["val"], b.meta["val"])
        n.meta["tensor"] = t
        changed = True
    if not changed:
        return
    for n in list(gm.graph.nodes):
        # NOTE: an op's scalar takes the tensor; a size rounded from the float (`int(h * 1.5)`,
        # `math.trunc`) keeps computing on the SymFloat
        if n.op == "call_function" and "tensor" not in n.meta and isinstance(n.target, torch._ops.OpOverload):
            n.args = tuple(_tensor_of(a) for a in n.args)
            n.kwargs = {k: _tensor_of(v) for k, v in n.kwargs.items()}
    for n in reversed(list(gm.graph.nodes)):
        if "tensor" in n.meta and not n.users:
            del n.meta["tensor"]
            gm.graph.erase_node(n)
    gm.graph.lint()
    gm.recompile()


def _tensor_of(a: Any) -> Any:
    return a.meta["tensor"] if isinstance(a, torch.fx.Node) and "tensor" in a.meta else a


def tensor_outputs(gm: Any) -> None:
    results = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    for r in results if isinstance(results, (tuple, list)) else [results]:
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else r
        if not isinstance(val, torch.Tensor):
            raise CompileFailure(f"the output holds a {type(val).__name__}, not only tensors (Inductor returns tensors)")
