"""iser.eplb: DeepSeek's Expert Parallelism Load Balancer (the contract of ``rebalance_experts``)."""

from __future__ import annotations

from typing import Any

from . import _core


def eplb(weight: Any, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int):
    """Replicates the heaviest experts and packs the replicas onto GPUs, like DeepSeek's
    ``eplb.rebalance_experts`` and ``iser eplb``.

    Args:
        weight: ``[num_layers, num_experts]`` non-negative loads (NumPy array, nested lists, or a
            torch CPU tensor).
        num_replicas: physical experts per layer (>= num_experts, a multiple of num_gpus).
        num_groups: expert groups.
        num_nodes: server nodes (hierarchical policy when they divide num_groups, else global).
        num_gpus: GPUs (a multiple of num_nodes).

    Returns:
        ``(phy2log [L, R], log2phy [L, E, X], logcnt [L, E])`` as int64 arrays (``log2phy`` padded
        with -1); torch tensors when ``weight`` is one.
    """
    is_torch = type(weight).__module__.startswith("torch")
    if is_torch:
        weight = weight.detach().cpu().numpy()
    result = _core.eplb(weight, num_replicas, num_groups, num_nodes, num_gpus)
    if is_torch:
        import torch

        return tuple(torch.from_numpy(a) for a in result)
    return result
