"""The compiled ops (``torch.ops.iser.*``): loading, fake kernels and thin wrappers."""

from __future__ import annotations

import functools
import glob
import os
from pathlib import Path

import torch

_LIBRARY_ENV = "ISER_TORCH_OPS"
_loaded_from: str | None = None


def _candidates() -> list[str]:
    found = []
    env = os.environ.get(_LIBRARY_ENV)
    if env:
        found.append(env)
    import iser  # the package (regular or namespace): its folders may hold the library

    for folder in list(getattr(iser, "__path__", [])):
        found.extend(sorted(glob.glob(os.path.join(folder, "_torch_ops*.so"))))
    return found


def load_library() -> str:
    """Loads the extension once; returns its path. Raises ImportError naming where it looked."""
    global _loaded_from
    if _loaded_from is not None:
        return _loaded_from
    paths = _candidates()
    existing = [p for p in paths if Path(p).is_file()]
    if not existing:
        raise ImportError(
            "iser.torch: the PyTorch extension (_torch_ops.so) was not found; looked in "
            f"${_LIBRARY_ENV}={os.environ.get(_LIBRARY_ENV)!r} and the iser package folders "
            f"{paths or '(none)'}. It is built with the CUDA part where torch is importable."
        )
    torch.ops.load_library(existing[0])
    _register_fakes()
    _loaded_from = existing[0]
    return _loaded_from


@functools.lru_cache(maxsize=None)
def _plan_words(num_ranks: int, num_experts: int, num_slots: int, policy: str) -> int:
    # Host arithmetic; fake kernels call it under FakeTensorMode, which must not see it.
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return int(torch.ops.iser.plan_layout(num_ranks, num_experts, num_slots, policy)[0])


def _register_fakes() -> None:
    def words(num_ranks, num_experts, num_slots, policy) -> int:
        return _plan_words(int(num_ranks), int(num_experts), int(num_slots), str(policy))

    @torch.library.register_fake("iser::count")
    def _count_fake(topk_ids, num_experts):
        return topk_ids.new_empty((*topk_ids.shape[:-2], num_experts), dtype=torch.int32)

    @torch.library.register_fake("iser::plan")
    def _plan_fake(counts, num_slots, policy="halo-q"):
        w = words(counts.shape[-2], counts.shape[-1], num_slots, policy)
        return counts.new_empty((*counts.shape[:-2], w), dtype=torch.int32)

    @torch.library.register_fake("iser::rewrite")
    def _rewrite_fake(plan, counts, topk_ids, rank, num_slots, policy="halo-q"):
        return topk_ids.new_empty(topk_ids.shape, dtype=torch.int32)

    @torch.library.register_fake("iser::plan_rewrite")
    def _plan_rewrite_fake(counts, topk_ids, rank, num_slots, policy="halo-q"):
        w = words(counts.shape[0], counts.shape[1], num_slots, policy)
        return (
            counts.new_empty((w,), dtype=torch.int32),
            topk_ids.new_empty(topk_ids.shape, dtype=torch.int32),
        )


def count(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Routes per expert: ``[..., num_tokens, top_k]`` ids (-1 = none) -> ``[..., E]`` int32."""
    return torch.ops.iser.count(topk_ids, num_experts)


def plan(counts: torch.Tensor, num_slots: int, policy: str = "halo-q") -> torch.Tensor:
    """HALO-Q plans of all-gathered counts ``[..., P, E]`` -> plan words ``[..., W]``."""
    return torch.ops.iser.plan(counts, num_slots, policy)


def rewrite(
    plan_words: torch.Tensor,
    counts: torch.Tensor,
    topk_ids: torch.Tensor,
    rank: int,
    num_slots: int,
    policy: str = "halo-q",
) -> torch.Tensor:
    """Rank ``rank``'s ``[num_tokens, top_k]`` expert ids -> global slot ids under the plan."""
    return torch.ops.iser.rewrite(plan_words, counts, topk_ids, rank, num_slots, policy)


def plan_rewrite(
    counts: torch.Tensor,
    topk_ids: torch.Tensor,
    rank: int,
    num_slots: int,
    policy: str = "halo-q",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``plan`` then ``rewrite`` of rank ``rank`` as one kernel: ``(plan words, slot ids)``."""
    return torch.ops.iser.plan_rewrite(counts, topk_ids, rank, num_slots, policy)


class PlanLayout:
    """Word offsets of a plan (``iser::GpuPlanLayout``) for ``(P, E, S)`` and the policy's plans
    (``iser-stateless`` plans may hold more broadcasts than the HALO-Q family's)."""

    def __init__(self, num_ranks: int, num_experts: int, num_slots: int, policy: str = "halo-q"):
        (
            self.total_words,
            self.loads,
            self.broadcasts,
            self.quotas,
            self.expert_broadcast,
            self.supply_begin,
            self.demand_end,
            self.max_broadcasts,
        ) = torch.ops.iser.plan_layout(num_ranks, num_experts, num_slots, policy)
        self.num_ranks = num_ranks
        self.num_experts = num_experts
        self.num_slots = num_slots

    # Header words (GpuPlanLayout::kStatus, ...).
    STATUS, TARGET, NUM_BROADCASTS, FLAGS = 0, 1, 2, 3
    BROADCAST_WORDS = 8
    BROADCAST_FIELDS = 7  # expert, owner, level, group_begin, group_size, helper, mode

    def meaningful(self, words: torch.Tensor) -> torch.Tensor:
        """The words that define a plan (header, loads, the B broadcast records without their
        reserved word, the B quota rows), as one 1-D tensor: equal plans give equal tensors."""
        b = int(words[self.NUM_BROADCASTS])
        header = words[: self.loads + self.num_ranks]
        records = words[self.broadcasts : self.broadcasts + b * self.BROADCAST_WORDS]
        records = records.view(b, self.BROADCAST_WORDS)[:, : self.BROADCAST_FIELDS].reshape(-1)
        quotas = words[self.quotas : self.quotas + b * self.num_ranks]
        return torch.cat([header, records, quotas])
