#!/usr/bin/env python3
"""What `iser.plan` costs from Python on top of the same plan in C++ (same process, same counts).

For EP 8/16/64 (E = 256, top-8, 8,192 tokens per rank, S = 2) and the policies halo-q and iser,
times single calls of `iser.plan(counts, slots=, policy=)` and, in C++ inside the module, single
plans of the same counts (`Topology::make` + `make_policy` + `plan`, what `iser.plan` does below
the binding), interleaved in rounds. Each round takes the median of its calls; the result is the
best round of each side (like timeit: on a shared machine, other jobs only ever add time). Prints
both and their difference, the overhead of the Python call (argument parsing, reading the NumPy
array into the core's count matrix, the Plan object).

    python bench/python_plan_overhead.py [--repeats N] [--rounds R]
"""

import argparse
import platform
import statistics
import time

import numpy as np

import iser
from iser import _core

NUM_EXPERTS, TOP_K, TOKENS_PER_RANK, SLOTS = 256, 8, 8192, 2


def counts_for(num_ranks: int, seed: int) -> np.ndarray:
    """Skewed routing (Zipf 1.0 popularity, shuffled), so plans have broadcasts."""
    rng = np.random.default_rng(seed)
    popularity = rng.permutation(1.0 / np.arange(1, NUM_EXPERTS + 1))
    popularity /= popularity.sum()
    return np.stack([rng.multinomial(TOKENS_PER_RANK * TOP_K, popularity)
                     for _ in range(num_ranks)]).astype(np.int32)


def python_median_ns(counts: np.ndarray, policy: str, repeats: int) -> float:
    plan, clock = iser.plan, time.perf_counter_ns
    samples = []
    for _ in range(repeats):
        start = clock()
        plan(counts, slots=SLOTS, policy=policy)
        samples.append(clock() - start)
    # perf_counter_ns's own cost is in every sample; measure and remove it.
    empty = []
    for _ in range(repeats):
        start = clock()
        empty.append(clock() - start)
    return statistics.median(samples) - statistics.median(empty)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1000, help="calls per round and side")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    args = parser.parse_args()
    print(f"iser {iser.__version__}, Python {platform.python_version()}, {platform.processor() or platform.machine()}")
    print(f"E = {NUM_EXPERTS}, top-{TOP_K}, {TOKENS_PER_RANK} tokens/rank, S = {SLOTS}; "
          f"best of {args.rounds} rounds, each the median of {args.repeats} calls")
    print(f"{'EP':>4} {'policy':<8} {'B':>4} {'C++ us':>9} {'Python us':>10} {'overhead us':>12} {'ratio':>6}")
    for num_ranks in (8, 16, 64):
        counts = counts_for(num_ranks, seed=num_ranks)
        for policy in ("halo-q", "iser"):
            broadcasts = iser.plan(counts, slots=SLOTS, policy=policy).num_broadcasts
            cpp, py = [], []
            for _ in range(args.rounds):
                cpp.append(_core._plan_median_ns(counts, SLOTS, policy, args.repeats))
                py.append(python_median_ns(counts, policy, args.repeats))
            c, p = min(cpp) / 1e3, min(py) / 1e3
            print(f"{num_ranks:>4} {policy:<8} {broadcasts:>4} {c:>9.2f} {p:>10.2f} {p - c:>12.2f} {p / c:>6.2f}")


if __name__ == "__main__":
    main()
