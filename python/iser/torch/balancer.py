"""The slot balancer: per-invocation expert replication for any expert-parallel MoE layer.

The layer keeps its routed experts in ``H + S`` local slots per weight tensor (home experts
``r*H ..`` first, then ``S`` helper slots), allocated by the balancer in iser's symmetric memory,
and computes every route in the slot that ``balance()`` names (global slot id
``rank * (H + S) + local slot``, the TensorRT-LLM slot convention):

    slot_ids = balancer.balance(topk_ids)   # count, exchange, plan, rewrite; replication starts
    ... dispatch by slot_ids, compute home slots (local slot < H) ...
    balancer.ready()                        # the current stream waits for the replicas
    ... compute helper slots (local slot >= H), combine ...

No call synchronises with the host, so a forward can be captured in a CUDA graph (after one
eager call). On a READY failure the helper slots are refilled from their owners' home bundles
before the helper work, so the output is unchanged; ``stats()`` counts and logs it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import torch

from . import _ops
from .distributed import unique_id_from_group

_log = logging.getLogger("iser.torch")


class SlotBalancer:
    """Slot memory and per-forward balancing of one MoE layer.

    Args:
        num_experts: routed experts E (a multiple of the ranks P).
        num_slots: helper slots S per rank (1..16).
        weights: the layer's per-expert weight tensors, any dtype (weights, fp8 scales, ...).
            Logical mode: ``[E, ...]`` (every expert); one rank per process: ``[H, ...]`` (this
            rank's home experts). Their values are copied into the home slots.
        max_tokens: most tokens per rank in one ``balance()``; ``top_k``: routes per token.
        logical: P ranks on the current GPU (tests, development); or
        group: a ``torch.distributed`` process group of P ranks, one per GPU (iser's own NCCL
            communicator is bootstrapped over it, as vLLM's pynccl does).
        policy: a GPU-planned policy (halo-q, owner-home, absorb, halo-q-owner-in,
            iser-stateless).
        transport: plan, p2p-direct, p2p-sami or p2p-sami-owner.
        copy_sms: CTAs of the replication per rank.
        timeout_us: how long the READY gate waits before it falls back to home bundles.
    """

    def __init__(
        self,
        num_experts: int,
        num_slots: int,
        weights: Sequence[torch.Tensor],
        *,
        max_tokens: int,
        top_k: int,
        logical: int | None = None,
        group=None,
        policy: str = "halo-q",
        transport: str = "plan",
        copy_sms: int = 8,
        timeout_us: int = 2_000_000,
    ):
        _ops.load_library()
        if (logical is None) == (group is None):
            raise ValueError("iser.torch.SlotBalancer: give exactly one of logical=P or group=")
        if group is not None:
            num_ranks, rank, unique_id = unique_id_from_group(group)
        else:
            num_ranks, rank, unique_id = int(logical), -1, ""
        if num_ranks < 2 or num_experts % num_ranks != 0:
            raise ValueError(
                f"iser.torch.SlotBalancer: num_experts = {num_experts} must be a multiple of "
                f"P = {num_ranks} >= 2"
            )
        self.num_ranks = num_ranks
        self.num_experts = num_experts
        self.num_slots = num_slots
        self.experts_per_rank = num_experts // num_ranks
        self.top_k = top_k
        self.policy = policy
        self.logical = rank < 0
        home = num_experts if self.logical else self.experts_per_rank
        weights = list(weights)
        for i, w in enumerate(weights):
            if w.dim() < 1 or w.shape[0] != home:
                raise ValueError(
                    f"iser.torch.SlotBalancer: weights[{i}] has shape {tuple(w.shape)}; its first "
                    f"dimension must be {home} ({'E' if self.logical else 'H'} experts)"
                )
        field_bytes = [w[0].numel() * w.element_size() for w in weights]
        self._c = torch.classes.iser.SlotBalancer(
            num_ranks, num_experts, num_slots, policy, transport, copy_sms, max_tokens, top_k,
            timeout_us, field_bytes, rank, unique_id,
        )
        self.rank = int(self._c.first_rank())
        self.num_local = int(self._c.num_local_ranks())
        # Slot tensors: views of the symmetric memory, [num_local, H + S, ...] per weight.
        self._slots = []
        for i, w in enumerate(weights):
            raw = self._c.field(i)  # [num_local, H + S, bytes] uint8
            view = raw.view(w.dtype).view(self.num_local, self.slots_per_rank, *w.shape[1:])
            view[:, : self.experts_per_rank].copy_(
                w.reshape(self.num_local, self.experts_per_rank, *w.shape[1:])
            )
            self._slots.append(view)
        torch.cuda.current_stream().synchronize()
        self._copy_stream = torch.cuda.ExternalStream(self._c.copy_stream())
        self._pending_ready = False
        self.copy_hook: Callable[[torch.cuda.Stream], None] | None = None
        self._fallback_seen = 0

    def describe(self) -> str:
        """The runtime's peer memory and multicast report (``Runtime::describe()``): e.g.
        ``"peer memory: nccl (...); multicast unavailable: <reason>"``."""
        return str(self._c.describe())

    @property
    def slots_per_rank(self) -> int:
        return self.experts_per_rank + self.num_slots

    @property
    def copy_stream(self) -> torch.cuda.Stream:
        """The balancer's side stream (highest priority): planning and replication run on it."""
        return self._copy_stream

    def slots(self, field: int) -> torch.Tensor:
        """Weight tensor ``field``'s slots: ``[P, H + S, ...]`` in logical mode, ``[H + S, ...]``
        with one rank per process. Home slots hold the layer's experts; helper slots are written
        by the replication (read them only after ``ready()``)."""
        s = self._slots[field]
        return s if self.logical else s[0]

    def home_slot_ids(self, topk_ids: torch.Tensor) -> torch.Tensor:
        """Global home slot of each expert id (-1 stays -1): balancing off. Expert e's home slot
        is (e // H) * (H + S) + e % H = e + (e // H) * S."""
        ids = topk_ids if topk_ids.dtype == torch.int32 else topk_ids.to(torch.int32)
        home = ids + torch.div(ids, self.experts_per_rank, rounding_mode="floor") * self.num_slots
        return torch.where(ids >= 0, home, -1)

    def balance(self, topk_ids: torch.Tensor, enabled: bool = True) -> torch.Tensor:
        """Slot ids for ``topk_ids`` (logical: ``[P, T, k]``; else ``[T, k]``), int32, same shape.

        Enabled: counts, exchanges the counts, plans, rewrites on the copy stream and starts the
        replication; the current stream waits only for the slot ids. Disabled: home slots only
        (no planning, no replication; ``ready()`` does nothing). No host synchronisation.
        """
        if not enabled:
            self._pending_ready = False
            return self.home_slot_ids(topk_ids)
        ids = topk_ids if self.logical else topk_ids.unsqueeze(0)
        slot_ids = self._c.route(ids)
        if self.copy_hook is not None:
            self.copy_hook(self._copy_stream)
        self._c.replicate()
        self._pending_ready = True
        return slot_ids if self.logical else slot_ids[0]

    def ready(self, stream: torch.cuda.Stream | None = None) -> None:
        """Makes ``stream`` (default: current) wait until the helper slots hold their replicas
        (or their home bundles after a READY failure). Call before the helper-slot work."""
        if not self._pending_ready:
            return
        self._pending_ready = False
        if stream is None:
            self._c.ready()
        else:
            with torch.cuda.stream(stream):
                self._c.ready()

    def release(self) -> None:
        """Frees the helper slots of the last ``balance()`` on the current stream (the next
        ``balance()`` does it itself; call this before dropping the balancer mid-forward)."""
        self._c.release()

    def set_fault_stream(self, local_rank: int, stream: torch.cuda.Stream | None) -> None:
        """Fault injection (tests, logical mode): local rank ``local_rank`` replicates on
        ``stream`` (work queued there first delays its copy and READY); None restores."""
        if stream is None:
            self._c.set_fault_stream(-1, 0)
        else:
            self._c.set_fault_stream(local_rank, stream.cuda_stream)

    def plan(self) -> torch.Tensor:
        """The last plan's words (a copy; synchronise the copy stream's work first)."""
        return self._c.plan().clone()

    def counts(self) -> torch.Tensor:
        """The last all-gathered count matrix ``[P, E]`` (a copy)."""
        return self._c.counts().clone()

    def stats(self) -> dict[str, int]:
        """Synchronises the device. ``fallback_slots``: helper slots refilled from home bundles
        (cumulative); ``ready_failures``; ``plan_status`` (0 = balanced); ``num_ops``: the last
        plan's replications; ``planner_errors``. READY failures are logged and cleared; other
        device-side failures raise."""
        out = dict(self._c.stats())
        if out["fallback_slots"] > self._fallback_seen:
            _log.warning(
                "iser: READY failure: %d helper slot(s) refilled from home bundles so far",
                out["fallback_slots"],
            )
            self._fallback_seen = out["fallback_slots"]
        return out


def measured_imbalance(slot_ids: torch.Tensor, num_ranks: int, slots_per_rank: int) -> float:
    """R = max / mean of the routes each rank computes under ``slot_ids`` (-1 ignored)."""
    flat = slot_ids.reshape(-1)
    flat = flat[flat >= 0].to(torch.int64)
    loads = torch.bincount(torch.div(flat, slots_per_rank, rounding_mode="floor"),
                           minlength=num_ranks).double()
    mean = loads.mean().item()
    return math.nan if mean == 0 else loads.max().item() / mean
