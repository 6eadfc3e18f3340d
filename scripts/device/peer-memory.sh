#!/bin/bash
# GPU machine: the runtime on NCCL symmetric windows against the CUDA IPC fallback. One GPU: the
# 1-rank window tests (NcclPeerMemory.*). Two or more GPUs, in addition: the two-process tests
# on the window (auto picks it) and again on IPC (ISER_PEER_MEMORY=ipc), and bench_replicate with
# both peer memories side by side in one run (-M nccl,ipc). Logs go to $OUT.
# PREBUILT=dir runs binaries built elsewhere (iser_gpu_tests, bench_replicate); otherwise builds.
source "$(dirname "$0")/common.sh"
header
B=${BUILD:-build/gpu}
if [ -z "$PREBUILT" ]; then
  build_targets $B iser_gpu_tests bench_replicate || exit 1
  T=$B/tests/iser_gpu_tests R=$B/bench/bench_replicate
else
  T=$PREBUILT/iser_gpu_tests R=$PREBUILT/bench_replicate
fi
echo "build $(el)"
GPUS=$(nvidia-smi -L | wc -l)
step window 60 $T --gtest_filter='NcclPeerMemory.*'
grep -E "^\[ +(OK|FAILED|SKIPPED) |report|Failure" $O/window.log | head -20
if [ "$GPUS" -ge 2 ]; then
  step mp_nccl 200 $T --gtest_filter='MultiProcess.*'
  ISER_PEER_MEMORY=ipc step mp_ipc 200 $T --gtest_filter='MultiProcess.*'
  grep -hE "^\[ +(OK|FAILED|SKIPPED) |report" $O/mp_nccl.log $O/mp_ipc.log | head -40
  step bench 240 $R -M nccl,ipc -x bundles -N 1,8 -t p2p-sami,p2p-sami-owner -s 8 -O out \
    -n 50 -w 10 -J $O/bench_peer_memory.json
  grep -E "^# peer memory|^bundles" $O/bench.log
else
  echo "1 GPU: the two-process tests and bench_replicate -M nccl,ipc need 2"
fi
