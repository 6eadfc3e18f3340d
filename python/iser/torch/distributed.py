"""iser's own NCCL communicator bootstrapped over a ``torch.distributed`` process group (as vLLM's
pynccl does): rank 0 of the group draws an NCCL unique id and the group broadcasts it, so any
backend (nccl, gloo) carries the bootstrap; nothing else listens on a port.
"""

from __future__ import annotations

import torch

from . import _ops


def unique_id_from_group(group) -> tuple[int, int, str]:
    """``(num_ranks, rank, unique_id)`` of this process in ``group``; collective over it. The id
    (hex) is what ``torch.classes.iser.SlotBalancer`` and ``peer_memory_report`` take."""
    import torch.distributed as dist

    _ops.load_library()
    num_ranks = dist.get_world_size(group)
    rank = dist.get_rank(group)
    box = [torch.ops.iser.nccl_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
    return num_ranks, rank, box[0]


def peer_memory_report(group, *, peer_memory: str = "auto", multicast: bool = False) -> str:
    """How iser's runtime would reach the group's GPUs, in one line; collective over ``group``
    (one process per GPU, the current CUDA device): ``"peer memory: nccl (NCCL symmetric window,
    LSA peer pointers; ...); multicast unavailable: <reason>"``.

    ``peer_memory``: ``"auto"`` (``$ISER_PEER_MEMORY`` if set, else an NCCL window where every
    rank can register one, else CUDA IPC), ``"nccl"`` (refused where a rank cannot) or ``"ipc"``.
    ``multicast``: opt in; multicast is reported available only where NCCL says multimem works.
    """
    num_ranks, rank, unique_id = unique_id_from_group(group)
    return torch.ops.iser.peer_memory_report(num_ranks, rank, unique_id, peer_memory, multicast)
