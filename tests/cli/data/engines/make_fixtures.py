"""Builds the engine-dump fixtures the way each engine's own writer builds them.

Each block follows the upstream writer named beside it (data layouts, dtypes, file names); the
routing itself is drawn from a seeded generator. Beside every fixture, <name>.expected.json holds
the counts (or token ids) the conversion must reproduce exactly, computed here from the same
draws, independently of the writer's own arithmetic.

    python make_fixtures.py OUTDIR      (needs torch and safetensors)
"""

import json
import os
import random
import sys

import torch
from safetensors.torch import save_file

L, E, K = 4, 8, 2  # layer 0 is dense (no routes), layers 1..3 are MoE
PHYS = 10  # two redundant physical experts
# physical -> logical: 0..7 are the experts themselves, 8 replicates 0, 9 replicates 3
P2L = [[p if p < E else (0, 3)[p - E] for p in range(PHYS)] for _ in range(L)]


def draw_pass(rng, num_tokens, moe_layers=(1, 2, 3)):
    """One forward pass: logical top-k per (layer, token) and the physical copy chosen."""
    logical = [[[-1] * K for _ in range(num_tokens)] for _ in range(L)]
    physical = [[[-1] * K for _ in range(num_tokens)] for _ in range(L)]
    for l in moe_layers:
        for t in range(num_tokens):
            ids = rng.sample(range(E), K)
            for j, e in enumerate(ids):
                copies = [p for p in range(PHYS) if P2L[l][p] == e]
                logical[l][t][j] = e
                physical[l][t][j] = rng.choice(copies)
    return logical, physical


def logical_counts(logical):
    out = [[0] * E for _ in range(L)]
    for l in range(L):
        for tok in logical[l]:
            for e in tok:
                if e >= 0:
                    out[l][e] += 1
    return out


def physical_count_tensor(physical):
    # sglang _SelectExpertsSinglePassGatherer: scatter_add of (topk_ids != -1) into [L, PHYS].
    data = torch.zeros((L, PHYS), dtype=torch.int)
    for l in range(L):
        ids = torch.tensor(physical[l], dtype=torch.int32).flatten()
        mask = ids != -1
        data[l, :].scatter_add_(0, ids.masked_fill(~mask, 0).long(), mask.int())
    return data


def write_expected(path, obj):
    with open(path + ".expected.json", "w") as f:
        json.dump(obj, f)


def sglang_stat(out, name, buffer_size, num_passes, seed, utilization):
    # python/sglang/srt/eplb/expert_distribution.py: _StatAccumulator + _CircularBuffer.
    rng = random.Random(seed)
    buf = torch.zeros((buffer_size, L, PHYS), dtype=torch.int32)
    curr = 0
    passes = []
    for _ in range(num_passes):
        logical, physical = draw_pass(rng, rng.randint(3, 6))
        passes.append(logical_counts(logical))
        buf[curr] = physical_count_tensor(physical)
        curr = (curr + 1) % buffer_size
    p2l = torch.tensor(P2L, dtype=torch.int64)
    lc = torch.zeros((buffer_size, L, E), dtype=torch.int32)
    lc.scatter_add_(2, p2l.unsqueeze(0).expand(buffer_size, -1, -1), buf)
    torch.save(dict(rank=0, logical_count=lc, average_utilization_rate_over_window=utilization),
               os.path.join(out, name))
    if num_passes <= buffer_size:
        rows = passes
    else:  # the dump keeps the buffer as stored; it does not record the write position
        start = num_passes - buffer_size
        stored = passes[start:]
        rows = [None] * buffer_size
        for j, counts in enumerate(stored):
            rows[(start + j) % buffer_size] = counts
    write_expected(os.path.join(out, name), {"kind": "iteration_counts", "num_experts": E,
                                             "num_layers": L, "counts": rows})


def sglang_detail(out, dirname, mode, ranks, pass_ids, seed):
    # _DetailAccumulator.dump: one file per rank, expert_distribution_recorder_<time>_<rank>.pt.
    rng = random.Random(seed)
    d = os.path.join(out, dirname)
    os.makedirs(d, exist_ok=True)
    expected = {}  # pass id -> rank -> counts / tokens
    files = []
    for r in range(ranks):
        records = []
        for fp in pass_ids:
            num_tokens = rng.randint(2, 5)
            logical, physical = draw_pass(rng, num_tokens)
            rec = dict(forward_pass_id=fp, rank=r, gatherer_key="primary")
            if mode == "per_token":
                # _DetailSinglePassGatherer: metadata, topk ids padded to 8 columns with -1.
                topk = torch.full((L, num_tokens, 8), -1, dtype=torch.int32)
                for l in range(L):
                    for t in range(num_tokens):
                        for j in range(K):
                            topk[l, t, j] = physical[l][t][j]
                rec.update(input_ids=[rng.randint(0, 1000) for _ in range(num_tokens)],
                           positions=list(range(num_tokens)), extend_seq_lens=[num_tokens],
                           forward_mode=1, topk_ids_of_layer=topk.clone(), misc_objects=[],
                           global_physical_count=physical_count_tensor(physical))
            else:
                rec.update(global_physical_count=physical_count_tensor(physical).clone())
            records.append(rec)
            expected.setdefault(fp, {})[r] = (logical if mode == "per_token"
                                              else logical_counts(logical))
        files.append(f"expert_distribution_recorder_1764633600.{r + 1}_{r}.pt")
        torch.save(dict(records=records,
                        last_physical_to_logical_map=torch.tensor(P2L, dtype=torch.int64)),
                   os.path.join(d, files[-1]))
    order = sorted(pass_ids)
    if mode == "per_token":
        tokens = [[] for _ in range(L)]
        for fp in order:
            for r in range(ranks):
                for l in range(L):
                    tokens[l].extend(expected[fp][r][l])
        exp = {"kind": "tokens", "num_experts": E, "num_layers": L, "top_k": K, "topk_ids": tokens}
    else:
        exp = {"kind": "iteration_rank_counts", "num_experts": E, "num_layers": L,
               "counts": [[[expected[fp][r][l] for r in range(ranks)] for l in range(L)]
                          for fp in order]}
    write_expected(d, exp)
    return files


def trtllm(out, dirname, num_slots, rank_layers, iters, seed, slot_to_expert=None, raw=True):
    # tensorrt_llm/_torch/expert_statistic.py: per rank "<iter>_<layer>" -> bincount (int64) and
    # "<iter>_<layer>" -> token_selected_experts [T, k] int32 (rank<r>_raw.safetensors).
    rng = random.Random(seed)
    d = os.path.join(out, dirname)
    os.makedirs(d, exist_ok=True)
    layers = sorted({l for ls in rank_layers for l in ls})
    per = {}  # (iter, layer) -> rank -> [T, k] slot ids
    # Under pipeline parallelism a later stage's rank sees the tokens of the same data-parallel
    # rank in the first stage: the token count depends on (iteration, position in the stage).
    stage_width = sum(1 for ls in rank_layers if ls == rank_layers[0])
    tokens_of = {(it, i): rng.randint(2, 6) for it in iters for i in range(stage_width)}
    for r, ls in enumerate(rank_layers):
        records, raw_records = {}, {}
        for it in iters:
            num_tokens = tokens_of[(it, r % stage_width)]
            for l in ls:
                sel = torch.tensor([rng.sample(range(num_slots), K) for _ in range(num_tokens)],
                                   dtype=torch.int32)
                key = f"{it}_{l}"
                raw_records[key] = sel.cpu().contiguous()
                counts = torch.bincount(sel.flatten(), minlength=num_slots)
                records[key] = counts.cpu() if key not in records else records[key] + counts
                per.setdefault((it, l), {})[r] = sel.tolist()
        if r == 0:
            with open(os.path.join(d, "meta_info.json"), "w") as f:
                json.dump({"num_experts": num_slots, "num_experts_per_token": K}, f)
        save_file(records, os.path.join(d, f"rank{r}.safetensors"))
        if raw:
            save_file(raw_records, os.path.join(d, f"rank{r}_raw.safetensors"))
    to_e = (lambda l, s: slot_to_expert[str(l)][s]) if slot_to_expert else (lambda l, s: s)
    num_e = E if slot_to_expert else num_slots
    ranks_of = {l: [r for r, ls in enumerate(rank_layers) if l in ls] for l in layers}
    counts = []
    for it in iters:
        row = []
        for l in layers:
            per_rank = []
            for r in ranks_of[l]:
                c = [0] * num_e
                for tok in per[(it, l)][r]:
                    for s in tok:
                        c[to_e(l, s)] += 1
                per_rank.append(c)
            row.append(per_rank)
        counts.append(row)
    tokens = [[[to_e(l, s) for s in tok] for it in iters for r in ranks_of[l]
               for tok in per[(it, l)][r]] for l in layers]
    write_expected(d, {"kind": "iteration_rank_counts", "num_experts": num_e,
                       "num_layers": len(layers), "counts": counts})
    with open(os.path.join(d, "raw.expected.json"), "w") as f:
        json.dump({"kind": "tokens", "num_experts": num_e, "num_layers": len(layers),
                   "top_k": K, "topk_ids": tokens}, f)


def vllm(out, seed):
    # vllm/distributed/eplb/eplb_state.py keeps expert_load_pass [L, physical] and
    # expert_load_window [W, L, physical] (int64) with physical_to_logical_map [L, physical];
    # the rebalance input global_expert_load is [L, logical]. Routed-experts capture returns
    # routed_experts [tokens, layers, top_k] int16. The window is a ring written at
    # expert_load_window_step, which then advances modulo the window size.
    rng = random.Random(seed)
    W, steps = 4, 6  # the ring has wrapped: it holds steps 2..5, step 4 at row 0
    window = torch.zeros((W, L, PHYS), dtype=torch.int64)
    step = 0
    per_step = []
    for _ in range(steps):
        logical, physical = draw_pass(rng, rng.randint(3, 6))
        window[step] = physical_count_tensor(physical).to(torch.int64)
        step = (step + 1) % W
        per_step.append(logical_counts(logical))
    p2l = torch.tensor(P2L, dtype=torch.int64)
    kept = per_step[steps - W:]  # chronological
    stored = [kept[(i - step) % W] for i in range(W)]
    save_file({"expert_load_window": window, "physical_to_logical_map": p2l},
              os.path.join(out, "vllm_expert_load_window.safetensors"))
    write_expected(os.path.join(out, "vllm_expert_load_window.safetensors"),
                   {"kind": "iteration_counts", "num_experts": E, "num_layers": L,
                    "counts": stored})
    save_file({"expert_load_window": window, "physical_to_logical_map": p2l,
               "expert_load_window_step": torch.tensor([step], dtype=torch.int64)},
              os.path.join(out, "vllm_expert_load_window_step.safetensors"))
    write_expected(os.path.join(out, "vllm_expert_load_window_step.safetensors"),
                   {"kind": "iteration_counts", "num_experts": E, "num_layers": L,
                    "counts": kept})
    per_step = kept
    glob = torch.zeros((L, E), dtype=torch.int64)
    glob.scatter_add_(1, p2l, window.sum(dim=0))
    save_file({"global_expert_load": glob}, os.path.join(out, "vllm_global_expert_load.safetensors"))
    write_expected(os.path.join(out, "vllm_global_expert_load.safetensors"),
                   {"kind": "histograms", "num_experts": E, "num_layers": L,
                    "counts": [[sum(s[l][e] for s in per_step) for e in range(E)]
                               for l in range(L)]})
    torch.save({"global_expert_load": glob}, os.path.join(out, "vllm_global_expert_load.pt"))
    write_expected(os.path.join(out, "vllm_global_expert_load.pt"),
                   {"kind": "histograms", "num_experts": E, "num_layers": L,
                    "counts": glob.tolist()})
    T = 7
    logical, _ = draw_pass(rng, T, moe_layers=range(L))
    routed = torch.tensor([[logical[l][t] for l in range(L)] for t in range(T)],
                          dtype=torch.int16)
    save_file({"routed_experts": routed}, os.path.join(out, "vllm_routed_experts.safetensors"))
    write_expected(os.path.join(out, "vllm_routed_experts.safetensors"),
                   {"kind": "tokens", "num_experts": E, "num_layers": L, "top_k": K,
                    "topk_ids": logical})
    # An integer tensor that says nothing about what it holds: must be refused.
    save_file({"load": glob}, os.path.join(out, "vllm_unnamed.safetensors"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sglang_stat(out, "expert_distribution_recorder_1764633600.5.pt", 8, 3, 1, None)
    sglang_stat(out, "expert_distribution_recorder_1764633601.5.pt", 4, 6, 2, 0.75)
    sglang_detail(out, "sglang_per_pass", "per_pass", 2, [7, 8, 9], 3)
    sglang_detail(out, "sglang_per_token", "per_token", 2, [4, 5], 4)
    trtllm(out, "trtllm_adp", E, [[1, 2, 3], [1, 2, 3]], [10, 11, 12], 5)
    trtllm(out, "trtllm_pp", E, [[1, 2], [1, 2], [3], [3]], [10, 11], 6)
    slot_map = {str(l): [s if s < E else (0, 3)[s - E] for s in range(PHYS)] for l in (1, 2, 3)}
    trtllm(out, "trtllm_lb", PHYS, [[1, 2, 3], [1, 2, 3]], [10, 11], 7, slot_to_expert=slot_map)
    with open(os.path.join(out, "trtllm_lb_slot_map.json"), "w") as f:
        json.dump(slot_map, f)
    vllm(out, 8)


if __name__ == "__main__":
    main()
