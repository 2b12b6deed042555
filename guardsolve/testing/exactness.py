"""The exactness oracle for traced programs: inputs at other and boundary sizes, re-traced and
compared with what the guards say.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator


def perturbed_inputs(rng: random.Random, inputs: tuple[Any, ...], count: int) -> list[tuple[Any, ...]]:
    """`count` variants of `inputs` with other sizes (and int values).

    Half the variants map every distinct size value to one new value, so equal dims stay
    equal and guards that tie dims can hold; the other half change dims independently.
    """
    import torch

    def remap(v: int, table: dict[int, int]) -> int:
        if v not in table:
            table[v] = rng.choice([v, v, v + 1, 2 * v, 1, max(v - 1, 0), v + 2, rng.randint(0, 2 * v + 3)])
        return table[v]

    out: list[tuple[Any, ...]] = []
    for k in range(count):
        consistent = k % 2 == 0
        table: dict[int, int] = {}
        variant: list[Any] = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                shape = [remap(d, table) if consistent else remap(d, {}) for d in x.shape]
                variant.append(torch.randn(shape).to(x.dtype) if x.is_floating_point()
                               else torch.randint(0, 2, shape).to(x.dtype))
            elif isinstance(x, int) and not isinstance(x, bool):
                variant.append(rng.choice([x, x + 1, -x, 2 * x, 0, x - 1]) if not consistent else remap(x, table))
            else:
                variant.append(x)
        out.append(tuple(variant))
    return out


def boundary_variants(gs: Any, inputs: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Inputs at sizes 0 and 1: each dim, each class of dims the guards hold equal (together),
    every pair of those at 1, all dims at 0 and all at 1; each named by its changes. The
    values come from `inputs` (`paths.resized`: indices stay in range).

    >>> import torch, guardsolve
    >>> gs = guardsolve.simplify(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)), explore=False)
    >>> [what for what, _ in boundary_variants(gs, (torch.ones(4), torch.ones(4)))]
    ['a0=0', 'a0=1', 'b0=0', 'b0=1', 'a0=0, b0=0', 'a0=1, b0=1']
    """
    import itertools

    from guardsolve.solve.explore.probes import resized
    from guardsolve.solve.explore.search import equal_classes

    example = gs.input_dims(*inputs)
    if example is None:
        return
    units = [(d,) for d in example] + equal_classes(gs)
    points = [{d: v for d in u} for u in units for v in (0, 1)]
    points += [{**{d: 1 for d in a}, **{d: 1 for d in b}} for a, b in itertools.combinations(units, 2)]
    points += [{d: v for d in example} for v in (0, 1)]
    seen = set()
    for change in points:
        p = {**example, **change}
        key = tuple(sorted(p.items()))
        if p == example or key in seen:
            continue
        seen.add(key)
        new = [resized(v, [p[d] for d in prm.dims]) if prm.kind == "tensor" else p[prm.name]
               for prm, v in zip(gs.signature, inputs)]
        yield ", ".join(f"{d}={p[d]}" for d in example if p[d] != example[d]), tuple(new)


def exactness_failures(fn: Callable[..., Any], inputs: tuple[Any, ...], *, count: int = 12,
                       seed: int = 0, meta_first: bool = False, explore: bool = False,
                       variants: list[tuple[Any, ...]] | None = None) -> list[str]:
    """Where `simplify(trace(fn, *inputs), explore=explore)` is not exact: shapes S (eager runs
    at S) at which the guards and a re-trace at S disagree.

    `explore=False` (the default) judges the example's path alone, which is exact by
    construction: `check(S)` must say whether re-tracing at S gives the same guard graph, i.e.
    the same bailouts (arithmetic nodes no bailout reads may differ). `explore=True` judges the
    merged routes for soundness: a failure is an S they accept where re-tracing records another
    trace (`divergence.difference`); rejecting an S of the same trace is measured by
    `benchmarks/paths.py`, not failed here (a route not explored).

    `meta_first` runs each variant under FakeTensorMode before eager and skips it where
    PyTorch's meta rules reject its shapes: some eager kernels check less than their meta
    rules (`aten.native_batch_norm` with running statistics of another size writes out of
    bounds), and an arbitrary op's sizes must not crash the process that sweeps them."""
    from guardsolve.ir.printer import print_guards
    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.divergence import difference
    from guardsolve.trace.tracer import trace

    t = trace(fn, *inputs)
    gs = simplify(t, explore=explore)
    reference = print_guards(t.guard_graph())
    failures: list[str] = []
    for variant in perturbed_inputs(random.Random(seed), inputs, count) if variants is None else variants:
        if meta_first and _meta_rejects(fn, variant):
            continue
        try:
            fn(*variant)
        except Exception:
            continue  # NOTE: eager itself rejects these sizes: nothing to compare
        try:
            u = trace(fn, *variant)
            same = difference(t, u) is None if explore else print_guards(u.guard_graph()) == reference
        except Exception:  # NOTE: no trace at S (user code fails on symbolic sizes): not the same
            same = False
        accepted = gs.check(*variant)
        if accepted != same and (accepted or not explore):
            shapes = [list(v.shape) if hasattr(v, "shape") else v for v in variant]
            failures.append(f"{shapes}: check says {accepted}, re-trace says {'same' if same else 'different'}")
    return failures


def _meta_rejects(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> bool:
    """Does `fn` fail at these shapes under FakeTensorMode with an error of its own (not one
    that says FakeTensor cannot run an op, which tells nothing about the shapes)?"""
    import logging

    import torch
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode, UnsupportedOperatorException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)  # NOTE: FakeTensor logs every meta failure with its traceback
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fn(*[mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in inputs])
    except (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException,
            GuardOnDataDependentSymNode, NotImplementedError):
        return False
    except Exception:
        return True
    finally:
        log.setLevel(level)
    return False


def size_variants(inputs: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The example's tensors at other sizes: each dim to 0, 1, 2, v-1, v+1 and 2v; each class
    of dims of equal example size moved together to those values, and apart (one member moved
    alone, which the per-dim changes already cover). Values are taken from the example's own
    (indices stay in range), each variant named by its changes.

    >>> import torch
    >>> [what for what, _ in size_variants((torch.ones(2), torch.ones(2)))][:4]
    ['a0=0', 'a0=1', 'a0=3', 'a0=4']
    """
    import torch

    from guardsolve.solve.explore.probes import resized

    dims = [(i, d, int(x.shape[d])) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) for d in range(x.dim())]

    def name(i: int, d: int) -> str:
        return f"{chr(ord('a') + i) if i < 26 else f'arg{i}_'}{d}"

    def values(v: int) -> list[int]:
        return sorted({0, 1, 2, max(v - 1, 0), v + 1, 2 * v} - {v})

    seen: set[tuple[Any, ...]] = set()

    def at(change: dict[tuple[int, int], int]) -> tuple[Any, ...] | None:
        key = tuple(sorted(change.items()))
        if key in seen:
            return None
        seen.add(key)
        return tuple(resized(x, [change.get((i, d), n) for d, n in enumerate(x.shape)])
                     if isinstance(x, torch.Tensor) else x for i, x in enumerate(inputs))

    for i, d, v in dims:
        for w in values(v):
            new = at({(i, d): w})
            if new is not None:
                yield f"{name(i, d)}={w}", new
    classes: dict[int, list[tuple[int, int]]] = {}
    for i, d, v in dims:
        classes.setdefault(v, []).append((i, d))
    for v, members in classes.items():
        if len(members) < 2:
            continue
        for w in values(v):
            new = at({m: w for m in members})
            if new is not None:
                yield ", ".join(f"{name(i, d)}={w}" for i, d in members), new
