"""Type stubs of iser._core, the C++ core behind the package (use ``iser``, not this module)."""

from typing import Any, Optional, Sequence

import numpy as np
import numpy.typing as npt

__version__: str

class Error(ValueError):
    """Bad input or configuration; the message is the CLI's (file, field, value)."""

ArrayLike = npt.ArrayLike

class Plan:
    """One invocation's plan (the result of :func:`plan`)."""

    broadcast_fields: tuple[str, ...]
    """Columns of :attr:`broadcasts`: expert, owner, level, group_begin, group_size, helper,
    mode (0 owner-direct, 1 sami, 2 p2p), resident (0/1)."""

    @property
    def policy(self) -> str: ...
    @property
    def num_ranks(self) -> int: ...
    @property
    def num_experts(self) -> int: ...
    @property
    def num_slots(self) -> int: ...
    @property
    def g_min(self) -> int: ...
    @property
    def target(self) -> int:
        """T = ceil(total routes / P)."""
    @property
    def owner_uses_home_slot(self) -> bool: ...
    @property
    def num_broadcasts(self) -> int: ...
    @property
    def loads(self) -> npt.NDArray[np.int32]:
        """int32 [P]: routes each rank computes after planning."""
    @property
    def broadcasts(self) -> npt.NDArray[np.int32]:
        """int32 [B, 8]: one row per broadcast, columns :attr:`broadcast_fields`."""
    @property
    def quotas(self) -> npt.NDArray[np.int32]:
        """int32 [B, P]: routes of each broadcast's expert that each rank computes."""
    @property
    def counts(self) -> npt.NDArray[np.int32]:
        """int32 [P, E]: the count matrix planned for."""
    def to_dict(self) -> dict[str, Any]:
        """The plan as ``iser plan --json`` prints it (with ``"valid": true`` once validated)."""
    def validate(self) -> None:
        """Checks every invariant of the policy's plans; raises :class:`Error` otherwise."""

def plan(counts: ArrayLike, *, slots: int = 4, policy: str = "halo-q", g_min: int = 4,
         min_move: int = 0, validate: bool = False, lsa_size: int = 0) -> Plan:
    """Plans one layer invocation from a count matrix ``counts[P, E]`` (int32/int64; routes
    source rank s sends to expert e), like ``iser plan --counts FILE --json``. ``lsa_size``:
    LSA teams of that many consecutive ranks (0 = one team); no group spans two teams."""

def rewrite(plan: Plan, rank: int, topk_ids: ArrayLike) -> npt.NDArray[np.int32]:
    """Rewrites rank ``rank``'s routes ``topk_ids[num_tokens, top_k]`` (-1 = none) to global
    slot ids ``rank * (H + S) + local slot``; the ids must be exactly the routes the plan's
    counts hold for that rank."""

def counts_from_topk(topk_ids: ArrayLike, *, num_ranks: int,
                     num_experts: int) -> npt.NDArray[np.int32]:
    """Count matrix [P, E] of one invocation: rank r's tokens are rows
    [r*tau, (r+1)*tau) of ``topk_ids[P*tau, top_k]`` (-1 = none)."""

def eplb(weight: ArrayLike, num_replicas: int, num_groups: int, num_nodes: int,
         num_gpus: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                 npt.NDArray[np.int64]]: ...
def policies() -> list[str]: ...
def bundled_trace() -> str: ...
def read_trace(path: str, *, format: str = "auto", num_experts: Optional[int] = None,
               top_k: Optional[int] = None, category: str = "", skip_rows: int = 0,
               skip_profile_rows: bool = False, slot_map: str = "",
               trtllm_raw: bool = False) -> dict[str, Any]: ...
def write_trace(path: str, fields: dict[str, Any], *, ids_dtype: str = "int32",
                counts_dtype: str = "int64") -> None: ...
def _plan_median_ns(counts: ArrayLike, slots: int, policy: str, repeats: int) -> float: ...
