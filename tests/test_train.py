"""Training through compiled entries: `guarded(model, backend="inductor")` in grad mode.

A call in grad mode that reads a tensor requiring grad is served by a training variant: a
forward and a backward compiled by Inductor from one joint graph (AOTAutograd), behind the
entry's check. Each test trains a model through it and an eager copy side by side and compares
every step's loss, gradients, parameters and buffers (`testing.train_side_by_side`).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import guardsolve
from guardsolve.testing import random_program, train_side_by_side

TOL = 1e-4  # relative, over every loss, gradient, parameter and buffer


def _classifier() -> nn.Module:
    """A token classifier over [batch, length] ids: embedding, linear, layer norm, linear."""
    return nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 5))


def _token_batches(shapes: list[tuple[int, int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 50, (b, s), generator=gen), torch.randint(0, 5, (b, s), generator=gen))
            for b, s in shapes]


def _token_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_token_classifier_trains_as_eager_with_one_compile_per_size_class(optimizer: str) -> None:
    make_opt = ((lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if optimizer == "sgd"
                else (lambda p: torch.optim.AdamW(p, lr=1e-2)))
    shapes = [(4, 7), (3, 9), (8, 5), (1, 1), (4, 7), (2, 12), (1, 3)]
    worst, fast = train_side_by_side(_classifier, _token_batches(shapes), make_opt, _token_loss,
                                     lambda m: guardsolve.guarded(m, backend="inductor"))
    info = fast.cache_info()
    assert worst < TOL, worst
    assert info.eager_calls == 0, info.eager_reasons
    assert info.traces == 1
    # NOTE: sizes from 2 up share one variant; a size of 1 another (the backward's own guards)
    assert info.compiles <= 3, info.miss_reasons
    assert all(v.train for v in fast.entries[0].variants)


def test_batchnorm_in_train_mode_updates_its_statistics_once_per_step() -> None:
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randn(b, 3, s, s, generator=gen), torch.randint(0, 4, (b,), generator=gen))
               for b, s in [(4, 8), (3, 12), (8, 16), (2, 8), (4, 10), (2, 3)]]
    worst, fast = train_side_by_side(make, batches, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                     F.cross_entropy, lambda m: guardsolve.guarded(m, backend="inductor"))
    info = fast.cache_info()
    assert worst < TOL, worst
    assert info.eager_calls == 0, info.eager_reasons
    assert info.compiles == 1, info.miss_reasons  # NOTE: height and width stay symbolic
    bn = fast.fn[1]
    assert int(bn.num_batches_tracked) == len(batches)


def test_gradients_reach_inputs_and_retain_graph_allows_a_second_backward() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    fast = guardsolve.guarded(m, backend="inductor")
    for b in (5, 3):
        x = torch.randn(b, 4, requires_grad=True)
        y = fast(x)
        assert fast.last_call.how in ("traced", "compiled")
        y.sum().backward(retain_graph=True)
        first = x.grad.clone()
        y.sum().backward()  # NOTE: a second backward through the same compiled graph
        x_ref = x.detach().clone().requires_grad_(True)
        m(x_ref).sum().backward()
        assert torch.allclose(first, x_ref.grad, atol=1e-6)
        assert torch.allclose(x.grad, 2 * x_ref.grad, atol=1e-6)
    assert fast.cache_info().eager_calls == 0


def test_a_closure_over_a_trainable_module_keeps_its_autograd_history() -> None:
    torch.manual_seed(0)
    net = nn.Linear(6, 3)
    ref = nn.Linear(6, 3)
    ref.load_state_dict(net.state_dict())
    fast = guardsolve.guarded(lambda x: torch.relu(net(x)).sum(-1), backend="inductor")
    for b in (4, 7):
        x = torch.randn(b, 6)
        fast(x).sum().backward()
        torch.relu(ref(x)).sum(-1).sum().backward()
    assert torch.allclose(net.weight.grad, ref.weight.grad, atol=1e-5)
    assert fast.cache_info().eager_calls == 0


def test_a_replaced_parameter_is_the_one_trained() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    fast = guardsolve.guarded(m, backend="inductor")
    fast(torch.randn(3, 4)).sum().backward()
    m[0].weight = nn.Parameter(torch.randn(4, 4))  # NOTE: rebound, as a user's reset would
    x = torch.randn(5, 4)
    out = fast(x)
    assert torch.allclose(out, m(x), atol=1e-6)
    out.sum().backward()
    assert m[0].weight.grad is not None and m[0].weight.grad.abs().sum() > 0
    assert fast.cache_info().traces == 1


def test_inference_calls_are_served_by_an_inference_entry() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    fast = guardsolve.guarded(m, backend="inductor")
    fast(torch.randn(3, 4)).sum().backward()
    with torch.no_grad():
        y = fast(torch.randn(6, 4))
    assert not y.requires_grad
    trained, served = fast.entries[0], fast.entries[fast.last_call.entry]
    assert served is not trained and not served.train and not served.variants[0].train
    assert trained.train and trained.variants[0].train


def test_autocast_bfloat16_training_is_served_compiled() -> None:
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.float(), y)

    class Cast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.net(x)

    gen = torch.Generator().manual_seed(3)
    batches = [(torch.randn(b, 16, generator=gen), torch.randn(b, 4, generator=gen)) for b in (4, 7, 9)]
    worst, fast = train_side_by_side(Cast, batches, lambda p: torch.optim.SGD(p, lr=0.1), loss,
                                     lambda m: guardsolve.guarded(m, backend="inductor"))
    assert worst < 1e-2, worst  # NOTE: bfloat16's own rounding
    assert fast.cache_info().eager_calls == 0 and fast.cache_info().compiles == 1


@pytest.mark.parametrize("seed", [3, 11])
def test_random_programs_train_their_inputs_as_eager(seed: int) -> None:
    rng = random.Random(seed)
    name, fn, (a, b) = random_program(rng)
    fast = guardsolve.guarded(fn, backend="inductor")
    for scale in (1, 2):
        a1 = a.repeat(scale, 1).clone().requires_grad_(True)
        b1 = b.repeat(scale, 1).clone()
        ref = a1.detach().clone().requires_grad_(True)
        try:
            want = fn(ref, b1)
        except (RuntimeError, IndexError):
            continue  # NOTE: shapes eager rejects at this scale
        got = fast(a1, b1)
        assert torch.allclose(got, want, atol=1e-5), name
        cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(0))
        (got * cot).sum().backward()
        (want * cot).sum().backward()
        assert torch.allclose(a1.grad, ref.grad, atol=1e-5), name


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 36))
def test_random_programs_train_as_eager_many(seed: int) -> None:
    test_random_programs_train_their_inputs_as_eager(seed)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_transformers_train_as_eager(arch: str) -> None:
    transformers = pytest.importorskip("transformers")
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=128, n_positions=64, use_cache=False,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        make = lambda: transformers.GPT2LMHeadModel(cfg).train()  # noqa: E731
    else:
        cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                      vocab_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
        make = lambda: transformers.BertForMaskedLM(cfg).train()  # noqa: E731

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = make()

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, labels=ids).loss

    gen = torch.Generator().manual_seed(4)
    batches = [(torch.randint(0, 128, (b, s), generator=gen),) for b, s in [(2, 16), (3, 24), (4, 9), (2, 16), (8, 32)]]
    worst, fast = train_side_by_side(LM, batches, lambda p: torch.optim.AdamW(p, lr=1e-3), lambda loss: loss,
                                     lambda m: guardsolve.guarded(m, backend="inductor"))
    info = fast.cache_info()
    assert worst < TOL, worst
    assert info.eager_calls == 0, info.eager_reasons
    assert info.compiles == 1, info.miss_reasons


def test_dropout_under_fallback_random_draws_eagers_exact_values() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))
    ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))
    ref.load_state_dict(m.state_dict())
    fast = guardsolve.guarded(m, backend="inductor")
    with torch._inductor.config.patch(fallback_random=True):
        for b in (4, 7, 4):
            x = torch.randn(b, 16)
            torch.manual_seed(b)
            got = fast(x)
            torch.manual_seed(b)
            want = ref(x)
            assert torch.equal(got, want)  # NOTE: the traced call too: its draws are put back
            got.square().mean().backward()
            want.square().mean().backward()
            assert torch.allclose(m[0].weight.grad, ref[0].weight.grad, atol=1e-6)
    assert fast.cache_info().eager_calls == 0


def test_dropout_without_fallback_random_keeps_eagers_statistics() -> None:
    torch.manual_seed(0)
    m = nn.Dropout(0.25)
    w = nn.Parameter(torch.ones(1))
    fast = guardsolve.guarded(lambda x: m(x * w), backend="inductor")
    out = fast(torch.ones(200, 50))
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.75))
    out.sum().backward()
    assert w.grad is not None


_RESTART = """
import json, sys
import torch, guardsolve
torch.manual_seed(0)
nn = torch.nn
if sys.argv[2] == "conv":  # NOTE: channels-last convolutions and max pooling's backward as ATen's op
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1),
                      nn.Conv2d(8, 4, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    shape = lambda b, s: (b, 3, s + 3, s + 5)
else:
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 4))
    shape = lambda b, s: (b, s, 16)
fast = guardsolve.guarded(m, backend="inductor", cache_dir=sys.argv[1])
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(1)
losses = []
for b, s in [(4, 7), (3, 9), (8, 5), (4, 7)]:
    loss = fast(torch.randn(shape(b, s), generator=gen)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
info = fast.cache_info()
print(json.dumps({"losses": losses, "traces": info.traces, "compiles": info.compiles, "loaded": info.loaded,
                  "eager": info.eager_calls}))
"""


@pytest.mark.parametrize("model", ["mlp", "conv"])
def test_a_restarted_training_job_compiles_nothing_and_trains_the_same(tmp_path: Any, model: str) -> None:
    import json
    import subprocess
    import sys

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", _RESTART, str(tmp_path), model], capture_output=True, text=True,
                              timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["traces"] == 1 and first["compiles"] >= 1 and first["eager"] == 0
    if model == "mlp":
        assert first["compiles"] == 1  # NOTE: its one variant serves every shape
    assert second["traces"] == 0 and second["compiles"] == 0 and second["eager"] == 0
    assert second["loaded"] == first["compiles"]
    assert second["losses"] == first["losses"]


def test_a_conv_net_keeps_its_image_sizes_symbolic_through_the_backward() -> None:
    """Convolutions whose input needs a gradient (strided ones too): `convolution_backward` is
    lowered without reading its gradients' strides as ints (`jit/backward.py`,
    `conv_backward_layouts`), so one variant serves every image size, odd ones too, not one
    per size."""
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.ReLU(),
                             nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.ReLU(), nn.Conv2d(16, 16, 1, dilation=1),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))

    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(b, 3, s, s, generator=gen), torch.randint(0, 4, (b,), generator=gen))
               for b, s in [(4, 16), (6, 24), (4, 12), (8, 20), (2, 15), (2, 16), (3, 9)]]
    worst, fast = train_side_by_side(make, batches, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                     F.cross_entropy, lambda m: guardsolve.guarded(m, backend="inductor"))
    info = fast.cache_info()
    assert worst < TOL, worst
    assert info.eager_calls == 0 and info.compiles == 1, info.miss_reasons
    assert fast.last_call.how == "compiled"


def test_a_dense_conv_net_runs_channels_last_and_returns_eagers_layout() -> None:
    """Convolutions run on channels-last copies (`jit/layout.py`); a 4-D output (a per-pixel
    head) comes back with eager's contiguous strides, and every step trains as eager's, over
    image sizes that one variant serves."""
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.Conv2d(8, 4, 1))

    gen = torch.Generator().manual_seed(7)
    batches = [(torch.randn(b, 3, h, w, generator=gen), torch.randint(0, 4, (b, h, w), generator=gen))
               for b, h, w in [(2, 8, 8), (3, 12, 10), (2, 16, 6)]]
    worst, fast = train_side_by_side(make, batches, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                     F.cross_entropy, lambda m: guardsolve.guarded(m, backend="inductor"))
    assert worst < TOL, worst
    out = fast(torch.randn(2, 3, 9, 9))
    assert fast.last_call.how == "compiled" and out.is_contiguous() and out.requires_grad
    assert fast.cache_info().compiles == 1, fast.cache_info().miss_reasons


def test_second_order_gradients_need_autograd_eager() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(5, 4, requires_grad=True)
    compiled = guardsolve.guarded(m, backend="inductor")
    (gx,) = torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        gx.square().sum().backward()  # NOTE: PyTorch's own error: a compiled backward is not differentiable
    m.zero_grad()
    eager = guardsolve.guarded(m, backend="inductor", autograd="eager")
    (gx,) = torch.autograd.grad(eager(x).sum(), x, create_graph=True)
    gx.square().sum().backward()
    want = m[0].weight.grad.clone()
    m.zero_grad()
    (gx,) = torch.autograd.grad(m(x).sum(), x, create_graph=True)
    gx.square().sum().backward()
    assert torch.allclose(want, m[0].weight.grad)
    (why, count), = eager.cache_info().eager_reasons
    assert count == 1 and why == "autograd: grad mode is on and input 'input' requires grad (autograd='eager')"
    with pytest.raises(ValueError, match="autograd='sometimes'"):
        guardsolve.guarded(m, backend="inductor", autograd="sometimes")


def test_a_call_whose_trace_fails_midway_updates_buffers_once() -> None:
    """The trace ran batch norm (train mode) before the data-dependent branch it cannot trace; the
    call then runs eagerly: the trace's writes are undone first, so the statistics move once."""
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.bn(x)
            return y * 2 if y.sum() > 0 else y - 1  # NOTE: a branch on data: not traced

    for backend in ("replay", "inductor"):
        m, ref = Branchy(), Branchy()
        fast = guardsolve.guarded(m, backend=backend, value_guards=False)
        x = torch.randn(6, 4)
        with torch.no_grad():
            assert torch.equal(fast(x), ref(x))
        assert fast.last_call.how == "eager"
        assert int(m.bn.num_batches_tracked) == 1
        assert torch.equal(m.bn.running_mean, ref.bn.running_mean)
    # NOTE: by default the call is traced again with value guards: the statistics are written
    # before the decision on data, so the trace is not served in segments (nor replayed): each
    # call writes them once, as eager does
    for backend in ("replay", "inductor"):
        m, ref = Branchy(), Branchy()
        fast = guardsolve.guarded(m, backend=backend)
        for i in range(3):
            x = torch.randn(6, 4) + (1.0 if i % 2 else -1.0)
            with torch.no_grad():
                # NOTE: the first call's output is its trace's own run (eager's kernels, whose
                # reductions may split over threads otherwise: equal up to rounding)
                torch.testing.assert_close(fast(x), ref(x), rtol=1e-5, atol=1e-6)
            assert int(m.bn.num_batches_tracked) == i + 1
            torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean, rtol=1e-5, atol=1e-6)
        assert "writes bn_num_batches_tracked" in fast.last_call.why and "before a decision on data" in fast.last_call.why


def test_an_input_computed_upstream_passes_its_gradient_back() -> None:
    """The guarded model sits inside a larger graph: its input is a non-leaf tensor (an eager
    encoder's output), and the model is called twice before one backward."""
    torch.manual_seed(0)
    encoder, head = nn.Linear(5, 6), nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 1))
    ref_encoder, ref_head = nn.Linear(5, 6), nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 1))
    ref_encoder.load_state_dict(encoder.state_dict())
    ref_head.load_state_dict(head.state_dict())
    fast = guardsolve.guarded(head, backend="inductor")
    for b in (4, 9):
        a, c = torch.randn(b, 5), torch.randn(b, 5)
        (fast(encoder(a)) - fast(encoder(c))).square().mean().backward()
        (ref_head(ref_encoder(a)) - ref_head(ref_encoder(c))).square().mean().backward()
    for p, q in zip([*encoder.parameters(), *head.parameters()], [*ref_encoder.parameters(), *ref_head.parameters()]):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)
    assert fast.cache_info().eager_calls == 0 and fast.cache_info().compiles == 1


def test_autocast_training_of_a_layer_norm_classifier_is_compiled() -> None:
    """Under autocast, float32 gradients computed through bfloat16 ops are compared with eager's
    at bfloat16's tolerance, scaled by the tensor's largest value (they were rejected, and
    every call ran eagerly)."""
    torch.manual_seed(0)
    clf = _classifier()
    fast = guardsolve.guarded(clf, backend="inductor")
    for b, s in [(8, 12), (4, 30), (16, 7)]:
        ids = torch.randint(0, 50, (b, s))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fast(ids)
        out.float().sum().backward()
    info = fast.cache_info()
    assert info.eager_calls == 0 and info.compiles == 1, info.eager_reasons


def test_a_hook_on_an_intermediate_runs_eagerly_and_a_branch_on_requires_grad_is_eagers() -> None:
    class Hooked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.c = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.a(x))
            if h.requires_grad:  # NOTE: True in eager; a trace's wrapper would say False
                h.register_hook(lambda g: g * 0.5)
            return self.c(h)

    torch.manual_seed(0)
    m = Hooked()
    ref = Hooked()
    ref.load_state_dict(m.state_dict())
    fast = guardsolve.guarded(m, backend="inductor")
    x = torch.randn(3, 4)
    fast(x).sum().backward()
    ref(x).sum().backward()
    assert torch.allclose(m.a.weight.grad, ref.a.weight.grad)
    (why, _), = fast.cache_info().eager_reasons
    assert "Tensor.register_hook: the program hooks the gradient" in why and "h.register_hook" in why
    with torch.no_grad():
        fast(x)  # NOTE: no grad mode: eager's answer (False) is the trace's; served
    assert fast.last_call.how == "traced"

    class Branch(Hooked):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            return h * 2 if h.requires_grad else h  # NOTE: eager's answer, from autograd on meta tensors

    b = Branch()
    b_ref = Branch()
    b_ref.load_state_dict(b.state_dict())
    fast = guardsolve.guarded(b, backend="inductor")
    for n in (3, 5):
        x = torch.randn(n, 4)
        assert torch.allclose(fast(x), b_ref(x))
    assert fast.last_call.how == "compiled" and fast.cache_info().eager_calls == 0
    with torch.no_grad():
        assert torch.allclose(fast(x), b_ref(x))  # NOTE: False there: the other branch, another entry


@pytest.mark.parametrize("backend", ["replay", "inductor"])
def test_a_value_read_from_a_buffer_is_checked_at_each_call(backend: str) -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("n", torch.tensor(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (1.0 / float(self.n))

    m = Scaled()
    fast = guardsolve.guarded(m, backend=backend, value_guards=True)
    x = torch.ones(3)
    with torch.no_grad():
        assert torch.equal(fast(x), x)
        m.n.fill_(2)  # NOTE: in place: the same tensor, another value
        assert torch.equal(fast(x), x * 0.5)
        assert torch.equal(fast(x), x * 0.5)


def test_a_trace_inductor_pins_at_every_size_stops_compiling() -> None:
    """A GRU's kernels pin every size: after two such variants, calls of other shapes run
    eagerly (with the reason) instead of costing a compile each; the two keep serving theirs."""
    torch.manual_seed(0)

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.head = nn.GRU(8, 16, batch_first=True), nn.Linear(16, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0])

    m = Recurrent()
    fast = guardsolve.guarded(m, backend="inductor")
    shapes = [(4, 7), (3, 9), (2, 5), (5, 6), (4, 7)]
    how = []
    for b, s in shapes:
        x = torch.randn(b, s, 8)
        out = fast(x)
        how.append(fast.last_call.how)
        out.sum().backward()
    assert how == ["traced", "compiled", "eager", "eager", "compiled"]
    info = fast.cache_info()
    assert info.compiles == 2
    (why, count), = info.eager_reasons
    assert count == 2 and "its 2 compiled variants each pin every size" in why
