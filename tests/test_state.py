"""An entry serves a call only while the state its trace read still holds (issue: never wrong).

Each case makes a call, changes the program's state, and calls again: the guarded result must
be eager's at that moment, with both backends where a compile is cheap enough."""

from __future__ import annotations

import os
import pathlib
import types

import torch
import torch.nn as nn
import pytest

import guardsolve

THRESH = 0.5
CFG = {"bias": 0.25, "scale": 2.0}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.temperature = 1.0
        self.use_softmax = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) / self.temperature
        return y.softmax(-1) if self.use_softmax else y


def _same(g: guardsolve.GuardedFunction, fn, *args) -> None:  # type: ignore[no-untyped-def]
    got, want = g(*args), fn(*args)
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


def gate(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x - THRESH)


def with_cfg(x: torch.Tensor) -> torch.Tensor:
    return x * CFG["scale"] + CFG["bias"]


@pytest.mark.parametrize("backend", ["replay"])
def test_every_change_gives_eagers_result(backend: str) -> None:
    global THRESH
    torch.manual_seed(0)
    m = Net().eval()
    g = guardsolve.guarded(m, backend=backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        _same(g, m, x)
        traces = g.cache_info().traces
        m.fc.weight = nn.Parameter(torch.randn(8, 8))  # a replaced weight: no new trace
        _same(g, m, x)
        m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True)
        _same(g, m, x)
        m.fc.weight.mul_(0.5)  # in place
        _same(g, m, x)
        assert g.cache_info().traces == traces and g.cache_info().hits == 3
        m.temperature = 4.0  # a float the forward divides by
        _same(g, m, x)
        assert "self.temperature == 1.0 failed (found 4.0)" in g.cache_info().miss_reasons[-1]
        m.use_softmax = False  # a flag it branches on
        _same(g, m, x)
        m.fc = nn.Linear(8, 8)  # a submodule swapped
        _same(g, m, x)
        m.temperature = 1  # an int where a float was: another value to Python code
        _same(g, m, x)

        gg = guardsolve.guarded(gate, backend=backend)
        _same(gg, gate, x)
        THRESH = 0.1
        try:
            _same(gg, gate, x)
            assert "gate.__globals__['THRESH'] == 0.5 failed (found 0.1)" in gg.cache_info().miss_reasons[-1]
        finally:
            THRESH = 0.5

        gc = guardsolve.guarded(with_cfg, backend=backend)
        _same(gc, with_cfg, x)
        CFG["bias"] = 1.0  # a dict entry
        try:
            _same(gc, with_cfg, x)
        finally:
            CFG["bias"] = 0.25


def test_closure_cells_and_nested_objects() -> None:
    torch.manual_seed(0)

    class Settings:
        def __init__(self) -> None:
            self.shift = 1.0

    settings = Settings()
    table = torch.randn(8)
    scale = 2.0

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * scale + table + settings.shift

    g = guardsolve.guarded(f)
    x = torch.randn(3, 8)
    with torch.no_grad():
        _same(g, f, x)
        scale = 3.0  # the cell rebound
        _same(g, f, x)
        table = torch.randn(8)  # a captured tensor rebound: no new trace
        traces = g.cache_info().traces
        _same(g, f, x)
        assert g.cache_info().traces == traces
        settings.shift = -1.0  # an attribute of a plain object the function reads
        _same(g, f, x)
        table = torch.randn(4, 2)  # another shape: eager's error, or its value
        with pytest.raises(RuntimeError):
            f(x)
        with pytest.raises(RuntimeError):
            g(x)


@pytest.mark.filterwarnings("ignore:.*grad mode is on")
def test_requires_grad_flip_and_closure_autograd() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    hidden = {"net": net}  # reached through a dict: found only by the trace's reads
    for fn in (lambda x: net(x), lambda x: hidden["net"](x)):
        g = guardsolve.guarded(fn)
        x = torch.randn(5, 8)
        for _ in range(2):
            out = g(x)
            assert out.grad_fn is not None
            loss = out.pow(2).sum() + sum(p.pow(2).sum() for p in net.parameters())
            net.zero_grad()
            loss.backward()
            got = [p.grad.clone() for p in net.parameters()]
            net.zero_grad()
            (net(x).pow(2).sum() + sum(p.pow(2).sum() for p in net.parameters())).backward()
            for a, b in zip(got, (p.grad for p in net.parameters())):
                assert torch.allclose(a, b, atol=1e-5)
        reasons = dict(g.cache_info().eager_reasons)
        assert sum(reasons.values()) == 2 and all("requires grad" in r for r in reasons)
        with torch.no_grad():  # inference calls are served
            _same(g, fn, x)
            _same(g, fn, x)
        assert g.cache_info().hits >= 1
    # a tensor that starts requiring grad after the entry was made: its state fails, eager runs
    net.requires_grad_(False)
    g = guardsolve.guarded(lambda x: net(x))
    x = torch.randn(5, 8)
    assert g(x).grad_fn is None and g(x).grad_fn is None and g.cache_info().hits == 1
    net[0].weight.requires_grad_(True)
    assert g(x).grad_fn is not None


def test_a_call_that_changes_its_state_runs_eagerly() -> None:
    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return x * self.calls

    m = Counting()
    g = guardsolve.guarded(m)  # NOTE: exploring other sizes must not run the writes again
    ref = Counting()
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3)
            assert torch.equal(g(x), ref(x))
    assert m.calls == ref.calls == 4
    assert g.cache_info().entries == 0
    assert any("the call changes state it reads: self.calls" in r for r, _ in g.cache_info().eager_reasons)


def test_explain_lists_the_state() -> None:
    m = Net().eval()
    g = guardsolve.guarded(m)
    with torch.no_grad():
        g(torch.randn(2, 8))
    text = g.entries[0].explain()
    assert "the state it read" in text
    assert "self.temperature == 1.0" in text and "self.use_softmax == True" in text
    assert "self.fc.weight: a float32 tensor [8, 8], requires_grad=True (the entry reads it at each call)" in text


def test_inductor_weight_swap_needs_no_compile_and_attributes_recompile() -> None:
    torch.manual_seed(0)
    m = Net().eval()
    g = guardsolve.guarded(m, backend="inductor")
    x = torch.randn(4, 8)
    with torch.no_grad():
        _same(g, m, x)
        assert g.cache_info().compiles == 1
        m.fc.weight = nn.Parameter(torch.randn(8, 8))
        _same(g, m, x)
        m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True)
        _same(g, m, x)
        assert (g.cache_info().compiles, g.cache_info().traces) == (1, 1)
        m.temperature = 4.0
        _same(g, m, x)
        m.use_softmax = False
        _same(g, m, x)
        assert g.cache_info().compiles == 3

        global THRESH
        gg = guardsolve.guarded(gate, backend="inductor")
        _same(gg, gate, x)
        THRESH = 0.1
        try:
            _same(gg, gate, x)
        finally:
            THRESH = 0.5
        assert gg.cache_info().compiles == 2


def test_globals_of_code_with_no_file_are_recorded() -> None:
    """`python -c`, a notebook cell, a doctest: code named `<...>` is the user's too."""
    ns: dict[str, object] = {"torch": torch, "K": 2.0}
    exec(compile("def f(x):\n    return x * K\n", "<string>", "exec"), ns)
    f = ns["f"]
    g = guardsolve.guarded(f)  # type: ignore[arg-type]
    x = torch.randn(3)
    assert torch.equal(g(x), x * 2.0)
    ns["K"] = 3.0
    assert torch.equal(g(x), x * 3.0)


def test_a_weight_that_starts_requiring_grad_in_place_is_seen() -> None:
    """The same tensor object, its `requires_grad` flipped in place: its entry no longer holds."""
    torch.manual_seed(0)
    net = nn.Linear(4, 4).requires_grad_(False)
    g = guardsolve.guarded(lambda x: torch.relu(net(x)))
    x = torch.randn(3, 4)
    assert g(x).grad_fn is None and g(x).grad_fn is None and g.cache_info().hits == 1
    net.weight.requires_grad_(True)
    assert not g.entries[0].state()
    assert "(found a float32 tensor [4, 4], requires_grad=True)" in (g.entries[0].state.failure() or "")
    out = g(x)
    assert out.grad_fn is not None
    out.sum().backward()
    want = net.weight.grad.clone()
    net.weight.grad = None
    torch.relu(net(x)).sum().backward()
    assert torch.allclose(want, net.weight.grad)


def test_a_weight_replaced_by_one_of_other_strides_is_named_by_its_strides() -> None:
    """The same values, dtype and shape, transposed strides: the entry no longer holds, and the
    miss says which part changed (the words for a tensor do not show strides)."""
    torch.manual_seed(0)
    net = nn.Linear(8, 16)
    g = guardsolve.guarded(lambda x: net(x))
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.equal(g(x), net(x))
        net.weight = nn.Parameter(net.weight.detach().t().contiguous().t())
        why = g.entries[0].state.failure() or ""
        assert "strides (1, 16) where the entry read (8, 1)" in why, why
        assert torch.allclose(g(x), net(x))


def test_a_c_object_read_by_the_function_is_not_saved_and_said_once(tmp_path: pathlib.Path) -> None:
    """functools.partial is a C type made at run time (a heap type): its bound arguments are not
    in its `__dict__`, so a loaded entry could not compare them. A second process with
    `partial(torch.mul, other=3)` was served the entry compiled with `other=2`."""
    import functools
    import warnings

    from guardsolve.jit.portable import _python_object

    scale = functools.partial(torch.mul, other=2)
    assert not _python_object(scale) and _python_object(types.SimpleNamespace()) is False
    f = lambda x: scale(x) + 1  # noqa: E731
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = guardsolve.guarded(f, backend="inductor", cache_dir=str(tmp_path))
        g(torch.randn(4, 3))
        g(torch.randn(5))
    said = [str(w.message) for w in caught if "cache_dir" in str(w.message)]
    assert len(said) == 1 and "partial" in said[0], said
    assert not [p for _, _, files in os.walk(str(tmp_path)) for p in files if p.endswith(".gse")]
