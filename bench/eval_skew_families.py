#!/usr/bin/env python3
"""Tables of docs/evaluation.md's skew-family section: every skew family x EP x S through
`iser replay --bound`, as Markdown (R, owner payloads, remote copies, bound, the best plan known,
gap per policy, and whether the first policy meets the goal, misses it, or no plan can reach it).

usage: bench/eval_skew_families.py ISER_BINARY [--bound-seconds 3] [--experts 256 --top-k 8]
       [--ep 16,32,64,72] [--slots 2,3,4] [--families zipf-0.6,...] [--policies iser,halo-q]
Standard library only; each (family, S) is one replay over every EP degree.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FAMILIES = ["zipf-0.6", "zipf-0.8", "zipf-1.0", "zipf-1.2", "zipf-1.5", "hot-ranks",
            "hot-spread", "rank-skew", "drift", "layer-correlated"]


def replay(args, family, slots):
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "r.json")
        # drift is replayed over 4 iterations (its hot set moves between them), the rest over one.
        iterations = "4" if family == "drift" else "1"
        cmd = [args.iser, "replay", "--synthetic", family, "--num-experts", str(args.experts),
               "--top-k", str(args.top_k), "--tokens-per-rank", str(args.tokens), "--ep", args.ep,
               "--slots", str(slots), "--policies", args.policies, "--layers", args.layers,
               "--iterations", iterations, "--bound", str(args.bound_seconds), "--threads",
               str(args.threads), "--validate", "-q", "--json", out_json]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
        text = run.stdout
        with open(out_json) as f:
            results = json.load(f)["results"]
    bounds = {}
    pattern = (r"^EP(\d+): bound R ([0-9.]+) \(.*proven optimal: (\d+) of (\d+)\)\n"
               r"  best plan known +R ([0-9.]+)")
    for m in re.finditer(pattern, text, re.M):
        bounds[int(m.group(1))] = (float(m.group(2)), int(m.group(3)), int(m.group(4)),
                                   float(m.group(5)))
    return " ".join(cmd[:-2]), results, bounds


# The balance goals: R <= 1.02 with S = 2, R <= 1.01 with S = 4 (none set for other S).
GOALS = {2: 1.02, 4: 1.01}


def verdict(r, bound_r, best_r, slots):
    """met / missed / impossible (the proven bound is above the goal: no plan reaches it);
    "missed, reachable" when a plan known (the block search's) reaches the goal."""
    goal = GOALS.get(slots)
    if goal is None:
        return "-"
    if r <= goal:
        return "met"
    if bound_r > goal:
        return "impossible"
    return "missed, reachable" if best_r <= goal else "missed"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("iser")
    p.add_argument("--bound-seconds", type=float, default=3.0)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--ep", default="16,32,64,72")
    p.add_argument("--slots", default="2,3,4")
    p.add_argument("--layers", default="0")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--policies", default="iser,halo-q")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    policies = args.policies.split(",")
    head = ("| family | EP | S | R before | bound R (proven optimal/n) | best plan known R | "
            + " | ".join(f"{q} R / payloads / copies / gap" for q in policies) + " | goal |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for family in args.families.split(","):
        for slots in [int(s) for s in args.slots.split(",")]:
            cmd, results, bounds = replay(args, family, slots)
            print(f"<!-- {cmd} -->", file=sys.stderr)
            for ep in [int(e) for e in args.ep.split(",")]:
                rows = {r["policy"]: r for r in results if r["ep"] == ep}
                b, opt, n, best = bounds[ep]
                before = next(iter(rows.values()))["mean_r_before"]
                cells = []
                for q in policies:
                    r = rows[q]
                    cells.append(f"{r['mean_r']:.4f} / {r['owner_payloads_max']} / "
                                 f"{r['remote_copies']:.0f} / {r['mean_r'] - b:+.4f}")
                print(f"| {family} | {ep} | {slots} | {before:.3f} | {b:.4f} ({opt}/{n}) | "
                      f"{best:.4f} | "
                      + " | ".join(cells) + f" | {verdict(rows[policies[0]]['mean_r'], b, best, slots)} |",
                      flush=True)


if __name__ == "__main__":
    main()
