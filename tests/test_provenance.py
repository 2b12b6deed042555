"""Provenance on multi-line programs: a guard made by the k-th torch call names that call's line.

The same program is checked through every surface that shows a source line: `explain()`,
`explain_failure()`, the `guarded()` cache's miss reasons and the JSON report. The first call
(`s = a * 2`) records guards too, so a tracer that kept the first call's line for every later
node would blame it for all of them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
from types import ModuleType

import pytest
import torch

import guardsolve
from guardsolve.cli import main

PROGRAM = '''\
def chain(a, b, c, d):
    s = a * 2
    t = s + b
    u = t + c
    return u + d


def mlp(x, w, v):
    h = x @ w
    h = h.relu()
    y = h @ v
    return y.sum(0) + x[0]
'''



@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """PROGRAM as a real module file `prog.py` (source lines are read back from it)."""
    path = tmp_path_factory.mktemp("provenance") / "prog.py"
    path.write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("guardsolve_provenance_prog", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(code: str) -> int:
    """The 1-based line of `code` in PROGRAM (unique)."""
    (n,) = [i for i, text in enumerate(PROGRAM.splitlines(), 1) if text.strip() == code]
    return n


# (guard, the torch call that makes it, sizes at which it is the first guard to fail; eager
# broadcasts them, so the cache can trace them)
CHAIN = [
    ("a0 == b0", "t = s + b", (4, 1, 4, 4)),
    ("a0 == c0", "u = t + c", (4, 4, 1, 4)),
    ("a0 == d0", "return u + d", (4, 4, 4, 1)),
]


def tensors(*sizes: int) -> list[torch.Tensor]:
    return [torch.randn(n) for n in sizes]


def at(code: str) -> str:
    """How a source line ends an explanation: `.../prog.py:4  u = t + c`."""
    return f"prog.py:{line_of(code)}  {code}"


def lines(where: list[str]) -> set[int]:
    """The line numbers of explain()'s `... at .../prog.py:N  code` entries."""
    return {int(w.split("prog.py:", 1)[1].split()[0]) for w in where}


def blocks(explained: str) -> dict[str, list[str]]:
    """explain()'s text as {constraint: its indented lines}."""
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for text in explained.splitlines():
        if text.startswith("    "):
            current.append(text.strip())
        else:
            current = out.setdefault(text, [])
    return out


@pytest.fixture(scope="module")
def chain_guards(prog: ModuleType) -> guardsolve.GuardSet:
    # NOTE: the example's path alone: each broadcast's own bailouts and lines (merged routes would
    # answer them otherwise)
    return guardsolve.simplify(guardsolve.trace(prog.chain, *tensors(4, 4, 4, 4)), explore=False)


@pytest.mark.parametrize("guard, code, _", CHAIN)
def test_explain_names_the_kth_call(chain_guards: guardsolve.GuardSet, guard: str, code: str, _: tuple) -> None:
    where = blocks(chain_guards.explain())[guard]
    assert where and all(w.endswith(at(code)) for w in where), where


def test_a_guard_of_several_calls_names_each(chain_guards: guardsolve.GuardSet) -> None:
    where = blocks(chain_guards.explain())["a0 != 1"]
    assert lines(where) == {line_of(c) for c in ("s = a * 2", "t = s + b", "u = t + c", "return u + d")}


@pytest.mark.parametrize("guard, code, sizes", CHAIN)
def test_explain_failure_names_the_kth_call(chain_guards: guardsolve.GuardSet, guard: str, code: str,
                                            sizes: tuple) -> None:
    why = chain_guards.explain_failure(*tensors(*sizes))
    assert why.startswith(f"{guard} failed") and why.endswith(at(code)), why


def test_cache_miss_reasons_name_the_kth_call(prog: ModuleType) -> None:
    cached = guardsolve.guarded(prog.chain, explore=False)
    cached(*tensors(4, 4, 4, 4))
    for k, (guard, code, sizes) in enumerate(CHAIN):
        args = tensors(*sizes)
        assert torch.equal(cached(*args), prog.chain(*args))
        info = cached.cache_info()
        assert info.misses == k + 2
        reason = info.miss_reasons[-1]
        # NOTE: entries are tried in order; entry 0 (the [4]s) is the one each new call misses first
        first = [r for r in info.miss_reasons if r.startswith("entry 0:")][-1]
        assert first.startswith(f"entry 0: {guard} failed") and first.endswith(at(code)), (first, reason)


def test_matmul_chain_blames_each_product(prog: ModuleType) -> None:
    """Two products and a slice: each size guard names its own line, not the first product's."""
    x, w, v = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 4)
    gs = guardsolve.simplify(guardsolve.trace(prog.mlp, x, w, v), explore=False)
    explained = blocks(gs.explain())
    assert lines(explained["x1 == w0"]) == {line_of("h = x @ w")}
    assert lines(explained["w1 == v0"]) == {line_of("y = h @ v")}
    assert lines(explained["x1 == v1"]) == {line_of("return y.sum(0) + x[0]")}
    why = gs.explain_failure(x, w, torch.randn(6, 4))
    assert why.startswith("w1 == v0 failed") and why.endswith(at("y = h @ v")), why
    why = gs.explain_failure(x, w, torch.randn(5, 3))
    assert why.startswith("x1 == v1 failed") and why.endswith(at("return y.sum(0) + x[0]")), why


def test_json_report_sources_name_the_kth_call(prog: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    script = pathlib.Path(prog.__file__)
    shapes = [a for n in "abcd" for a in ("--shape", f"{n}=4")]
    assert main(["report", f"{script}:chain", *shapes, "--format", "json", "--no-explore"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_guard = {g["guard"]: g["sources"] for g in doc["guards"]}
    for guard, code, _ in CHAIN:
        assert [(s["line"], s["code"]) for s in by_guard[guard]] == [(line_of(code), code)], by_guard[guard]
        assert all(pathlib.Path(s["file"]).name == "prog.py" for s in by_guard[guard])
    assert {s["line"] for s in by_guard["a0 != 1"]} == {line_of(c) for c in ("s = a * 2", "t = s + b", "u = t + c",
                                                                              "return u + d")}



def test_program_text_is_what_the_functions_run(prog: ModuleType) -> None:
    """line_of() counts the lines of the file the functions were compiled from."""
    assert prog.chain.__code__.co_firstlineno == line_of("def chain(a, b, c, d):")
    assert prog.mlp.__code__.co_firstlineno == line_of("def mlp(x, w, v):")


def test_a_program_that_is_all_torch_names_torch_nn_not_the_caller() -> None:
    """Tracing `nn.LSTM` as it is: no user line exists inside the traced call, so each guard
    names the module's own line (never this test, which only called `trace`)."""
    lstm = torch.nn.LSTM(8, 16, batch_first=True).eval()
    with torch.no_grad():
        gs = guardsolve.simplify(guardsolve.trace(lstm, torch.randn(2, 5, 8)))
    locs = [gs.graph.nodes[i].meta.get("loc") for c in gs.constraints for i in c.prov]
    assert locs and all(loc is not None and loc.short_file == os.path.join("torch", "nn", "modules", "rnn.py")
                        for loc in locs), locs
    assert any("input.size(-1)" in loc.code for loc in locs)
