"""Are the guards exact to the trace? op_db, module_db and the example models at sizes 0 and 1.

For each program (op_db's first sample per op, module_db's first sample per module, the models
of examples/models.py) the guards of `simplify(trace(fn, *inputs))` are judged on perturbed
inputs: each dim at 0 and at 1, each class of equal dims together at 0 and at 1, every pair of
those at 1, all dims at 0 and all at 1. A perturbed input where eager raises is skipped (no
trace serves it). Otherwise a fresh trace at it records *the same trace* or not (the same
nodes, placeholders' example shapes aside, output structure and static guards:
`divergence.difference`, or the same but for ops that are identities at its sizes:
`identity.same_but_identities`), and the guards accept it or not. Side by side, the same counts for the
example's path alone (`explore=False`).

    accepted_same       the guards accept it and the fresh trace is the same     (wanted)
    rejected_same       the guards reject it although the fresh trace is the same (over-restrictive)
    accepted_different  the guards accept it and the fresh trace differs          (UNSOUND)
    rejected_different  the guards reject it and the fresh trace differs or fails (wanted)

Targets: rejected_same <= 1% of the same-trace inputs; accepted_different = 0. Each program
runs in a forked child (an eager kernel that crashes at a perturbed size takes only its case).

    python benchmarks/paths.py --jobs 2 --write     # about 10 minutes on 2 cores; writes PATHS.md
    python benchmarks/paths.py --fast               # the subset tests/test_paths.py runs
    python benchmarks/paths.py --wide --jobs 2 --write   # writes PATHS-WIDE.md

`--wide` moves dims further, as a server's shapes do: besides sizes 0 and 1, each dim and each
class of equal dims to 2, v-1, v+1 and 2v (one dim of a class moved alone sets equal dims
apart), and each guard's boundary: for each merged guard, the point nearest the example where
it alone is false, and one step from it on every dim (`witness.flip_points`). Its table adds a
replay column: every input the guards accept is run through the trace's replay
(`trace/replay.py`), whose values must equal eager's.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import multiprocessing.connection
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import coverage as cov  # noqa: E402  (benchmarks/coverage.py: op_db and module_db samples)

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
KINDS = ("accepted_same", "rejected_same", "accepted_different", "rejected_different")
FAST_OPS = ("add", "mul", "sin", "abs", "sum", "softmax", "view", "reshape", "cat", "matmul", "mm",
            "nn.functional.linear", "nn.functional.layer_norm", "expand", "transpose", "index_select", "where")
FAST_MODULES = ("nn.Linear", "nn.LayerNorm", "nn.LSTM", "nn.Conv2d", "nn.BatchNorm2d", "nn.Embedding")
FAST_MODELS = ("lstm", "conv_net", "self_attention")


@dataclass
class Tally:
    """One program's counts, for the guards with path merging and for the example's path alone."""

    kind: str
    name: str
    merged: collections.Counter = field(default_factory=collections.Counter)
    path: collections.Counter = field(default_factory=collections.Counter)
    eager_raises: int = 0
    note: str = ""
    unsound: list[str] = field(default_factory=list)
    over: list[str] = field(default_factory=list)
    replays: int = 0
    eager_unstable: int = 0  # accepted inputs where two eager runs from one seed disagree (not compared)
    unreplayable: bool = False  # the trace's random ops follow a reseed: `guarded` never replays it
    replay_failures: list[str] = field(default_factory=list)


# NOTE: set once by main() before any child is forked (a flag of this script's run)
WIDE = False
SAVED = False  # `--saved`: judge the guards of the trace's text (saved after exploring), not the live trace's
WIDE_MAX = 40  # wide variants per program, at most


def wide_variants(gs: Any, inputs: tuple[Any, ...]) -> list[tuple[str, tuple[Any, ...]]]:
    """Inputs further out: each dim and class of equal dims at 2, v-1, v+1, 2v, and each merged
    guard's boundary (where it alone fails, nearest the example) with one step either side."""
    from guardsolve.solve.explore import equal_classes, resized
    from guardsolve.solve.witness import flip_points

    example = gs.input_dims(*inputs)
    if example is None:
        return []
    points: list[dict[str, int]] = []
    for unit in [(d,) for d in example] + equal_classes(gs):
        v = example[unit[0]]
        for w in (2, v - 1, v + 1, 2 * v):
            if w >= 0:
                points.append({**example, **{d: w for d in unit}})
    for flip in flip_points([c.formula for c in gs.constraints], set(gs.sizes), example, largest=4096):
        points.append(flip)
        points += [{**flip, d: flip[d] + k} for d in flip for k in (-1, 1) if flip[d] + k >= 0]
    out, seen = [], {tuple(sorted(example.items()))}
    for p in points:
        key = tuple(sorted(p.items()))
        if key in seen or any(v < 0 for d, v in p.items() if d in gs.sizes):
            continue
        seen.add(key)
        new = [resized(x, [p[d] for d in prm.dims]) if prm.kind == "tensor" else p[prm.name]
               for prm, x in zip(gs.signature, inputs)]
        if sum(x.numel() for x in new if isinstance(x, torch.Tensor)) > 4_000_000:
            continue
        out.append((", ".join(f"{d}={p[d]}" for d in example if p[d] != example[d]), tuple(new)))
    return out[:WIDE_MAX]


def _replay_differs(replay: Callable[..., Any], fn: Callable[..., Any], variant: tuple[Any, ...]) -> str | None:
    """What differs between the replay and eager at `variant`; "eager differs from itself" where
    two eager runs from one seed disagree, or where they differ only while PyTorch leaves
    memory uninitialized: with `fill_uninitialized_memory` (deterministic algorithms), which
    fills it with NaN, the replay equals eager (`MultiMarginLoss` on an empty batch returns an
    uninitialized scalar), which no replay can match otherwise."""
    from guardsolve.testing import outcome, same_outcome

    torch.manual_seed(0)
    expected = outcome(fn, variant)
    torch.manual_seed(0)
    if same_outcome(expected, outcome(fn, variant)) is not None:
        return SELF
    torch.manual_seed(0)
    why = same_outcome(expected, outcome(replay, variant))
    if why is None:
        return None
    det, fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        torch.manual_seed(0)
        filled = outcome(fn, variant)
        torch.manual_seed(0)
        if (filled[0] == expected[0] == "ok" and same_outcome(expected, filled) is not None
                and same_outcome(filled, outcome(replay, variant)) is None):
            return SELF
    finally:
        torch.use_deterministic_algorithms(det)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    return why


SELF = "eager differs from itself"


def judge(kind: str, name: str, fn: Callable[..., Any], inputs: tuple[Any, ...], send: Callable[..., None]) -> Tally:
    import guardsolve
    from guardsolve.testing import boundary_variants
    from guardsolve.trace.identity import same_but_identities
    from guardsolve.trace.divergence import difference

    tally = Tally(kind, name)
    try:
        t = guardsolve.trace(fn, *inputs)
        base = guardsolve.simplify(t, explore=False, jobs=1)
        gs = guardsolve.simplify(t, jobs=1)
        if SAVED:  # NOTE: the text as `guardsolve trace` writes it: after exploring, its routes recorded
            gs = guardsolve.simplify(guardsolve.Graph.parse(str(t.graph)), jobs=1)
    except Exception as e:
        tally.note = f"does not trace ({type(e).__name__})"
        return tally
    variants = list(boundary_variants(base, inputs)) + (wide_variants(gs, inputs) if WIDE else [])
    replay = None
    if WIDE and t.unreplayable is None:  # NOTE: else `guarded` never replays it (it reseeds its RNG)
        from guardsolve.trace.replay import compile_replay

        replay = compile_replay(t.graph, t.out_spec, t.constants)
    elif WIDE:
        tally.unreplayable = True
    for what, variant in variants:
        send(("case", what))
        try:
            torch.manual_seed(0)
            fn(*variant)
        except Exception:
            tally.eager_raises += 1
            continue
        try:
            torch.manual_seed(0)
            u = guardsolve.trace(fn, *variant)
            same = difference(t, u) is None
            if not same:
                # NOTE: the same but for ops that are identities at these sizes (issue 38: an
                # `expand` to the tensor's own size, a full `slice`): the same trace there
                dims = base.input_dims(*variant)
                same = dims is not None and same_but_identities(t, u, dims) is not None
        except TimeoutError:
            raise  # NOTE: the program's time is up (`_alarm`): not a trace that differs
        except Exception:
            same = False
        for counter, g in ((tally.merged, gs), (tally.path, base)):
            ok = g.check(*variant)
            counter[f"{'accepted' if ok else 'rejected'}_{'same' if same else 'different'}"] += 1
        if gs.check(*variant) and not same:
            tally.unsound.append(what)
        if replay is not None and gs.check(*variant):
            why = _replay_differs(replay, fn, variant)
            if why == SELF:
                tally.eager_unstable += 1
            else:
                tally.replays += 1
                if why is not None:
                    tally.replay_failures.append(f"{what}: {why}")
        if same and not gs.check(*variant):
            tally.over.append(f"{what} ({gs.explain_failure(*variant)[:120]})")
    return tally


def programs(args: argparse.Namespace) -> list[tuple[str, str]]:
    ops = list(dict.fromkeys(cov._name(o) for o in cov.op_database()))
    mods = [m.name for m in cov.module_database()]
    sys.path.insert(0, str(ROOT / "examples"))
    import models

    names = list(models.MODELS)
    if args.fast:
        ops = [o for o in ops if o in FAST_OPS]
        mods = [m for m in mods if m in FAST_MODULES]
        names = [n for n in names if n in FAST_MODELS]
    todo = [("op", o) for o in ops] + [("module", m) for m in mods] + [("model", n) for n in names]
    return [e for e in todo if args.only is None or e[1] in args.only.split(",")]


def sample_of(kind: str, name: str) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
    if kind == "model":
        import models

        make, inputs = models.MODELS[name]
        torch.manual_seed(0)
        m = make()

        def call(*a: Any) -> Any:
            out = m(*a)
            return out.last_hidden_state if hasattr(out, "last_hidden_state") else out

        return call, inputs()
    if kind == "module":
        info = next(m for m in cov.module_database() if m.name == name)
        s = next(iter(cov.module_samples(info, 1)), None)
    else:
        op = next(o for o in cov.op_database() if cov._name(o) == name)
        s = next(iter(cov.op_samples(op, 1)), None)
    return None if s is None else (s.fn, s.inputs)


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError(f"over {TIMEOUT_S} s")


def _child(entry: tuple[str, str], send: Any) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    kind, name = entry
    try:
        torch.manual_seed(0)
        made = sample_of(kind, name)
        tally = Tally(kind, name, note="no sample") if made is None else judge(kind, name, *made, send.send)
    except Exception as e:
        tally = Tally(kind, name, note=f"{type(e).__name__}: {str(e)[:80]}")
    signal.alarm(0)
    send.send(("tally", tally))
    send.close()


def sweep(todo: list[tuple[str, str]], jobs: int) -> list[Tally]:
    """Each program in a forked child, `jobs` at a time; a child that dies leaves its program's
    tally as far as it got, with the case it died in."""
    ctx = multiprocessing.get_context("fork")
    pending = list(todo)
    running: dict[Any, tuple[tuple[str, str], Any, list[str]]] = {}
    out: list[Tally] = []
    while pending or running:
        while pending and len(running) < jobs:
            entry = pending.pop(0)
            proc, recv = cov.start_child(ctx, _child, entry)
            running[recv] = (entry, proc, [])
        for recv in multiprocessing.connection.wait(list(running), timeout=1.0):
            entry, proc, cases = running[recv]
            try:
                msg = recv.recv()
            except (EOFError, OSError):
                proc.join(5)
                out.append(Tally(*entry, note=f"process died at {cases[-1] if cases else 'start'} "
                                             f"(exit code {proc.exitcode})"))
                del running[recv]
                continue
            if msg[0] == "case":
                cases.append(msg[1])
                continue
            out.append(msg[1])
            proc.join(5)
            recv.close()
            del running[recv]
            print(f"[{len(out)}/{len(todo)}] {entry[0]} {entry[1]}", file=sys.stderr, flush=True)
    return out


def table(tallies: list[Tally]) -> str:
    judged = [t for t in tallies if t.merged or t.path]
    lines = ["| guards | programs | perturbed inputs eager runs | " + " | ".join(KINDS) + " | rejected_same / same |",
             "|---|---|---|" + "---|" * len(KINDS) + "---|"]
    if WIDE:
        replays = sum(t.replays for t in judged)
        failed = sum(len(t.replay_failures) for t in judged)
        unstable = sum(t.eager_unstable for t in judged)
        reseeded = sum(t.unreplayable for t in judged)
        lines = [f"Replay of every input the merged guards accept: {replays} replayed, {failed} differ from eager"
                 f" ({unstable} not compared: two eager runs from one seed disagree there, or agree with the replay only once PyTorch fills uninitialized memory; {reseeded} programs not "
                 "replayed: their random ops follow a reseed inside the function, so `guarded` serves them "
                 "from a trace's own run and keeps no entry).", ""] + lines
    for label, attr in (("merged paths (default)", "merged"), ("example's path alone (explore=False)", "path")):
        total = collections.Counter()
        for t in judged:
            total.update(getattr(t, attr))
        same = total["accepted_same"] + total["rejected_same"]
        lines.append(f"| {label} | {len(judged)} | {sum(total.values())} | " + " | ".join(str(total[k]) for k in KINDS)
                     + f" | {100 * total['rejected_same'] / max(same, 1):.1f}% |")
    by_kind = collections.Counter(t.kind for t in judged)
    over = sum(1 for t in judged if t.merged["rejected_same"])
    over0 = sum(1 for t in judged if t.path["rejected_same"])
    lines += ["", f"Programs judged: {', '.join(f'{n} {k}s' for k, n in by_kind.items())}; "
                  f"{sum(1 for t in tallies if t.note)} without a judgement (listed below). Programs with a "
                  f"rejected_same input: {over} with merged paths, {over0} with the example's path alone."]
    return "\n".join(lines)


def details(tallies: list[Tally]) -> str:
    lines = []
    unsound = [t for t in tallies if t.unsound]
    lines.append(f"### accepted_different (unsound): {sum(len(t.unsound) for t in unsound)}")
    lines += [f"- {t.kind} {t.name}: {', '.join(t.unsound)}" for t in unsound]
    if WIDE:
        failed = [t for t in tallies if t.replay_failures]
        lines += ["", f"### replay differs from eager: {sum(len(t.replay_failures) for t in failed)}"]
        lines += [f"- {t.kind} {t.name}: " + "; ".join(t.replay_failures[:3]) for t in failed]
    over = [t for t in tallies if t.over]
    lines += ["", f"### rejected_same (over-restrictive): {sum(len(t.over) for t in over)} in {len(over)} programs"]
    lines += [f"- {t.kind} {t.name}: " + "; ".join(t.over[:3]) + (f"; ... {len(t.over) - 3} more" if len(t.over) > 3 else "")
              for t in over]
    notes = collections.Counter(t.note.split(" at ")[0] if t.note.startswith("process died") else t.note
                                for t in tallies if t.note)
    lines += ["", "### not judged", ""] + [f"- {n}: {k}" for k, n in notes.most_common()]
    died = [t for t in tallies if t.note.startswith("process died")]
    if died:
        lines += ["", "Processes that died (the case they were in; an eager run of it, or a probe of the trace):", ""]
        lines += [f"- {t.kind} {t.name}: {t.note}" for t in died]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--fast", action="store_true", help="the subset the default tests run")
    p.add_argument("--only", help="ops, modules or models by name, comma-separated")
    p.add_argument("--saved", action="store_true",
                   help="judge the merged guards of the trace's saved text (Graph.parse(str(t.graph)) after "
                        "exploring), not the live trace's; prints, never writes")
    p.add_argument("--write", action="store_true", help="write benchmarks/PATHS.md (PATHS-WIDE.md with --wide)")
    p.add_argument("--wide", action="store_true", help="also 2, v-1, v+1, 2v and each guard's boundary; a replay column")
    args = p.parse_args(argv)
    global WIDE, SAVED
    WIDE, SAVED = args.wide, args.saved
    start = time.perf_counter()
    tallies = sweep(programs(args), args.jobs)
    text = table(tallies) + "\n\n" + details(tallies)
    print(text)
    print(f"\n{time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.write and not SAVED:
        cmd = f"python benchmarks/paths.py{' --wide' if WIDE else ''} --jobs {args.jobs} --write"
        title = "sizes 0, 1, 2, v-1, v+1, 2v and each guard's boundary" if WIDE else "sizes 0 and 1"
        (ROOT / "benchmarks" / ("PATHS-WIDE.md" if WIDE else "PATHS.md")).write_text(
            f"# Guards exact to the trace: {title} (benchmarks/paths.py)\n\n"
            f"`{cmd}`, torch {torch.__version__}, {time.perf_counter() - start:.0f} s on this machine.\n\n"
            + (__doc__ or "").split("\n\n", 1)[1].split("Targets:")[0].strip() + "\n\n"
            + ((__doc__ or "").split("`--wide`", 1)[1].join(["`--wide`", ""]).strip() + "\n\n" if WIDE else "")
            + text + "\n")
    bad = sum(len(t.unsound) for t in tallies)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
