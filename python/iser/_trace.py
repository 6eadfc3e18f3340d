"""Routing data: every format the CLI reads (canonical safetensors, TensorRT-LLM dump directory,
vLLM safetensors, SGLang JSON, JSONL per-token top-k, CSV histograms), as NumPy arrays, and the
canonical safetensors writer (``iser convert``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal, Optional, Union

import numpy as np

from . import _core

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass
class Trace:
    """Routing data in the canonical layout (docs/data.md).

    kind: ``"tokens"`` (``topk_ids [L, T, k]``, -1 = empty choice, optional ``request_ids [T]``),
    ``"histograms"`` (``histograms``: category -> ``[L, E]``; ``""`` names a bare
    ``expert_counts`` tensor) or ``"iteration_counts"`` (``iteration_counts [I, L, E]`` or
    ``[I, L, P, E]``). metadata: model, dataset, source, num_experts, top_k, num_layers,
    num_tokens, skipped_tokens, notes.
    """

    kind: Literal["tokens", "histograms", "iteration_counts"]
    metadata: dict[str, Any]
    topk_ids: Optional[np.ndarray] = None
    request_ids: Optional[np.ndarray] = None
    histograms: Optional[dict[str, np.ndarray]] = None
    iteration_counts: Optional[np.ndarray] = None

    @property
    def num_experts(self) -> int:
        return int(self.metadata["num_experts"])

    @property
    def top_k(self) -> int:
        return int(self.metadata["top_k"])

    @property
    def num_layers(self) -> int:
        return int(self.metadata["num_layers"])


def read_trace(
    path: PathLike,
    *,
    format: str = "auto",
    num_experts: Optional[int] = None,
    top_k: Optional[int] = None,
    category: str = "",
    skip_rows: int = 0,
    skip_profile_rows: bool = False,
    slot_map: Optional[PathLike] = None,
    trtllm_raw: bool = False,
) -> Trace:
    """Reads routing data in any supported format (``format="auto"`` detects it). Keywords are
    ``iser convert``'s flags; ``num_experts``/``top_k`` override or supply what the file lacks;
    ``slot_map`` maps a TensorRT-LLM load-balancer dump's slots to experts (JSON file),
    ``trtllm_raw`` reads TensorRT-LLM's per-token ``_raw`` files."""
    fields = _core.read_trace(os.fspath(path), format=format, num_experts=num_experts, top_k=top_k,
                              category=category, skip_rows=skip_rows,
                              skip_profile_rows=skip_profile_rows,
                              slot_map=os.fspath(slot_map) if slot_map is not None else "",
                              trtllm_raw=trtllm_raw)
    return Trace(**fields)


def write_trace(path: PathLike, trace: Trace, *, ids_dtype: str = "int32",
                counts_dtype: str = "int64") -> None:
    """Writes ``trace`` as canonical safetensors (validated first; ``ids_dtype`` int16|int32 for
    topk_ids, ``counts_dtype`` int32|int64 for counts; narrowing that loses a value raises)."""
    fields = {f.name: getattr(trace, f.name) for f in dataclasses.fields(trace)}
    _core.write_trace(os.fspath(path), fields, ids_dtype=ids_dtype, counts_dtype=counts_dtype)


def convert(
    input: PathLike,
    output: PathLike,
    *,
    format: str = "auto",
    num_experts: Optional[int] = None,
    top_k: Optional[int] = None,
    model: Optional[str] = None,
    dataset: Optional[str] = None,
    category: Optional[str] = None,
    skip_rows: int = 0,
    skip_profile_rows: bool = False,
    slot_map: Optional[PathLike] = None,
    trtllm_raw: bool = False,
    ids_dtype: str = "int32",
    counts_dtype: str = "int64",
) -> Trace:
    """``iser convert``: reads ``input`` in any supported format and writes canonical safetensors
    to ``output`` (the same bytes the CLI writes); returns the trace written."""
    trace = read_trace(input, format=format, num_experts=num_experts, top_k=top_k,
                       skip_rows=skip_rows, skip_profile_rows=skip_profile_rows,
                       slot_map=slot_map, trtllm_raw=trtllm_raw)
    if model:
        trace.metadata["model"] = model
    if dataset:
        trace.metadata["dataset"] = dataset
    if category:
        if trace.kind != "histograms" or len(trace.histograms) != 1:
            raise _core.Error("--category applies to inputs holding one histogram set")
        trace.histograms = {category: next(iter(trace.histograms.values()))}
    write_trace(output, trace, ids_dtype=ids_dtype, counts_dtype=counts_dtype)
    return trace


def bundled_trace() -> str:
    """Path of the bundled real routing data (DeepSeek-V4.1-Flash coding histograms)."""
    return _core.bundled_trace()
