"""Coverage sweep: guardsolve and `make_fx(tracing_mode="symbolic")` on PyTorch's own op and
module databases (issue 10).

Inputs: `op_db` (float32, CPU, the first K samples per op whose tensors are plain dense
strided tensors; `sample.input` and `sample.args` tensors are traced inputs, everything else
is closed over) and `module_db` (the module built from its constructor input, in eval mode
with `requires_grad_(False)`; the forward input's tensors are traced, the rest closed over).

A sample is ok for guardsolve only when `trace` succeeds, the output equals eager (values
are compared only when two seeded eager runs agree, so `empty` and random ops compare by
shape and dtype), and `exactness_failures(..., count=6, meta_first=True)` is empty (shapes
PyTorch's meta rules reject are not run eagerly: some eager kernels check less and write out of
bounds). make_fx runs side by side
on the same samples and the same closure (with `_allow_non_fake_inputs=True`, so that closed-over
tensors such as module parameters are constants, as they are for guardsolve). Each op runs in
a forked child, so a kernel that aborts the process counts as one crash for that op.

    python benchmarks/coverage.py                 # full sweep, writes benchmarks/COVERAGE.md
    python benchmarks/coverage.py --ops 40 --no-modules --no-write
    python benchmarks/coverage.py --only nn.functional.pad
"""

from __future__ import annotations

import argparse
import collections
import datetime
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import guardsolve  # noqa: E402
from guardsolve.testing import exactness_failures  # noqa: E402

TIMEOUT_S = 20
COMPILE_SECTION = "## Compiled at symbolic sizes"  # compile_coverage.py's section of COVERAGE.md
CATEGORIES = ("unsupported", "data-dependent", "wrong", "inexact", "crash", "timeout")

# The fast subset the default tests run: ops across families, and a few modules.
FAST_OPS = (
    "add", "mul", "sub", "div", "where", "clamp", "sigmoid", "exp", "abs", "rsub",  # elementwise
    "sum", "mean", "amax", "var", "std", "max", "softmax", "cumsum",  # reductions
    "view", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "cat", "stack",
    "split", "chunk", "expand", "repeat", "flip", "select",  # views / reshape
    "index_select", "gather", "scatter", "masked_fill", "take_along_dim",  # indexing
    "matmul", "mm", "bmm", "addmm", "linalg.vector_norm", "einsum",  # linalg
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.interpolate", "nn.functional.pad",  # conv / pool
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",  # norms
    "nn.functional.mse_loss", "nn.functional.cross_entropy", "nn.functional.l1_loss",  # losses
    "zeros_like", "ones_like", "full_like", "new_zeros", "arange", "linspace",  # factories
)
FAST_MODULES = ("nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.MaxPool2d", "nn.Embedding",
                "nn.GELU", "nn.TransformerEncoderLayer")


# NOTE: outputs of uninitialized memory: two eager runs can agree by chance (the allocator hands
# back the same block), so their values are never compared, only shapes and dtypes.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                           "new_empty_strided"})


class Timeout(Exception):
    pass


@dataclass
class Sample:
    """One case: `fn(*inputs)` with the non-tensor parts closed over."""

    kind: str  # "op" or "module"
    name: str
    index: int
    fn: Callable[..., Any]
    inputs: tuple[torch.Tensor, ...]


@dataclass
class Result:
    kind: str
    name: str
    index: int
    gs: str  # "ok" or a category
    reason: str = ""
    fx: bool = False
    fx_reason: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# -- samples -----------------------------------------------------------------------------------


def _plain(t: Any) -> bool:
    return (type(t) is torch.Tensor and t.layout is torch.strided and not t.is_quantized
            and not t.is_conj() and not t.is_neg())


def _closure(call: Callable[..., Any], structure: Any) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]] | None:
    """`fn(*tensors)` that rebuilds `structure` with the traced tensors and calls `call` on it;
    None when a tensor in it is not plain dense."""
    leaves, spec = tree_flatten(structure)
    tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
    if not all(_plain(t) for t in tensors):
        return None
    slots = [i for i, a in enumerate(leaves) if isinstance(a, torch.Tensor)]

    def fn(*ts: Any) -> Any:
        filled = list(leaves)
        for i, t in zip(slots, ts):
            filled[i] = t
        return call(tree_unflatten(filled, spec))

    return fn, tuple(t.detach() for t in tensors)


def _dense_kwargs(kwargs: dict[str, Any]) -> bool:
    return all(_plain(a) for a in tree_flatten(kwargs)[0] if isinstance(a, torch.Tensor))


def op_samples(op: Any, k: int) -> Iterator[Sample]:
    """The first `k` plain-dense float32 CPU samples of an OpInfo."""
    if torch.float32 not in op.supported_dtypes("cpu"):
        return
    try:
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
    except Exception:
        return
    taken = 0
    for s in samples:
        if taken >= k:
            break
        if not _dense_kwargs(s.kwargs):
            continue
        kwargs = s.kwargs
        made = _closure(lambda ia, kw=kwargs: op.op(ia[0], *ia[1], **kw), (s.input, tuple(s.args)))
        if made is None:
            continue
        yield Sample("op", op.full_name if hasattr(op, "full_name") else op.name, taken, *made)
        taken += 1


def module_samples(info: Any, k: int) -> Iterator[Sample]:
    """The first `k` plain-dense float32 CPU samples of a ModuleInfo, the module in eval mode."""
    try:
        inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=False, training=False)
    except Exception:
        return
    taken = 0
    for mi in inputs:
        if taken >= k:
            break
        if mi.forward_input is None or not _dense_kwargs(mi.forward_input.kwargs):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
            m = m.to(torch.float32).eval().requires_grad_(False)
        except Exception:
            continue
        kwargs = mi.forward_input.kwargs
        made = _closure(lambda a, m=m, kw=kwargs: m(*a, **kw), tuple(mi.forward_input.args))
        if made is None:
            continue
        yield Sample("module", info.name, taken, *made)
        taken += 1


# -- one sample --------------------------------------------------------------------------------


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout(f"over {TIMEOUT_S} s")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


def _seeded(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> Any:
    torch.manual_seed(0)
    return fn(*inputs)


def _compare(expected: Any, got: Any, values: bool) -> str | None:
    """Why `got` differs from eager's `expected`, or None."""
    e_leaves, e_spec = tree_flatten(expected)
    g_leaves, g_spec = tree_flatten(got)
    if len(e_leaves) != len(g_leaves):
        return f"output structure {e_spec} vs {g_spec}"
    for i, (e, g) in enumerate(zip(e_leaves, g_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return f"output {i}: {type(g).__name__} where eager returns a tensor"
            if e.shape != g.shape or e.dtype != g.dtype:
                return f"output {i}: {list(g.shape)} {g.dtype}, eager {list(e.shape)} {e.dtype}"
            if values:
                try:
                    torch.testing.assert_close(g, e, equal_nan=True, rtol=1e-5, atol=1e-6)
                except AssertionError as err:
                    return f"output {i}: values differ ({str(err).strip().splitlines()[0]})"
        elif values and e != g and not (isinstance(e, float) and e != e and g != g):
            return f"output {i}: {g!r}, eager {e!r}"
    return None


def _deterministic(fn: Callable[..., Any], inputs: tuple[Any, ...], first: Any) -> bool:
    """Do two seeded eager runs agree (not `empty`, not random beyond the seed)?"""
    try:
        return _compare(first, _seeded(fn, inputs), True) is None
    except Exception:
        return False


def check_guardsolve(sample: Sample, expected: Any, values: bool) -> tuple[str, str]:
    """("ok", "") or (category, reason) for guardsolve on one sample."""
    try:
        torch.manual_seed(0)
        t = guardsolve.trace(sample.fn, *sample.inputs)
    except guardsolve.UnsupportedOpError as e:
        return "unsupported", f"{e.op}: {e.reason.splitlines()[0][:160]}"
    except guardsolve.DataDependentError as e:
        return "data-dependent", str(e).splitlines()[0][:160]
    except Timeout as e:
        return "timeout", f"trace {e}"
    except Exception as e:
        return "crash", "trace: " + _first_line(e)
    why = _compare(expected, t.output, values)
    if why is not None:
        return "wrong", why
    try:
        failures = exactness_failures(sample.fn, sample.inputs, count=6, meta_first=True)
    except Timeout as e:
        return "timeout", f"exactness {e}"
    except guardsolve.UnsupportedOpError as e:
        return "crash", f"exactness: {e.op}: {e.reason.splitlines()[0][:140]}"
    except Exception as e:
        return "crash", "exactness: " + _first_line(e)
    if failures:
        return "inexact", failures[0][:200]
    return "ok", ""


def check_make_fx(sample: Sample) -> tuple[bool, str]:
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        # NOTE: the closure holds tensors (parameters, tensor kwargs) that are not inputs; make_fx
        # accepts them as constants only when asked to (guardsolve always does).
        make_fx(sample.fn, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*sample.inputs)
        return True, ""
    except Timeout as e:
        return False, f"timeout {e}"
    except Exception as e:
        return False, _first_line(e)


def run_sample(sample: Sample, make_fx_too: bool = True) -> Result | None:
    """Both tracers on one sample; None when eager itself fails on it."""
    start = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        try:
            signal.alarm(TIMEOUT_S)
            expected = _seeded(sample.fn, sample.inputs)
            values = (sample.name.split(".")[0] not in UNINITIALIZED
                      and _deterministic(sample.fn, sample.inputs, expected))
        except Exception:
            return None
        finally:
            signal.alarm(0)
        try:
            signal.alarm(TIMEOUT_S)
            gs, reason = check_guardsolve(sample, expected, values)
        except Timeout as e:
            gs, reason = "timeout", str(e)
        finally:
            signal.alarm(0)
        fx, fx_reason = False, "not run"
        if make_fx_too:
            try:
                signal.alarm(TIMEOUT_S)
                fx, fx_reason = check_make_fx(sample)
            except Timeout as e:
                fx, fx_reason = False, f"timeout {e}"
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)
    return Result(sample.kind, sample.name, sample.index, gs, reason, fx, fx_reason, time.perf_counter() - start)


# -- the sweep ---------------------------------------------------------------------------------


def op_database() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def module_database() -> list[Any]:
    from torch.testing._internal.common_modules import module_db

    return module_db


def _databases(args: argparse.Namespace) -> list[tuple[str, Any]]:
    op_db = op_database()
    ops = [("op", o) for o in op_db]
    if args.fast:
        ops = [("op", o) for o in op_db if o.name in FAST_OPS]
    if args.only:
        ops = [("op", o) for o in op_db if o.name == args.only or _name(o) == args.only]
    if args.ops is not None:
        ops = ops[:args.ops]
    mods: list[tuple[str, Any]] = []
    if args.modules:
        module_db = module_database()
        mods = [("module", m) for m in module_db]
        if args.fast:
            mods = [("module", m) for m in module_db if m.name in FAST_MODULES]
        if args.only:
            mods = [("module", m) for m in module_db if m.name == args.only]
        if args.ops is not None:
            mods = mods[:args.ops]
    return ops + mods


def _name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _run_entry(job: tuple[str, Any, int], each: Callable[[Result], None] | None = None) -> list[Result]:
    kind, info, k = job
    torch.set_num_threads(1)
    samples = op_samples(info, k) if kind == "op" else module_samples(info, k)
    out: list[Result] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while True:
            try:
                s = next(samples)
            except StopIteration:
                break
            except Exception:
                break
            if kind == "op":
                s.name = _name(info)
            r = run_sample(s)
            if r is not None:
                out.append(r)
                if each is not None:
                    each(r)
    return out


_JOBS: list[tuple[str, Any, int]] = []


def _run_index(i: int) -> list[Result]:
    return _run_entry(_JOBS[i])


def sweep(args: argparse.Namespace) -> list[Result]:
    global _JOBS
    _JOBS = [(kind, info, args.samples) for kind, info in _databases(args)]
    results: list[Result] = []
    runner = _forked if args.jobs > 1 else ((i, _run_index(i)) for i in range(len(_JOBS)))
    for done, (i, rs) in enumerate(runner(args.jobs) if args.jobs > 1 else runner, 1):  # type: ignore[operator]
        results.extend(rs)
        _progress(done, len(_JOBS), rs)
    return sorted(results, key=lambda r: (r.kind, r.name, r.index))


def _forked(jobs: int) -> Iterator[tuple[int, list[Result]]]:
    """Each op in a forked child, `jobs` at a time; a child that dies (a C++ abort in a kernel)
    becomes one crash result instead of a hung pool."""
    ctx = multiprocessing.get_context("fork")
    pending = list(range(len(_JOBS)))
    running: dict[int, tuple[Any, Any]] = {}
    running_results: dict[int, list[Result]] = {}
    while pending or running:
        while pending and len(running) < jobs:
            i = pending.pop(0)
            running[i] = start_child(ctx, _child, i)
        ready = multiprocessing.connection.wait([recv for _, recv in running.values()], timeout=1.0)
        for i, (proc, recv) in list(running.items()):
            if recv not in ready:
                continue
            got, rs = _drain(recv, got_so_far=running_results.setdefault(i, []))
            if not got:
                continue
            proc.join()
            if rs is None:  # NOTE: the child died in the middle of a sample
                kind, info, _ = _JOBS[i]
                name = _name(info) if kind == "op" else info.name
                done = running_results[i]
                rs = done + [Result(kind, name, len(done), "crash", f"process died (exit code {proc.exitcode})",
                                    False, "not run (process died)")]
            recv.close()
            del running[i], running_results[i]
            yield i, rs


def _drain(recv: Any, got_so_far: list[Result]) -> tuple[bool, list[Result] | None]:
    """Read what a child sent: (finished?, its results, or None when it died)."""
    while recv.poll():
        try:
            r = recv.recv()
        except EOFError:
            return True, None
        if r is None:
            return True, list(got_so_far)
        got_so_far.append(r)
    return False, None


def start_child(ctx: Any, target: Callable[..., None], job: Any) -> tuple[Any, Any]:
    """A forked child running `target(job, send)`: (the process, the end of its pipe to read)."""
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(job, send), daemon=True)
    proc.start()
    send.close()
    return proc, recv


def _child(i: int, send: Any) -> None:
    """Sends each result as it is known (they survive a later abort), then None."""
    _run_entry(_JOBS[i], send.send)
    send.send(None)
    send.close()


def _progress(done: int, total: int, rs: list[Result]) -> None:
    if rs:
        marks = " ".join(f"{r.gs}/{'fx' if r.fx else 'no-fx'}" for r in rs)
        print(f"[{done}/{total}] {rs[0].kind} {rs[0].name}: {marks}", file=sys.stderr, flush=True)


# -- tables ------------------------------------------------------------------------------------


def tables(results: list[Result]) -> str:
    lines = ["| | guardsolve ok | make_fx ok | both | guardsolve only | make_fx only | wrong | inexact | total |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in ("op", "module"):
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        for unit, groups in (("samples", [[r] for r in rs]), (f"{kind}s", list(_by_name(rs).values()))):
            def count(pred: Callable[[list[Result]], bool]) -> int:
                return sum(1 for g in groups if pred(g))

            gs_ok = lambda g: all(r.gs == "ok" for r in g)  # noqa: E731
            fx_ok = lambda g: all(r.fx for r in g)  # noqa: E731
            lines.append(
                f"| {kind_label(kind)} {unit} | {count(gs_ok)} | {count(fx_ok)} | "
                f"{count(lambda g: gs_ok(g) and fx_ok(g))} | {count(lambda g: gs_ok(g) and not fx_ok(g))} | "
                f"{count(lambda g: fx_ok(g) and not gs_ok(g))} | {count(lambda g: any(r.gs == 'wrong' for r in g))} | "
                f"{count(lambda g: any(r.gs == 'inexact' for r in g))} | {len(groups)} |")
    lines.append("")
    lines.append("(an op or module counts as ok when all of its samples are)")
    lines.append("")
    cats = collections.Counter(r.gs for r in results if r.gs != "ok")
    lines.append("| guardsolve failure category | samples |")
    lines.append("|---|---|")
    for c in CATEGORIES:
        lines.append(f"| {c} | {cats.get(c, 0)} |")
    lines.append("")
    lines.append("Top guardsolve failure reasons (count, category, reason, examples):")
    lines.append("")
    reasons: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for r in results:
        if r.gs != "ok":
            reasons[(r.gs, _short(r.reason))].append(f"{r.name}[{r.index}]")
    lines.append("| count | category | reason | examples |")
    lines.append("|---|---|---|---|")
    for (cat, reason), where in sorted(reasons.items(), key=lambda kv: -len(kv[1]))[:30]:
        lines.append(f"| {len(where)} | {cat} | {_md(reason)} | {', '.join(sorted(set(where))[:3])} |")
    lines.append("")
    fx_reasons = collections.Counter(_short(r.fx_reason) for r in results if not r.fx)
    lines.append("Top make_fx failure reasons:")
    lines.append("")
    lines.append("| count | reason |")
    lines.append("|---|---|")
    for reason, n in fx_reasons.most_common(10):
        lines.append(f"| {n} | {_md(reason)} |")
    return "\n".join(lines)


def kind_label(kind: str) -> str:
    return "op_db" if kind == "op" else "module_db"


def _by_name(rs: list[Result]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = collections.defaultdict(list)
    for r in rs:
        out[r.name].append(r)
    return out


def _short(reason: str) -> str:
    """A reason without the user line and sizes, so that equal causes group."""
    import re

    reason = reason.split(" — ")[0]
    reason = re.sub(r"\[[^\]]*\]", "[..]", reason)
    reason = re.sub(r"\b\d+\b", "N", reason)
    return reason[:140]


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def failures_list(results: list[Result]) -> str:
    lines = ["| kind | name | sample | category | reason | make_fx |", "|---|---|---|---|---|---|"]
    for r in results:
        if r.gs != "ok":
            lines.append(f"| {r.kind} | {r.name} | {r.index} | {r.gs} | {_md(r.reason[:160])} | "
                         f"{'ok' if r.fx else _md(r.fx_reason[:80])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=None, help="only the first N ops (and modules)")
    p.add_argument("--only", default=None, help="only the op or module with this name")
    p.add_argument("--modules", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--samples", type=int, default=3, help="samples per op / module (default 3)")
    p.add_argument("--fast", action="store_true", help="the fast subset of the default tests")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                   help="write benchmarks/COVERAGE.md (default: only for a full sweep)")
    p.add_argument("--failures", action="store_true", help="also print every failing sample")
    args = p.parse_args(argv)
    start = time.perf_counter()
    results = sweep(args)
    elapsed = time.perf_counter() - start
    table = tables(results)
    print(table)
    if args.failures:
        print()
        print(failures_list(results))
    full = args.ops is None and args.only is None and not args.fast and args.modules
    if args.write or (args.write is None and full):
        cmd = "python benchmarks/coverage.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = "\n".join([
            "# Coverage sweep: guardsolve vs make_fx symbolic on op_db and module_db",
            "",
            f"- Command: `{cmd.strip()}`",
            f"- Date: {datetime.date.today().isoformat()}; {elapsed / 60:.1f} min",
            f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}",
            f"- Per sample: float32 CPU, first {args.samples} plain-dense samples; modules in eval mode "
            f"without grad; {TIMEOUT_S} s limit per tracer; exactness over 6 perturbed shapes.",
            "",
            table,
            "",
            "## Every guardsolve failure",
            "",
            failures_list(results),
            "",
        ])
        path = Path(__file__).with_name("COVERAGE.md")
        # NOTE: compile_coverage.py's section (from its heading to the end) is kept as it was
        kept = path.read_text().partition(COMPILE_SECTION)[1:] if path.exists() else ("", "")
        path.write_text(text + (f"\n{kept[0]}{kept[1]}" if kept[0] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
