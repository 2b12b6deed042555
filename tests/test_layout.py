"""The package layout: one folder per pipeline stage, imports acyclic and pointing downward.

The import graph is read with `ast`, so it counts every import, also those inside functions;
only `if TYPE_CHECKING:` blocks are skipped (they never run, so they cannot form a cycle).
"""

from __future__ import annotations

import ast
import graphlib
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "guardsolve"

# Each stage may import its own modules and those of stages with a LOWER level, nothing else.
# NOTE: this is import order, not pipeline order: `Trace.guard_graph()` and replay's value
# bailouts use guards/, so guards sits below trace; `simplify()` accepts a `Trace`, so trace sits
# below solve; the `guarded()` JIT ties trace, solve, replay and Inductor (read through pytorch/) together above them.
LEVEL = {
    "errors": 0,   # errors.py: the exception hierarchy
    "patching": 0,  # patching.py: every patch of torch, held by a count under one lock
    "ir": 1,       # ir/: ops, Node/Graph, text form, the walker, concrete rules
    "guards": 2,   # guards/: guard_graph, normal form, Python-vs-z3 semantics
    "trace": 3,    # trace/: traced tensor, guarded ints, tracer, torch rules, replay
    "solve": 4,    # solve/: union-find, ordering, z3, witnesses, simplify, GuardSet
    "pytorch": 5,  # pytorch/: torch.export's and torch.compile's words in and out (dynamic, export_check, compile)
    "jit": 6,      # jit/: guarded() (cache.py), its backends (replay, Inductor) and its store; reads Inductor's guards through pytorch/
    "cli": 7,      # cli/: the command line and its reports
    "testing": 7,  # testing.py: random guard graphs for tests and benchmarks
    "api": 8,      # guardsolve/__init__.py (the public API) and __main__.py
}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str:
    parts = module.split(".")
    return "api" if len(parts) == 1 or parts[1] == "__main__" else parts[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The guardsolve modules that `source` (module `module`) imports, anywhere in the file."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                if f"{base}.{a.name}" in known:  # `from guardsolve.ir import kernels`
                    found.add(f"{base}.{a.name}")
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found - {module}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(paths)
    return {m: imports_of(p.read_text(), m, p.name == "__init__.py", known) for m, p in paths.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} ({stage(m)}) imports {d} ({stage(d)})" for m, deps in sorted(graph.items())
            for d in sorted(deps) if stage(d) != stage(m) and LEVEL[stage(d)] >= LEVEL[stage(m)]]


def test_every_module_belongs_to_a_stage() -> None:
    assert {m: stage(m) for m in import_graph() if stage(m) not in LEVEL} == {}


def test_import_graph_is_acyclic() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as e:
        # NOTE: graphlib lists each module before one that imports it; reversed, each imports the next.
        pytest.fail("import cycle: " + " imports ".join(reversed(e.args[1])))


def test_stages_import_only_downward() -> None:
    upward = upward_imports(import_graph())
    assert not upward, "imports that point up the stage order:\n" + "\n".join(upward)


def test_the_check_sees_imports_inside_functions_but_not_type_checking_blocks() -> None:
    known = {"guardsolve.errors", "guardsolve.ir", "guardsolve.ir.graph", "guardsolve.ir.kernels",
             "guardsolve.solve.simplify"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from guardsolve.ir import kernels\n"
        "from . import graph\n"
        "if TYPE_CHECKING:\n"
        "    from guardsolve.errors import GraphError\n"
        "def f():\n"
        "    from guardsolve.solve.simplify import simplify\n"
    )
    deps = imports_of(source, "guardsolve.ir.concrete", False, known)
    assert deps == {"guardsolve.ir.kernels", "guardsolve.ir.graph", "guardsolve.solve.simplify"}
    assert upward_imports({"guardsolve.ir.concrete": deps}) == [
        "guardsolve.ir.concrete (ir) imports guardsolve.solve.simplify (solve)"]


def test_solve_is_the_solver_alone() -> None:
    """PyTorch's own tracers' vocabulary (torch.export, torch.compile/Dynamo) lives in pytorch/:
    no module of solve/ names them, and pytorch/ holds the modules that do."""
    foreign = ("torch.export", "torch._dynamo", "torch.compile", "torch._guards", "symbolic_shapes")
    found = [f"{p.relative_to(PACKAGE)} names {w}" for p in sorted((PACKAGE / "solve").rglob("*.py"))
             for w in foreign if w in p.read_text()]
    assert found == []
    assert {"dynamic.py", "export_check.py"} <= {p.name for p in (PACKAGE / "pytorch").glob("*.py")}


def test_the_repository_root_holds_only_the_project() -> None:
    """Every file git tracks lies under one of the project's own top-level entries: a stray
    file (a shell redirect's output once landed as files named after guards) fails here."""
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    allowed = {".ci", ".gitignore", "README.md", "benchmarks", "docs", "examples", "guardsolve", "pyproject.toml", "tests"}
    stray = sorted({line.split("/", 1)[0] for line in out.stdout.splitlines()} - allowed)
    assert stray == [], f"tracked files outside the project's layout: {stray}"


def private_imports() -> list[str]:
    """Every `from guardsolve.X import _name` whose module is not the importer itself: what two
    modules share has a public name in the module that owns it."""
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    found: list[str] = []
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            if base.split(".")[0] != "guardsolve" or base == module:
                continue
            found += [f"{module}:{node.lineno} imports {base}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports()
    assert not found, "private names imported from another module:\n" + "\n".join(found)


# Files that may stay longer than MAX_LINES, each with its reason (at most 3).
MAX_LINES = 600
LONG_FILES: dict[str, str] = {}


def test_no_module_is_longer_than_its_limit() -> None:
    """One concept per file: no module of guardsolve/ passes MAX_LINES lines, except those
    LONG_FILES names with a reason (at most three)."""
    assert len(LONG_FILES) <= 3
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := p.read_text().count("\n")) > MAX_LINES}
    assert set(long) - set(LONG_FILES) == set(), f"modules over {MAX_LINES} lines: {long}"
    assert set(LONG_FILES) <= set(long), f"LONG_FILES names files that are short now: {set(LONG_FILES) - set(long)}"


def test_no_class_name_is_defined_twice() -> None:
    """A public class name means one thing in the package: `Recorder` or `Leaf` in two modules
    made a reader ask which."""
    where: dict[str, list[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(str(p.relative_to(PACKAGE)))
    assert {n: ps for n, ps in where.items() if len(ps) > 1} == {}


def test_the_jit_never_tests_its_backend_by_name() -> None:
    """Backends are objects (jit/backends/): the cache asks one what it does, it does not compare
    a backend's name."""
    pattern = re.compile(r"""backend(?:\.name)?\s*[!=]=|[!=]=\s*["'](?:inductor|replay)["']""")
    found = [f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}" for p in sorted((PACKAGE / "jit").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def torch_attribute_writes(source: str) -> list[int]:
    """The lines of `source` that assign an attribute or an item of something imported from
    torch (`torch._C.f = g`, `lowering.lowerings[op] = g`, `setattr(torch.nn.Module, ...)`)."""
    tree = ast.parse(source)
    torch_names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            torch_names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            torch_names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}

    def root(e: ast.expr) -> str | None:
        while isinstance(e, (ast.Attribute, ast.Subscript)):
            e = e.value
        return e.id if isinstance(e, ast.Name) else None

    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, (ast.Attribute, ast.Subscript)) and root(e) in torch_names:
                    lines.append(node.lineno)
    return sorted(set(lines))


# NOTE: V.graph is the graph this thread's compile lowers (torch._inductor.virtualized), not a
# function of torch: setting its layout flag for one lowering is that compile's own state.
PER_COMPILE_STATE = ("V.graph.",)


def test_only_patching_changes_torch() -> None:
    """Every change to torch's functions goes through guardsolve/patching.py (one lock, one count,
    undone in order): no other module assigns an attribute or item of torch."""
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name == "patching.py" and p.parent == PACKAGE:
            continue
        text = p.read_text().splitlines()
        found += [f"{p.relative_to(PACKAGE)}:{n}: {text[n - 1].strip()}" for n in torch_attribute_writes("\n".join(text))
                  if not text[n - 1].strip().startswith(PER_COMPILE_STATE)]
    assert found == [], "torch patched outside guardsolve/patching.py:\n" + "\n".join(found)


def test_torch_attribute_writes_finds_each_kind_of_write() -> None:
    source = (
        "import torch\n"
        "from torch._inductor import lowering\n"
        "x = torch.zeros(1)\n"
        "torch._C.f = 1\n"
        "lowering.lowerings[0], y = 2, 3\n"
        "setattr(torch.nn.Module, 'g', 4)\n"
        "y.attr = 5\n"
    )
    assert torch_attribute_writes(source) == [4, 5, 6]


def test_every_module_is_in_the_architecture_page() -> None:
    """docs/architecture.md names every module of guardsolve/ (its map of where each concept lives)."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.parent != PACKAGE and f"`{p.relative_to(PACKAGE)}`" not in page]
    assert missing == [], f"modules docs/architecture.md does not name: {missing}"
