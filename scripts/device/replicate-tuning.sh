#!/bin/bash
# GPU machine (2 GPUs): runtime GPU tests, then the replication benchmark's copy-shape matrix
# for one 37.16 MB bundle and 512 MiB (bulk pipelines vs the register path vs copy engine vs
# tuned ncclBroadcast) and the latency section. Logs go to $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp}
date -u | tee $O/date.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a $O/date.log
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
B=${BUILD:-build/gpu}
if [ -z "$PREBUILT" ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DISER_BUILD_BENCH=ON > $O/cfg.log 2>&1 || { tail -30 $O/cfg.log; exit 1; }
  cmake --build $B -j16 --target iser_gpu_tests bench_replicate > $O/build.log 2>&1 || { grep -B2 -A8 -E "error|Error" $O/build.log | head -60; exit 1; }
  T=$B/tests/iser_gpu_tests; R=$B/bench/bench_replicate
else
  T=$PREBUILT/iser_gpu_tests; R=$PREBUILT/bench_replicate
fi
echo "build $(el)"
F='*LogicalRanks*:*LogicalRuntime*:*RuntimeFaults*:*MultiProcess*:*GraphReplay*'
timeout 150 $T --gtest_filter="$F" > $O/tests.log 2>&1
echo "tests rc=$? $(el)"; grep -E "^\[  (PASSED|FAILED) |Failure|^\[  FAILED|tests ran" $O/tests.log | head -30
V=${SHAPES:-registers,bulk:1x16,bulk:2x8,bulk:4x5,bulk:8x2,bulk:11x2,bulk:16x1}
timeout 150 $R -x bundles,sweep -N 1 -b 512M -e 512M -w 5 -n 20 -c 1 -G 1 -g 2 -V $V -J $O/shapes.json > $O/shapes.txt 2>&1
echo "shapes rc=$? $(el)"; grep -vE "^bundles +nccl-bcast +(Simple|LL)" $O/shapes.txt | head -400
timeout 60 $R -x bundles,latency -N 1 -B 2 -t p2p-direct,p2p-sami -s 8,16 -w 5 -n 20 -c 1 -G 1 -g 2 -V ${SHAPES2:-registers,bulk} > $O/banks2.txt 2>&1
echo "banks2 rc=$? $(el)"; cat $O/banks2.txt
