"""Programs that decide on tensor data, served as compiled segments.

    python examples/segments.py

`route` branches on a value `.item()` reads; `moe` routes tokens to experts with a `nonzero`
per expert and skips an expert no token chose; `moe_hit` loops over the experts some token chose,
as transformers' MoE layers do. Under `guarded(..., backend="inductor")` each
trace is cut where the program reads data: the tensor ops between two cuts are compiled at
symbolic sizes (a size `nonzero` counted is an input size of the next segment), the decisions
on data are checked between segments, and a call whose data takes another path continues in
that path's trace. Every call is compared with eager; at the end, how the calls were served and
the segments of one trace.

    guardsolve report examples/segments.py:route --shape x=4,8 --values x=ones --value-guards

prints the same cuts without compiling.
"""

from __future__ import annotations

import torch

import guardsolve


def route(x: torch.Tensor) -> torch.Tensor:
    if x.mean().item() > 0:
        return (x.relu() * 2).sum(-1)
    return (x.sigmoid() - 1).sum(-1)


def make_moe(d: int = 16, experts: int = 4) -> object:
    """Top-2 routing: per expert, the tokens routed to it (`nonzero`), gathered, run through
    the expert's weight, weighted and added back; an expert no token chose is skipped."""
    gate, weights = torch.randn(d, experts), torch.randn(experts, d, d) * 0.3

    def moe(x: torch.Tensor) -> torch.Tensor:
        top, idx = (x @ gate).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e in range(experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            h = x.index_select(0, tok) @ weights[e]
            out = out.index_add(0, tok, h * top[tok, slot].unsqueeze(-1))
        return out

    return moe


def make_hit_experts(d: int = 16, experts: int = 4) -> object:
    """Top-2 routing as transformers' MoE layers loop (OLMoE, Mixtral with their eager experts):
    over the experts some token chose (`for e in hit`, a `nonzero`), then `torch.where` of that
    expert's rows of the routing mask. Iterating over the `nonzero` needs its count as an int:
    each count is a path of its own."""
    gate, weights = torch.randn(d, experts), torch.randn(experts, d, d) * 0.3

    def moe_hit(x: torch.Tensor) -> torch.Tensor:
        top, idx = (x @ gate).softmax(-1).topk(2, dim=-1)
        mask = torch.nn.functional.one_hot(idx, experts).permute(2, 1, 0)
        hit = (mask.sum((-1, -2)) > 0).nonzero()
        out = torch.zeros_like(x)
        for e in hit:
            slot, tok = torch.where(mask[e[0]])
            h = x[tok] @ weights[e[0]]
            out = out.index_add(0, tok, h * top[tok, slot, None])
        return out

    return moe_hit


def main() -> None:
    torch.manual_seed(0)
    fast_route = guardsolve.guarded(route, backend="inductor")
    for n, sign in [(4, 1), (4, -1), (7, 1), (9, -1), (5, 1)]:
        x = torch.randn(n, 8).abs() * sign
        assert torch.allclose(fast_route(x), route(x), atol=1e-6)
    i = fast_route.cache_info()
    print(f"route: {i.traces} traces, {i.compiles} compiles, {i.hits} hits, {i.eager_calls} eager calls")
    print(fast_route.entries[0].variants[0].segments.explain())

    moe = make_moe()
    fast_moe = guardsolve.guarded(moe, backend="inductor")
    with torch.no_grad():
        for n in [8, 1, 3, 16, 2, 9, 1, 32, 64, 5]:
            x = torch.randn(n, 16)
            assert torch.allclose(fast_moe(x), moe(x), atol=1e-5)
    i = fast_moe.cache_info()
    print(f"moe: {i.traces} traces (paths), {i.compiles} compiles (segments shared by the paths), {i.hits} hits, "
          f"{i.eager_calls} eager calls, over token counts 1 to 64")

    moe_hit = make_hit_experts()
    fast_hit = guardsolve.guarded(moe_hit, backend="inductor")
    with torch.no_grad():
        for n in [8, 1, 16, 2, 32, 12, 1, 24]:
            x = torch.randn(n, 16)
            assert torch.allclose(fast_hit(x), moe_hit(x), atol=1e-5)
    i = fast_hit.cache_info()
    print(f"moe over the experts hit: {i.traces} traces (paths), {i.compiles} compiles, {i.hits} hits, "
          f"{i.eager_calls} eager calls")


if __name__ == "__main__":
    main()
