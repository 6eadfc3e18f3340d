"""iser on PyTorch: the GPU planner's ops on CUDA tensors (``count``, ``plan``, ``rewrite``,
``plan_rewrite``, also as ``torch.ops.iser.*``), the slot balancer that gives any
expert-parallel MoE layer per-invocation expert replication, a reference EP MoE module and
adapters for Hugging Face transformers MoE blocks. docs/pytorch.md shows the wiring.

Importing this module loads the compiled extension (``_torch_ops.so`` in the package folder, or
the path in ``$ISER_TORCH_OPS``); ImportError where it was not built.
"""

from ._ops import PlanLayout, count, load_library, plan, plan_rewrite, rewrite

load_library()

from .balancer import SlotBalancer, measured_imbalance  # noqa: E402
from .distributed import peer_memory_report, unique_id_from_group  # noqa: E402
from .hf import ep_from_hf  # noqa: E402
from .moe import EpMoE  # noqa: E402

__all__ = [
    "EpMoE",
    "PlanLayout",
    "SlotBalancer",
    "count",
    "ep_from_hf",
    "load_library",
    "measured_imbalance",
    "peer_memory_report",
    "plan",
    "plan_rewrite",
    "rewrite",
    "unique_id_from_group",
]
