"""Rejections in the user's words (issue 38, part 5): every route a report rejects names a user
`file:line` and an op (the torch op whose rule decides, or the program's own test of a size),
never trace line numbers alone; so do `explain(verbose=True)` and `explain_failure`.

The programs are the examples and real models (`examples/models.py`), and a small ViT-like
model (conv patches, a class token concatenated with `expand(x.shape[0], -1, -1)`, LayerNorm,
`[:, 0]`), whose guards are exactly its channel and patch counts.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import pytest
import torch
from torch import nn

import guardsolve
from guardsolve.cli import main

ROOT = pathlib.Path(__file__).parent.parent
HERE = pathlib.Path(__file__)

# `path/to/file.py:12` (a user's line; a saved trace's user lines are its own: `add.gs:3`) and an op: a torch op, or what the program's own code did
FILE_LINE = re.compile(r"([\w./-]+\.(?:py|gs)):(\d+)\b")
OP = re.compile(r"\b(?:aten|prims)\.\w+|the program's own (?:test|arithmetic)|a read of \.shape")


class TinyViT(nn.Module):
    """Conv patches, a class token, LayerNorm, the class token's row: `[:, 0]`."""

    def __init__(self, dim: int = 32, patch: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, 17, dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        t = t + self.pos
        return self.head(self.norm(t)[:, 0])


def _files() -> list[pathlib.Path]:
    """Where a printed user path may live: the repo, and the installed packages' folder."""
    out = [pathlib.Path.cwd(), ROOT, pathlib.Path("/")]
    spec = importlib.util.find_spec("transformers")
    if spec is not None and spec.submodule_search_locations:
        out.append(pathlib.Path(list(spec.submodule_search_locations)[0]).parent)
    return out


def _names_a_user_line_and_an_op(line: str) -> str | None:
    """What `line` lacks (None: it names a user `file:line` that exists, and an op)."""
    found = [(f, int(n)) for f, n in FILE_LINE.findall(line)]
    real = [(f, n) for f, n in found if any((base / f).is_file() and 0 < n <= len((base / f).read_text().splitlines())
                                            for base in _files())]
    if not real:
        return f"no user file:line in {line!r}"
    if not OP.search(line):
        return f"no op in {line!r}"
    if re.search(r"trace line \d+", line) and line.find("trace line") < line.find(f"{real[0][0]}:{real[0][1]}"):
        return f"a trace line before the user's line in {line!r}"
    return None


def _rejection_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("rejected at ")]


def _check_report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> int:
    """Every rejection line of the report, default and --verbose; how many --verbose has."""
    assert main(argv) == 0
    default = capsys.readouterr().out
    assert main(argv + ["--verbose"]) == 0
    verbose = capsys.readouterr().out
    lines = _rejection_lines(default) + _rejection_lines(verbose)
    bad = [why for why in map(_names_a_user_line_and_an_op, lines) if why is not None]
    assert not bad, "\n".join(bad)
    return len(_rejection_lines(verbose))


PROGRAMS = [
    pytest.param(["examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4"], id="add"),
    pytest.param(["examples/branching.py:route", "--shape", "x=32,8", "--shape", "y=8,4"], id="branching"),
    pytest.param(["examples/cat_reshape.py:merge_pairs", "--shape", "a=4,6", "--shape", "b=4,10"], id="cat_reshape"),
    pytest.param(["examples/cnn.py:SmallCNN", "--shape", "x=4,3,16,16"], id="cnn"),
    pytest.param([f"{HERE.relative_to(ROOT)}:TinyViT", "--shape", "x=4,3,16,16"], id="vit"),
    pytest.param(["examples/models.py:lstm", "--shape", "input=2,5,8"], id="lstm"),
    pytest.param(["examples/attention.py:AttentionBlock", "--shape", "x=2,16,64"], id="attention",
                 marks=pytest.mark.slow),
    pytest.param(["examples/mlp.py:MLP", "--shape", "x=32,64"], id="mlp", marks=pytest.mark.slow),
    pytest.param(["examples/masking.py:positive_scores", "--shape", "x=6,4", "--shape", "w=4"], id="masking",
                 marks=pytest.mark.slow),
    pytest.param(["examples/models.py:conv_net", "--shape", "x=2,3,16,16"], id="conv_net", marks=pytest.mark.slow),
    pytest.param(["examples/models.py:transformer_layer", "--shape", "src=2,6,16"], id="transformer_layer",
                 marks=pytest.mark.slow),
    pytest.param(["examples/models.py:self_attention", "--shape", "x=2,5,16"], id="self_attention",
                 marks=pytest.mark.slow),
    pytest.param(["examples/models.py:bert", "--shape", "input_ids=2,16", "--dtype", "int64"], id="bert",
                 marks=pytest.mark.slow),
    pytest.param(["examples/models.py:gpt2", "--shape", "input_ids=2,16", "--dtype", "int64"], id="gpt2",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("target", PROGRAMS)
def test_every_rejection_line_names_a_user_line_and_an_op(target: list[str], capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if "models.py:bert" in target[0] or "models.py:gpt2" in target[0]:
        pytest.importorskip("transformers")
    monkeypatch.chdir(ROOT)
    _check_report(capsys, ["report", *target])


def test_the_vits_guards_are_its_patch_count_and_a_rejection_names_the_add_that_decides(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 1 records the trace batch 4 records (the class token's `expand` keeps the batch
    symbol), and so does any height and width giving 16 patches (`[4, 3, 4, 64]`, where the
    patch grid is 1 high): the guards are the channel count and the patch count the position
    table fits. A size with another patch count is rejected at the `+ self.pos` line by
    `aten.add.Tensor`, with the sizes on both sides; never the trace's own line alone."""
    monkeypatch.chdir(ROOT)
    _check_report(capsys, ["report", f"{HERE.relative_to(ROOT)}:TinyViT", "--shape", "x=4,3,16,16"])
    gs = guardsolve.simplify(guardsolve.trace(TinyViT().eval(), torch.randn(4, 3, 16, 16)))
    assert [c.text for c in gs] == ["x1 == 3", "(x2 // 4)*(x3 // 4) == 16"], str(gs)
    assert gs.check(torch.randn(1, 3, 16, 16)) and gs.check(torch.randn(4, 3, 4, 64)) and gs.check(torch.randn(2, 3, 19, 17))
    probe = next(p for p in gs.probes if dict(p.point) == {"x0": 4, "x1": 3, "x2": 15, "x3": 16})
    why = gs.rejection(probe)
    assert why.startswith("stops at tests/test_rejections.py:"), why
    assert "t = t + self.pos: aten.add.Tensor's shape rule rejects these sizes" in why, why
    assert "(in the trace x2=16, x3=16, here x2=15, x3=16)" in why, why
    miss = gs.explain_failure(torch.randn(4, 3, 16, 20))
    assert _names_a_user_line_and_an_op(miss) is None, miss
    assert miss.startswith("(x2 // 4)*(x3 // 4) == 16 failed (x2=16, x3=20) (aten.add.Tensor's shape rule) — "
                           "tests/test_rejections.py:"), miss
    explained = gs.explain(verbose=True).partition("another trace at these sizes (rejected):\n")[2]
    lines = [line for line in explained.splitlines() if line.startswith("    ")]
    assert lines and all(_names_a_user_line_and_an_op(line) is None for line in lines), lines


def test_a_branch_of_the_users_code_is_named_with_its_sizes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() if x.shape[0] > 1 else x.cos()

    gs = guardsolve.simplify(guardsolve.trace(f, torch.randn(5, 8)))
    why = gs.explain_failure(torch.randn(1, 8))
    assert "records another trace at tests/test_rejections.py:" in why, why
    assert "decided otherwise: x0 >= 2 by the program's own test of a size (in the trace x0=5, here x0=1)" in why, why
    assert _names_a_user_line_and_an_op(why) is None


def test_the_check_command_names_the_line_and_op_of_a_rejected_size(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["check", "examples/notebook.py:add", "--shape", "a=4", "--shape", "b=4", "--at", "a=0", "--at",
                 "b=4"]) == 1
    out = capsys.readouterr().out
    fresh = next(line for line in out.splitlines() if line.startswith("a fresh trace at these sizes"))
    assert _names_a_user_line_and_an_op(fresh) is None, fresh
    assert "(in the trace a0=4, b0=4, here a0=0, b0=4)" in fresh, fresh


class EmbedDropBranch(nn.Module):
    """An embedding, an eval-mode dropout (it asks a stride order of `ids1`), then a test of the
    program's own on `ids.shape[1]`: only the test decides `ids1 >= 2`."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 32)
        self.drop = nn.Dropout(0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.emb(ids))
        return h * 2 if ids.shape[1] > 1 else h


def test_a_guard_source_that_decides_nothing_is_explained(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The dropout's line is a source of `ids1 >= 2`, but at `ids1=1` its rule returns the same
    sizes and strides: the report says so (text and JSON), and lists the deciding line first."""
    monkeypatch.chdir(ROOT)
    target = [f"{HERE.relative_to(ROOT)}:EmbedDropBranch", "--shape", "ids=2,16", "--dtype", "int64"]
    assert main(["report", *target]) == 0
    out = capsys.readouterr().out
    block = out.split("ids1 >= 2\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block[0].endswith("return h * 2 if ids.shape[1] > 1 else h"), block
    assert any("h = self.drop(self.emb(ids))  (decides nothing at ids1=1: aten.dropout.default returns the same sizes "
               "and strides there)" in line for line in block), block
    assert main(["report", *target, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sources = next(g for g in doc["guards"] if g["guard"] == "ids1 >= 2")["sources"]
    assert [s.get("decides_nothing_at") for s in sources if "self.drop" in s["code"]] == [{"ids1": 1}]
    assert all("decides_nothing_at" not in s for s in sources if "ids.shape[1] > 1" in s["code"])


@pytest.mark.slow
def test_berts_eval_mode_dropout_lines_are_explained(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    monkeypatch.chdir(ROOT)
    assert main(["report", "examples/models.py:bert", "--shape", "input_ids=2,16", "--dtype", "int64"]) == 0
    out = capsys.readouterr().out
    block = out.split("input_ids1 >= 2\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "sdpa_attention.py:148" in block[0], block
    dropout = [line for line in block if "dropout(" in line]
    assert dropout and all("(decides nothing at input_ids1=1: aten.dropout.default returns the same sizes and strides "
                           "there)" in line for line in dropout), block


def test_a_saved_trace_names_its_own_lines(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved trace's user is its text: its rejections and failed guards name `file.gs:line`
    and the op of that line, never `trace line N` alone."""
    monkeypatch.chdir(tmp_path)
    pathlib.Path("add.gs").write_text(str(guardsolve.trace(lambda a, b: a + b, torch.ones(4), torch.ones(4)).graph))
    pathlib.Path("cnn.py").write_text((ROOT / "examples/cnn.py").read_text())
    assert main(["trace", "cnn.py:SmallCNN", "--shape", "x=4,3,16,16", "-o", "cnn.gs"]) == 0
    for saved in ("add.gs", "cnn.gs"):
        assert _check_report(capsys, ["report", saved]) > 0
    assert main(["check", "add.gs", "--shape", "a=0", "--shape", "b=4"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("(aten.add.Tensor's shape rule) — add.gs:3  v0 = aten.add.Tensor(a, b)"), lines
    assert lines[1].startswith("a fresh trace at these sizes stops at add.gs:3  v0 = aten.add.Tensor(a, b): "), lines
    assert all(_names_a_user_line_and_an_op(line) is None for line in lines), lines


def test_a_miss_names_the_deciding_source_not_an_idle_one() -> None:
    """At ids [3, 1] (no route probed there) the failed guard names the program's own test,
    which decides, not the dropout that only asks a stride order."""
    m = EmbedDropBranch().eval()
    gs = guardsolve.simplify(guardsolve.trace(m, torch.randint(0, 10, (2, 16))))
    why = gs.explain_failure(torch.randint(0, 10, (3, 1)))
    assert why.startswith("ids1 >= 2 failed (ids1=1) (the program's own test of a size) — tests/test_rejections.py:"), why
    assert why.endswith("return h * 2 if ids.shape[1] > 1 else h"), why


@pytest.mark.slow
def test_a_bert_miss_names_its_deciding_line() -> None:
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    import models

    gs = guardsolve.simplify(guardsolve.trace(models.bert(), torch.randint(0, 100, (2, 16))))
    why = gs.explain_failure(torch.randint(0, 100, (3, 1)))
    assert "(the program's own test of a size) — transformers/integrations/sdpa_attention.py:148" in why, why
    assert "dropout" not in why, why
