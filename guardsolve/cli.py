"""The `guardsolve` command line: a thin argparse front end over the library.

    guardsolve report examples/notebook.py:add --shape a=4 --shape b=4
    guardsolve report saved_trace.gs
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Sequence

from guardsolve.errors import GuardsolveError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guardsolve", description="Minimal, exact guards for traced PyTorch programs.")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="print the minimal guards of a function or saved graph, and their origin")
    r.add_argument("target", help="path/to/script.py:fn, package.module:fn, or a saved graph text file")
    r.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...", help="example tensor shape")
    r.add_argument("--int", action="append", default=[], metavar="NAME=V", help="example int argument")
    r.add_argument("--dtype", default="float32", help="dtype of the example tensors (default float32)")
    r.add_argument("--verify", action="store_true", help="prove equivalence and irredundancy with z3")
    r.add_argument("--timeout-ms", type=int, default=5000, help="per solver call (default 5000)")
    for a in (r,):
        a.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "report":
            return _report(args)
    except GuardsolveError as e:
        if args.debug:
            traceback.print_exc()
        print(f"guardsolve: error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    return 0  # pragma: no cover - argparse rejects unknown commands


def _report(args: argparse.Namespace) -> int:
    from guardsolve.report import text_report
    from guardsolve.simplify import simplify
    from guardsolve.targets import load

    loaded = load(args.target, args.shape, args.int, args.dtype)
    t0 = time.perf_counter()
    gs = simplify(loaded.graph, timeout_ms=args.timeout_ms)
    seconds = time.perf_counter() - t0
    if args.verify:
        gs.verify(timeout_ms=args.timeout_ms)
    print(text_report(gs, loaded.target, loaded.inputs, seconds, args.verify))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
