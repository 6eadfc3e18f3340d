#!/bin/bash
# GPU machine (2 GPUs): build, every GPU test, compute-sanitizer (memcheck/racecheck/synccheck) on the planner and logical-rank tests. Logs go to $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
date -u | tee ${OUT:-/tmp}/date.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a ${OUT:-/tmp}/date.log
t0=$(date +%s)
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DISER_BUILD_BENCH=ON > ${OUT:-/tmp}/cfg.log 2>&1 || { tail -30 ${OUT:-/tmp}/cfg.log; exit 1; }
cmake --build build/gpu -j32 --target iser_gpu_tests bench_planner_gpu bench_replicate bench_moe_e3 bench_moe_layer iser > ${OUT:-/tmp}/build.log 2>&1 || { grep -B2 -A8 -E "error|Error" ${OUT:-/tmp}/build.log | head -60; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
(cd build/gpu && timeout ${CTEST_TIMEOUT:-300} ctest -L gpu --output-on-failure --timeout 200 2>&1) > ${OUT:-/tmp}/ctest.log
grep -E "GPU ==|tests passed|tests failed|\*\*\*|Failed|Passed" ${OUT:-/tmp}/ctest.log | tail -60
echo "tests $(( $(date +%s) - t0 )) s"
S=/usr/local/cuda/bin/compute-sanitizer
export ISER_TEST_SHORT=1 ISER_GPU_TEST_SCALE=0.001
F='GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanner.RunsInsideACudaGraph:P/LogicalRanks.*:LogicalRuntime.*'
for tool in memcheck racecheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 timeout 90 $S --tool $tool --error-exitcode 9 build/gpu/tests/iser_gpu_tests --gtest_filter=$F > ${OUT:-/tmp}/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' ${OUT:-/tmp}/san_$tool.log | tr '\n' ' ') $(( $(date +%s) - t0 )) s"
done
