"""What Dynamo installs for one compiled frame, read from its guard manager.

These are PyTorch internals (torch 2.13): a cache entry's `guard_manager` tree (`TENSOR_MATCH`
leaves per source, the shape guards as epilogue lambdas with Dynamo's verbose comments), the
ShapeEnv a backend sees, and convert_frame's `_compile`. `require()` names what is missing
when they move.

>>> split_comment("2 <= L['x'].size()[0]  # f.py:3 in f (_dynamo/x.py:1 in g)")
("2 <= L['x'].size()[0]", 'f.py:3 in f (_dynamo/x.py:1 in g)')
>>> parse_tensor_match("check_tensor(L['x'], Tensor, DispatchKeySet(CPU), torch.float32, device=None, "
...                    "requires_grad=False, size=[None, 8], stride=[8, 1])")
([None, 8], [8, 1])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from guardsolve.errors import GuardsolveError

TESTED_TORCH = ("2.13",)  # NOTE: the minor versions whose Dynamo internals this module was checked on


class DynamoInternalsError(GuardsolveError):
    """Dynamo's internals that guardsolve reads are not where torch 2.13 keeps them."""


def require() -> Any:
    """The Dynamo modules this bridge reads, or a `DynamoInternalsError` naming what moved."""
    import torch

    try:
        import torch._dynamo as dynamo
        from torch._dynamo import convert_frame
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list  # noqa: F401
        from torch._dynamo.symbolic_convert import InstructionTranslator  # noqa: F401
        from torch._guards import CompileContext, TracingContext  # noqa: F401
    except ImportError as e:
        raise DynamoInternalsError(f"torch {torch.__version__}: {e} (guardsolve's torch.compile bridge is "
                                   f"tested on torch {', '.join(TESTED_TORCH)})") from None
    for owner, name in ((convert_frame, "_compile"), (dynamo, "mark_dynamic"), (torch.compiler, "set_stance")):
        if not hasattr(owner, name):
            raise DynamoInternalsError(f"torch {torch.__version__}: {owner.__name__}.{name} is gone (guardsolve's "
                                       f"torch.compile bridge is tested on torch {', '.join(TESTED_TORCH)})")
    return dynamo


def split_comment(part: str) -> tuple[str, str]:
    """A verbose code part as (code, Dynamo's comment)."""
    code, _, comment = part.partition("  # ")
    return code.strip(), comment.strip()


_TENSOR_MATCH = re.compile(r"size=\[(?P<size>[^\]]*)\], stride=\[(?P<stride>[^\]]*)\]")


def _ints(text: str) -> list[int | None]:
    return [None if s.strip() == "None" else int(s) for s in text.split(",") if s.strip()]


def parse_tensor_match(code: str) -> tuple[list[int | None], list[int | None]]:
    """The static sizes and strides a TENSOR_MATCH guard checks (None: dynamic)."""
    m = _TENSOR_MATCH.search(code)
    if m is None:
        raise DynamoInternalsError(f"cannot read the sizes of Dynamo's TENSOR_MATCH guard {code[:120]!r}")
    return _ints(m["size"]), _ints(m["stride"])


@dataclass(frozen=True)
class GuardLeaf:
    """One guard Dynamo runs on entry: its kind (`TENSOR_MATCH`, `LAMBDA_GUARD`, ...), the source
    it reads (None for the root's), its code and Dynamo's comment."""

    kind: str
    source: str | None
    code: str
    comment: str


def leaves(guard_manager: Any) -> tuple[list[GuardLeaf], list[GuardLeaf]]:
    """A cache entry's guard tree as (the leaves, the shape guards run last)."""
    root = guard_manager.root
    out: list[GuardLeaf] = []

    def walk(mgr: Any, source: str | None) -> None:
        for g in mgr.get_leaf_guards():
            out.extend(GuardLeaf(type(g).__name__, source, *split_comment(p)) for p in g.verbose_code_parts())
        for child in mgr.get_child_managers():
            walk(child, child.get_source())

    walk(root, None)
    shape = [GuardLeaf(type(g).__name__, None, *split_comment(p))
             for g in root.get_epilogue_lambda_guards() for p in g.verbose_code_parts()]
    return out, shape


def snapshot(f_locals: Any) -> dict[str, Any]:
    """A frame's locals as they are now: containers copied one level (the frame may pop from its
    `**kwargs` as it runs, after Dynamo compiled it for those values)."""
    return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in f_locals.items()}


@dataclass
class Compiled:
    """One frame Dynamo compiled, as its backend saw it."""

    code: Any  # the frame's code object
    compile_id: str
    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    shape_env: Any  # None when the frame had no fake mode
    entry: Any = None  # its cache entry, once Dynamo installed it
    error: str | None = None  # Dynamo's own error on this call's first compile (a violated mark_dynamic)

    @property
    def name(self) -> str:
        return self.code.co_name


@dataclass
class Capture:
    """Frames compiled through `backend()`, in order."""

    frames: list[Compiled] = field(default_factory=list)

    def backend(self, inner: Any) -> Any:
        """A backend that records each frame, then compiles it with `inner`."""
        from torch._dynamo.backends.registry import lookup_backend
        from torch._dynamo.symbolic_convert import InstructionTranslator
        from torch._guards import CompileContext, TracingContext

        compile_fn = lookup_backend(inner) if isinstance(inner, str) else inner

        def backend(gm: Any, example_inputs: Any) -> Any:
            tx = InstructionTranslator.current_tx()
            tc = TracingContext.try_get()
            mode = getattr(tc, "fake_mode", None)
            self.frames.append(Compiled(tx.f_code, str(CompileContext.current_compile_id()), snapshot(tx.f_locals),
                                        tx.f_globals, getattr(mode, "shape_env", None)))
            return compile_fn(gm, example_inputs)

        return backend

    def installed(self) -> Iterator[Compiled]:
        """Each recorded frame with its cache entry (frames whose entry is gone are skipped)."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        for c in self.frames:
            for e in _debug_get_cache_entry_list(c.code):
                if str(e.compile_id) == c.compile_id:
                    c.entry = e
                    break
            yield c
