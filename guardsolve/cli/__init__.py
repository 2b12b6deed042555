"""cli: the `guardsolve` command line, a thin argparse front end over the library.

Takes in: a target (`file.py:fn` or `module:fn`) with `--shape`s, or a saved trace. Gives out: a
report of the minimal guards (`report`: text, json, python, dot; `--dynamic` for torch.export,
`--export-check` to run torch.export on the spec),
a saved trace in the printed IR (`add.gs` holds `i6 = int_eq(i0, i1)`, `bool_bailout(i6, expect=True)`,
...), or a check's exit status:

    guardsolve report examples/notebook.py:add --shape a=4 --shape b=4 [--format json] [--dynamic a0]
    guardsolve report examples/mlp.py:MLP --shape x=32,64 --via torch.compile   # Dynamo's own guards
    guardsolve trace examples/notebook.py:add --shape a=4 --shape b=4 -o add.gs
    guardsolve check add.gs --shape a=4 --shape b=8         # exit 0: guards hold, 1: they fail
    guardsolve check examples/notebook.py:add --shape a=4 --shape b=4 --dims a0=5,b0=5

Errors print one line on stderr and exit with status 2 (a bug in guardsolve: 3; `--debug` shows
the traceback). `--help` and `--version` import neither torch nor z3.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any, Sequence

from guardsolve.errors import GuardsolveError


def _positive(text: str) -> int:
    """A whole number of milliseconds, at least 1 (z3 reads 0 as "no limit")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} should be at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # NOTE: SUPPRESS keeps a subcommand's default from overriding `guardsolve --debug CMD`.
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show Python tracebacks on errors")
    common.add_argument("--timeout-ms", type=_positive, default=5000, help="per solver call (default 5000)")
    common.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="processes for a large guard graph's independent parts (default: the cores "
                             "this process may use, capped by GUARDSOLVE_JOBS; 1: this process only)")

    target = argparse.ArgumentParser(add_help=False)
    target.add_argument("target", help="path/to/script.py:fn, package.module:fn (a function, or an nn.Module "
                                       "class or factory called with no arguments), or a saved graph file")
    target.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="example tensor shape for a parameter (repeat per parameter)")
    target.add_argument("--int", action="append", default=[], metavar="NAME=V", help="example int argument")
    target.add_argument("--dtype", action="append", default=[], metavar="[NAME=]DTYPE",
                        help="dtype of the example tensors (default float32), or of one input: --dtype ids=int64 "
                             "(repeat per input; aliases such as fp16, bf16, half, torch.float16 work)")
    target.add_argument("--values", action="append", default=[], metavar="NAME=KIND",
                        help="how an example tensor is filled: randint:LO,HI, ones, zeros, randn, rand, arange "
                             "(default: floats randn; ints random in [0, 2), and ones for an input named *mask*)")
    target.add_argument("--train", action="store_true",
                        help="trace an nn.Module target in training mode (by default it is switched to eval mode)")
    target.add_argument("--grad", action=argparse.BooleanOptionalAction, default=None,
                        help="--no-grad traces under torch.no_grad(), as a model is usually served; --grad with "
                             "grad mode on (default: grad on for guardsolve's own trace, no_grad for --via "
                             "torch.compile); the report's `mode:` line says which ran")
    target.add_argument("--value-guards", action="store_true",
                        help="record branches on tensor data as value guards instead of failing")
    target.add_argument("--no-explore", action="store_true",
                        help="keep the example's route only: do not trace again at sizes 0 and 1 to merge the "
                             "routes that record the same trace")

    p = argparse.ArgumentParser(prog="guardsolve", description="Minimal, exact guards for traced PyTorch programs.")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", parents=[common, target], help="the minimal guards and where each came from")
    r.add_argument("--format", choices=["text", "json", "python", "dot"], default="text")
    r.add_argument("-o", "--output", help="write the report here (for dot: .svg/.png/.pdf render with Graphviz)")
    r.add_argument("--verify", action="store_true", help="prove equivalence and irredundancy with z3")
    r.add_argument("-v", "--verbose", action="store_true",
                   help="list each other route tried (merged, or rejected with why), not only their counts; with "
                        "--via torch.compile, each of Dynamo's dropped guards, not a count per source line")
    r.add_argument("--dynamic", action="append", default=[], metavar="DIM",
                   help="a dim that should stay free: report the guards that constrain it, with fixes. A dim is "
                        "named by its input and index: x0 is x.shape[0], x2 is x.shape[2] (x1_0 when the name ends "
                        "in a digit); an --int n is n")
    r.add_argument("--via", choices=["guardsolve", "torch.compile"], default="guardsolve",
                   help="whose guards: guardsolve's own trace (default), or torch.compile's (Dynamo's guards on "
                        "one call, minimal and explained; --dynamic DIM then marks DIM with mark_dynamic, and "
                        "without --dynamic every dim is dynamic, as dynamic=True)")
    r.add_argument("--export-check", action="store_true",
                   help="with --dynamic: export with the spec in torch.export itself, apply the pins it adds "
                        "beyond the guards, and print the spec it accepts")
    t = sub.add_parser("trace", parents=[common, target],
                       help="save the tensor trace in the text format, with the routes that only tracing the function "
                            "again finds (--no-explore: the trace alone)")
    t.add_argument("-o", "--output", help="file to write (default: stdout)")
    c = sub.add_parser("check", parents=[common, target],
                       help="do new sizes satisfy the guards? exit 0 if they do, 1 if not")
    c.add_argument("--dims", action="append", default=[], metavar="a0=4,b0=8",
                   help="explicit dim values; a0 is a.shape[0] (an --int n is n)")
    c.add_argument("--at", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="new tensor shape to check (for a saved tensor trace, --shape means the same)")
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("guardsolve")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 a check failed, 2 bad input, 3 a bug)."""
    args = _parser().parse_args(argv)
    try:
        from guardsolve.cli.args import check

        check(args)  # NOTE: before torch and z3 load: a mistake is answered at once
        command = {"report": _report, "trace": _trace, "check": _check}[args.command]
        if getattr(args, "via", None) == "torch.compile":
            return command(args)  # NOTE: `cli.compile` sets its own grad mode (no_grad by default)
        with _grad(args):
            return command(args)
    except GuardsolveError as e:
        return _fail(args, f"guardsolve: error: {e}", 2)
    except KeyboardInterrupt:
        return _fail(args, "guardsolve: interrupted", 130)
    except BrokenPipeError:
        # NOTE: the reader stopped early (`guardsolve report ... | head`): nothing is wrong; keep
        # Python from complaining again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # NOTE: a bug in guardsolve, still one line (the traceback with --debug)
        return _fail(args, f"guardsolve: internal error: {type(e).__name__}: {e} (rerun with --debug "
                           f"for the traceback, and please report it)", 3)


def console() -> None:
    """The `guardsolve` command: `main`, then exit without tearing the interpreter down.

    NOTE: everything is written and flushed by then; unloading torch, z3 and a user's model
    library module by module takes about a second, longer than many reports take.
    """
    status = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        status = 141
    sys.stderr.flush()
    os._exit(status)


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    if args.debug:
        traceback.print_exc()
    print(message.splitlines()[0] if message.strip() else message, file=sys.stderr)
    return status


class _Progress:
    """`label...` on stderr while a long step runs, then how long it took: only when stderr is a
    terminal (a pipe or a file stays quiet)."""

    def __init__(self, label: str):
        self.label, self.shown = label, sys.stderr.isatty()

    def __enter__(self) -> "_Progress":
        self.t0 = time.perf_counter()
        if self.shown:
            print(f"guardsolve: {self.label}...", end="\r", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.shown:
            print(f"guardsolve: {self.label}: {time.perf_counter() - self.t0:.1f} s\033[K", file=sys.stderr, flush=True)


def _warm_imports() -> None:
    """Pay the one-off costs before a step is timed (the solver's modules, z3's and sympy's
    imports, the first solver, PyTorch's first dispatch of the rules): a report's time is the
    work, the same as a second call in a process takes."""
    import torch

    from guardsolve.solve.simplify import simplify
    from guardsolve.trace.tracer import trace

    simplify(trace(lambda a, b: (a + b).view(-1) // 2, torch.ones(2, 2), torch.ones(2, 1)))


def _grad(args: argparse.Namespace, default: bool = True) -> Any:
    """The grad mode a command runs in, the whole command long (the trace, the routes it
    explores, the checks after it): `--grad`/`--no-grad`, else `default`."""
    import torch

    return torch.set_grad_enabled(default if args.grad is None else args.grad)


def _load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from guardsolve.cli.targets import TargetError, load

    with _Progress(f"tracing {args.target}" if ":" in args.target else f"reading {args.target}"):
        loaded = load(args.target, args.shape, args.int, args.dtype, args.value_guards, args.values, args.train)
    if loaded.from_file and args.command != "check" and (args.shape or args.int):
        flag = f"--shape {args.shape[0]}" if args.shape else f"--int {args.int[0]}"
        raise TargetError(f"{flag}: {args.target} is a saved graph, already traced at its shapes "
                          f"(`check` takes new shapes for it)")
    return loaded


def _report(args: argparse.Namespace) -> int:
    from guardsolve.cli.report import (ReportInfo, dot_report, export_checked, json_report, judgement, python_report,
                                       text_report)
    from guardsolve.cli.targets import render_dot, write_output
    from guardsolve.solve.simplify import simplify

    if args.via == "torch.compile":
        return _report_compile(args)
    loaded = _load(args)
    _warm_imports()
    with _Progress(f"simplifying {len(loaded.graph)} trace nodes"):
        t0 = time.perf_counter()
        gs = simplify(loaded.trace or loaded.graph, timeout_ms=args.timeout_ms, jobs=args.jobs,
                      explore=not args.no_explore)
        seconds = time.perf_counter() - t0
    info = ReportInfo(loaded.target, loaded.inputs, loaded.graph, seconds, args.verify, args.dynamic,
                      loaded.target if loaded.from_file else None, input_specs=loaded.input_specs,
                      verbose=args.verbose, mode=loaded.mode)
    if args.format in ("text", "json") and loaded.trace is not None:
        info.idle = _idle(loaded.trace, gs)
    # NOTE: fail soft: a stage after the guards that fails is reported after them, never instead of them
    if args.verify:
        with _Progress("verifying"):
            if not _stage(info, "verify", lambda: gs.verify(timeout_ms=args.timeout_ms)):
                info.verified = False
    if args.dynamic and not _stage(info, "--dynamic", lambda: judgement(gs, info)):
        info.dynamic = ()
    if args.export_check and info.dynamic:
        with _Progress("checking the spec with torch.export"):
            _stage(info, "--export-check", lambda: setattr(info, "checked", export_checked(gs, info, loaded.trace)))
    if args.format == "dot":
        text = dot_report(gs)
        if args.output and not args.output.endswith(".dot"):
            render_dot(text, args.output)
            return _failed(info)
    else:
        text = {"text": text_report, "json": json_report, "python": python_report}[args.format](gs, info)
    write_output(text, args.output)
    return _failed(info)


def _idle(trace: Any, gs: Any) -> dict[int, Any]:
    """The guards' sources that decide nothing on their far side (`solve.deciding`); none where
    that cannot be told (a note for the reader only: it never stops a report)."""
    from guardsolve.solve.deciding import idle_sources

    try:
        return idle_sources(trace, gs)
    except Exception:  # NOTE: a reading aid; the guards stand without it
        return {}


def _stage(info, name: str, run) -> bool:  # type: ignore[no-untyped-def]
    """Run one stage after the guards; its error is kept in `info.failures` (the report prints it)."""
    try:
        run()
        return True
    except GuardsolveError as e:
        info.failures.append((name, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return False


def _failed(info) -> int:  # type: ignore[no-untyped-def]
    """Exit 2 with the first failed stage on stderr (the report above holds the rest), else 0."""
    if not info.failures:
        return 0
    stage, message = info.failures[0]
    print(f"guardsolve: error: {stage} failed after the guards were computed (they are printed): {message}",
          file=sys.stderr)
    return 2


def _report_compile(args: argparse.Namespace) -> int:
    """`report --via torch.compile`: Dynamo's guards on one call, minimal and explained."""
    from guardsolve.cli.compile import compile_report
    from guardsolve.cli.targets import TargetError, write_output

    if args.format == "dot" or args.export_check or args.no_explore:
        flag = "--format dot" if args.format == "dot" else "--export-check" if args.export_check else "--no-explore"
        raise TargetError(f"{flag} does not apply to --via torch.compile (its guards are Dynamo's, not a trace's)")
    write_output(compile_report(args), args.output)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from guardsolve.cli.targets import write_output

    loaded = _load(args)
    if loaded.trace is not None and not args.no_explore:
        from guardsolve.solve.simplify import simplify

        # NOTE: exploring records in the trace the routes only tracing the function again finds
        # (`ir.routes`): the saved text's guards are then the live trace's
        with _Progress(f"exploring the routes of {len(loaded.graph)} trace nodes"):
            simplify(loaded.trace, timeout_ms=args.timeout_ms, jobs=args.jobs)
    write_output(str(loaded.graph), args.output)
    return 0


def _check(args: argparse.Namespace) -> int:
    from guardsolve.cli.targets import new_dims
    from guardsolve.solve.simplify import simplify

    loaded = _load(args)
    gs = simplify(loaded.trace or loaded.graph, timeout_ms=args.timeout_ms, jobs=args.jobs,
                  explore=not args.no_explore)
    shapes = args.at + (args.shape + args.int if loaded.from_file else [])  # NOTE: a saved trace's new inputs
    dims = new_dims(gs, args.dims, shapes)
    failed = gs.first_failure(dims)
    if failed is None:
        from guardsolve.cli.report import plural

        print(f"ok: {'the' if len(gs) == 1 else 'all'} {plural(len(gs), 'guard')} {'holds' if len(gs) == 1 else 'hold'}")
        return 0
    values = ", ".join(f"{d}={dims[d]}" for d in failed.dims)
    where = gs.failed_at(failed, dims)
    print(f"guard failed: {failed.text} ({values}){where}")
    probe = next((p for p in gs.probes if dict(p.point) == dims), None)
    if probe is not None:
        print(f"a fresh trace at these sizes {gs.rejection(probe)}")
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
