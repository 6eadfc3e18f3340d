#!/bin/bash
# GPU machine (2 GPUs): the replication benchmark (docs/benchmarks.md, "Replication transports"): 1/4/8 bundles
# of 37.16 MB and the 1 MiB - 512 MiB sweep, copy SMs 1/2/4/8/16, every transport and copy
# shape ($SHAPES), tuned ncclBroadcast, the latency section; all in one run. Logs go to $OUT.
# PREBUILT=dir runs binaries built elsewhere (bench_replicate); otherwise builds into $BUILD.
source "$(dirname "$0")/common.sh"
header
B=${BUILD:-build/gpu}
if [ -z "$PREBUILT" ]; then
  build_targets $B bench_replicate || exit 1
  R=$B/bench/bench_replicate
else
  R=$PREBUILT/bench_replicate
fi
echo "build $(el)"
timeout ${BENCH_TIMEOUT:-200} $R -b 1M -e 512M -f 2 -w 5 -n 20 -c 1 -G 1 -g 2 -V ${SHAPES:-bulk,registers} -J $O/replicate.json > $O/replicate.txt 2>&1
echo "replicate bench rc=$? $(el)"
