"""Compile coverage (issue 48): of the op_db / module_db samples guardsolve traces, how many it
serves compiled at symbolic sizes, beside torch.compile(dynamic=True) on the same samples.

Samples are `coverage.py`'s (float32, CPU, plain dense; modules in eval mode without grad).
For each sample guardsolve traces (`guardsolve.trace` succeeds), under `torch.no_grad()`:

- guardsolve: `guarded(fn, backend="inductor")` called at the sample. *compiled*: a variant was
  compiled (it passed the compile-time comparison with eager). *symbolic*: its check accepts at
  least one size other than the example's (`jit.inductor.points.sizes_accepted`: the far points z3
  finds in its guards, each with random inputs the whole check accepts), i.e. it is not
  pinned to the example. *second size*: a call at the second size below is served by that
  same compile (no new trace, no new compile, not eager), its output equal to eager's.
- torch.compile(`dynamic=True`, Inductor, a counting backend): *compiles*: the first call
  compiles without error; *second size*: a call at the second size adds no compile, its
  output equal to eager's.

The second size is one guardsolve's trace guards accept (so eager runs the same program
there): the largest within about twice the example that z3 finds, else the smallest with
every size at least 1. A sample whose inputs have no size (0-d tensors only) has none and
counts in neither second-size column.

    python benchmarks/compile_coverage.py --every 4 --write    # a quarter of op_db, all modules
    python benchmarks/compile_coverage.py --only nn.functional.interpolate
"""

from __future__ import annotations

import argparse
import collections
import datetime
import multiprocessing
import os
import platform
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import guardsolve  # noqa: E402
from coverage import (_compare, _deterministic, _name, _seeded, module_database, module_samples,  # noqa: E402
                      op_database, op_samples, start_child, Sample, UNINITIALIZED)

STAGE_S = 120  # a limit per stage (trace, guardsolve's compile and calls, torch.compile's)
SECTION = "## Compiled at symbolic sizes: guardsolve's Inductor backend vs torch.compile(dynamic=True)"


class Timeout(Exception):
    pass


@dataclass
class CResult:
    kind: str
    name: str
    index: int
    traced: bool
    compiled: bool = False
    symbolic: bool = False
    has_second: bool = False
    gs_second: bool = False
    gs_reason: str = ""
    tc_compiles: bool = False
    tc_second: bool = False
    tc_reason: str = ""
    seconds: float = 0.0


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout(f"over {STAGE_S} s")


def _stage(fn: Callable[[], Any]) -> Any:
    signal.alarm(STAGE_S)
    try:
        return fn()
    finally:
        signal.alarm(0)


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


def second_inputs(entry: Any, values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """All of fn's inputs with the traced ones at a second size the entry's trace guards accept
    (the largest within about twice the example z3 finds, else the smallest of sizes >= 1)."""
    from guardsolve.jit.inductor import points

    t = entry.trace
    traced = list(range(len(values))) if entry.traced is None else list(entry.traced)
    tvals = tuple(values[i] for i in traced)
    base = points._dims_at(t, tvals)
    fixed = {p.dims[0] for p in t.signature if p.kind == "int"}
    points = [p for p in points._far_points(entry.guards, base, fixed, lambda d: True, 2000)
              if all(n >= 1 for n in p.values())]
    if not points:
        return None
    args = points._inputs_at(t, tvals, points[-1], torch.Generator().manual_seed(1))
    if args is None:
        return None
    out = list(values)
    for i, a in zip(traced, args):
        out[i] = a
    return tuple(out)


def check_guardsolve(s: Sample, r: CResult) -> tuple[Any, tuple[Any, ...] | None]:
    """Fills r's guardsolve columns; returns (the guarded function, the second inputs)."""
    from guardsolve.jit.inductor import sizes_accepted

    f = guardsolve.guarded(s.fn, backend="inductor")
    with torch.no_grad():
        _stage(lambda: f(*s.inputs))
    info = f.cache_info()
    entries = [e for e in f.entries if e.variants]
    if not entries:
        why = info.eager_reasons[0] if info.eager_reasons else "no compiled variant"
        r.gs_reason = why if info.traces else "not traced by guarded(): " + why
        return f, None
    r.compiled = True
    entry, v = entries[0], entries[0].variants[0]
    tvals = s.inputs if entry.traced is None else tuple(s.inputs[i] for i in entry.traced)
    with torch.no_grad():  # NOTE: the state it was compiled in (its check reads grad mode)
        r.symbolic = bool(_stage(lambda: sizes_accepted(entry.trace, v, tvals, entry.names)))
    if not r.symbolic:
        pins = [g for g in v.backend if g.kind == "size" and "==" in g.text]
        r.gs_reason = ("pinned: a backend guard was not translated" if v.exact_example else
                       f"pinned: {pins[0].text} ({pins[0].why})" if pins else "pinned by the trace's own guards")
    second = _stage(lambda: second_inputs(entry, s.inputs))
    if second is None:
        return f, None
    r.has_second = True
    before = f.cache_info()
    with torch.no_grad():
        got = _stage(lambda: f(*second))
    after = f.cache_info()
    want = _seeded(s.fn, second)
    same = (after.compiles == before.compiles and after.traces == before.traces
            and after.eager_calls == before.eager_calls)
    wrong = _compare(want, got, s.name.split(".")[0] not in UNINITIALIZED and _deterministic(s.fn, second, want))
    r.gs_second = same and wrong is None
    if wrong is not None:
        r.gs_reason = f"WRONG at the second size: {wrong}"
    elif not same and r.symbolic:
        r.gs_reason = "the second size needed " + ("a new trace" if after.traces != before.traces else
                                                   "a new compile" if after.compiles != before.compiles else "eager")
    return f, second


def check_torch_compile(s: Sample, r: CResult, second: tuple[Any, ...] | None) -> None:
    torch._dynamo.reset()
    from torch._inductor.compile_fx import compile_fx

    count = [0]

    def backend(gm: Any, example: Any) -> Any:
        count[0] += 1
        return compile_fx(gm, example)

    cf = torch.compile(s.fn, dynamic=True, backend=backend)
    try:
        with torch.no_grad():
            _stage(lambda: cf(*s.inputs))
    except Exception as e:
        r.tc_reason = _line(e)
        return
    r.tc_compiles = True
    if second is None:
        return
    first = count[0]
    try:
        with torch.no_grad():
            got = _stage(lambda: cf(*second))
    except Exception as e:
        r.tc_reason = "second size: " + _line(e)
        return
    want = _seeded(s.fn, second)
    wrong = _compare(want, got, s.name.split(".")[0] not in UNINITIALIZED and _deterministic(s.fn, second, want))
    r.tc_second = count[0] == first and wrong is None
    if wrong is not None:
        r.tc_reason = f"WRONG at the second size: {wrong}"
    elif count[0] != first:
        r.tc_reason = f"recompiled at the second size ({count[0] - first} more graphs)"


def run_sample(s: Sample) -> CResult | None:
    start = time.perf_counter()
    r = CResult(s.kind, s.name, s.index, traced=False)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        try:
            _stage(lambda: _seeded(s.fn, s.inputs))
        except Exception:
            return None  # NOTE: eager itself fails: not a sample
        try:
            _stage(lambda: guardsolve.trace(s.fn, *s.inputs))
        except Exception as e:
            r.gs_reason = "not traced: " + _line(e)
            return r
        r.traced = True
        second = None
        try:
            _, second = check_guardsolve(s, r)
        except Exception as e:
            r.gs_reason = r.gs_reason or _line(e)
        try:
            check_torch_compile(s, r, second)
        except Exception as e:
            r.tc_reason = r.tc_reason or _line(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        r.seconds = time.perf_counter() - start
    return r


# -- the sweep ---------------------------------------------------------------------------------


def jobs(args: argparse.Namespace) -> list[tuple[str, Any]]:
    ops = [("op", o) for o in op_database()]
    mods = [("module", m) for m in module_database()] if args.modules else []
    if args.only:
        ops = [(k, o) for k, o in ops if o.name == args.only or _name(o) == args.only]
        mods = [(k, m) for k, m in mods if m.name == args.only]
    else:
        ops = ops[args.offset::args.every]
        mods = mods[args.offset::args.module_every]
    return ops + mods


def _child(job: tuple[str, Any, int], send: Any) -> None:
    kind, info, k = job
    torch.set_num_threads(1)
    # NOTE: the first k samples with a size to vary (a 0-d sample, OpInfo's first for most
    # binary ops, has no size: nothing there can be symbolic), from the first 20
    samples = op_samples(info, 20) if kind == "op" else module_samples(info, 20)
    taken = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while taken < k:
            try:
                s = next(samples)
            except Exception:
                break
            if not any(x.dim() > 0 for x in s.inputs):
                continue
            if kind == "op":
                s.name = _name(info)
            s.index = taken
            r = run_sample(s)
            if r is not None:
                taken += 1
                send.send(r)
    send.send(None)
    send.close()


def sweep(args: argparse.Namespace) -> list[CResult]:
    ctx = multiprocessing.get_context("fork")
    todo = jobs(args)
    out: list[CResult] = []
    for n, (kind, info) in enumerate(todo, 1):
        proc, recv = start_child(ctx, _child, (kind, info, args.samples))
        got: list[CResult] = []
        died = False
        while True:
            try:
                r = recv.recv()
            except EOFError:
                died = True
                break
            if r is None:
                break
            got.append(r)
        proc.join()
        if died:
            name = _name(info) if kind == "op" else info.name
            got.append(CResult(kind, name, len(got), traced=False, gs_reason=f"process died (exit code {proc.exitcode})"))
        out.extend(got)
        for r in got:
            print(f"[{n}/{len(todo)}] {r.kind} {r.name}[{r.index}] {r.seconds:.1f}s traced={r.traced} "
                  f"compiled={r.compiled} symbolic={r.symbolic} second={r.gs_second} | torch.compile "
                  f"{r.tc_compiles} second={r.tc_second} | {r.gs_reason[:100]} | {r.tc_reason[:80]}",
                  file=sys.stderr, flush=True)
    return out


# -- tables ------------------------------------------------------------------------------------


def _short(reason: str) -> str:
    reason = re.sub(r"\[[^\]]*\]", "[..]", reason)
    reason = re.sub(r"\b\d+\b", "N", reason)
    return reason[:150].replace("|", "\\|")


def tables(results: list[CResult]) -> str:
    lines = ["| | samples | guardsolve traces | compiled | **symbolic** (check accepts another size) | "
             "with a second size | guardsolve serves it, same compile | torch.compile compiles | "
             "torch.compile serves it, no recompile |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, label in (("op", "op_db"), ("module", "module_db"), (None, "all")):
        rs = [r for r in results if kind is None or r.kind == kind]
        tr = [r for r in rs if r.traced]
        sec = [r for r in tr if r.has_second]
        lines.append(f"| {label} | {len(rs)} | {len(tr)} | {sum(r.compiled for r in tr)} | "
                     f"{sum(r.symbolic for r in tr)} | {len(sec)} | {sum(r.gs_second for r in sec)} | "
                     f"{sum(r.tc_compiles for r in tr)} | {sum(r.tc_second for r in sec)} |")
    lines += ["", "Why a traced sample is not served symbolically by guardsolve (count, reason, examples):", "",
              "| count | reason | examples |", "|---|---|---|"]
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in results:
        if r.traced and not r.symbolic:
            groups[_short(r.gs_reason)].append(f"{r.name}[{r.index}]")
    for reason, where in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:20]:
        lines.append(f"| {len(where)} | {reason} | {', '.join(where[:3])} |")
    lines += ["", "Why torch.compile(dynamic=True) does not serve a traced sample at its second size without "
              "recompiling (count, reason, examples):", "", "| count | reason | examples |", "|---|---|---|"]
    groups = collections.defaultdict(list)
    for r in results:
        if r.traced and not (r.tc_compiles and (r.tc_second or not r.has_second)):
            groups[_short(r.tc_reason or "no second size")].append(f"{r.name}[{r.index}]")
    for reason, where in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:12]:
        lines.append(f"| {len(where)} | {reason} | {', '.join(where[:3])} |")
    wrong = [r for r in results if "WRONG" in r.gs_reason]
    lines += ["", f"guardsolve outputs different from eager: {len(wrong)}"
              + (": " + ", ".join(f"{r.name}[{r.index}]" for r in wrong) if wrong else ".")]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replaces (or appends) this sweep's section of COVERAGE.md; the rest is coverage.py's."""
    path = Path(__file__).with_name("COVERAGE.md")
    old = path.read_text() if path.exists() else ""
    head = old.split(SECTION)[0].rstrip() if SECTION in old else old.rstrip()
    path.write_text(f"{head}\n\n{text}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, default=4, help="every Nth op of op_db (default 4)")
    p.add_argument("--module-every", type=int, default=1, help="every Nth module of module_db (default 1)")
    p.add_argument("--offset", type=int, default=0, help="start at this index of each database")
    p.add_argument("--samples", type=int, default=1, help="samples per op / module (default 1)")
    p.add_argument("--modules", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--only", default=None, help="only the op or module with this name")
    p.add_argument("--write", action="store_true", help="write the section of benchmarks/COVERAGE.md")
    args = p.parse_args(argv)
    start = time.perf_counter()
    results = sweep(args)
    elapsed = time.perf_counter() - start
    table = tables(results)
    print(table)
    if args.write:
        cmd = "python benchmarks/compile_coverage.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_section("\n".join([
            SECTION, "",
            f"- Command: `{cmd.strip()}`",
            f"- Date: {datetime.date.today().isoformat()}; {elapsed / 60:.1f} min; {platform.machine()}, "
            f"{os.cpu_count()} CPUs, torch {torch.__version__}, one thread",
            f"- Samples: every {args.every}th op of op_db ({len(op_database())} entries) from index {args.offset}, "
            f"every {args.module_every}th module of module_db ({len(module_database())}), the first {args.samples} "
            f"plain-dense float32 CPU sample(s) of each with a tensor of at least one dim; {STAGE_S} s limit per stage. The columns are explained in the script's docstring.",
            "", table,
        ]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
