"""An entry serves a call only while the state its trace read still holds (issue: never wrong).

Each case makes a call, changes the program's state, and calls again: the guarded result must
be eager's at that moment, with both backends where a compile is cheap enough."""

from __future__ import annotations

import os
import pathlib
import types
from typing import Any

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


# -- state a new user changed where the check did not look (found trying the project as one) ----------


class _Factor(nn.Module):
    factor = 2.0  # NOTE: a class attribute: `_Factor.factor = 5.0` changes every instance

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


_factor_forward = _Factor.forward


def test_class_attribute_defaults_and_partial_keywords_are_state() -> None:
    import functools

    m = _Factor()
    g = guardsolve.guarded(m)
    x = torch.ones(3)
    _same(g, m, x)
    _Factor.factor = 5.0
    try:
        _same(g, m, x)
    finally:
        _Factor.factor = 2.0
    lines = [line for e in g.entries for line in e.state.lines()]
    assert "_Factor.factor == 2.0" in lines and "_Factor.forward is <function>" in lines, lines

    def f(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return x * k

    gf = guardsolve.guarded(f)
    _same(gf, f, x)
    f.__defaults__ = (3.0,)  # NOTE: a new tuple: the old one, which the check held, is unchanged
    _same(gf, f, x)

    _Factor.forward = lambda self, x: x * self.factor + 1  # type: ignore[method-assign]  # NOTE: a rebound method
    try:
        _same(g, m, x)
    finally:
        del _Factor.forward
        _Factor.forward = _factor_forward  # type: ignore[method-assign]

    p = functools.partial(f, k=4.0)
    gp = guardsolve.guarded(p)
    _same(gp, p, x)
    p.keywords["k"] = 9.0
    _same(gp, p, x)


def test_an_attribute_of_the_programs_own_module_is_state(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gs_user_cfg.py").write_text("SCALE = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gs_user_cfg  # type: ignore[import-not-found]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * gs_user_cfg.SCALE

    f.__globals__["gs_user_cfg"] = gs_user_cfg
    g = guardsolve.guarded(f)
    x = torch.ones(3)
    _same(g, f, x)
    gs_user_cfg.SCALE = -1.0
    _same(g, f, x)
    assert g.cache_info().traces == 2


def test_a_tensor_whose_storage_is_replaced_in_place_is_read_where_it_lives_now() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    g = guardsolve.guarded(lin, backend="inductor")
    x = torch.randn(2, 4)
    with torch.no_grad():
        _same(g, lin, x)
        lin.weight.data = torch.randn(4, 4)  # NOTE: the same Parameter object, another storage
        _same(g, lin, x)
        assert g.last_call.how == "compiled" and g.cache_info().compiles == 1
        torch.utils.swap_tensors(lin.weight, nn.Parameter(torch.randn(4, 4)))
        _same(g, lin, x)
        lin.double()  # NOTE: `.data =` with another dtype: a new trace, never the float32 entry
        xd = x.double()
        _same(g, lin, xd)
        lin.weight.data = torch.randn(5, 4, dtype=torch.float64)  # NOTE: another shape
        lin.bias.data = torch.randn(5, dtype=torch.float64)
        _same(g, lin, xd)
    s = torch.ones(3)

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * s

    gs = guardsolve.guarded(scaled, backend="inductor")
    _same(gs, scaled, torch.ones(3))
    s.resize_(1)  # NOTE: a size changed in place, its storage kept: the artifact's input assert, then a trace
    s[0] = 2.0
    _same(gs, scaled, torch.ones(3))
    assert gs.cache_info().traces == 2


def test_inductor_asserts_the_layout_of_constants_not_of_the_checked_inputs() -> None:
    """The generated code asserts a constant's sizes and strides (a `resize_` in place is seen
    there, as above) and not an input's, which the variant's check holds before every call (24
    asserts, about a sixth of a small MoE call)."""
    import inspect

    s = torch.ones(3)

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * s + 1

    g = guardsolve.guarded(scaled, backend="inductor")
    _same(g, scaled, torch.ones(2, 3))
    call = g.entries[0].variants[0].run.__globals__["_art"]  # NOTE: Inductor's `call` (a plain graph)
    source = inspect.getsource(inspect.getmodule(call))
    asserts = [line.strip() for line in source.splitlines() if line.strip().startswith("assert_size_stride(")]
    assert len(asserts) == 1 and "(3, ), (1, )" in asserts[0], asserts
    _same(g, scaled, torch.ones(5, 3))
    _same(g, scaled, torch.ones(5, 6)[:, ::2])  # NOTE: other strides: the check refuses, another variant
    assert g.cache_info().compiles == 2


def test_arguments_that_share_memory_with_a_write_run_eagerly() -> None:
    def h(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        b.copy_(a * 2)
        return a + 1

    g = guardsolve.guarded(h)
    got = g(torch.ones(3), torch.ones(3))
    assert got.tolist() == [2.0, 2.0, 2.0]
    for make in (lambda x: (x, x), lambda x: (x[1:], x[:-1])):
        x, y = torch.arange(5.0), torch.arange(5.0)
        got, want = g(*make(x)), h(*make(y))
        assert torch.equal(got, want) and torch.equal(x, y)
        assert "share memory" in g.last_call.why
    # NOTE: the first call aliased: its trace is eager's run, and it keeps no entry
    g2 = guardsolve.guarded(h)
    x, y = torch.ones(3), torch.ones(3)
    assert torch.equal(g2(x, x), h(y, y))
    assert len(g2.entries) == 0


def test_an_input_that_is_a_buffer_the_function_writes_runs_eagerly() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cnt", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.cnt.add_(1)
            return x + self.cnt

    m, me = Counter(), Counter()
    g = guardsolve.guarded(m)
    with torch.no_grad():
        assert torch.equal(g(torch.ones(3)), me(torch.ones(3)))
        assert torch.equal(g(m.cnt), me(me.cnt)) and torch.equal(m.cnt, me.cnt)
        assert "share memory" in g.last_call.why


def test_untied_weights_are_two_tensors_again() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.head = nn.Embedding(30, 8), nn.Linear(8, 30, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(torch.tanh(self.emb(ids)))

    torch.manual_seed(0)
    m = Tied()
    g = guardsolve.guarded(m)
    ids = torch.randint(0, 30, (2, 4))
    with torch.no_grad():
        _same(g, m, ids)
        m.head.weight = nn.Parameter(m.emb.weight.detach() * 0.5)
        _same(g, m, ids)
        assert "were one tensor" in str(g.cache_info().miss_reasons[-1])


def test_what_a_failed_trace_drew_or_wrote_is_undone_before_eager_runs_it() -> None:
    gen = torch.Generator()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape, generator=gen)  # NOTE: a user generator: not traced

    g = guardsolve.guarded(f)
    gen.manual_seed(123)
    a, a_next = g(torch.zeros(4)), torch.rand(1, generator=gen)
    gen.manual_seed(123)
    b, b_next = f(torch.zeros(4)), torch.rand(1, generator=gen)
    assert torch.equal(a, b) and torch.equal(a_next, b_next)

    bn = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    gb = guardsolve.guarded(bn)
    with torch.no_grad(), pytest.raises(ValueError, match="more than 1 value per channel"):
        gb(torch.randn(1, 4))  # NOTE: eager raises after counting the batch: counted once
    assert bn[1].num_batches_tracked.item() == 1


def test_printing_a_tensor_runs_the_call_eagerly_and_a_method_no_trace_takes_too() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * len(str(x))

    def h(x: torch.Tensor) -> torch.Tensor:
        return x + float(x.numpy().sum())

    for fn in (f, h):
        g = guardsolve.guarded(fn)
        x = torch.ones(3)
        assert torch.equal(g(x), fn(x)) and g.last_call.how == "eager"


def test_an_output_no_replay_rebuilds_is_not_traced_again_at_its_signature() -> None:
    class Box:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

    def f(x: torch.Tensor) -> Any:
        return x * 2, Box(x + 1)

    g = guardsolve.guarded(f)
    x = torch.ones(8)
    for _ in range(3):
        out = g(x)
        assert torch.equal(out[0], x * 2) and torch.equal(out[1].t, x + 1)
    info = g.cache_info()
    assert info.traces == 1 and info.eager_calls == 2, info


def test_a_buffer_kept_under_no_grad_in_a_training_forward_runs_eagerly() -> None:
    import copy

    class Ema(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)
            self.register_buffer("ema", torch.zeros(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.l1(x)
            with torch.no_grad():
                self.ema.mul_(0.9).add_(h.mean(0) * 0.1)
            return self.l2(torch.relu(h) + self.ema)

    torch.manual_seed(0)
    me = Ema()
    mg = copy.deepcopy(me)
    g = guardsolve.guarded(mg, backend="inductor")
    for b in (4, 2):
        x = torch.randn(b, 6)
        me(x).sum().backward()
        g(x).sum().backward()
        assert torch.allclose(me.l1.weight.grad, mg.l1.weight.grad) and torch.equal(me.ema, mg.ema)
        assert not mg.ema.requires_grad
    assert "grad mode off" in g.last_call.why and g.cache_info().compiles == 0


def test_a_modules_dict_read_by_the_program_is_state() -> None:
    class Extra(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.__dict__.get("extra", 0.0)

    m = Extra()
    g = guardsolve.guarded(m)
    x = torch.ones(3)
    _same(g, m, x)
    m.extra = 7.0
    _same(g, m, x)
    m.extra = 2.0
    _same(g, m, x)


def test_a_program_comparing_type_with_tensor_runs_eagerly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if type(x) is torch.Tensor:  # NOTE: a traced tensor is a subclass: the trace's side differs
            return x * 3
        return x * 2

    g = guardsolve.guarded(f)
    for _ in range(2):
        assert torch.equal(g(torch.ones(3)), f(torch.ones(3))) and g.last_call.how == "eager"
    assert "type(x)" in g.last_call.why


def test_a_generator_of_the_programs_own_is_never_replayed() -> None:
    gen = torch.Generator()

    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(2, 3, generator=gen)  # NOTE: constant shape: was a constant of the trace

    g = guardsolve.guarded(noisy)
    for seed in (0, 1):
        gen.manual_seed(seed)
        got, after = g(torch.zeros(2, 3)), gen.get_state()
        gen.manual_seed(seed)
        assert torch.equal(got, noisy(torch.zeros(2, 3))) and torch.equal(after, gen.get_state())


def test_a_branch_on_a_global_mode_is_guarded() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if torch.are_deterministic_algorithms_enabled() else x * 3

    g = guardsolve.guarded(f)
    x = torch.ones(3)
    _same(g, f, x)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _same(g, f, x)
    finally:
        torch.use_deterministic_algorithms(before)
    with torch.inference_mode():
        h = guardsolve.guarded(lambda x: x * (2 if torch.is_inference_mode_enabled() else 3))
        assert torch.equal(h(x), x * 2)
    assert torch.equal(h(x), x * 3)


def test_a_hooks_own_state_and_a_configs_class_values_are_state() -> None:
    scale = [2.0]

    def make(s: float) -> Any:
        return lambda mod, i, o: o * s

    hook = make(2.0)
    m = nn.Linear(4, 4).eval()
    m.register_forward_hook(hook)
    g = guardsolve.guarded(m)
    x = torch.randn(3, 4)
    with torch.no_grad():
        _same(g, m, x)
        hook.__closure__[0].cell_contents = 5.0
        _same(g, m, x)

    class Cfg:
        scale = 2.0

    cfg = Cfg()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * cfg.scale

    gf = guardsolve.guarded(f)
    _same(gf, f, x)
    Cfg.scale = 3.0
    _same(gf, f, x)
    assert scale == [2.0]


def test_numpy_of_a_tensor_in_the_program_runs_eagerly() -> None:
    w = torch.tensor([2.0, 1.0, 1.0, 1.0])

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * torch.as_tensor(w.numpy())  # NOTE: was garbage: the array's memory, a constant, freed

    g = guardsolve.guarded(f)
    x = torch.ones(2, 4)
    assert torch.equal(g(x), f(x)) and "numpy()" in g.last_call.why
    assert torch.Tensor.numpy(w).sum() == 5.0  # NOTE: PyTorch's own method is back after the trace


def test_a_cache_dir_that_cannot_be_written_loses_the_entry_not_the_call(tmp_path: pathlib.Path) -> None:
    import warnings

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    m = nn.Linear(4, 4).eval()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        g = guardsolve.guarded(m, backend="inductor", cache_dir=str(blocker))
        x = torch.randn(3, 4)
        _same(g, m, x)
        _same(g, m, x)
    assert g.last_call.how == "compiled"
    assert any("not saved" in str(w.message) for w in caught)
