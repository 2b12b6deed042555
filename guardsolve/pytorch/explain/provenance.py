"""Where one of Dynamo's guards came from: the user lines its comment names, the bounds it states,
and the fix torch.compile's words give for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
import torch
from guardsolve.ir.node import short_path


FIXES = {
    "duck sizing": "give the inputs different example sizes, or set "
                   "torch.fx.experimental._config.use_duck_shape = False",
    "0/1 specialization": "trace an example of size >= 2, or torch._dynamo.decorators.mark_unbacked(tensor, dim)",
    "static by default": "torch._dynamo.mark_dynamic(tensor, dim), or torch.compile(..., dynamic=True)",
    "stride": "the input's strides are those of the example's layout; pass inputs of the same layout",
    "automatic dynamic": "none needed: it keeps inputs of the earlier static graph on that graph",
    "specialized": "see the specializations: the guards that pin this dim",
    "shape rule": "none: PyTorch's shape rule for the op asks it",
    "NaN specialization": "none needed: a NaN value would compile a graph of its own",
    "Dynamo's own": "see Dynamo's comment (TORCH_LOGS=guards)",
    "symbol replacement": "mark the dims dynamic with different example sizes (TORCH_LOGS=+dynamic shows the replacement)",
}


@dataclass(frozen=True)
class GuardSource:
    """Where one Dynamo guard came from: a user line, or a named assumption (with a fix)."""

    assumption: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    code: str | None = None
    detail: str | None = None
    # NOTE: where PyTorch itself decided a bound of a size on this line (the framework location of
    # Dynamo's comment, `_subclasses/fake_impls.py:1811 in conv`), with that line's code
    decided: str | None = None

    @property
    def fix(self) -> str | None:
        return FIXES.get(self.assumption) if self.assumption else None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" + (f"  {self.code}" if self.code else "") if self.file else ""
        if self.assumption is None:
            return where + (f" — decided in PyTorch at {self.decided}" if self.decided else "")
        text = f"Dynamo's assumption: {self.assumption}" + (f" ({self.detail})" if self.detail else "")
        return text + (f"; first used at {where}" if where else "")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "line": self.line, "code": self.code}
        if self.decided:
            d["decided_in"] = self.decided
        if self.assumption:
            d.update(assumption=self.assumption, fix=self.fix)
            if self.detail:
                d["detail"] = self.detail
        return d


_FILE = r"(?P<file><[^>]+>|[^\s:#]+):(?P<line>\d+) in (?P<fn>[\w<>.]+)"


# NOTE: `) and ` joins two of Dynamo's locations; `; via ` a user line and the library line it
# called (`callers_in_slocs`)
_LOC = re.compile(r"(?:^|\) and |; via )(?P<code>.*?)\s+# " + _FILE)


_FRAMEWORK = re.compile("^" + _FILE)


def _file(printed: str, code: Any) -> str:
    """Dynamo prints a shortened path; the frame's own file when it is that one."""
    full = getattr(code, "co_filename", "")
    if not full:
        return printed
    return short_path(full) if full.endswith(printed.lstrip(".")) or printed.endswith(short_path(full)) else printed


def user_lines(comment: str, code: Any = None) -> list[GuardSource]:
    """The user lines in one of Dynamo's verbose comments (`if x.shape[0] > 5:  # f.py:3 in f (...)`).

    >>> [str(s) for s in user_lines("if n > 5:  # f.py:3 in f (_dynamo/variables/tensor.py:2606 in evaluate_expr)")]
    ['f.py:3  if n > 5:']
    """
    return [GuardSource(None, _file(m["file"], code), int(m["line"]), m["fn"], m["code"].strip() or None)
            for m in _LOC.finditer(comment)]


def sources_of(comment: str, code: str, frame_code: Any = None) -> tuple[GuardSource, ...]:
    """Every source of a guard from Dynamo's verbose comment: a user line or a named assumption.

    >>> [s.assumption for s in sources_of("duck sizing added this equality because these variables had the same size 3", "")]
    ['duck sizing']
    >>> [s.assumption for s in sources_of("(unknown var s17, please file a bug)", "L['y'].size()[0] == 2*L['x'].size()[0]")]
    ['symbol replacement']
    """
    lines = user_lines(comment, frame_code)
    if "duck sizing" in comment:
        m = re.search(r"the same size (\d+)", comment)
        return (GuardSource("duck sizing", detail=f"the example sizes were equal ({m[1]})" if m else None),)
    if "0/1 specialization" in comment:
        # NOTE: one of the joined locations is where Dynamo made the symbol ("first use"); the
        # others are decisions user lines made on it, sources of their own
        pieces = re.split(r"(?<=\)) and ", comment)
        made = next((p for p in pieces if "0/1 specialization" in p), comment)
        first = next(iter(user_lines(made, frame_code)), GuardSource())
        decided = [s for p in pieces if p is not made for s in user_lines(p, frame_code)]
        return (GuardSource("0/1 specialization", first.file, first.line, first.function, first.code,
                            "a dynamic size is assumed >= 2"), *dict.fromkeys(decided))
    if "NaN specialization" in comment:
        return (GuardSource("NaN specialization", detail="a float Dynamo reads is assumed not to be NaN"),)
    if "exclusion guard for automatic dynamic" in comment:
        return (GuardSource("automatic dynamic", detail="inputs of the earlier static graph stay on it"),)
    if "unknown source" in comment and (".stride()" in code or "storage_offset" in code):
        return (GuardSource("stride", detail="Dynamo ties the strides to the sizes of the example's layout"),)
    if lines:
        return tuple(lines)
    if "unknown var" in comment or "unknown source" in comment:
        return (GuardSource("symbol replacement", detail="Dynamo tied this size to another symbol's expression "
                            "when it made its symbols, and recorded no line for it"),)
    fw = _FRAMEWORK.match(comment)
    if fw is not None:
        return (GuardSource("shape rule", fw["file"], int(fw["line"]), fw["fn"], detail=f"{fw['file']}:{fw['line']} in {fw['fn']}"),)
    # NOTE: never "unknown": what Dynamo said, as it said it
    return (GuardSource("Dynamo's own", detail=comment or "Dynamo recorded no source for this guard"),)


_RANGE = re.compile(r"^(?P<lo>-?\d+) <= (?P<sym>.+?) <= (?P<hi>-?\d+)$")


UPPER = re.compile(r"^(?P<sym>.+?) <= (?P<hi>-?\d+)$")


# NOTE: one of Dynamo's locations as it ends: a user line's `# file:line in fn (framework)`, or a
# framework location alone
_SLOC_END = re.compile(r"(# \S+:\d+ in [\w<>.]+ \(.*\)|^\S+:\d+ in [\w<>.]+)$")


_DECIDED = re.compile(r"\((?P<file>[^\s()]+):(?P<line>\d+) in (?P<fn>[\w<>.]+)\)$")


def bounds_of(code: str, comment: str) -> list[tuple[str, str]]:
    """A range guard `lo <= s <= hi` as its two bounds, each with its own location: Dynamo
    tightens each bound where it does (`produce_guards` joins the two as `lower and upper`).
    Empty for any other guard.

    >>> bounds_of("2 <= L['x'].size()[0] <= 15",
    ...           "f(x)  # a.py:3 in g (0/1 specialization ...) and f(x)  # a.py:3 in g (fake_impls.py:9 in conv)")
    [("2 <= L['x'].size()[0]", 'f(x)  # a.py:3 in g (0/1 specialization ...)'), ("L['x'].size()[0] <= 15", 'f(x)  # a.py:3 in g (fake_impls.py:9 in conv)')]
    """
    m = _RANGE.match(code)
    if m is None:
        return []
    at = comment.find(" and ")
    while at >= 0:
        if _SLOC_END.search(comment[:at]):
            return [(f"{m['lo']} <= {m['sym']}", comment[:at]), (f"{m['sym']} <= {m['hi']}", comment[at + 5:])]
        at = comment.find(" and ", at + 5)
    return []


def deciding_sources(sources: tuple[GuardSource, ...], comment: str) -> tuple[GuardSource, ...]:
    """An upper bound's sources, the innermost line naming the PyTorch function that decided it
    (`_subclasses/fake_impls.py:1811 in conv  conv_backend = torch._C._select_conv_backend(`);
    as they are where Dynamo itself decided it (a user's `if`) or named no user line."""
    m = _DECIDED.search(comment)
    users = [k for k, s in enumerate(sources) if s.assumption is None and s.file]
    if m is None or not users or m["file"].startswith("_dynamo/"):
        return sources
    import linecache
    import os

    code = linecache.getline(os.path.join(os.path.dirname(torch.__file__), m["file"]), int(m["line"])).strip()
    decided = f"torch/{m['file']}:{m['line']} in {m['fn']}" + (f"  {code}" if code else "")
    k = users[-1]
    s = sources[k]
    return (*sources[:k], GuardSource(s.assumption, s.file, s.line, s.function, s.code, s.detail, decided),
            *sources[k + 1:])
