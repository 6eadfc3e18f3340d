#!/bin/bash
# GPU machine (2 GPUs): the replication benchmark (docs/benchmarks.md, issue 7): 1/4/8 bundles
# of 37.16 MB and the 1 MiB - 512 MiB sweep, copy SMs 1/2/4/8/16, every transport and copy
# shape ($SHAPES), tuned ncclBroadcast, the latency section; all in one run. Logs go to $OUT.
# PREBUILT=dir runs binaries built elsewhere (bench_replicate); otherwise builds into $BUILD.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp}
date -u | tee $O/bench_date.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a $O/bench_date.log
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
B=${BUILD:-build/gpu}
if [ -z "$PREBUILT" ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DISER_BUILD_BENCH=ON > $O/cfg.log 2>&1 || { tail -30 $O/cfg.log; exit 1; }
  cmake --build $B -j16 --target bench_replicate > $O/build.log 2>&1 || { grep -B2 -A8 -E "error|Error" $O/build.log | head -60; exit 1; }
  R=$B/bench/bench_replicate
else
  R=$PREBUILT/bench_replicate
fi
echo "build $(el)"
timeout ${BENCH_TIMEOUT:-200} $R -b 1M -e 512M -f 2 -w 5 -n 20 -c 1 -G 1 -g 2 -V ${SHAPES:-bulk,registers} -J $O/replicate.json > $O/replicate.txt 2>&1
echo "replicate bench rc=$? $(el)"
