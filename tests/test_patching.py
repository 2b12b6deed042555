"""guardsolve/patching.py: patches of torch held by a count under one lock, undone in order."""

from __future__ import annotations

import threading
import types

import pytest

from guardsolve.patching import Patch, PatchTable, active, patched


def _doubled(f):  # type: ignore[no-untyped-def]
    return lambda x: 2 * f(x)


def test_overlapping_holders_in_two_threads_restore_the_original_once_both_are_out() -> None:
    """A enters, B enters, A leaves, B leaves: B keeps the patch after A left, and the original
    comes back only when B leaves (with try/finally alone, A's exit restored the original
    under B, and B's exit put A's wrapper back for good)."""
    ns = types.SimpleNamespace(f=lambda x: x + 1)
    original = ns.f
    table = PatchTable()
    p = Patch(ns, "f", _doubled)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def a() -> None:
        with patched(p, table=table):
            a_in.set()
            b_in.wait(5)
            seen["a"] = ns.f(3)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with patched(p, table=table):
            b_in.set()
            a_out.wait(5)
            seen["b after a left"] = ns.f(3)
            seen["count"] = active(ns, "f", table=table)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"a": 8, "b after a left": 8, "count": 1}
    assert ns.f is original and active(ns, "f", table=table) == 0


def test_an_inherited_class_attribute_is_inherited_again() -> None:
    class Base:
        def g(self) -> str:
            return "base"

    class Child(Base):
        pass

    with patched(Patch(Child, "g", lambda g: lambda self: "patched " + g(self))):
        assert Child().g() == "patched base" and "g" in Child.__dict__
    assert "g" not in Child.__dict__ and Child().g() == "base"


def test_a_class_attribute_is_given_raw_and_restored_raw() -> None:
    class C:
        @classmethod
        def make(cls) -> str:
            return cls.__name__

    raw = C.__dict__["make"]
    with patched(Patch(C, "make", lambda m: classmethod(lambda cls: "patched " + m.__func__(cls)))):
        assert C.make() == "patched C"
    assert C.__dict__["make"] is raw and C.make() == "C"


def test_items_are_patched_in_order_and_undone_in_reverse() -> None:
    class Logged(dict):  # type: ignore[type-arg]
        def __init__(self, *a: object) -> None:
            super().__init__(*a)
            self.writes: list[tuple[str, object]] = []

        def __setitem__(self, k: str, v: object) -> None:
            self.writes.append((k, v))
            super().__setitem__(k, v)

    table = Logged({"conv": "aten conv", "pool": "aten pool"})
    with patched(Patch(table, "conv", lambda v: f"ours over {v}", item=True),
                 Patch(table, "pool", lambda v: f"ours over {v}", item=True)):
        assert table["conv"] == "ours over aten conv" and table["pool"] == "ours over aten pool"
    assert table == {"conv": "aten conv", "pool": "aten pool"}
    assert [k for k, _ in table.writes] == ["conv", "pool", "pool", "conv"]


def test_two_different_patches_of_one_attribute_are_refused_and_nothing_is_left_installed() -> None:
    ns = types.SimpleNamespace(f=lambda: 1, g=lambda: 2)
    f, g = ns.f, ns.g
    table = PatchTable()
    with patched(Patch(ns, "f", lambda f: (lambda: 10)), table=table):
        with pytest.raises(RuntimeError, match=r"SimpleNamespace\.f is already patched by another patch"):
            with patched(Patch(ns, "g", lambda g: (lambda: 20)), Patch(ns, "f", _doubled), table=table):
                pass
        assert ns.g is g and ns.f() == 10  # the first patch of the refused block was undone
    assert ns.f is f and table.held == {}


def test_the_same_code_makes_the_same_patch_at_every_call() -> None:
    """A patch built inside a function (a new closure at each call) is one patch: two callers
    of the function share it rather than clash."""
    ns = types.SimpleNamespace(f=lambda: 1)
    table = PatchTable()

    def hold() -> Patch:
        return Patch(ns, "f", lambda f: (lambda: f() + 1))

    with patched(hold(), table=table), patched(hold(), table=table):
        assert ns.f() == 2 and active(ns, "f", table=table) == 2
    assert ns.f() == 1


def test_two_inductor_compiles_at_once_serve_eagers_results_and_leave_torch_as_it_was() -> None:
    """Two guarded functions compile with Inductor in two threads at once: each patch of torch a
    compile holds (the convolution's layout, Inductor's view strides and input asserts) is
    installed once, held while either compiles, and PyTorch's own is back when both are done."""
    import torch
    from torch._inductor import ir
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._subclasses import fake_impls

    import guardsolve

    own = {"select": torch._C._select_conv_backend, "create": ir.View.__dict__["create"],
           "asserts": PythonWrapperCodegen.__dict__["codegen_input_size_asserts"],
           "strides": fake_impls._compute_stride}
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval(),
            torch.nn.Sequential(torch.nn.Conv2d(3, 2, 1), torch.nn.Flatten(1)).eval()]
    xs = [torch.randn(2, 3, 8, 8), torch.randn(3, 3, 5, 5)]
    fast = [guardsolve.guarded(n, backend="inductor") for n in nets]
    start = threading.Barrier(2)
    got: dict[int, object] = {}

    def run(k: int) -> None:
        start.wait(10)
        with torch.no_grad():
            out = fast[k](xs[k])
        got[k] = (out, fast[k].last_call.how if fast[k].last_call else None)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    with torch.no_grad():
        for k in range(2):
            out, how = got[k]  # type: ignore[misc]
            assert how == "traced" and fast[k].entries[0].variants, (how, fast[k].cache_info())
            torch.testing.assert_close(out, nets[k](xs[k]))
            torch.testing.assert_close(fast[k](xs[k]), nets[k](xs[k]))
            assert fast[k].last_call.how == "compiled"
    assert torch._C._select_conv_backend is own["select"]
    assert ir.View.__dict__["create"] is own["create"]
    assert PythonWrapperCodegen.__dict__["codegen_input_size_asserts"] is own["asserts"]
    assert fake_impls._compute_stride is own["strides"]
    assert active(torch._C, "_select_conv_backend") == 0 and active(ir.View, "create") == 0
