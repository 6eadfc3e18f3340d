"""Hugging Face transformers' own MoE blocks (small configs, random weights, nothing
downloaded) as EP blocks over P = 2, 4, 8 logical ranks: Mixtral, Qwen2-MoE (shared expert with
a gate) and DeepSeek-V3 (grouped top-k router, shared experts). For each: the output equals the
HF block's within a per-dtype tolerance, ON == OFF bit for bit, a router biased towards a few
experts gives a lower measured R with balancing than without, and the plan validates."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.gpu

HIDDEN = 64
# Tolerance of EP vs HF per dtype: the same products summed in another order (fp32 accumulation
# here, the block's dtype in HF's index_add): fp32 ~1e-6 relative; bf16 one extra rounding of
# every expert output (2^-8) over k = 4 routes and the shared expert.
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def mixtral(num_experts):
    from transformers.models.mixtral.modeling_mixtral import MixtralConfig, MixtralSparseMoeBlock

    cfg = MixtralConfig(hidden_size=HIDDEN, intermediate_size=32, num_local_experts=num_experts,
                        num_experts_per_tok=2, router_jitter_noise=0.0)
    return MixtralSparseMoeBlock(cfg)


def qwen2_moe(num_experts):
    from transformers.models.qwen2_moe.modeling_qwen2_moe import (Qwen2MoeConfig,
                                                                  Qwen2MoeSparseMoeBlock)

    cfg = Qwen2MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=32,
                         shared_expert_intermediate_size=48, num_experts=num_experts,
                         num_experts_per_tok=4, norm_topk_prob=False)
    return Qwen2MoeSparseMoeBlock(cfg)


def deepseek_v3(num_experts):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3Config,
                                                                      DeepseekV3MoE)

    cfg = DeepseekV3Config(hidden_size=HIDDEN, intermediate_size=96, moe_intermediate_size=32,
                           n_routed_experts=num_experts, num_experts_per_tok=4, n_group=4,
                           topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5,
                           norm_topk_prob=True)
    return DeepseekV3MoE(cfg)


def init_block(block, gen, hot, direction):
    """Random weights; the router favours experts `hot` for inputs along `direction`."""
    for name, p in block.named_parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=gen, device=p.device) * 0.1)
    with torch.no_grad():
        if hasattr(block.gate, "e_score_correction_bias"):
            block.gate.e_score_correction_bias.zero_()
            block.gate.e_score_correction_bias[hot] += 0.5  # DeepSeek's selection bias
        block.gate.weight[hot] += 2.0 * direction / direction.norm() ** 2


@pytest.mark.parametrize("factory", [mixtral, qwen2_moe, deepseek_v3])
@pytest.mark.parametrize("num_ranks", [2, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_block(iser_torch, factory, num_ranks, dtype):
    it = iser_torch
    gen = torch.Generator(device="cuda").manual_seed(1000 * num_ranks + sum(map(ord, factory.__name__)))
    num_experts, tokens = 4 * num_ranks if num_ranks > 2 else 16, 48
    block = factory(num_experts).cuda()
    direction = torch.randn(HIDDEN, generator=gen, device="cuda")
    hot = [0, 1] if num_experts >= 8 else [0]  # experts of rank 0
    init_block(block, gen, hot, direction)
    block = block.to(dtype).eval()
    x = (torch.randn(1, num_ranks * tokens, HIDDEN, generator=gen, device="cuda") * 0.5
         + direction).to(dtype)
    with torch.no_grad():
        want = block(x)
        ep = it.ep_from_hf(block, logical=num_ranks, num_slots=2, max_tokens=tokens)
        on = ep(x)
        slot_on = ep.last_slot_ids.clone()
        b = ep.balancer
        torch.cuda.synchronize()
        plan, counts = b.plan().cpu(), b.counts().cpu()
        off = ep(x, balance=False)
        slot_off = ep.last_slot_ids.clone()
    assert on.shape == want.shape
    assert torch.equal(on, off), "ON and OFF differ"
    torch.testing.assert_close(on, want, **TOL[dtype])
    assert list(torch.ops.iser.validate_plan(plan, counts, 2)) == []
    r_on = it.measured_imbalance(slot_on, num_ranks, b.slots_per_rank)
    r_off = it.measured_imbalance(slot_off, num_ranks, b.slots_per_rank)
    print(f"{factory.__name__} P={num_ranks} {dtype}: R off {r_off:.3f} -> on {r_on:.3f}")
    assert r_on < r_off
    assert b.stats()["fallback_slots"] == 0
