"""iser.replay: the main job (``iser replay``) returning exactly what ``--json`` writes."""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Sequence, Union

from . import _core
from ._core import Error

# The CLI's range checks on `iser replay` flags: name -> (low, high), inclusive; None = unbounded.
_MAX_RANKS, _MAX_EXPERTS, _MAX_SLOTS = 1024, 1 << 16, 64
_RANGES = {
    "tokens_per_rank": (1, None),
    "slots": (0, _MAX_SLOTS),
    "g_min": (1, _MAX_RANKS),
    "iterations": (1, None),
    "min_move": (0, None),
    "eplb_window": (0, None),
    "threads": (0, None),
    "num_experts": (1, _MAX_EXPERTS),
    "top_k": (1, 64),
    "num_layers": (1, 4096),
    "skip_rows": (0, None),
    "rank_imbalance": (1.0, 1000.0),
    "imbalance_ep": (2, _MAX_RANKS),
}


def _check_range(name: str, value: Any) -> None:
    low, high = _RANGES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Error(f"{name} = {value!r} is not a number")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise Error(f"{name} = {value} out of range {bound}")


def _index_list(value: Union[str, Iterable[int], None], name: str) -> list[int]:
    """'0-3,7' or [0, 1, 2, 3, 7] -> [0, 1, 2, 3, 7] (the CLI's --layers syntax)."""
    if value is None:
        return []
    if not isinstance(value, str):
        out = [int(v) for v in value]
        if any(v < 0 for v in out):
            raise Error(f"bad {name}: negative index in {out}")
        return out
    out = []
    for item in filter(None, value.split(",")):
        first, dash, last = item.partition("-")
        try:
            lo, hi = int(first), int(last) if dash else int(first)
        except ValueError:
            raise Error(f"bad --{name} entry '{item}': expected N or N-M") from None
        if lo < 0 or hi < lo:
            raise Error(f"bad --{name} range '{item}'")
        out += range(lo, hi + 1)
    return out


def _name_list(value: Union[str, Iterable[str], None]) -> list[str]:
    if value is None or value == "all":
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return [str(v) for v in value]


def policies() -> list[str]:
    """Names accepted by ``policy=`` / ``policies=``, in report order."""
    return _core.policies()


def replay(
    trace: Union[str, os.PathLike, None] = None,
    *,
    synthetic: Optional[str] = None,
    ep: Optional[Sequence[int]] = None,
    tokens_per_rank: Optional[int] = None,
    slots: Optional[int] = None,
    g_min: Optional[int] = None,
    policies: Union[str, Sequence[str], None] = None,
    layers: Union[str, Sequence[int], None] = None,
    iterations: Optional[int] = None,
    seed: int = 1,
    min_move: int = 0,
    eplb_window: int = 0,
    validate: bool = False,
    threads: int = 0,
    num_experts: Optional[int] = None,
    top_k: Optional[int] = None,
    num_layers: Optional[int] = None,
    alpha: Optional[float] = None,
    rank_imbalance: Optional[float] = None,
    imbalance_ep: Optional[int] = None,
    category: str = "",
    skip_rows: int = 0,
    skip_profile_rows: bool = False,
    project_hw: Optional[str] = None,
) -> dict[str, Any]:
    """Replays routing data through the balancing policies, like ``iser replay --json``.

    ``trace`` is any routing file or directory the CLI reads (default: the bundled
    DeepSeek-V4.1-Flash histograms); ``synthetic="power-law"|"mixed"`` generates routing instead.
    Unset arguments take the CLI's defaults (EP 4,8,16,24; 8192 tokens per rank; S = 4; every
    policy). ``layers`` is a list or the CLI's ``"3-39"`` / ``"0,5,7"`` syntax; ``policies`` a list
    or a comma-separated string. Returns the dict ``--json`` writes: ``{"config", "trace",
    "results"}``. Releases the GIL while it runs (on ``threads`` worker threads, 0 = all cores).
    """
    given = dict(tokens_per_rank=tokens_per_rank, slots=slots, g_min=g_min, iterations=iterations,
                 min_move=min_move, eplb_window=eplb_window, threads=threads,
                 num_experts=num_experts, top_k=top_k, num_layers=num_layers, skip_rows=skip_rows,
                 rank_imbalance=rank_imbalance, imbalance_ep=imbalance_ep)
    for name, value in given.items():
        if value is not None:
            _check_range(name, value)
    if synthetic is not None and synthetic not in ("power-law", "mixed"):
        raise Error(f"synthetic = '{synthetic}' is not power-law or mixed")
    if alpha is not None and not alpha > 0:
        raise Error(f"alpha = {alpha} must be positive")
    if ep is not None:
        ep = [int(p) for p in ([ep] if isinstance(ep, int) else ep)]
    return _core.replay(
        trace=os.fspath(trace) if trace is not None else "",
        synthetic=synthetic or "",
        ep=ep,
        tokens_per_rank=tokens_per_rank,
        slots=slots,
        g_min=g_min,
        policies=_name_list(policies),
        layers=_index_list(layers, "layers"),
        iterations=iterations,
        seed=seed,
        min_move=min_move,
        eplb_window=eplb_window,
        validate=validate,
        threads=threads,
        num_experts=num_experts,
        top_k=top_k,
        num_layers=num_layers,
        alpha=alpha,
        rank_imbalance=rank_imbalance,
        imbalance_ep=imbalance_ep,
        category=category,
        skip_rows=skip_rows,
        skip_profile_rows=skip_profile_rows,
        project_hw=project_hw or "",
    )
