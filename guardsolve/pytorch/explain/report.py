"""`CompileReport`: every frame of one torch.compile call explained, in text and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable
from guardsolve.solve.guardset import GuardSet
from guardsolve.pytorch.explain.frame import DynamoGuard, Frame, Specialization
from guardsolve.pytorch.explain.naming import grad_mode


JSON_VERSION = 1


@dataclass
class CompileReport:
    """Every frame Dynamo compiled for one call, outermost first (see the module doc)."""

    target: str
    frames: list[Frame]
    compiled: Callable[..., Any]  # the compiled callable these guards are Dynamo's for
    result: Any
    compile_seconds: float
    explain_seconds: float
    error: str | None = None  # Dynamo's own error on the first try (a violated mark_dynamic, say)
    grad: bool = True  # grad mode was on for the call (Dynamo guards it: the header says it once)
    eager: str | None = None  # Dynamo compiled no frame and ran the call eagerly: why, in its words
    setting: str | None = None  # the setting Dynamo's hint names (`torch._dynamo.config.allow_rnn = True`)
    unguarded: GuardSet | None = None  # where it ran eagerly: no size guard over the call's inputs

    @property
    def ran_eagerly(self) -> bool:
        """Dynamo compiled no frame: every input runs eagerly, so no guard rejects any."""
        return not self.frames

    @property
    def guards(self) -> GuardSet:
        """The outermost frame's minimal guards (none where Dynamo ran the call eagerly)."""
        if self.frames:
            return self.frames[0].guards
        assert self.unguarded is not None, "a report without frames holds the call's unguarded set"
        return self.unguarded

    @property
    def dynamo_guards(self) -> list[DynamoGuard]:
        """The outermost frame's size guards, as Dynamo checks them."""
        return self.frames[0].dynamo_guards if self.frames else []

    @property
    def specializations(self) -> list[Specialization]:
        return [s for f in self.frames for s in f.specializations]

    def frame(self, name: str) -> Frame:
        """The frame compiled from the code object named `name` (the newest, if several)."""
        for f in reversed(self.frames):
            if f.name == name:
                return f
        raise KeyError(f"no frame {name!r} (frames: {', '.join(f.name for f in self.frames)})")

    def counts(self) -> dict[str, int]:
        return {"frames": len(self.frames), "dynamo_guards": sum(len(f.dynamo_guards) for f in self.frames),
                "minimal_guards": sum(len(f.guards) for f in self.frames)}

    def __str__(self) -> str:
        return self.text()

    def text(self, verbose: bool = False) -> str:
        """The report (`verbose`: each of Dynamo's dropped guards, not a count per source line)."""
        n = self.counts()
        lines = [f"target: {self.target} (torch.compile, {grad_mode(self.grad)})",
                 f"frames: {n['frames']}; Dynamo's shape guards: {n['dynamo_guards']} -> {n['minimal_guards']} minimal; "
                 f"compiled in {self.compile_seconds:.2f} s, explained in {self.explain_seconds:.2f} s"]
        if self.error:
            lines.append(f"Dynamo refused the first compile: {self.error.splitlines()[0]}")
        if self.ran_eagerly:
            lines += ["", f"no guards: Dynamo compiled no frame of {self.target.split(' at ')[0]}: it runs every call "
                          f"eagerly, so no input recompiles",
                      f"  why: {self.eager or 'Dynamo gave no reason'}"]
            if self.setting:
                lines.append(f"  to compile it: {self.setting}")
        for f in self.frames:
            lines += ["", *f.lines(verbose)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """Per frame, a table of each minimal guard with Dynamo's guards behind it and their sources."""
        import html

        parts = [f"<div><b>{html.escape(self.target)}</b> (torch.compile): {self.counts()['dynamo_guards']} Dynamo "
                 f"shape guards &rarr; {self.counts()['minimal_guards']} minimal"]
        for f in self.frames:
            rows = []
            for c in f.guards:
                behind = {f._code_of(i): "; ".join(map(str, g.sources)) for i in sorted(c.prov)
                          if (g := f.guard_of(i)) is not None}
                rows.append(f"<tr><td><code>{html.escape(c.text)}</code></td><td>"
                            + "<br>".join(f"<code>{html.escape(d)}</code> &larr; {html.escape(s)}" for d, s in behind.items())
                            + "</td></tr>")
            parts.append(f"<p>frame {html.escape(f.compile_id)} <code>{html.escape(f.name)}</code> "
                         f"({html.escape(f.file)}:{f.line})</p><table><thead><tr><th>guard</th>"
                         f"<th>Dynamo's guards and their sources</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
        return "".join(parts) + "</div>"

    def as_dict(self) -> dict[str, Any]:
        outer = self.frames[0].as_dict() if self.frames else {"guards": [], "dynamo_guards": [], "static": [],
                                                              "minimal": True}
        return {"version": JSON_VERSION, "target": self.target, "via": "torch.compile", "counts": self.counts(),
                "ran_eagerly": {"why": self.eager, "setting": self.setting} if self.ran_eagerly else None,
                "compile_seconds": round(self.compile_seconds, 6), "explain_seconds": round(self.explain_seconds, 6),
                "error": self.error, "grad_enabled": self.grad, "guards": outer["guards"],
                "dynamo_guards": outer["dynamo_guards"],
                "static": outer["static"], "minimal": outer["minimal"], "frames": [f.as_dict() for f in self.frames]}

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)
