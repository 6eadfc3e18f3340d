"""Hugging Face transformers MoE blocks as EP blocks on the slot balancer.

``ep_from_hf(block, ...)`` takes a transformers sparse-MoE block whose experts hold fused 3-D
weights (``experts.gate_up_proj [E, 2I, He]``, ``experts.down_proj [E, He, I]``,
``experts.act_fn``) and whose router ``block.gate(x)`` returns ``(logits, weights, ids)``, as in
transformers 5: ``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock`` / ``Qwen3MoeSparseMoeBlock``
and ``DeepseekV3MoE`` (grouped top-k router). It returns an :class:`EpMoE` that uses the block's
own router, expert weights and shared expert(s):

- ``shared_expert`` + ``shared_expert_gate`` (Qwen MoE): ``sigmoid(gate(x)) * shared_expert(x)``;
- ``shared_experts`` (DeepSeek-V3): ``shared_experts(x)``;
- neither (Mixtral): no shared expert.
"""

from __future__ import annotations

import torch
from torch import nn

from .moe import EpMoE


def _shared(block: nn.Module):
    if hasattr(block, "shared_expert") and hasattr(block, "shared_expert_gate"):
        expert, gate = block.shared_expert, block.shared_expert_gate
        return lambda x: torch.sigmoid(gate(x)) * expert(x)
    if hasattr(block, "shared_experts"):
        return block.shared_experts
    return None


def ep_from_hf(
    block: nn.Module,
    *,
    num_slots: int,
    max_tokens: int,
    logical: int | None = None,
    group=None,
    **balancer_kwargs,
) -> EpMoE:
    """An EP form of ``block`` over ``logical`` ranks on this GPU or the ranks of ``group``."""
    experts = getattr(block, "experts", None)
    gate = getattr(block, "gate", None)
    if experts is None or gate is None or not hasattr(experts, "gate_up_proj"):
        raise TypeError(
            f"iser.torch.hf: {type(block).__name__} has no `gate` router and fused "
            "`experts.gate_up_proj` / `experts.down_proj` weights (transformers 5 MoE blocks)"
        )
    gate_up, down = experts.gate_up_proj, experts.down_proj
    num_experts = gate_up.shape[0]
    top_k = int(getattr(gate, "top_k", 0) or getattr(block, "top_k", 0))
    if top_k < 1:
        raise TypeError(f"iser.torch.hf: cannot find top_k on {type(block).__name__}.gate")
    if group is not None:
        import torch.distributed as dist

        per_rank = num_experts // dist.get_world_size(group)
        first = dist.get_rank(group) * per_rank
        gate_up, down = gate_up[first : first + per_rank], down[first : first + per_rank]

    def router(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, weights, ids = gate(x)
        return weights, ids

    return EpMoE(
        router,
        gate_up,
        down,
        num_experts=num_experts,
        num_slots=num_slots,
        top_k=top_k,
        max_tokens=max_tokens,
        shared=_shared(block),
        act_fn=experts.act_fn,
        logical=logical,
        group=group,
        **balancer_kwargs,
    )
