"""iser.replay against `iser replay --json` (bundled trace, synthetic routing, trace files)."""

import json
import threading
import time

import pytest

import iser


def cli_replay(cli, tmp_path, *flags):
    out = tmp_path / "replay.json"
    cli.run("replay", "-q", "--json", out, *flags)
    return json.loads(out.read_text())


def test_default_source_equals_cli(cli, tmp_path):
    """No trace: the CLI's default source (real drift over the bundled topics)."""
    kwargs = dict(ep=[8, 16], slots=3, tokens_per_rank=1024, iterations=1, warmup=1,
                  layers=[3, 19], policies=["none", "halo-q", "iser", "eplb", "p2p"], seed=5)
    expected = cli_replay(cli, tmp_path, "--ep", "8,16", "--slots", 3, "--tokens-per-rank", 1024,
                          "--iterations", 1, "--warmup", 1, "--layers", "3,19",
                          "--policies", "none,halo-q,iser,eplb,p2p", "--seed", 5)
    result = iser.replay(**kwargs)
    assert result["results"] == expected["results"]
    assert result == expected
    assert [r["ep"] for r in result["results"]] == [8] * 5 + [16] * 5


def test_bundled_trace_equals_cli(cli, tmp_path):
    """The bundled DeepSeek-V4.1-Flash coding histograms, by path."""
    expected = cli_replay(cli, tmp_path, "--trace", iser.bundled_trace(), "--ep", 8,
                          "--layers", 3, "--iterations", 1, "--tokens-per-rank", 512,
                          "--policies", "none,eplb-oracle,halo-q")
    assert iser.replay(iser.bundled_trace(), ep=[8], layers=[3], iterations=1,
                       tokens_per_rank=512, policies="none,eplb-oracle,halo-q") == expected


def test_synthetic_and_layers_equal_cli(cli, tmp_path):
    expected = cli_replay(cli, tmp_path, "--synthetic", "power-law", "--num-experts", 64,
                          "--top-k", 4, "--num-layers", 6, "--ep", 8, "--layers", "1-3,5",
                          "--policies", "halo-q,iser", "--tokens-per-rank", 512, "--validate",
                          "--min-move", 2)
    result = iser.replay(synthetic="power-law", num_experts=64, top_k=4, num_layers=6, ep=[8],
                         layers="1-3,5", policies="halo-q,iser", tokens_per_rank=512,
                         validate=True, min_move=2)
    assert result == expected
    assert iser.replay(synthetic="power-law", num_experts=64, top_k=4, num_layers=6, ep=[8],
                       layers=[1, 2, 3, 5], policies=["halo-q", "iser"], tokens_per_rank=512,
                       validate=True, min_move=2) == expected


def test_trace_file_equals_cli(cli, tmp_path):
    path = tmp_path / "routes.jsonl"
    lines = [json.dumps({"layer": l, "topk_ids": [(t * 7 + l + j * 5) % 32 for j in range(4)]})
             for t in range(256) for l in range(2)]
    path.write_text("\n".join(lines) + "\n")
    flags = ["--num-experts", 32, "--top-k", 4, "--ep", "4,8", "--tokens-per-rank", 16,
             "--policies", "none,halo-q"]
    expected = cli_replay(cli, tmp_path, "--trace", path, *flags)
    assert iser.replay(path, num_experts=32, top_k=4, ep=[4, 8], tokens_per_rank=16,
                       policies=["none", "halo-q"]) == expected


def test_releases_the_gil():
    """The main thread keeps running Python while a replay runs in another thread."""
    ticks = 0
    done = threading.Event()

    def work():
        iser.replay(synthetic="mixed", ep=[8, 16], num_layers=16, tokens_per_rank=4096,
                    policies=["halo-q", "iser"], threads=1)
        done.set()

    start = time.perf_counter()
    thread = threading.Thread(target=work)
    thread.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    thread.join()
    elapsed = time.perf_counter() - start
    assert elapsed > 0.05, "replay too short to tell"
    # Holding the GIL would leave the main thread one tick per switch interval at most.
    assert ticks > elapsed / 0.005, (ticks, elapsed)


def test_bad_arguments_raise():
    with pytest.raises(iser.Error, match="unknown policy|policy"):
        iser.replay(synthetic="mixed", ep=[8], policies=["nope"], tokens_per_rank=64)
    with pytest.raises(iser.Error, match="--slots"):
        iser.replay(slots=-1)
    with pytest.raises(iser.Error, match="implied"):
        iser.replay(json="x.json")
    with pytest.raises(iser.Error, match="exclusive"):
        iser.replay("x.safetensors", synthetic="mixed")
    with pytest.raises(iser.Error, match="bad --layers"):
        iser.replay(layers="3-x")
    with pytest.raises(iser.Error, match="ep|EP|divid"):
        iser.replay(ep=[7], policies=["none"], tokens_per_rank=64)
