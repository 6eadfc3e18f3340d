"""iser.eplb against `iser eplb` (and DeepSeek's published README example)."""

import json

import numpy as np
import pytest

import iser

README_WEIGHT = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                 [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]


def cli_eplb(cli, tmp_path, weight, replicas, groups, nodes, gpus):
    path = tmp_path / "weight.json"
    path.write_text(json.dumps({"weight": np.asarray(weight).tolist()}))
    return cli.json("eplb", "--weight", path, "--replicas", replicas, "--groups", groups,
                    "--nodes", nodes, "--gpus", gpus)


def as_lists(result):
    return {name: np.asarray(a).tolist() for name, a in zip(("phy2log", "log2phy", "logcnt"), result)}


def test_readme_example(cli, tmp_path):
    phy2log, log2phy, logcnt = iser.eplb(README_WEIGHT, 16, 4, 2, 8)
    # DeepSeek's README output.
    assert phy2log.tolist() == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                                [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
    assert phy2log.dtype == np.int64 and log2phy.shape == (2, 12, 2) and logcnt.shape == (2, 12)
    assert as_lists((phy2log, log2phy, logcnt)) == cli_eplb(cli, tmp_path, README_WEIGHT, 16, 4, 2, 8)


@pytest.mark.parametrize("L,E,R,groups,nodes,gpus", [
    (3, 16, 24, 4, 2, 8), (2, 64, 80, 8, 2, 16), (4, 12, 12, 3, 2, 4), (1, 32, 48, 1, 1, 8)])
def test_random_weights_equal_cli(cli, tmp_path, L, E, R, groups, nodes, gpus):
    rng = np.random.default_rng([L, E, R])
    weight = rng.integers(0, 1000, size=(L, E)).astype(np.float64)
    assert as_lists(iser.eplb(weight, R, groups, nodes, gpus)) == \
        cli_eplb(cli, tmp_path, weight, R, groups, nodes, gpus)
    # int32 weights plan the same.
    assert as_lists(iser.eplb(weight.astype(np.int32), R, groups, nodes, gpus)) == \
        as_lists(iser.eplb(weight, R, groups, nodes, gpus))


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    result = iser.eplb(torch.tensor(README_WEIGHT), 16, 4, 2, 8)
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.int64 for t in result)
    assert as_lists(result) == as_lists(iser.eplb(README_WEIGHT, 16, 4, 2, 8))


def test_errors_match_cli(cli, tmp_path):
    with pytest.raises(iser.Error) as e:
        iser.eplb(README_WEIGHT, 15, 4, 2, 8)
    assert str(e.value) in cli.error("eplb", "--weight", _write(tmp_path, README_WEIGHT),
                                     "--replicas", 15, "--groups", 4, "--nodes", 2, "--gpus", 8)
    with pytest.raises(iser.Error, match="weight"):
        iser.eplb([[1.0, -2.0]], 2, 1, 1, 1)
    with pytest.raises(iser.Error, match="2-D"):
        iser.eplb([1.0, 2.0], 2, 1, 1, 1)
    with pytest.raises(iser.Error, match="dtype"):
        iser.eplb(np.array([[True, False]]), 2, 1, 1, 1)


def _write(tmp_path, weight):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"weight": weight}))
    return path
