"""One compiled frame explained: Dynamo's guards on it (`DynamoGuard`), its pins and
specializations, and the minimal GuardSet over its inputs (`Frame`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence
from guardsolve.solve.guardset import GuardSet
from guardsolve.pytorch.explain.naming import GRAD_MODE
from guardsolve.pytorch.explain.provenance import GuardSource


@dataclass(frozen=True)
class DynamoGuard:
    """One size guard Dynamo checks on entry, as it checks it, and where it came from.

    `kind`: "shape" (an epilogue lambda over sizes), "static size" (a size its TENSOR_MATCH
    checks) or "stride" (a shape guard over strides: a static guard here)."""

    code: str
    kind: str
    sources: tuple[GuardSource, ...]
    comment: str = ""
    expr: Any = field(default=None, compare=False)  # the sympy condition, over one symbol per source
    dims: tuple[tuple[Any, str], ...] = field(default=(), compare=False)  # its symbols that are input dims
    # NOTE: a range `2 <= s <= 15`: its lower and upper bound, each a guard with its own sources
    # (`sources` is theirs together); the guard set has a bailout per bound
    bounds: tuple["DynamoGuard", ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.code

    def as_dict(self) -> dict[str, Any]:
        out = {"code": self.code, "kind": self.kind, "sources": [s.as_dict() for s in self.sources],
               "dynamo_comment": self.comment}
        if self.bounds:
            out["bounds"] = [{"code": b.code, "sources": [s.as_dict() for s in b.sources]} for b in self.bounds]
        return out


@dataclass(frozen=True)
class Pin:
    """One guard that pins or narrows a specialized dim: its text over guardsolve's names,
    where it came from, and a witness value of the dim it rejects (the other dims as the call)."""

    text: str
    sources: tuple[GuardSource, ...]
    witness: dict[str, int] | None

    def __str__(self) -> str:
        w = f"; rejects {', '.join(f'{k}={v}' for k, v in self.witness.items())}" if self.witness else ""
        return f"{self.text}  at {'; '.join(map(str, self.sources)) or 'Dynamo'}{w}"


@dataclass(frozen=True)
class Specialization:
    """A dim Dynamo made a symbol for and then pinned to `value`; `marked`: the user marked it
    dynamic (then Dynamo's own error is `error`)."""

    dim: str
    source: str
    value: int
    marked: bool
    pins: tuple[Pin, ...]
    error: str | None = None

    def __str__(self) -> str:
        head = (f"{self.dim} ({self.source}) was marked dynamic but is specialized to {self.value}" if self.marked
                else f"{self.dim} ({self.source}) is specialized to {self.value}")
        return "\n".join([head + f", by {len(self.pins)} guard{'s' if len(self.pins) != 1 else ''}:",
                          *(f"    {p}" for p in self.pins)])

    def as_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "source": self.source, "value": self.value, "marked": self.marked,
                "error": self.error, "pins": [{"guard": p.text, "sources": [s.as_dict() for s in p.sources],
                                               "witness": p.witness} for p in self.pins]}


@dataclass
class Frame:
    """One frame Dynamo compiled: its guards as Dynamo checks them and as guardsolve reduced them."""

    name: str
    compile_id: str
    file: str
    line: int
    params: tuple[str, ...]
    dynamo_guards: list[DynamoGuard]
    guards: GuardSet
    other_guards: list[str]  # Dynamo's guards that are not about sizes (type and id matches, ...)
    specializations: list[Specialization] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # Dynamo's source -> guardsolve's dim
    code: Any = field(default=None, repr=False)  # the frame's code object
    inputs: dict[str, str] = field(default_factory=dict)  # each of `params` -> its source in the frame
    f_locals: dict[str, Any] = field(default_factory=dict, repr=False)  # the locals it was compiled for
    # NOTE: the outermost frame as the user called it, where Dynamo compiled a wrapper around it
    # (`LlamaModel.forward (modeling_llama.py:350), through its wrapper wrapped_func (...)`)
    label: str | None = None

    @property
    def title(self) -> str:
        """The frame as the report names it: `name (file:line)`, or as the user called it."""
        return self.label or f"{self.name} ({self.file}:{self.line})"

    def arguments(self, f_locals: Mapping[str, Any]) -> list[Any]:
        """The values `guards.check` takes, read from the frame's locals (`L['args'][0]`, ...)."""
        return [eval(self.inputs[p], {"L": f_locals}) for p in self.params]  # NOTE: Dynamo's own source text

    def guard_of(self, node: int) -> DynamoGuard | None:
        """The Dynamo guard one bailout of `guards.graph` translates (one bound of a range)."""
        meta = self.guards.graph.nodes[node].meta
        if meta.get("dynamo") is None:
            return None
        g = self.dynamo_guards[meta["dynamo"]]
        return g.bounds[meta["bound"]] if meta.get("bound") is not None else g

    def _code_of(self, node: int) -> str:
        """The Dynamo guard of a bailout as the report prints it: a range's bound says its range."""
        meta = self.guards.graph.nodes[node].meta
        g = self.guard_of(node)
        whole = self.dynamo_guards[meta["dynamo"]].code
        return g.code if g is None or g.code == whole else f"{g.code} (of {whole})"

    def sources_of(self, node: int) -> tuple[GuardSource, ...]:
        """The sources of one bailout of `guards.graph` (the Dynamo guard it translates)."""
        g = self.guard_of(node)
        return g.sources if g is not None else ()

    def as_dict(self) -> dict[str, Any]:
        gs = self.guards
        return {
            "frame": self.name, "called_as": self.label, "compile_id": self.compile_id, "file": self.file,
            "line": self.line,
            "params": list(self.params), "dims": self.names,
            "counts": {"dynamo": len(self.dynamo_guards), "minimal": len(gs)},
            "dynamo_guards": [g.as_dict() for g in self.dynamo_guards],
            "guards": [{"guard": c.text, "kind": c.kind, "dims": list(c.dims),
                        "sources": self._sources(sorted(c.prov))} for c in gs],
            "implied": self._sources(sorted(gs.implied - set(gs.tautologies))),
            "always_true": self._sources(sorted(gs.tautologies)),
            "static": [g.text for g in gs.static],
            "other_guards": len(self.other_guards),
            "minimal": gs.minimal,
            "specializations": [s.as_dict() for s in self.specializations],
        }

    def _sources(self, nodes: Sequence[int]) -> list[dict[str, Any]]:
        out = []
        for i in nodes:
            dg = self.guard_of(i)
            for s in (dg.sources if dg else ()):
                out.append({"bailout": self.guards._describe(i), "dynamo": dg.code if dg else None, **s.as_dict()})
        return out

    def lines(self, verbose: bool = False) -> list[str]:
        """The frame as the report prints it (`verbose`: each dropped guard, not a count per source)."""
        gs = self.guards
        sizes = sum(g.kind in ("shape", "static size") for g in self.dynamo_guards)
        out = [f"frame {self.compile_id} {self.title}: Dynamo checks "
               f"{len(self.dynamo_guards)} shape guards ({sizes} over input sizes, "
               f"{len(self.dynamo_guards) - sizes} on strides and other values) -> "
               f"{len(gs)} minimal size guard{'s' if len(gs) != 1 else ''}"
               f"{'' if gs.minimal else ' (not proved minimal: solver undecided)'}"]
        if self.names:
            out.append("  dims: " + ", ".join(f"{d} = {s}" for s, d in self.names.items()))
        if not len(gs):
            out.append("  (no size guards)")
        for c in gs:
            out.append(f"  {c.text}")
            seen: set[str] = set()
            for i in sorted(c.prov):
                dg = self.guard_of(i)
                if dg is None:
                    continue
                text = f"      Dynamo: {self._code_of(i)}  <- {'; '.join(map(str, dg.sources))}"
                if text not in seen:
                    seen.add(text)
                    out.append(text)
        for title, nodes in (("implied by the above (dropped):", sorted(gs.implied - set(gs.tautologies))),
                             ("always true (dropped):", sorted(gs.tautologies))):
            out += self._dropped(title, nodes, verbose)
        # NOTE: the grad mode is one fact of the whole call: the report's header says it, once
        static = [g for g in gs.static if not g.text.startswith(GRAD_MODE)]
        if static or self.other_guards:
            out.append(f"  static (not sizes): {len(static)}; Dynamo's other guards (types, ids, state): "
                       f"{len(self.other_guards)}")
            out += [f"      {g.text}" for g in static]
        for s in self.specializations:
            out += ["  " + line for line in str(s).splitlines()]
        return out


    def _dropped(self, title: str, nodes: Sequence[int], verbose: bool) -> list[str]:
        """Dynamo's guards the minimal ones imply, over the dims as kept guards print (`x1 >= 1`):
        grouped by source with a count and the shortest reading (`verbose`: each reading once);
        no heading when there are none."""
        gs = self.guards
        by_source: dict[str, list[str]] = {}
        for i in nodes:
            dg = self.guard_of(i)
            if dg is not None:
                readings = by_source.setdefault("; ".join(map(str, dg.sources)), [])
                if gs._reading(i) not in readings:
                    readings.append(gs._reading(i))
        lines = [f"      {r}  <- {src}" if verbose or len(rs) == 1 else
                 f"      {src}  ({len(rs)} guards, e.g. {min(rs, key=len)})"
                 for src, rs in by_source.items() for r in (rs if verbose else rs[:1])]
        return [f"  {title}", *lines] if lines else []
