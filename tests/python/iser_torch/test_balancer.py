"""iser.torch.SlotBalancer with P logical ranks on one GPU: the plan and slot ids are the CPU
planner's, the plan validates, helper slots hold byte copies of their experts, OFF is home slots,
balancing lowers R, and balance() + ready() replay inside a CUDA graph."""

import pytest

from conftest import skewed_ids

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


def make_weights(num_experts, gen):
    """Two weight tensors of different dtypes: bf16 [E, 48, 32] and fp8 scales [E, 24]."""
    w = torch.randn(num_experts, 48, 32, generator=gen, device="cuda").to(torch.bfloat16)
    scales = torch.randn(num_experts, 24, generator=gen, device="cuda").to(torch.float8_e4m3fn)
    return [w, scales]


def decode_broadcasts(it, plan, p, e, s, policy):
    layout = it.PlanLayout(p, e, s, policy)
    b = int(plan[layout.NUM_BROADCASTS])
    rec = plan[layout.broadcasts : layout.broadcasts + 8 * b].view(b, 8).tolist()
    return [dict(expert=r[0], owner=r[1], begin=r[3], size=r[4], helper=r[5]) for r in rec]


def check_invocation(it, bal, ids, weights, policy):
    """The last balance() of `bal` on `ids` [P, T, k] against the CPU reference."""
    p, e, s = bal.num_ranks, bal.num_experts, bal.num_slots
    torch.cuda.synchronize()
    counts, plan = bal.counts().cpu(), bal.plan().cpu()
    assert torch.equal(counts, it.count(ids, e).cpu())
    ref = torch.ops.iser.plan_reference(counts, s, policy)
    layout = it.PlanLayout(p, e, s, policy)
    assert torch.equal(layout.meaningful(plan), layout.meaningful(ref))
    assert list(torch.ops.iser.validate_plan(plan, counts, s, policy)) == []
    h = bal.experts_per_rank
    for bc in decode_broadcasts(it, plan, p, e, s, policy):
        for m in range(bc["begin"], bc["begin"] + bc["size"]):
            for f, w in enumerate(weights):
                got = bal.slots(f)[m, h + bc["helper"]].view(torch.uint8)
                assert torch.equal(got, w[bc["expert"]].view(torch.uint8)), (bc, m, f)
    return plan, counts


@pytest.mark.parametrize("num_ranks", [2, 4, 8])
@pytest.mark.parametrize("policy", ["halo-q", "owner-home", "iser-stateless"])
def test_balance_matches_cpu_planner(iser_torch, num_ranks, policy):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(num_ranks)
    e, s, t, k = 8 * num_ranks, 2, 96, 4
    weights = make_weights(e, gen)
    bal = it.SlotBalancer(e, s, weights, max_tokens=128, top_k=k, logical=num_ranks,
                          policy=policy)
    # Home slots hold the layer's experts.
    h = bal.experts_per_rank
    for f, w in enumerate(weights):
        assert torch.equal(bal.slots(f)[:, :h].reshape(w.shape).view(torch.uint8),
                           w.view(torch.uint8))
    reduced = 0
    for step in range(4):
        ids = skewed_ids(gen, 1, num_ranks, t - 16 * (step % 2), k, e, "cuda", alpha=1.2)[0]
        slot_ids = bal.balance(ids)
        bal.ready()
        plan, counts = check_invocation(it, bal, ids, weights, policy)
        for r in range(num_ranks):
            want = torch.ops.iser.rewrite_reference(plan, counts, ids[r].cpu(), r, s, policy)
            assert torch.equal(slot_ids[r].cpu(), want), f"rank {r} step {step}"
        off = bal.balance(ids, enabled=False)
        bal.ready()  # nothing to wait for
        assert torch.equal(off, bal.home_slot_ids(ids))
        r_on = it.measured_imbalance(slot_ids, num_ranks, bal.slots_per_rank)
        r_off = it.measured_imbalance(off, num_ranks, bal.slots_per_rank)
        assert r_on <= r_off
        reduced += r_on < r_off
    assert reduced >= 3, "skewed routing should be balanced in most steps"
    st = bal.stats()
    assert st["fallback_slots"] == 0 and st["ready_failures"] == 0 and st["plan_status"] == 0


def test_cuda_graph_replay(iser_torch):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(5)
    p, e, s, t, k = 4, 32, 2, 64, 4
    weights = make_weights(e, gen)
    bal = it.SlotBalancer(e, s, weights, max_tokens=t, top_k=k, logical=p)
    static = skewed_ids(gen, 1, p, t, k, e, "cuda")[0]
    bal.balance(static)  # eager warm-up
    bal.ready()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        slot_ids = bal.balance(static)
        bal.ready()
        helper = bal.slots(0)[:, bal.experts_per_rank :].clone()
    for _ in range(4):
        fresh = skewed_ids(gen, 1, p, t, k, e, "cuda")[0]
        static.copy_(fresh)
        graph.replay()
        plan, counts = check_invocation(it, bal, fresh, weights, "halo-q")
        for r in range(p):
            want = torch.ops.iser.rewrite_reference(plan, counts, fresh[r].cpu(), r, s, "halo-q")
            assert torch.equal(slot_ids[r].cpu(), want)
        assert torch.equal(helper, bal.slots(0)[:, bal.experts_per_rank :])
    # Eager calls continue after the replays (device generations stay in step).
    bal.balance(static)
    bal.ready()
    check_invocation(it, bal, static, weights, "halo-q")
    assert bal.stats()["ready_failures"] == 0


def test_bad_arguments(iser_torch):
    it = iser_torch
    w = [torch.zeros(16, 8, device="cuda")]
    with pytest.raises(ValueError, match="exactly one"):
        it.SlotBalancer(16, 2, w, max_tokens=8, top_k=2)
    with pytest.raises(ValueError, match="first dimension must be 16"):
        it.SlotBalancer(16, 2, [torch.zeros(8, 8, device="cuda")], max_tokens=8, top_k=2,
                        logical=2)
    with pytest.raises(RuntimeError, match="transport 'copy-engine'"):
        it.SlotBalancer(16, 2, w, max_tokens=8, top_k=2, logical=2, transport="copy-engine")
    with pytest.raises(RuntimeError, match="policy 'resident'"):
        it.SlotBalancer(16, 2, w, max_tokens=8, top_k=2, logical=2, policy="resident")
    bal = it.SlotBalancer(16, 2, w, max_tokens=8, top_k=2, logical=2)
    with pytest.raises(RuntimeError, match="num_tokens = 9"):
        bal.balance(torch.zeros(2, 9, 2, dtype=torch.int32, device="cuda"))
    with pytest.raises(RuntimeError, match="must be \\[2, num_tokens, top_k\\]"):
        bal.balance(torch.zeros(3, 8, 2, dtype=torch.int32, device="cuda"))
