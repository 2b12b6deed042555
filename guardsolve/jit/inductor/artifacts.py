"""What a compiled artifact holds: its graphs, autograd functions, saved tensors, a direct call, its bytes."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable
import torch


def plain_graph(gm: Any) -> bool:
    """True when the re-traced graph mutates nothing and no output is an input or a view of one:
    then AOTAutograd's runtime wrapper around Inductor's call has nothing to fix up."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            if any(a.alias_info is not None and a.alias_info.is_write for a in n.target._schema.arguments):
                return False
    results = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]

    def aliases_input(n: Any) -> bool:
        while isinstance(n, torch.fx.Node):
            if n.op == "placeholder":
                return True
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                return False
            rets = n.target._schema.returns
            if not rets or rets[0].alias_info is None or not n.args:
                return False
            n = n.args[0]
        return False

    return not any(aliases_input(r) for r in (results if isinstance(results, (tuple, list)) else [results]))


def compiled_graphs(artifact: Any) -> list[Any]:
    """The `CompiledFxGraph`s (Inductor's generated modules) inside a `standalone_compile` artifact."""
    from torch._inductor.output_code import CompiledFxGraph

    return _inside(artifact, lambda f: isinstance(f, CompiledFxGraph))


def autograd_functions(artifact: Any) -> list[type]:
    """The `torch.autograd.Function` classes AOTAutograd made inside a training artifact (each
    holds its forward's and backward's compiled code and their metadata)."""
    return _inside(artifact, lambda f: isinstance(f, type) and issubclass(f, torch.autograd.Function)
                   and hasattr(f.__dict__.get("metadata"), "bw_donated_idxs"))


def keep_saved_tensors(artifact: Any) -> int:
    """Mark each backward of a training artifact compiled with `donated_buffer=False` as
    donating nothing (`bw_donated_idxs = []`); returns how many backwards it found.

    NOTE: PyTorch internals (torch 2.13): compiled so, a backward's metadata keeps
    `bw_donated_idxs = None`, and its runtime check (`None != []`, with the global flag on)
    raised on `backward(retain_graph=True)` though no buffer was donated."""
    n = 0
    for fn in autograd_functions(artifact):
        meta = getattr(fn, "metadata", None)
        if meta is not None and hasattr(meta, "bw_donated_idxs"):
            if meta.bw_donated_idxs is None:
                meta.bw_donated_idxs = []
            n += 1
    return n


def _inside(artifact: Any, want: Callable[[Any], bool]) -> list[Any]:
    """The objects `want` accepts among those reachable from `artifact` through closures and
    AOTAutograd's and Inductor's wrapper attributes (a found one is not looked into)."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [artifact]
    while stack and len(seen) < 10_000:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if want(f):
            found.append(f)
            continue
        if isinstance(f, type):
            continue
        for c in getattr(f, "__closure__", None) or ():
            try:
                stack.append(c.cell_contents)
            except ValueError:
                continue
        for a in ("_compiled_fn", "compiled_fn", "inner_fn", "fw_func", "__self__", "__func__"):
            v = getattr(f, a, None)
            if v is not None and (callable(v) or isinstance(v, type)):
                stack.append(v)
    return found


def direct_call(artifact: Any, outputs: int) -> Callable[[list[Any]], Any] | None:
    """Inductor's own `call(args)` inside a `standalone_compile` artifact (its generated module's
    entry point, without AOTAutograd's runtime wrapper), when exactly one is found and it returns
    `outputs` values; else None. Only for a `plain_graph`."""
    found = compiled_graphs(artifact)
    if len(found) != 1:
        return None
    g = found[0]
    if g.mutated_inputs or getattr(g, "inputs_to_check", None) or len(g.output_strides or ()) != outputs:
        return None
    return g.current_callable


def aborts_on_bad_index(artifact: Any) -> bool:
    """True when a generated kernel checks an index read from data inside an OpenMP parallel
    region: there the failed check (eager's IndexError) is a C++ exception that cannot leave the
    region, and the process aborts. Compiled with one kernel thread, it raises instead."""
    return any("index out of bounds" in (g.source_code or "") and "#pragma omp" in (g.source_code or "")
               for g in compiled_graphs(artifact))


def direct_runner(call: Callable[..., Any] | None, train: bool = False) -> dict[str, Any] | str:
    """What a later process needs to run `call` without importing Inductor (`jit/kernels.py`), or
    why it cannot (it then loads the artifact through Inductor)."""
    from guardsolve.jit.kernels import NotDirect, capture

    if train:
        return "a training variant: AOTAutograd's wrapper runs its forward and its backward"
    if call is None:
        return "Inductor's runtime wrapper runs it (its graph mutates an input or returns an alias of one)"
    try:
        return capture(call)
    except NotDirect as e:
        return str(e)


def artifact_bytes(artifact: Any) -> bytes | None:
    """The artifact as bytes for `cache_dir`, or None where writing them fails (a full disk): the
    variant serves the call, unsaved."""
    try:
        with tempfile.TemporaryDirectory(prefix="guardsolve-") as d:
            path = os.path.join(d, "artifact.bin")
            artifact.save(path=path, format="binary")
            with open(path, "rb") as f:
                return f.read()
    except OSError:
        return None


def load_artifact(data: bytes) -> Callable[..., Any]:
    """An artifact saved by `compile_variant(save=True)`, loaded (Inductor's cache rebuilds its
    C++ when cold; a warm cache makes this milliseconds)."""
    from torch._inductor import CompiledArtifact

    with tempfile.TemporaryDirectory(prefix="guardsolve-") as d:
        path = os.path.join(d, "artifact.bin")
        with open(path, "wb") as f:
            f.write(data)
        return CompiledArtifact.load(path=path, format="binary")
