"""The seed notebook end to end: trace `a + b`, derive its guards, and simplify them.

Run: python examples/notebook.py
"""

from __future__ import annotations

import torch

import guardsolve


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def main() -> None:
    torch.manual_seed(0)
    t = guardsolve.trace(add, torch.randn(4), torch.randn(4))
    print("# tensor trace")
    print(t.graph)

    guards = guardsolve.guard_graph(t.graph)
    print("\n# guard graph (shape rules)")
    print(guards)

    print("\n# printed guards")
    print("\n".join(guardsolve.print_guards(guards)))

    print("\n# re-checking the guard graph at a0=4, b0=8")
    try:
        guardsolve.run_concrete(guards, {"a0": 4, "b0": 8})
    except guardsolve.GuardFailure as e:
        print(f"GuardFailure: {e}")

    gs = guardsolve.simplify(t.graph)
    print(f"\n# minimal guards ({len(guards.bailouts())} bailouts -> {len(gs)} constraints)")
    print(gs)
    print("\n# where each guard came from")
    print(gs.explain())
    print("\n# certificate")
    print(gs.verify())
    print("\n# compiled check")
    print(gs.source())
    print(f"\ncheck([4], [4]) = {gs.check(torch.ones(4), torch.ones(4))}; "
          f"check([4], [8]) = {gs.check(torch.ones(4), torch.ones(8))}")


if __name__ == "__main__":
    main()
