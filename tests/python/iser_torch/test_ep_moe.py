"""iser.torch.EpMoE (P logical ranks): ON == OFF bit for bit, equal to a dense per-token
reference within a stated tolerance, and a READY failure (one rank's copy stalled past the
gate's timeout) leaves the output unchanged and is counted."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.gpu


def dense_reference(x, weights, ids, w13, w2):
    """sum_j w_j * down(silu(gate) * up) per token, in fp32."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for j in range(ids.shape[1]):
        e = ids[:, j].long()
        g, u = torch.einsum("th,tih->ti", x.float(), w13[e].float()).chunk(2, dim=-1)
        y = torch.einsum("ti,thi->th", F.silu(g) * u, w2[e].float())
        out += weights[:, j, None].float() * y
    return out


def make_layer(it, p, e, s, k, tokens, dtype, gen, **kw):
    he, inter = 64, 32
    w13 = (torch.randn(e, 2 * inter, he, generator=gen, device="cuda") * 0.1).to(dtype)
    w2 = (torch.randn(e, he, inter, generator=gen, device="cuda") * 0.1).to(dtype)
    router_w = torch.randn(e, he, generator=gen, device="cuda").to(dtype)
    hot = torch.zeros(e, device="cuda", dtype=dtype)
    hot[:3] = 4.0  # three experts of rank 0 run hot

    def router(x):
        logits = F.linear(x, router_w).float() + hot.float()
        w, i = torch.topk(torch.softmax(logits, -1), k, dim=-1)
        return w / w.sum(-1, keepdim=True), i

    layer = it.EpMoE(router, w13, w2, num_experts=e, num_slots=s, top_k=k, max_tokens=tokens,
                     logical=p, **kw)
    return layer, router, w13, w2


@pytest.mark.parametrize("num_ranks", [2, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_equals_off_and_reference(iser_torch, num_ranks, dtype):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(num_ranks)
    e, s, k, t = 4 * num_ranks, 2, 2, 32
    layer, router, w13, w2 = make_layer(it, num_ranks, e, s, k, t, dtype, gen)
    x = torch.randn(num_ranks * t, 64, generator=gen, device="cuda").to(dtype)
    on = layer(x)
    slot_on = layer.last_slot_ids.clone()
    off = layer(x, balance=False)
    assert torch.equal(on, off)
    weights, ids = router(x)
    ref = dense_reference(x, weights, ids, w13, w2)
    tol = 1e-4 if dtype == torch.float32 else 2e-2  # fp32: GEMM order; bf16: one rounding
    torch.testing.assert_close(on.float(), ref, atol=tol, rtol=tol)
    b = layer.balancer
    r_on = it.measured_imbalance(slot_on, num_ranks, b.slots_per_rank)
    r_off = it.measured_imbalance(b.home_slot_ids(ids.view(num_ranks, t, k)), num_ranks,
                                  b.slots_per_rank)
    assert r_on < r_off


def test_ready_failure_falls_back_home(iser_torch):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(3)
    p, e, s, k, t = 4, 16, 2, 2, 32
    layer, _, _, _ = make_layer(it, p, e, s, k, t, torch.bfloat16, gen, timeout_us=2000)
    x = torch.randn(p * t, 64, generator=gen, device="cuda").to(torch.bfloat16)
    off = layer(x, balance=False)
    b = layer.balancer
    stall = torch.cuda.Stream()
    # Rank 0 owns the hot experts, so it writes replicas; its copy waits ~50 ms behind a sleep
    # (queued after set_fault_stream, which synchronises the device).
    b.set_fault_stream(0, stall)
    with torch.cuda.stream(stall):
        torch.cuda._sleep(100_000_000)
    on = layer(x)
    torch.cuda.synchronize()
    b.set_fault_stream(0, None)
    st = b.stats()
    assert st["ready_failures"] >= 1 and st["fallback_slots"] >= 1, st
    assert torch.equal(on, off)
    # The next invocation balances normally again.
    again = layer(x)
    torch.cuda.synchronize()
    assert torch.equal(again, off)
    st2 = b.stats()
    assert st2["ready_failures"] == st["ready_failures"], st2
