"""iser.model against `iser model ... --json`."""

import pytest

import iser


def test_overlap_equals_cli(cli):
    flags = dict(hw="GB300", model="deepseek-v4-pro", ep=8, tokens_per_rank=8192, copies=4)
    expected = cli.json("model", "overlap", "--hw", "GB300", "--model", "deepseek-v4-pro", "--ep", 8,
                        "--tokens-per-rank", 8192, "--copies", 4, "--json")
    result = iser.model("overlap", **flags)
    assert result == expected
    assert result["copies_hidden_shared"] == pytest.approx(5.24, abs=0.005)


def test_sweep_and_broadcast_equal_cli(cli):
    assert iser.model("overlap", sweep=True) == cli.json("model", "overlap", "--sweep", "--json")
    assert iser.model("broadcast", bytes="44MB", group="4..16") == \
        cli.json("model", "broadcast", "--bytes", "44MB", "--group", "4..16", "--json")


def test_model_errors():
    with pytest.raises(iser.Error, match="unknown model 'nope'"):
        iser.model("nope")
    with pytest.raises(iser.Error, match="XYZ"):
        iser.model("overlap", hw="XYZ")
