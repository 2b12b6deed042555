"""A restart: a new process serves saved Inductor entries without importing Inductor's compiler.

The first process (this one) compiles a small MLP with `cache_dir`; a second process (a
subprocess, with an empty Inductor cache directory) loads the entry and serves its calls with
no trace and no compile, running Inductor's generated code and kernels (`jit/kernels.py`).
Where that does not apply (another CPU, a kernel that does not load) the artifact is loaded
through Inductor instead, with the reason.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

import guardsolve
from guardsolve.jit import kernels
from guardsolve.jit.kernels import NotDirect

ROOT = pathlib.Path(__file__).parent.parent


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, Any]:
    """A cache directory holding the MLP's one entry, and its variant as compiled here."""
    folder = tmp_path_factory.mktemp("cache")
    fast = guardsolve.guarded(_mlp(), backend="inductor", cache_dir=str(folder))
    with torch.no_grad():
        fast(torch.randn(8, 16))
    assert fast.cache_info().compiles == 1
    return folder, fast.entries[0].variants[0]


SECOND = textwrap.dedent("""
    import json, sys
    import torch, guardsolve
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    fast = guardsolve.guarded(m, backend="inductor", cache_dir=sys.argv[1])
    same = []
    with torch.no_grad():
        for b in (8, 1, 0, 5):
            x = torch.randn(b, 16)
            same.append(torch.allclose(fast(x), m(x), atol=1e-5))
        first = fast.cache_info()
        modules = sorted(n for n in ("torch._inductor", "torch._inductor.compile_fx", "torch._dynamo", "sympy")
                         if n in sys.modules)
        v = fast.entries[0].variants[0]
        strided = v.check(torch.randn(3, 32)[:, ::2])  # NOTE: strides Inductor did not compile for
        m[2].weight = torch.nn.Parameter(torch.randn(8, 32))  # NOTE: a swapped weight: served, no compile
        x = torch.randn(3, 16)
        same.append(torch.allclose(fast(x), m(x), atol=1e-5))
    i = fast.cache_info()
    print(json.dumps(dict(traces=i.traces, compiles=i.compiles, loaded=i.loaded, hits=i.hits, same=same,
                          modules=modules, strided=strided, reasons=list(i.miss_reasons),
                          first=[first.traces, first.compiles, first.hits])))
""")


def test_a_second_process_serves_the_saved_entry_without_importing_inductor(
        saved: tuple[pathlib.Path, Any], tmp_path: pathlib.Path) -> None:
    """The second process, with Inductor's own cache directory empty, loads the entry and serves
    batches 8, 1, 0 and 5 and a swapped weight with 0 traces and 0 compiles, equal to eager;
    torch._inductor (compile_fx included), torch._dynamo and sympy are never imported, nothing
    is written to Inductor's cache, and the loaded check still rejects strides it was not
    compiled for."""
    folder, _ = saved
    empty = tmp_path / "inductor-cache"
    empty.mkdir()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(empty), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SECOND, str(folder)], capture_output=True, text=True, timeout=600,
                         env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["first"] == [0, 0, 4] and (r["traces"], r["compiles"], r["loaded"], r["hits"]) == (0, 0, 1, 5), r
    assert all(r["same"]), r
    assert r["modules"] == [], r  # NOTE: no compiler, no Dynamo: only torch and what the code needs
    assert r["strided"] is False
    assert not any("through Inductor" in m or "ignored" in m for m in r["reasons"]), r["reasons"]
    assert list(empty.iterdir()) == []


def test_where_the_kernels_do_not_apply_the_artifact_loads_through_inductor(
        saved: tuple[pathlib.Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """As if on another CPU (one lacking a feature the kernels were built with): the entry loads
    through Inductor's own `CompiledArtifact.load`, serves with no trace and no compile, and the
    reason is in `miss_reasons`."""
    folder, variant = saved
    assert isinstance(variant.direct, dict)
    machine, cpu = kernels._cpu()
    monkeypatch.setattr(kernels, "_cpu", lambda: (machine, cpu - {sorted(variant.direct["cpu"])[0]}))
    m = _mlp()
    fast = guardsolve.guarded(m, backend="inductor", cache_dir=str(folder))
    with torch.no_grad():
        for b in (4, 1):
            x = torch.randn(b, 16)
            assert torch.allclose(fast(x), m(x), atol=1e-5)
    i = fast.cache_info()
    assert (i.traces, i.compiles, i.loaded, i.hits) == (0, 0, 1, 2)
    assert any("loaded through Inductor's compiler" in r and "built for another CPU" in r for r in i.miss_reasons), \
        i.miss_reasons


def test_a_direct_load_refuses_what_was_not_saved(saved: tuple[pathlib.Path, Any]) -> None:
    """`kernels.load` raises NotDirect (never runs something else) for a library that does not
    load, for code that builds a kernel other than the saved one, and for another machine; the
    saved data itself loads and equals Inductor's own call."""
    _, variant = saved
    direct = variant.direct
    call = kernels.load(direct)
    args = [torch.randn(5, 16), *(p.detach() for p in _mlp().parameters())]
    want = variant.run.__globals__["_art"](list(args))
    assert torch.equal(call(list(args))[0], want[0])
    (key, (entry, data)), = direct["kernels"].items()
    with pytest.raises(NotDirect, match="do not load here"):
        kernels.load({**direct, "kernels": {key: (entry, b"not a shared library")}})
    with pytest.raises(NotDirect, match="builds a kernel that was not saved"):
        kernels.load({**direct, "source": direct["source"].replace("clamp_min", "clamp_max")})
    with pytest.raises(NotDirect, match="built for another CPU"):
        kernels.load({**direct, "machine": "riscv128"})


def test_a_library_loaded_again_is_mapped_once(saved: tuple[pathlib.Path, Any]) -> None:
    """Loading the same saved kernels again (an entry offered to many programs, a process that
    builds many guarded functions on one `cache_dir`) imports no new copy of the library: each
    copy stayed mapped for good, and 150 programs reached the kernel's map limit (a segfault)."""
    _, variant = saved
    direct = variant.direct

    def mapped() -> int:
        with open("/proc/self/maps") as f:
            return sum("guardsolve_kernel_" in line for line in f)

    first = kernels.load(direct)
    before = mapped()
    again = [kernels.load(direct) for _ in range(5)]
    assert mapped() == before > 0
    args = [torch.randn(3, 16), *(p.detach() for p in _mlp().parameters())]
    assert all(torch.equal(c(list(args))[0], first(list(args))[0]) for c in again)


def test_the_standins_match_inductors_names() -> None:
    """Each stand-in replaces a name Inductor's modules still have (a torch upgrade that renames
    one fails here, not in a restart); `_align` computes what Inductor's does."""
    for module, names in kernels.standins(lambda key: None, {}).items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name}"
    from torch._inductor.utils import _align

    assert all(kernels._align(n) == _align(n) for n in range(0, 4096, 7))


_SCRIPT_MODEL = '''
import json, sys
import torch, guardsolve


class Net(torch.nn.Module):
    scale = 2.0  # NOTE: read from the class: a leaf whose root is the module's class

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def run(cache_dir: str) -> None:
    torch.manual_seed(0)
    g = guardsolve.guarded(Net().eval(), backend="inductor", cache_dir=cache_dir)
    with torch.no_grad():
        out = g(torch.ones(2, 4))
    i = g.cache_info()
    print(json.dumps({"traces": i.traces, "loaded": i.loaded, "out": out.tolist()}))


if __name__ == "__main__":
    run(sys.argv[1])
'''


def test_a_scripts_model_class_is_found_where_another_process_imports_it(tmp_path: pathlib.Path) -> None:
    """A model class defined in a script is `__main__.Net` where the script runs and `net.Net`
    where a server imports it: the saved entry reads the class by the module's place (its
    type's method order), and its methods by name and code."""
    (tmp_path / "net.py").write_text(_SCRIPT_MODEL)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}
    cache = str(tmp_path / "cache")

    def last(cmd: list[str]) -> dict[str, Any]:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = last([sys.executable, str(tmp_path / "net.py"), cache])
    second = last([sys.executable, "-c", f"import net; net.run({cache!r})"])
    assert first["traces"] == 1 and second["traces"] == 0 and second["loaded"] == 1, (first, second)
    assert second["out"] == first["out"]


def _keeps_flag(flag: bool = True) -> Any:
    """A decorator whose wrapper reads its own default and the wrapped function's attribute, as
    transformers' decorators of `forward` do."""
    def wrap(func: Any) -> Any:
        def inner(self: Any, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
            return func(self, x) * scale if flag and getattr(func, "scaled", True) else func(self, x)
        return inner
    return wrap


def _passes(func: Any) -> Any:
    def outer(self: Any, x: torch.Tensor) -> torch.Tensor:
        return func(self, x)
    return outer


class _Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    @_passes
    @_keeps_flag()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_a_state_check_through_a_decorated_forward_is_saved_and_found_again() -> None:
    """What the wrappers of a decorated `forward` hold (their cells, an inner wrapper's defaults,
    the wrapped function's attributes) is named by where the module's class holds it, so the
    entry can be saved; the rebuilt check holds, and fails where a default it read changed."""
    from guardsolve.jit.portable import restore_state, state_spec
    from guardsolve.jit.store import dumps, loads
    from guardsolve.trace.state import StateCheck, recording

    m = _Decorated()
    with torch.no_grad(), recording(m) as rec:
        m(torch.ones(2, 3))
    spec = state_spec(StateCheck.of(rec), m)  # NOTE: raised NotPortable ("<closure func>") before
    assert any(how[0] == "class_cell" for _, how in spec["derive"])
    check = restore_state(loads(dumps(spec)), m)  # NOTE: as the store writes and reads it
    assert check()
    inner = _Decorated.forward.__closure__[0].cell_contents
    inner.__defaults__ = (3.0,)
    try:
        assert not check()
    finally:
        inner.__defaults__ = (2.0,)
    assert check()
