#!/usr/bin/env python3
"""Independent check of `iser replay`'s R without balancing on the bundled DeepSeek-V4.1-Flash
histograms (the independent check of R in docs/evaluation.md), written from the raw CSV with numpy only.

1. Whole-set R per EP degree: rank r owns experts [rH, (r+1)H); R = max / mean rank load of the
   raw histogram, averaged over layers (the data README quotes 1.23 / 1.54 / 2.07 / 2.54).
2. Per-iteration R: P x tau tokens per layer, each drawing k = 6 distinct experts with
   probability proportional to the count, without replacement (Gumbel-top-k: the k largest of
   log p + Gumbel noise are exactly successive sampling without replacement), R = max / mean of
   routes per home rank, averaged over layers. numpy's RNG, not iser's: the two agree up to
   sampling noise (the script prints the standard error).

Usage: scripts/check_bundled_r.py [CSV] [--tokens-per-rank 8192] [--iterations 1]
"""
import argparse
import csv
import pathlib

import numpy as np


def load(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return np.array([[int(x) for x in row[1:]] for row in rows[1:]], dtype=np.int64)


def whole_set_r(hist, ep):
    loads = hist.reshape(hist.shape[0], ep, -1).sum(axis=2)
    return (loads.max(axis=1) / loads.mean(axis=1)).mean()


def sampled_r(hist, ep, tau, k, iterations, rng):
    rs = []
    for layer in hist:
        logp = np.log(np.maximum(layer, 1e-300) / layer.sum())
        logp[layer == 0] = -np.inf
        for _ in range(iterations):
            counts = np.zeros(len(layer), dtype=np.int64)
            remaining = ep * tau
            while remaining:
                n = min(remaining, 16384)
                keys = logp + rng.gumbel(size=(n, len(layer)))
                top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
                counts += np.bincount(top.ravel(), minlength=len(layer))
                remaining -= n
            loads = counts.reshape(ep, -1).sum(axis=1)
            rs.append(loads.max() / loads.mean())
    rs = np.array(rs)
    return rs.mean(), rs.std(ddof=1) / np.sqrt(len(rs))


def main():
    default_csv = pathlib.Path(__file__).resolve().parents[2] / "shared/data/dsv41-flash/coding.csv"
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(default_csv))
    ap.add_argument("--tokens-per-rank", type=int, default=8192)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--top-k", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    hist = load(args.csv)
    rng = np.random.default_rng(args.seed)
    print(f"{hist.shape[0]} layers x {hist.shape[1]} experts, row sums {sorted(set(hist.sum(1)))}")
    print("EP  whole-set R  per-iteration R (tau=%d)  std.err" % args.tokens_per_rank)
    for ep in (4, 8, 16, 24):
        mean, err = sampled_r(hist, ep, args.tokens_per_rank, args.top_k, args.iterations, rng)
        print(f"{ep:<3} {whole_set_r(hist, ep):11.4f}  {mean:23.4f}  {err:7.4f}")


if __name__ == "__main__":
    main()
