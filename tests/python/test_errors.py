"""Bad inputs raise iser.Error (a ValueError) naming the problem, with the CLI's message where
the CLI takes the same input."""

import json

import numpy as np
import pytest

import iser


def test_error_is_a_value_error():
    assert issubclass(iser.Error, ValueError)
    assert iser.Error.__module__ == "iser"


def test_ranks_not_dividing_experts(cli, tmp_path):
    counts = np.ones((3, 16), dtype=np.int64)
    with pytest.raises(iser.Error) as e:
        iser.plan(counts, slots=2)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"num_ranks": 3, "num_experts": 16, "counts": counts.tolist()}))
    message = cli.error("plan", "--counts", path, "--slots", 2)
    assert str(e.value) == message
    assert "16" in message and "3" in message


def test_unknown_policy_matches_cli(cli, tmp_path):
    counts = np.ones((4, 16), dtype=np.int32)
    with pytest.raises(iser.Error) as e:
        iser.plan(counts, policy="nope")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"num_ranks": 4, "num_experts": 16, "counts": counts.tolist()}))
    assert str(e.value) == cli.error("plan", "--counts", path, "--policy", "nope")
    assert "nope" in str(e.value)


@pytest.mark.parametrize("counts,match", [
    (np.ones(16, dtype=np.int32), r"counts: expected a 2-D array \[num_ranks, num_experts\], got shape \[16\]"),
    (np.ones((2, 4, 4), dtype=np.int32), "got shape \\[2, 4, 4\\]"),
    (np.ones((4, 16)), "counts: dtype float64 is not an integer type"),
    (np.ones((4, 16), dtype=bool), "dtype bool8 is not an integer type"),
    (np.full((4, 16), 2**40, dtype=np.int64), r"counts\[0\]\[0\] = 1099511627776 does not fit in 32 bits"),
    (np.zeros((0, 16), dtype=np.int32), "num_ranks = 0 out of range"),
    (["a", "b"], "counts"),
])
def test_bad_counts(counts, match):
    with pytest.raises(iser.Error, match=match):
        iser.plan(counts)


def test_negative_count():
    counts = np.ones((4, 16), dtype=np.int32)
    counts[2, 5] = -3
    with pytest.raises(iser.Error, match=r"counts\[2\]\[5\] = -3 is negative"):
        iser.plan(counts)


def test_bad_slots_and_gmin():
    with pytest.raises(iser.Error, match="slots|S"):
        iser.plan(np.ones((4, 16), dtype=np.int32), slots=-1)
    with pytest.raises(iser.Error, match="g_min"):
        iser.plan(np.ones((4, 16), dtype=np.int32), g_min=0)


def test_rewrite_errors():
    P, E, k = 4, 16, 2
    topk = np.tile(np.arange(k), (P * 8, 1))
    counts = iser.counts_from_topk(topk, num_ranks=P, num_experts=E)
    plan = iser.plan(counts, slots=1)
    with pytest.raises(iser.Error, match="rank = 4 out of range"):
        iser.rewrite(plan, 4, topk[:8])
    bad = topk[:8].copy()
    bad[3, 1] = E
    with pytest.raises(iser.Error, match=str(E)):
        iser.rewrite(plan, 0, bad)
    with pytest.raises(iser.Error):  # routes that differ from the planned counts
        iser.rewrite(plan, 0, np.full((8, k), 5))
    with pytest.raises(iser.Error, match="2-D"):
        iser.rewrite(plan, 0, topk[:8].ravel())
    with pytest.raises(iser.Error, match="float"):
        iser.rewrite(plan, 0, topk[:8].astype(np.float32))


def test_counts_from_topk_errors():
    with pytest.raises(iser.Error, match="token|17"):
        iser.counts_from_topk(np.array([[0, 17], [1, 2]]), num_ranks=2, num_experts=16)
    with pytest.raises(iser.Error, match="not a multiple of num_ranks"):
        iser.counts_from_topk(np.zeros((3, 2), dtype=np.int32), num_ranks=2, num_experts=16)


def test_unreadable_files(tmp_path):
    with pytest.raises(iser.Error, match="nothing-here"):
        iser.replay(tmp_path / "nothing-here.safetensors")
    with pytest.raises(iser.Error, match="nothing-here"):
        iser.read_trace(tmp_path / "nothing-here.jsonl")
    with pytest.raises(iser.Error, match="cannot|write|o/x"):
        iser.write_trace(tmp_path / "no" / "such" / "dir" / "x.safetensors",
                         iser.Trace(kind="histograms", metadata={"num_experts": 4, "top_k": 1},
                                    histograms={"": np.ones((1, 4), dtype=np.int64)}))
