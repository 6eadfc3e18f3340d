"""torch.ops.iser.{count, plan, rewrite, plan_rewrite} == the C++ CPU planner, bit for bit, on
random skewed routing (>= 10,000 invocations over P = 2..72, every GPU-planned policy), under
torch.compile and inside a CUDA graph."""

import os

import pytest

torch = pytest.importorskip("torch")

from conftest import skewed_ids

pytestmark = pytest.mark.gpu

# ISER_TEST_SCALE < 1 shrinks the random sweep (compute-sanitizer runs).
SCALE = float(os.environ.get("ISER_TEST_SCALE", "1"))

POLICIES = ["halo-q", "owner-home", "absorb", "halo-q-owner-in", "iser-stateless"]
# (P, E, S, top_k, tokens per rank, invocations)
CONFIGS = [
    (2, 8, 1, 2, 32, 800),
    (2, 16, 2, 4, 64, 600),
    (3, 12, 2, 2, 32, 700),
    (4, 16, 2, 2, 64, 800),
    (4, 64, 4, 6, 64, 600),
    (5, 20, 2, 2, 32, 600),
    (6, 24, 3, 4, 32, 600),
    (7, 28, 2, 2, 16, 600),
    (8, 64, 2, 8, 64, 800),
    (8, 256, 4, 8, 32, 600),
    (12, 48, 3, 2, 32, 500),
    (16, 128, 4, 4, 32, 600),
    (16, 256, 8, 8, 16, 500),
    (24, 96, 4, 2, 16, 500),
    (32, 256, 4, 8, 16, 500),
    (64, 256, 4, 4, 8, 400),
    (72, 288, 4, 2, 8, 400),
]


def reference_counts(ids, num_experts):
    flat = ids.reshape(-1, ids.shape[-2] * ids.shape[-1]).long()
    out = torch.zeros(flat.shape[0], num_experts + 1, dtype=torch.int32, device=ids.device)
    out.scatter_add_(1, torch.where(flat >= 0, flat, num_experts), torch.ones_like(flat, dtype=torch.int32))
    return out[:, :num_experts].reshape(*ids.shape[:-2], num_experts)


def meaningful_mask(layout, words):
    """Per plan row: header + loads, the B records (fields 0..6) and quota rows, as a masked
    copy (everything else zero) so that two plan batches compare with one equality."""
    n = words.shape[0]
    b = words[:, layout.NUM_BROADCASTS].long()
    mb, p = layout.max_broadcasts, layout.num_ranks
    live = torch.arange(mb)[None, :] < b[:, None]
    head = words[:, : layout.loads + p]
    rec = words[:, layout.broadcasts : layout.broadcasts + mb * 8].reshape(n, mb, 8)[:, :, :7]
    quo = words[:, layout.quotas : layout.quotas + mb * p].reshape(n, mb, p)
    return head, torch.where(live[..., None], rec, 0), torch.where(live[..., None], quo, 0)


def same_plan(layout, a, b):
    return all(torch.equal(x, y) for x, y in zip(meaningful_mask(layout, a[None]),
                                                  meaningful_mask(layout, b[None])))


def test_bit_exact_against_cpu_planner(iser_torch):
    it = iser_torch
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(2025)
    checked = 0
    for idx, (p, e, s, k, t, n) in enumerate(CONFIGS):
        n = max(2, int(n * SCALE))
        policy = POLICIES[idx % len(POLICIES)]
        ids = skewed_ids(gen, n, p, t, k, e, dev)
        counts = it.count(ids, e)
        assert torch.equal(counts, reference_counts(ids, e)), (p, e, s)
        plans = it.plan(counts, s, policy)
        counts_cpu, plans_cpu = counts.cpu(), plans.cpu()
        ref = torch.ops.iser.plan_reference(counts_cpu, s, policy)
        layout = it.PlanLayout(p, e, s, policy)
        assert plans.shape == (n, layout.total_words)
        assert (plans_cpu[:, 0] == 0).all(), "a GPU plan carries a status"
        for got, want, what in zip(meaningful_mask(layout, plans_cpu),
                                   meaningful_mask(layout, ref), ["header", "records", "quotas"]):
            bad = (got != want).reshape(n, -1).any(dim=1).nonzero()
            assert bad.numel() == 0, f"P={p} E={e} S={s} {policy}: {what} differ, plan {bad[0].item()}"
        ids_cpu = ids.cpu()
        for i in range(n):
            r1, r2 = i % p, (i + 1) % p
            got = it.rewrite(plans[i], counts[i], ids[i, r1], r1, s, policy)
            want = torch.ops.iser.rewrite_reference(plans_cpu[i], counts_cpu[i], ids_cpu[i, r1], r1, s, policy)
            assert torch.equal(got.cpu(), want), f"rewrite P={p} E={e} S={s} {policy} inv {i} rank {r1}"
            fused_plan, fused = it.plan_rewrite(counts[i], ids[i, r2], r2, s, policy)
            want2 = torch.ops.iser.rewrite_reference(plans_cpu[i], counts_cpu[i], ids_cpu[i, r2], r2, s, policy)
            assert torch.equal(fused.cpu(), want2), f"plan_rewrite P={p} inv {i} rank {r2}"
            assert same_plan(layout, fused_plan.cpu(), plans_cpu[i]), f"plan_rewrite plan P={p} inv {i}"
        checked += n
    print(f"GPU ops == CPU planner on {checked} random invocations")
    if SCALE >= 1.0:
        assert checked >= 10_000


def test_int64_ids_and_errors(iser_torch):
    it = iser_torch
    ids = torch.tensor([[[0, 1], [2, 3]], [[1, 0], [-1, 3]]], device="cuda")  # int64
    counts = it.count(ids, 4)
    assert counts.tolist() == [[1, 1, 1, 1], [1, 1, 0, 1]]
    with pytest.raises(RuntimeError, match="rank = 5"):
        it.plan_rewrite(counts, ids[0], 5, 1)
    with pytest.raises(RuntimeError, match="policy 'iser-x'"):
        it.plan(counts, 1, "iser-x")
    with pytest.raises(RuntimeError, match="for iser use iser-stateless"):
        it.plan(counts, 1, "iser")  # resident: the GPU planner keeps no previous plan
    with pytest.raises(RuntimeError, match="CPU"):
        it.count(ids.cpu(), 4)  # no CPU kernel: the dispatcher names the backend


def pipeline(it, ids, num_experts, num_slots, policy):
    counts = it.count(ids, num_experts)
    plan, slots = it.plan_rewrite(counts, ids[1], 1, num_slots, policy)
    return counts, plan, slots, it.rewrite(plan, counts, ids[0], 0, num_slots, policy)


def test_torch_compile(iser_torch):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(7)
    ids = skewed_ids(gen, 1, 8, 64, 4, 64, "cuda")[0]
    eager = pipeline(it, ids, 64, 2, "halo-q")
    compiled = torch.compile(lambda x: pipeline(it, x, 64, 2, "halo-q"), fullgraph=True)
    for a, b in zip(eager, compiled(ids)):
        assert torch.equal(a, b)


def test_cuda_graph_capture(iser_torch):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(11)
    static = skewed_ids(gen, 1, 4, 128, 4, 32, "cuda")[0]
    pipeline(it, static, 32, 2, "owner-home")  # builds the planner outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pipeline(it, static, 32, 2, "owner-home")
    for _ in range(3):
        fresh = skewed_ids(gen, 1, 4, 128, 4, 32, "cuda")[0]
        static.copy_(fresh)
        graph.replay()
        want = pipeline(it, fresh, 32, 2, "owner-home")
        for a, b in zip(out, want):
            assert torch.equal(a, b)
