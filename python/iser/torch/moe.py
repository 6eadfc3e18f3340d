"""``EpMoE``: a reference expert-parallel MoE module on the slot balancer.

Per forward, on every rank: router -> ``balance()`` -> dispatch (fixed-size all-to-all of the
routes by destination rank) -> home-slot gated MLPs -> ``ready()`` -> helper-slot gated MLPs ->
all-to-all back -> combine (shared expert + sum_j w_j y_j in fp32, j in order). Everything is
device-side (no host synchronisation).

Every slot runs its GEMMs at a fixed M = C = P * T rows (the most routes one slot can receive,
since a token's experts are distinct), so a route's output rows do not depend on which slot or
row computes them: ON (balanced) and OFF (home slots only) outputs are bitwise equal. This is a
reference for correctness, not a fast layer.

Logical mode (``logical=P``): the P ranks' tokens are the P consecutive equal parts of the
input's tokens, the all-to-all is a transpose. With ``group=``: this rank's tokens, the
all-to-all is ``torch.distributed.all_to_all_single`` over the group.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .balancer import SlotBalancer

Router = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class EpMoE(nn.Module):
    """Gated-MLP experts ``down(act(gate(x)) * up(x))`` over P ranks with per-forward balancing.

    Args:
        router: ``x [N, He] -> (topk_weights [N, k], topk_ids [N, k])``.
        gate_up_proj: ``[E, 2I, He]`` (gate rows first), ``down_proj``: ``[E, He, I]`` — every
            expert in logical mode, this rank's ``H`` home experts with ``group=``.
        top_k: routes per token; ``max_tokens``: most tokens per rank per forward.
        shared: optional shared expert ``x [N, He] -> [N, He]``, computed beside the copy.
        act_fn: the gate activation (SiLU by default).
        Remaining keywords go to :class:`SlotBalancer` (``num_slots``, ``logical`` or
        ``group``, ``policy``, ``transport``, ``copy_sms``, ``timeout_us``).
    """

    def __init__(
        self,
        router: Router,
        gate_up_proj: torch.Tensor,
        down_proj: torch.Tensor,
        *,
        num_experts: int,
        num_slots: int,
        top_k: int,
        max_tokens: int,
        shared: Callable[[torch.Tensor], torch.Tensor] | None = None,
        act_fn: Callable[[torch.Tensor], torch.Tensor] = F.silu,
        **balancer_kwargs,
    ):
        super().__init__()
        self.router = router
        self.shared = shared
        self.act_fn = act_fn
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.group = balancer_kwargs.get("group")
        self.balancer = SlotBalancer(
            num_experts,
            num_slots,
            [gate_up_proj.detach(), down_proj.detach()],
            max_tokens=max_tokens,
            top_k=top_k,
            **balancer_kwargs,
        )
        self.last_slot_ids: torch.Tensor | None = None

    # ---- pieces ------------------------------------------------------------------------------

    def _exchange(self, send: torch.Tensor) -> torch.Tensor:
        """``send [L, P, ...]`` (to destination d) -> ``recv [L, P, ...]`` (from source s)."""
        if self.balancer.logical:
            return send.transpose(0, 1).contiguous()
        import torch.distributed as dist

        recv = torch.empty_like(send[0])
        dist.all_to_all_single(recv, send[0].contiguous(), group=self.group)
        return recv.unsqueeze(0)

    def _mlp(self, x: torch.Tensor, slot: int, local: int) -> torch.Tensor:
        b = self.balancer
        w13 = b._slots[0][local, slot]
        w2 = b._slots[1][local, slot]
        gate, up = F.linear(x, w13).chunk(2, dim=-1)
        return F.linear(self.act_fn(gate) * up, w2)

    def forward(self, hidden_states: torch.Tensor, balance: bool = True) -> torch.Tensor:
        b = self.balancer
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        num_local, num_ranks, spr = b.num_local, b.num_ranks, b.slots_per_rank
        if x.shape[0] % num_local != 0:
            raise ValueError(
                f"iser.torch.EpMoE: {x.shape[0]} tokens do not split evenly over {num_local} "
                "logical ranks"
            )
        tokens = x.shape[0] // num_local
        if tokens > self.max_tokens:
            raise ValueError(
                f"iser.torch.EpMoE: {tokens} tokens per rank exceed max_tokens = {self.max_tokens}"
            )
        weights, ids = self.router(x)
        k = ids.shape[-1]
        routes = tokens * k
        slot_ids = b.balance(ids.reshape(num_local, tokens, k), enabled=balance)
        self.last_slot_ids = slot_ids
        shared_out = self.shared(x) if self.shared is not None else None

        dev = x.device
        hidden = x.shape[-1]
        xl = x.view(num_local, tokens, hidden)
        lidx = torch.arange(num_local, device=dev)[:, None]

        # Dispatch: route i of local rank l goes to destination d's block at position pos
        # (routes to d in route order); invalid routes go to the spare row `routes` of block 0.
        slot = slot_ids.reshape(num_local, routes).long()
        valid = slot >= 0
        dest = torch.where(valid, torch.div(slot, spr, rounding_mode="floor"), num_ranks)
        pos = _positions(dest, num_ranks + 1)
        dest = torch.where(valid, dest, 0)
        pos = torch.where(valid, pos, routes)
        local_slot = torch.where(valid, slot % spr, -1).to(torch.int32)
        token = torch.arange(routes, device=dev) // k
        send_x = x.new_zeros(num_local, num_ranks, routes + 1, hidden)
        send_x[lidx, dest, pos] = xl[lidx, token[None, :].expand(num_local, -1)]
        send_slot = torch.full((num_local, num_ranks, routes + 1), -1, dtype=torch.int32,
                               device=dev)
        send_slot[lidx, dest, pos] = local_slot
        send_slot[:, :, routes] = -1
        recv_x = self._exchange(send_x)
        recv_slot = self._exchange(send_slot)

        # Receive: the routes of local slot l fill rows [0, n_l) of its [C] buffer in (source,
        # position) order; empty positions go to the spare slot `spr`.
        m = num_ranks * (routes + 1)
        capacity = num_ranks * tokens
        rs = recv_slot.view(num_local, m).long()
        rvalid = rs >= 0
        rslot = torch.where(rvalid, rs, spr)
        row = torch.clamp(_positions(rslot, spr + 1), max=capacity - 1)
        xs = x.new_zeros(num_local, spr + 1, capacity, hidden)
        xs[lidx, rslot, row] = recv_x.view(num_local, m, hidden)
        ys = torch.zeros_like(xs)
        home = b.experts_per_rank
        for local in range(num_local):
            for s in range(home):
                ys[local, s] = self._mlp(xs[local, s], s, local)
        if balance:
            b.ready()
            for local in range(num_local):
                for s in range(home, spr):
                    ys[local, s] = self._mlp(xs[local, s], s, local)
        y_recv = torch.where(rvalid[..., None], ys[lidx, rslot, row], 0)
        y_back = self._exchange(y_recv.view(num_local, num_ranks, routes + 1, hidden))

        # Combine: shared + sum_j w_j y_j in fp32, j in order (the same for ON and OFF).
        y_route = torch.where(valid[..., None], y_back[lidx, dest, pos], 0)
        y_route = y_route.view(num_local * tokens, k, hidden).float()
        w = torch.where(valid.view(-1, k), weights.float(), 0.0)
        acc = (shared_out.float() if shared_out is not None
               else torch.zeros(x.shape, dtype=torch.float32, device=dev))
        for j in range(k):
            acc = acc + w[:, j, None] * y_route[:, j]
        return acc.to(x.dtype).view(shape)


def _positions(keys: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Per row of ``keys [L, n]`` (values in [0, num_keys)): each entry's rank among the
    entries of the row with the same key, in index order. Device-side, no host sync."""
    n = keys.shape[1]
    idx = torch.arange(n, device=keys.device)
    order = torch.argsort(keys * n + idx, dim=1, stable=True)
    counts = torch.zeros(keys.shape[0], num_keys, dtype=torch.long, device=keys.device)
    counts.scatter_add_(1, keys, torch.ones_like(keys))
    start = counts.cumsum(1) - counts
    sorted_keys = keys.gather(1, order)
    rank_sorted = idx[None, :] - start.gather(1, sorted_keys)
    return torch.empty_like(keys).scatter_(1, order, rank_sorted)
