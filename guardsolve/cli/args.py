"""The command line's arguments checked before torch and z3 load: one line, exit 2, with the fix.

Everything here reads only the arguments and the file system, so a mistake is answered in a
fraction of a second (torch's import alone takes seconds):

>>> parse_dtype("fp16"), parse_dtype("torch.bfloat16"), parse_dtype("long")
('float16', 'bfloat16', 'int64')
>>> parse_shape("x=2,3")
('x', (2, 3))
>>> parse_values("mask=ones"), parse_values("ids=randint:0,100")
(('mask', ('ones',)), ('ids', ('randint', 0, 100)))
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from typing import Any, Sequence

from guardsolve.errors import GuardsolveError


class ArgumentError(GuardsolveError):
    """A command-line argument is malformed; the message says the expected form."""


# torch's dtype names, and the aliases torch users type (torch.half is float16, ...)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128")
ALIASES = {
    "float": "float32", "fp32": "float32", "f32": "float32", "single": "float32",
    "double": "float64", "fp64": "float64", "f64": "float64",
    "half": "float16", "fp16": "float16", "f16": "float16",
    "bf16": "bfloat16",
    "long": "int64", "i64": "int64", "int": "int32", "i32": "int32", "short": "int16", "i16": "int16",
    "i8": "int8", "byte": "uint8", "u8": "uint8",
    "cfloat": "complex64", "cdouble": "complex128",
}


def parse_dtype(text: str, flag: str = "--dtype") -> str:
    """A dtype name as torch spells it; aliases (`fp16`, `half`, `torch.float16`, `bf16`) too."""
    name = text.strip().removeprefix("torch.").lower()
    if name in DTYPES:
        return name
    if name in ALIASES:
        return ALIASES[name]
    close = difflib.get_close_matches(name, [*DTYPES, *ALIASES], n=1)
    hint = f"did you mean {ALIASES.get(close[0], close[0])}? " if close else ""
    raise ArgumentError(f"unknown {flag} {text!r}: {hint}valid: {', '.join(DTYPES)} "
                        f"(aliases: fp16, half, bf16, fp32, fp64, double, long, int, torch.NAME)")


def parse_dtypes(specs: Sequence[str]) -> tuple[str, dict[str, str]]:
    """`--dtype int64` (every input) and `--dtype ids=int64` (one input): (default, per name)."""
    default, per_name = "float32", {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if sep:
            if not name.isidentifier():
                raise ArgumentError(f"malformed --dtype {spec!r}: expected DTYPE or NAME=DTYPE (e.g. ids=int64)")
            if name in per_name:
                raise ArgumentError(f"--dtype {spec!r}: {name!r} is already given")
            per_name[name] = parse_dtype(value, f"--dtype {name}=")
        else:
            default = parse_dtype(spec)
    return default, per_name


def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """`x=4,8` -> ("x", (4, 8)); `s=` is a 0-d tensor. Other spellings get the fix."""
    name, sep, dims = spec.partition("=")
    if not sep or not name.isidentifier():
        raise ArgumentError(f"malformed --shape {spec!r}: expected NAME=D0,D1,... (e.g. x=4,8)")
    parts = [d for d in re.split(r"[,x×*\s]+", dims.strip().strip("()[]")) if d]
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        if parts and all(p.lstrip("-").isdigit() for p in parts):
            raise ArgumentError(f"malformed --shape {spec!r}: write --shape {name}={','.join(parts)}") from None
        raise ArgumentError(f"malformed --shape {spec!r}: dims must be integers, as NAME=D0,D1,... "
                            f"(e.g. {name}=4,8)") from None
    if any(d < 0 for d in shape):
        raise ArgumentError(f"malformed --shape {spec!r}: dims must be non-negative")
    return name, shape


VALUE_KINDS = ("randn", "rand", "randint", "ones", "zeros", "arange")


def parse_values(spec: str) -> tuple[str, tuple[Any, ...]]:
    """`--values NAME=KIND`: how an example tensor is filled (randint:LO,HI, ones, zeros, randn,
    rand, arange)."""
    name, sep, value = spec.partition("=")
    if not sep or not name.isidentifier():
        raise ArgumentError(f"malformed --values {spec!r}: expected NAME=KIND (KIND: randint:LO,HI, "
                            f"{', '.join(k for k in VALUE_KINDS if k != 'randint')})")
    kind, _, rest = value.strip().partition(":")
    if kind not in VALUE_KINDS:
        close = difflib.get_close_matches(kind, VALUE_KINDS, n=1)
        raise ArgumentError(f"unknown --values kind {kind!r} in {spec!r}: "
                            f"{f'did you mean {close[0]}? ' if close else ''}valid: randint:LO,HI, "
                            f"{', '.join(k for k in VALUE_KINDS if k != 'randint')}")
    if kind == "randint":
        try:
            lo, hi = (int(v) for v in rest.split(","))
            if hi <= lo:
                raise ValueError
        except ValueError:
            raise ArgumentError(f"malformed --values {spec!r}: expected {name}=randint:LO,HI with LO < HI "
                                f"(e.g. {name}=randint:0,100)") from None
        return name, ("randint", lo, hi)
    if rest:
        raise ArgumentError(f"malformed --values {spec!r}: {kind} takes no arguments")
    return name, (kind,)


def check_target(target: str, saved_graph_ok: bool = True) -> None:
    """The target's syntax: `path/to/file.py:NAME`, `package.module:NAME`, or a saved graph file."""
    where, sep, attr = target.rpartition(":")
    if sep and where.endswith(".py") and not os.path.exists(where):
        raise ArgumentError(f"no such file: {where}")
    if sep and attr and (where.endswith(".py") or where.replace(".", "").replace("_", "").isalnum()):
        if not attr.replace(".", "_").isidentifier():
            raise ArgumentError(f"target {target!r}: {attr!r} is not a Python name")
        return
    if os.path.exists(target):
        return
    stem, dot, name = target.rpartition(".")
    script = f"{stem.replace('.', os.sep)}.py"
    if dot and name.isidentifier() and (os.path.exists(script) or name[:1].isupper()):
        # NOTE: `mynet.TinyNet` meant a name in a module: the script if there is one, else the import path
        guess = f"{script}:{name}" if os.path.exists(script) else f"{stem}:{name}"
        raise ArgumentError(f"no such file: {target}; did you mean {guess}?")
    if target.endswith(".py"):
        raise ArgumentError(f"no such file: {target}")
    raise ArgumentError(f"no such file: {target} (a target is path/to/file.py:NAME, package.module:NAME, "
                        "or a saved graph file)")


def known_dims(shapes: Sequence[str], ints: Sequence[str]) -> dict[str, str]:
    """Each dim name the trace will have, with what it stands for: `x0` is `x.shape[0]`, an
    `--int n` is `n` (the names `ir.signature.dim_names` gives, without importing torch).

    >>> known_dims(["x=4,10"], ["n=3"])
    {'x0': 'x.shape[0]', 'x1': 'x.shape[1]', 'n': 'n'}
    """
    from guardsolve.ir.signature import dim_names

    params = [(name, "tensor", len(shape)) for name, shape in map(parse_shape, shapes)]
    params += [(spec.partition("=")[0].strip(), "int", 0) for spec in ints if spec.partition("=")[0].strip()]
    return {d: (f"{p.name}.shape[{i}]" if p.kind == "tensor" else p.name)
            for p in dim_names(params) for i, d in enumerate(p.dims)}


def check_dim(dim: str, dims: dict[str, str], flag: str) -> None:
    """`dim` names an input dim, or the one-line error says what dims are and the closest one.

    >>> check_dim("x5", known_dims(["x=4,10,16"], []), "--dynamic")
    Traceback (most recent call last):
    ...
    guardsolve.cli.args.ArgumentError: --dynamic x5: no such dim: x has rank 3 (dims: x0, x1, x2; x0 is x.shape[0]); did you mean x2?
    """
    if dim in dims:
        return
    tensors = {v.partition(".shape")[0] for v in dims.values() if ".shape[" in v}
    stem = dim.rstrip("0123456789").removesuffix("_")
    if dim in tensors:
        why = f"{dim} is a tensor; its dims are named by index"
        close = [d for d in dims if dims[d].startswith(f"{dim}.shape[")][:1]
    elif stem in tensors and stem != dim:
        rank = sum(1 for v in dims.values() if v.startswith(f"{stem}.shape["))
        why, close = f"{stem} has rank {rank}", [d for d in dims if dims[d] == f"{stem}.shape[{rank - 1}]"]
    else:
        lowered = {d.lower(): d for d in dims}
        why = f"no input named {stem or dim}"
        close = [lowered[c] for c in difflib.get_close_matches(dim.lower(), list(lowered), n=1)]
    first = next(iter(dims.items()), None)
    named = f"; {first[0]} is {first[1]}" if first and first[0] != first[1] else ""
    listed = ", ".join(dims) or "none"
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ArgumentError(f"{flag} {dim}: no such dim: {why} (dims: {listed}{named}){hint}")


RENDERED = (".svg", ".png", ".pdf")


def check_output(path: str | None, fmt: str) -> None:
    """`-o` for `--format dot`: a rendered picture needs Graphviz's `dot` on PATH."""
    if path is None or fmt != "dot":
        return
    ext = os.path.splitext(path)[1].lower()
    if ext in RENDERED and shutil.which("dot") is None:
        raise ArgumentError(f"-o {path}: rendering {ext} needs Graphviz's `dot` on PATH; install graphviz, "
                            f"or write the dot text with -o {os.path.splitext(path)[0]}.dot")
    if ext not in (*RENDERED, ".dot", ".gv", ""):
        raise ArgumentError(f"-o {path}: --format dot writes .dot, or renders .svg, .png or .pdf")


def check(args: Any) -> None:
    """Every argument that can be judged without torch: the first mistake raises."""
    check_target(args.target)
    for spec in args.shape:
        parse_shape(spec)
    if getattr(args, "dtype", None):
        parse_dtypes(args.dtype)
    for spec in getattr(args, "values", []) or []:
        parse_values(spec)
    for d in getattr(args, "dynamic", []) or []:
        if not d.isidentifier():
            raise ArgumentError(f"malformed --dynamic {d!r}: expected a dim name such as x0 (one per --dynamic)")
    if ":" in args.target and (args.shape or args.int):  # NOTE: a saved graph's dims are known once it is read
        dims = known_dims(args.shape, args.int)
        for d in getattr(args, "dynamic", []) or []:
            check_dim(d, dims, "--dynamic")
        for spec in getattr(args, "dims", []) or []:
            for item in spec.split(","):
                name = item.partition("=")[0].strip()
                if name.isidentifier():
                    check_dim(name, dims, "--dims")
    if getattr(args, "export_check", False) and not args.dynamic:
        raise ArgumentError("--export-check checks the --dynamic spec: give --dynamic DIM")
    check_output(getattr(args, "output", None), getattr(args, "format", ""))
