"""A fixed-seed uniform sample of mutmut's mutants of the solver core, and its per-module tally.

Run from the directory where `mutmut run` generated `mutants/` (benchmarks/MUTATION.md):

    python benchmarks/mutation_sample.py names            # the sampled mutant names, one a line
    python benchmarks/mutation_sample.py tally            # per module: sampled, killed, survived, ...
    python benchmarks/mutation_sample.py names --seed 17 -n 150 --exclude 16:250   # the held-out sample

`--seed` and `-n` change the sample; the population is every mutant mutmut generated for the
files `only_mutate` lists in pyproject.toml, sorted by name, so a seed names the same mutants as
long as those files are unchanged.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tomllib
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

# NOTE: a timeout or a crash of the mutated code under the tests is a detection, as mutmut counts it
DETECTED = {"killed", "timeout", "segfault"}

# The sampled mutants judged equivalent, by seed (16: n 250; 17: n 150 held out from 16:250),
# each with its reason in MUTATION.md.
EQUIVALENT: dict[int, list[str]] = {
    16: """
guardsolve.guards.expr.x_normal__mutmut_49
guardsolve.solve.bounded.x_propagate__mutmut_44
guardsolve.solve.bounded.xǁBoxesǁ__init____mutmut_8
guardsolve.solve.order.x__topological__mutmut_20
guardsolve.solve.order.xǁOrderLayerǁ_search__mutmut_56
guardsolve.solve.order.xǁOrderLayerǁ_zero_cycles__mutmut_12
guardsolve.solve.simplify.x_classify__mutmut_25
guardsolve.solve.simplify.xǁSimplifierǁ__init____mutmut_7
guardsolve.solve.simplify.xǁSimplifierǁ_equalities__mutmut_116
guardsolve.solve.simplify.xǁSimplifierǁrun__mutmut_38
guardsolve.solve.smt.xǁContextsǁ__init____mutmut_6
guardsolve.solve.unify.xǁUnionFindǁunion__mutmut_21
guardsolve.solve.witness.x__boundary__mutmut_26
guardsolve.solve.witness.xǁWitnessesǁ_others_hold__mutmut_7
""".split(),
    17: """
guardsolve.solve.order.xǁOrderLayerǁ_implied_out_edges__mutmut_15
guardsolve.solve.order.xǁOrderLayerǁ_implied_out_edges__mutmut_50
guardsolve.solve.order.xǁOrderLayerǁ_search__mutmut_81
guardsolve.solve.simplify.x_classify__mutmut_26
guardsolve.solve.simplify.xǁSimplifierǁ_ne_formula__mutmut_7
guardsolve.solve.smt.xǁContextsǁscope__mutmut_26
guardsolve.solve.smt.xǁ_Lazyǁclose__mutmut_2
""".split(),
}


def population(root: Path) -> dict[str, int | None]:
    """Every generated mutant of the mutated files, with its last exit code (None: not run)."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    out: dict[str, int | None] = {}
    for path in cfg["only_mutate"]:
        meta = root / "mutants" / (path + ".meta")
        if not meta.exists():
            sys.exit(f"{meta} is missing: run `mutmut run` once to generate the mutants")
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def sample(pop: dict[str, int | None], n: int, seed: int, exclude: tuple[int, int] | None = None) -> list[str]:
    """`n` mutants drawn uniformly without replacement; `exclude` (seed, n) leaves out an earlier
    sample, so a second sample is held out from the tests written against the first."""
    names = sorted(pop)
    if exclude is not None:
        names = sorted(set(names) - set(sample(pop, exclude[1], exclude[0])))
    return sorted(random.Random(seed).sample(names, n))


def module(name: str) -> str:
    return name.split(".x_")[0].split(".xǁ")[0].rsplit(".", 1)[-1]


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (mid - half, mid + half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["names", "tally"])
    ap.add_argument("-n", type=int, default=250)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--exclude", help="SEED:N, an earlier sample to leave out (e.g. 16:250)")
    ap.add_argument("--equivalent", type=Path, help="a file of mutant names judged equivalent, one a line "
                    "(default: EQUIVALENT above, for the seed)")
    args = ap.parse_args(argv)
    pop = population(args.root)
    exclude = tuple(int(v) for v in args.exclude.split(":")) if args.exclude else None
    names = sample(pop, args.n, args.seed, exclude)  # type: ignore[arg-type]
    if args.what == "names":
        print("\n".join(names))
        return 0
    equivalent = set(args.equivalent.read_text().split() if args.equivalent else EQUIVALENT.get(args.seed, []))
    rows: dict[str, Counter[str]] = {}
    for name in names:
        status = status_by_exit_code[pop[name]]
        status = "killed" if status in DETECTED else status
        if status != "killed" and name in equivalent:
            status = "equivalent"
        rows.setdefault(module(name), Counter())[status] += 1
        if status not in ("killed", "equivalent"):
            print(f"{status}: {name}")
    total = sum(rows.values(), Counter())
    cols = sorted(total)
    print(f"population {len(pop)}, sample {len(names)}, seed {args.seed}")
    print("| module | sampled | " + " | ".join(cols) + " |")
    for mod, c in sorted(rows.items()) + [("all", total)]:
        print(f"| {mod} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    live = len(names) - total["equivalent"]
    lo, hi = wilson(total["killed"], live)
    print(f"killed {total['killed']} of {live} non-equivalent: {total['killed'] / live:.1%} "
          f"(95% Wilson {lo:.1%} - {hi:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
