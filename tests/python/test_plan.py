"""iser.plan / Plan / iser.rewrite against `iser plan --json` on the same count matrices."""

import json

import numpy as np
import pytest

import iser

# (P, E, S): EP degrees with and without aligned sub-groups, S above and below H.
SHAPES = [(2, 8, 1), (4, 16, 2), (8, 64, 3), (16, 128, 4), (6, 48, 2), (64, 256, 2)]


def random_counts(rng, P, E, skew):
    """Counts with a few hot experts (Zipf-like popularity), so that plans have broadcasts."""
    popularity = rng.permutation(1.0 / np.arange(1, E + 1) ** skew)
    tokens = rng.integers(50, 400, size=P)
    return np.stack([rng.multinomial(t * 4, popularity / popularity.sum()) for t in tokens])


def cli_plan(cli, tmp_path, counts, *flags):
    path = tmp_path / "counts.json"
    P, E = counts.shape
    path.write_text(json.dumps({"num_ranks": P, "num_experts": E, "counts": counts.tolist()}))
    return cli.json("plan", "--counts", path, "--json", *flags)


@pytest.mark.parametrize("policy", ["halo-q", "iser"])
@pytest.mark.parametrize("P,E,S", SHAPES)
def test_plan_equals_cli(cli, tmp_path, policy, P, E, S):
    rng = np.random.default_rng([P, E, S, len(policy)])
    for trial in range(3):
        counts = random_counts(rng, P, E, skew=[0.6, 1.0, 1.4][trial])
        expected = cli_plan(cli, tmp_path, counts, "--slots", S, "--policy", policy, "--validate")
        plan = iser.plan(counts, slots=S, policy=policy, validate=True)
        assert plan.to_dict() == expected
        unvalidated = {k: v for k, v in expected.items() if k != "valid"}
        assert iser.plan(counts.astype(np.int32), slots=S, policy=policy).to_dict() == unvalidated


@pytest.mark.parametrize("policy", ["halo-q", "iser"])
def test_plan_with_lsa_teams_equals_cli(cli, tmp_path, policy):
    """16 ranks as 2 LSA teams of 8: no replication group spans a team, like the CLI's plan."""
    rng = np.random.default_rng(16)
    counts = random_counts(rng, 16, 128, skew=1.2)
    expected = cli_plan(cli, tmp_path, counts, "--slots", 2, "--policy", policy, "--lsa-size", 8,
                        "--validate")
    plan = iser.plan(counts, slots=2, policy=policy, lsa_size=8, validate=True)
    assert plan.to_dict() == expected and expected["lsa_size"] == 8
    for b in expected["broadcasts"]:
        hosts = set(range(b["group_begin"], b["group_begin"] + b["group_size"])) | {b["owner"]}
        assert len({r // 8 for r in hosts}) == 1, b
    with pytest.raises(iser.Error, match="lsa_size = 5"):
        iser.plan(counts, slots=2, lsa_size=5)


def test_plan_fields_match_dict():
    rng = np.random.default_rng(7)
    counts = random_counts(rng, 8, 64, skew=1.2)
    plan = iser.plan(counts, slots=3, policy="halo-q")
    d = plan.to_dict()
    assert plan.num_broadcasts == len(d["broadcasts"]) > 0
    assert (plan.num_ranks, plan.num_experts, plan.num_slots) == (8, 64, 3)
    assert plan.target == d["T"] and plan.policy == "halo-q"
    assert plan.owner_uses_home_slot == d["owner_uses_home_slot"]
    assert plan.loads.dtype == np.int32 and plan.loads.tolist() == d["loads"]
    assert plan.quotas.shape == (plan.num_broadcasts, 8)
    assert plan.quotas.tolist() == [b["quota"] for b in d["broadcasts"]]
    modes = {"owner-direct": 0, "sami": 1, "p2p": 2}
    for row, b in zip(plan.broadcasts.tolist(), d["broadcasts"]):
        fields = dict(zip(iser.Plan.broadcast_fields, row))
        assert fields["mode"] == modes[b["mode"]] and fields["resident"] == int(b["resident"])
        for name in ("expert", "owner", "level", "group_begin", "group_size", "helper"):
            assert fields[name] == b[name]
    assert (plan.counts == counts).all()
    plan.validate()
    assert plan.to_dict()["valid"] is True
    assert "halo-q" in repr(plan)


def test_plan_accepts_lists_int64_and_strided_arrays():
    rng = np.random.default_rng(3)
    counts = random_counts(rng, 4, 16, skew=1.0)
    expected = iser.plan(counts, slots=2).to_dict()
    assert iser.plan(counts.tolist(), slots=2).to_dict() == expected
    strided = np.asfortranarray(counts)  # column-major: non-contiguous rows
    assert iser.plan(strided, slots=2).to_dict() == expected
    wide = np.zeros((4, 32), dtype=np.int64)
    wide[:, ::2] = counts
    assert iser.plan(wide[:, ::2], slots=2).to_dict() == expected


@pytest.mark.parametrize("policy", ["halo-q", "iser", "owner-home", "p2p"])
def test_rewrite_realises_the_plan(policy):
    """Every route goes to a slot holding its expert, and the routes each rank computes per
    expert are the plan's quotas (home loads for experts without broadcasts)."""
    P, E, S, k, tau = 8, 32, 2, 4, 96
    H = E // P
    rng = np.random.default_rng(11)
    popularity = 1.0 / np.arange(1, E + 1) ** 1.3
    topk = np.stack([rng.choice(E, size=k, replace=False, p=popularity / popularity.sum())
                     for _ in range(P * tau)]).astype(np.int64)
    topk[5, 1] = -1  # an empty choice stays -1
    counts = iser.counts_from_topk(topk, num_ranks=P, num_experts=E)
    assert counts.sum() == (topk >= 0).sum()
    plan = iser.plan(counts, slots=S, policy=policy)
    d = plan.to_dict()
    computed = np.zeros((P, E), dtype=np.int64)  # routes of expert e computed on rank d
    for r in range(P):
        slots = iser.rewrite(plan, r, topk[r * tau:(r + 1) * tau])
        assert slots.shape == (tau, k) and slots.dtype == np.int32
        ids = topk[r * tau:(r + 1) * tau]
        assert ((slots == -1) == (ids == -1)).all()
        for expert, slot in zip(ids[ids >= 0], slots[ids >= 0]):
            dst, local = divmod(int(slot), H + S)
            if local < H:
                assert dst * H + local == expert
            else:
                hosts = [b for b in d["broadcasts"] if b["helper"] == local - H
                         and b["group_begin"] <= dst < b["group_begin"] + b["group_size"]]
                assert [b["expert"] for b in hosts][:1] == [expert]
            computed[dst, expert] += 1
    assert computed.sum(axis=1).tolist() == d["loads"]
    for b in d["broadcasts"]:
        e = b["expert"]
        quota = np.sum([q["quota"] for q in d["broadcasts"] if q["expert"] == e], axis=0)
        assert computed[:, e].tolist() == quota.tolist()


def test_policies_list():
    names = iser.policies()
    assert {"halo-q", "iser", "none", "eplb", "p2p"} <= set(names)
