"""Routing data: every format the CLI reads, read into NumPy and converted to canonical
safetensors byte-for-byte like `iser convert`; round trips of the canonical layout."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import iser

E, K = 16, 4


def write_jsonl(path: Path, num_tokens=40, num_layers=2):
    rows = [json.dumps({"type": "meta", "num_experts": E, "top_k": K, "model": "toy"})]
    for t in range(num_tokens):
        for layer in range(num_layers):
            ids = [(t * 3 + layer + 5 * j) % E for j in range(K)]
            rows.append(json.dumps({"layer": layer, "req_id": t // 10, "topk_ids": ids}))
    path.write_text("\n".join(rows) + "\n")


def write_csv(path: Path, counts: np.ndarray):
    header = "layer," + ",".join(f"e{e}" for e in range(counts.shape[1]))
    lines = [header] + [",".join(map(str, [l, *row])) for l, row in enumerate(counts.tolist())]
    path.write_text("\n".join(lines) + "\n")


def write_vllm(path: Path, counts: np.ndarray):
    """A plain safetensors file with vLLM's expert load: int64 [L, E] `global_expert_load`."""
    data = counts.astype("<i8").tobytes()
    header = json.dumps({"__metadata__": {"top_k": str(K)},
                         "global_expert_load": {"dtype": "I64", "shape": list(counts.shape),
                                                "data_offsets": [0, len(data)]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def write_trtllm(path: Path, counts: np.ndarray):
    """A TensorRT-LLM expert-statistics dump: counts [I, L, P, E]."""
    path.mkdir()
    I, L, P, _ = counts.shape
    (path / "meta_info.json").write_text(json.dumps({"num_experts": E, "top_k": K}))
    for r in range(P):
        header, blob = {}, b""
        for i in range(I):
            for l in range(L):
                data = counts[i, l, r].astype("<i4").tobytes()
                header[f"{i}_{l}"] = {"dtype": "I32", "shape": [E],
                                      "data_offsets": [len(blob), len(blob) + len(data)]}
                blob += data
        text = json.dumps(header).encode()
        (path / f"rank{r}.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + blob)


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(1)
    hist = rng.integers(0, 500, size=(3, E))
    paths = {}
    write_jsonl(paths.setdefault("jsonl", tmp_path / "routes.jsonl"))
    write_csv(paths.setdefault("csv", tmp_path / "hist.csv"), hist)
    write_vllm(paths.setdefault("vllm", tmp_path / "load.safetensors"), hist)
    (tmp_path / "sglang.json").write_text(json.dumps({"logical_count": hist.tolist(), "top_k": K}))
    paths["sglang"] = tmp_path / "sglang.json"
    write_trtllm(paths.setdefault("trtllm", tmp_path / "dump"), rng.integers(0, 50, (2, 3, 4, E)))
    return paths, hist


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "vllm", "sglang", "trtllm"])
def test_convert_equals_cli(cli, tmp_path, inputs, fmt):
    paths, _ = inputs
    extra = ["--top-k", K] if fmt == "csv" else []
    cli.run("convert", "-i", paths[fmt], "-o", tmp_path / "cli.safetensors", *extra)
    trace = iser.convert(paths[fmt], tmp_path / "py.safetensors", top_k=K if extra else None)
    assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "cli.safetensors").read_bytes()
    again = iser.read_trace(tmp_path / "py.safetensors")
    assert again.kind == trace.kind
    for name in ("topk_ids", "request_ids", "iteration_counts"):
        a, b = getattr(trace, name), getattr(again, name)
        assert (a is None and b is None) or np.array_equal(a, b)
    if trace.histograms is not None:
        assert trace.histograms.keys() == again.histograms.keys()
        assert all(np.array_equal(trace.histograms[c], again.histograms[c]) for c in trace.histograms)


def test_read_formats(inputs):
    paths, hist = inputs
    tokens = iser.read_trace(paths["jsonl"])
    assert tokens.kind == "tokens" and tokens.topk_ids.shape == (2, 40, K)
    assert tokens.topk_ids[1, 7].tolist() == [(7 * 3 + 1 + 5 * j) % E for j in range(K)]
    assert tokens.metadata["model"] == "toy" and tokens.request_ids.tolist() == [t // 10 for t in range(40)]
    for fmt in ("csv", "vllm", "sglang"):
        h = iser.read_trace(paths[fmt], top_k=K)
        assert h.kind == "histograms" and h.num_experts == E and h.top_k == K
        assert np.array_equal(next(iter(h.histograms.values())), hist)
    dump = iser.read_trace(paths["trtllm"], format="trtllm")
    assert dump.kind == "iteration_counts" and dump.iteration_counts.shape == (2, 3, 4, E)


def test_write_read_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    ids = rng.integers(-1, E, size=(3, 50, K)).astype(np.int32)
    trace = iser.Trace(kind="tokens", metadata={"num_experts": E, "top_k": K, "model": "m"},
                       topk_ids=ids, request_ids=np.arange(50) // 5)
    for ids_dtype in ("int16", "int32"):
        iser.write_trace(tmp_path / "t.safetensors", trace, ids_dtype=ids_dtype)
        back = iser.read_trace(tmp_path / "t.safetensors")
        assert np.array_equal(back.topk_ids, ids) and np.array_equal(back.request_ids, np.arange(50) // 5)
        assert back.metadata["model"] == "m" and back.num_layers == 3
    counts = iser.Trace(kind="iteration_counts", metadata={"num_experts": E, "top_k": K},
                        iteration_counts=rng.integers(0, 9, size=(2, 3, 8, E)))
    iser.write_trace(tmp_path / "c.safetensors", counts, counts_dtype="int32")
    assert np.array_equal(iser.read_trace(tmp_path / "c.safetensors").iteration_counts,
                          counts.iteration_counts)


def test_bundled_trace(cli):
    trace = iser.read_trace(iser.bundled_trace())
    assert trace.kind == "histograms" and trace.num_experts == 384 and trace.num_layers == 40
    assert list(trace.histograms) == ["coding"] and trace.histograms["coding"].shape == (40, 384)


def test_bad_traces(tmp_path, cli):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(iser.Error) as e:
        iser.read_trace(missing)
    assert "missing.safetensors" in str(e.value)
    assert str(e.value) in cli.error("convert", "-i", missing, "-o", tmp_path / "x.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"12345678{not json")
    with pytest.raises(iser.Error, match="bad.safetensors"):
        iser.read_trace(bad)
    with pytest.raises(iser.Error, match="unknown trace format 'xml'"):
        iser.read_trace(bad, format="xml")
    out_of_range = iser.Trace(kind="tokens", metadata={"num_experts": E, "top_k": K},
                              topk_ids=np.full((1, 2, K), E, dtype=np.int32))
    with pytest.raises(iser.Error):
        iser.write_trace(tmp_path / "o.safetensors", out_of_range)
    with pytest.raises(iser.Error, match="dtype"):
        iser.write_trace(tmp_path / "o.safetensors", out_of_range, ids_dtype="int8")


ENGINES = Path(__file__).resolve().parents[1] / "cli" / "data" / "engines"


@pytest.mark.parametrize("name, flags", [
    ("expert_distribution_recorder_1764633600.5.pt", {"top_k": 2}),
    ("sglang_per_pass", {"top_k": 2}),
    ("sglang_per_token", {}),
    ("trtllm_pp", {}),
    ("trtllm_adp", {"trtllm_raw": True}),
    ("trtllm_lb", {"slot_map": ENGINES / "trtllm_lb_slot_map.json"}),
    ("vllm_expert_load_window.safetensors", {"top_k": 2}),
    ("vllm_global_expert_load.pt", {"top_k": 2}),
])
def test_engine_dumps_convert_like_the_cli(cli, tmp_path, name, flags):
    """The engines' own dump layouts (tests/cli/data/engines) convert to the CLI's bytes."""
    args = []
    for key, value in flags.items():
        args += ["--" + key.replace("_", "-")] + ([] if value is True else [value])
    cli.run("convert", "-i", ENGINES / name, "-o", tmp_path / "cli.safetensors", *args)
    iser.convert(ENGINES / name, tmp_path / "py.safetensors", **flags)
    assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "cli.safetensors").read_bytes()


def test_load_balancer_dump_without_map_is_refused():
    with pytest.raises(iser.Error, match="slot-map"):
        iser.read_trace(ENGINES / "trtllm_lb", num_experts=8)
