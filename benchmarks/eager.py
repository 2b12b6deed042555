"""Eager-faithfulness sweep (issue 28): a trace and `guarded` end as eager ends.

Two parts; each op, module or model runs in a forked child, and the child says which phase of
which case it is in, so a kernel that kills the process is one crash, named as eager's own (it
died running eager) or the trace's:

- errors: op_db's `error_inputs` (CPU). On every input where eager raises, `trace` and a fresh
  `guarded` must raise an instance of eager's exception type whose message is eager's, with at
  most guardsolve's location (" — file:line") appended.
- sizes: op_db (first float32 sample per op), module_db (first sample per module, eval mode)
  and the real models (`examples/models.py`), each dim of each tensor input set to 0 and to 1
  alone. Each perturbed input runs eagerly, then through `trace`, then through a `guarded`
  that first saw the sample's own shapes (so its second call may be a cache hit, a replay).
  Where eager returns, both must return eager's output (values compared where two seeded eager
  runs agree) or say they cannot trace (`UnsupportedOpError`, `DataDependentError`); where eager
  raises, both must raise as above.

Perturbed tensors keep the sample's values, cycled to the new size, so index tensors stay in range
where they can.

    python benchmarks/eager.py                  # both parts, writes benchmarks/EAGER.md
    python benchmarks/eager.py --fast --no-write  # the subset the default tests run
    python benchmarks/eager.py --only nn.LSTM --part sizes
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import platform
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import guardsolve  # noqa: E402

_spec = importlib.util.spec_from_file_location("guardsolve_coverage_sweep", ROOT / "benchmarks" / "coverage.py")
assert _spec is not None and _spec.loader is not None
cov = sys.modules.setdefault("guardsolve_coverage_sweep", importlib.util.module_from_spec(_spec))
if not hasattr(cov, "op_samples"):
    _spec.loader.exec_module(cov)

TIMEOUT_S = 20
# Outcomes of one case for one tracer, worst last. "same": as eager; "cannot-trace": the tracer
# says it does not trace this (eager returned); the rest break the contract.
OUTCOMES = ("same", "cannot-trace", "message", "type", "returns", "wrong", "crash", "timeout")
FAST_ERROR_OPS = ("add", "mul", "cat", "stack", "view", "reshape", "gather", "index_select", "mm", "bmm",
                  "matmul", "nn.functional.conv2d", "nn.functional.linear", "nn.functional.layer_norm",
                  "nn.functional.embedding", "narrow", "take_along_dim", "masked_fill", "item")
FAST_SIZE_OPS = ("add", "mul", "sum", "softmax", "view", "cat", "matmul", "nn.functional.linear",
                 "nn.functional.layer_norm", "nn.functional.conv2d", "nn.functional.batch_norm",
                 "nn.functional.interpolate", "native_batch_norm")
FAST_MODULES = ("nn.Linear", "nn.LSTM", "nn.GRU", "nn.RNN", "nn.BatchNorm2d", "nn.LayerNorm")
FAST_MODELS = ("lstm", "conv_net")


@dataclass
class Case:
    """One input for one entry: `fn(*inputs)`; `what` names the perturbation."""

    what: str
    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    original: tuple[Any, ...] | None = None  # the sample's own inputs (`guarded` sees them first)


@dataclass
class Result:
    part: str  # "errors" or "sizes"
    kind: str  # "op", "module" or "model"
    name: str
    what: str
    eager: str  # "ok", "raises", "crash" (eager itself died) or "timeout"
    trace: str  # an OUTCOMES entry
    guarded: str
    detail: str = ""


class Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout(f"over {TIMEOUT_S} s")


# -- cases --------------------------------------------------------------------------------------


def _resized(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A tensor of `shape` holding `t`'s values, cycled (zeros when `t` is empty)."""
    n = 1
    for s in shape:
        n *= s
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return torch.zeros(shape, dtype=t.dtype)
    return flat[torch.arange(n) % flat.numel()].reshape(shape).clone()


def perturbed(inputs: tuple[Any, ...]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Each dim of each tensor input at 0 and at 1 (where it is not that already)."""
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            continue
        for d, size in enumerate(t.shape):
            for v in (0, 1):
                if size == v:
                    continue
                shape = list(t.shape)
                shape[d] = v
                new = list(inputs)
                new[i] = _resized(t, shape)
                yield f"input {i} dim {d} = {v} {shape}", tuple(new)


def _sample_cases(s: Any) -> Iterator[Case]:
    for what, inputs in perturbed(s.inputs):
        yield Case(what, s.fn, inputs, s.inputs)


def error_cases(op: Any) -> Iterator[Case]:
    """op_db's error inputs whose tensors are plain dense."""
    if op.error_inputs_func is None:
        return
    try:
        errors = list(op.error_inputs("cpu"))
    except Exception:
        return
    for k, e in enumerate(errors):
        s = e.sample_input
        kwargs = s.kwargs
        if not cov._dense_kwargs(kwargs):
            continue
        made = cov._closure(lambda ia, kw=kwargs, op=op: op.op(ia[0], *ia[1], **kw), (s.input, tuple(s.args)))
        if made is None:
            continue
        yield Case(f"error input {k}", *made)


def model_cases(name: str) -> Iterator[Case]:
    sys.path.insert(0, str(ROOT / "examples"))
    import models  # noqa: F401  (examples/models.py)

    make, inputs = models.MODELS[name]
    torch.manual_seed(0)
    m = make()
    args = inputs()
    fn = _model_call(m)
    for what, new in perturbed(args):
        yield Case(what, fn, new, args)


def _model_call(m: torch.nn.Module) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        out = m(*args)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out

    return call


def entries(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(part, kind, name) of every entry to run."""
    out: list[tuple[str, str, str]] = []
    op_names = [cov._name(o) for o in cov.op_database()]
    mod_names = [m.name for m in cov.module_database()]
    sys.path.insert(0, str(ROOT / "examples"))
    import models

    model_names = list(models.MODELS)
    if args.fast:
        err_ops = [n for n in dict.fromkeys(op_names) if n in FAST_ERROR_OPS]
        size_ops = [n for n in dict.fromkeys(op_names) if n in FAST_SIZE_OPS]
        mod_names = [n for n in mod_names if n in FAST_MODULES]
        model_names = [n for n in model_names if n in FAST_MODELS]
    else:
        err_ops = size_ops = list(dict.fromkeys(op_names))
    if args.only:
        err_ops = [n for n in err_ops if n == args.only]
        size_ops = [n for n in size_ops if n == args.only]
        mod_names = [n for n in mod_names if n == args.only]
        model_names = [n for n in model_names if n == args.only]
    if args.part in ("errors", "both"):
        out += [("errors", "op", n) for n in err_ops]
    if args.part in ("sizes", "both"):
        out += [("sizes", "op", n) for n in size_ops] + [("sizes", "module", n) for n in mod_names]
        out += [("sizes", "model", n) for n in model_names]
    return out


def cases_of(part: str, kind: str, name: str) -> Iterator[Case]:
    if kind == "model":
        yield from model_cases(name)
        return
    if kind == "module":
        info = next(m for m in cov.module_database() if m.name == name)
        for s in cov.module_samples(info, 1):
            yield from _sample_cases(s)
        return
    for op in (o for o in cov.op_database() if cov._name(o) == name):
        if part == "errors":
            yield from error_cases(op)
        else:
            for s in cov.op_samples(op, 1):
                yield from _sample_cases(s)


# -- one case ------------------------------------------------------------------------------------


def _same_error(eager: BaseException, got: BaseException) -> str:
    """"same", "message" or "type": does `got` end as eager's `eager` did?"""
    if not isinstance(got, type(eager)):
        return "type"
    e, g = str(eager), str(got)
    return "same" if g == e or g.startswith(e + " — ") else "message"


def _outcome(eager_out: Any, eager_exc: BaseException | None, values: bool, run: Callable[[], Any]) -> tuple[str, str]:
    try:
        got = run()
    except Timeout as e:
        return "timeout", str(e)
    except (guardsolve.UnsupportedOpError, guardsolve.DataDependentError) as e:
        if eager_exc is None:
            return "cannot-trace", str(e).splitlines()[0][:160]
        return _same_error(eager_exc, e), f"{type(e).__name__}: {str(e).splitlines()[0][:160]} | eager: {eager_exc}"[:300]
    except Exception as e:
        if eager_exc is None:
            return "type", f"raises {type(e).__name__}: {str(e).splitlines()[0][:160]} where eager returns"
        verdict = _same_error(eager_exc, e)
        return verdict, ("" if verdict == "same" else
                         f"{type(e).__name__}: {str(e)[:200]!r} | eager {type(eager_exc).__name__}: {str(eager_exc)[:200]!r}")
    if eager_exc is not None:
        return "returns", f"returns where eager raises {type(eager_exc).__name__}: {str(eager_exc).splitlines()[0][:160]}"
    why = cov._compare(eager_out, got, values)
    return ("wrong", why) if why is not None else ("same", "")


def run_case(part: str, kind: str, name: str, case: Case, phase: Callable[[str], None]) -> Result:
    """Eager, then `trace`, then `guarded`; `phase` is told before each starts."""
    phase("eager")
    eager_out: Any = None
    eager_exc: BaseException | None = None
    values = False
    try:
        signal.alarm(TIMEOUT_S)
        eager_out = cov._seeded(case.fn, case.inputs)
        values = name.split(".")[0] not in cov.UNINITIALIZED and cov._deterministic(case.fn, case.inputs, eager_out)
    except Timeout:
        return Result(part, kind, name, case.what, "timeout", "same", "same", "eager over the time limit")
    except Exception as e:
        eager_exc = e
    finally:
        signal.alarm(0)
    eager = "ok" if eager_exc is None else "raises"
    if part == "errors" and eager_exc is None:
        return Result(part, kind, name, case.what, "ok", "same", "same", "eager does not raise here")

    def traced() -> Any:
        torch.manual_seed(0)
        return guardsolve.trace(case.fn, *case.inputs).output

    def cached() -> Any:
        g = guardsolve.guarded(case.fn)
        if case.original is not None:
            try:
                torch.manual_seed(0)
                g(*case.original)
            except Exception:
                pass
        torch.manual_seed(0)
        return g(*case.inputs)

    details = []
    verdicts = []
    for label, run in (("trace", traced), ("guarded", cached)):
        phase("|".join([label, *verdicts]))
        try:
            signal.alarm(TIMEOUT_S)
            verdict, detail = _outcome(eager_out, eager_exc, values, run)
        finally:
            signal.alarm(0)
        verdicts.append(verdict)
        if detail and verdict != "same":
            details.append(f"{label}: {detail}")
    return Result(part, kind, name, case.what, eager, verdicts[0], verdicts[1], "; ".join(details))


# -- the sweep in forked children ---------------------------------------------------------------


def _child(entry: tuple[str, str, str], start: int, send: Any) -> None:
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    part, kind, name = entry
    try:
        for i, case in enumerate(cases_of(part, kind, name)):
            if i < start:
                continue
            send.send(("case", i, case.what))
            r = run_case(part, kind, name, case, lambda p: send.send(("phase", p)))
            send.send(("result", r))
    except Exception as e:  # NOTE: building the samples failed: the entry has no (more) cases
        send.send(("note", f"{type(e).__name__}: {e}"))
    send.send(("end",))
    send.close()


def sweep(todo: list[tuple[str, str, str]], jobs: int) -> list[Result]:
    """Every entry's cases, `jobs` children at a time; a child that dies leaves one crash
    result for the case it was in, and a new child goes on from the next case."""
    ctx = multiprocessing.get_context("fork")
    pending: list[tuple[int, int]] = [(i, 0) for i in range(len(todo))]
    running: dict[Any, dict[str, Any]] = {}
    results: list[Result] = []
    done = 0
    while pending or running:
        while pending and len(running) < jobs:
            i, start = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(todo[i], start, send), daemon=True)
            proc.start()
            send.close()
            running[recv] = {"i": i, "proc": proc, "case": None, "what": "", "phase": "samples"}
        ready = multiprocessing.connection.wait(list(running), timeout=1.0)
        for recv in ready:
            st = running[recv]
            ended = False
            try:
                while recv.poll():
                    msg = recv.recv()
                    if msg[0] == "case":
                        st["case"], st["what"], st["phase"] = msg[1], msg[2], "eager"
                    elif msg[0] == "phase":
                        st["phase"] = msg[1]
                    elif msg[0] == "result":
                        results.append(msg[1])
                        st["case"] = None
                    elif msg[0] == "end":
                        ended = True
                        break
            except (EOFError, OSError):
                ended = True
                part, kind, name = todo[st["i"]]
                if st["case"] is not None:
                    st["proc"].join(5)
                    died = f"process died in {st['phase'].split('|')[0]} (exit code {st['proc'].exitcode})"
                    match st["phase"].split("|"):
                        case ["eager"]:
                            r = Result(part, kind, name, st["what"], "crash", "same", "same", died)
                        case ["trace"]:
                            r = Result(part, kind, name, st["what"], "ran", "crash", "crash", died)
                        case ["guarded", verdict]:
                            r = Result(part, kind, name, st["what"], "ran", verdict, "crash", died)
                        case _:
                            r = Result(part, kind, name, st["what"], "ran", "crash", "crash", died)
                    results.append(r)
                    pending.insert(0, (st["i"], st["case"] + 1))
            if ended:
                st["proc"].join(5)
                recv.close()
                del running[recv]
                done += 1
                print(f"[{done}] {' '.join(todo[st['i']])}", file=sys.stderr, flush=True)
    return results


# -- report --------------------------------------------------------------------------------------


def tables(results: list[Result]) -> str:
    lines: list[str] = []
    for part in ("errors", "sizes"):
        rs = [r for r in results if r.part == part and not (part == "errors" and r.eager == "ok")]
        if not rs:
            continue
        lines += [f"### {part}", "", "| | cases | eager raises | eager crashes | " + " | ".join(OUTCOMES) + " |",
                  "|---|---|---|---|" + "---|" * len(OUTCOMES)]
        for tracer in ("trace", "guarded"):
            count = collections.Counter(getattr(r, tracer) for r in rs if r.eager != "crash")
            lines.append(f"| {tracer} | {len(rs)} | {sum(r.eager == 'raises' for r in rs)} | "
                         f"{sum(r.eager == 'crash' for r in rs)} | " + " | ".join(str(count.get(o, 0)) for o in OUTCOMES) + " |")
        names = {(r.kind, r.name) for r in rs}
        lines += ["", f"{len(names)} ops, modules and models; every case where eager ran is counted for both tracers.", ""]
    return "\n".join(lines)


def failures(results: list[Result]) -> str:
    bad = [r for r in results if r.trace not in ("same", "cannot-trace") or r.guarded not in ("same", "cannot-trace")
           or r.eager == "crash"]
    lines = ["| part | kind | name | case | eager | trace | guarded | detail |", "|---|---|---|---|---|---|---|---|"]
    for r in bad:
        lines.append(f"| {r.part} | {r.kind} | {r.name} | {r.what} | {r.eager} | {r.trace} | {r.guarded} | "
                     f"{cov._md(r.detail[:300])} |")
    return "\n".join(lines)


def cannot_trace(results: list[Result]) -> str:
    reasons = collections.Counter()
    for r in results:
        if r.trace == "cannot-trace":
            reasons[cov._short(r.detail.split("; ")[0].removeprefix("trace: "))] += 1
    lines = ["| count | reason |", "|---|---|"]
    lines += [f"| {n} | {cov._md(reason)} |" for reason, n in reasons.most_common(15)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("errors", "sizes", "both"), default="both")
    p.add_argument("--only", default=None, help="only the op, module or model with this name")
    p.add_argument("--fast", action="store_true", help="the subset the default tests run")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                   help="write benchmarks/EAGER.md (default: only for a full sweep)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    results = sweep(entries(args), args.jobs)
    elapsed = time.perf_counter() - start
    table = tables(results)
    print(table)
    print(failures(results))
    full = not args.fast and args.only is None and args.part == "both"
    if args.write or (args.write is None and full):
        cmd = "python benchmarks/eager.py " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(__file__).with_name("EAGER.md").write_text("\n".join([
            "# Eager-faithfulness sweep: trace and guarded against eager PyTorch",
            "",
            f"- Command: `{cmd.strip()}`",
            f"- Date: {datetime.date.today().isoformat()}; {elapsed / 60:.1f} min",
            f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}",
            f"- {TIMEOUT_S} s limit per phase; each entry in a forked child (see the script's docstring).",
            "- Outcomes: same (as eager: equal output, or an instance of eager's exception type with eager's "
            "message plus at most guardsolve's location); cannot-trace (eager returned, the tracer says it "
            "does not trace this); message / type (eager raised, the tracer raised with another message / "
            "type); returns (eager raised, the tracer returned); wrong (values or shapes differ); crash "
            "(the process died in the tracer; a death in eager is an eager crash, PyTorch's own).",
            "",
            table,
            "## Every case outside the contract",
            "",
            failures(results),
            "",
            "## Why the tracer declined (cannot-trace, most frequent)",
            "",
            cannot_trace(results),
            "",
        ]))
    bad = [r for r in results if r.trace not in ("same", "cannot-trace") or r.guarded not in ("same", "cannot-trace")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
