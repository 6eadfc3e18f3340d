#!/bin/bash
# GPU machine (1 GPU): the iser policy on the GPU, plans and rewrite. Binaries: prebuilt ones in
# $PREBUILT (iser_gpu_tests, bench_planner_gpu; CUDA 13.0, sm_90a) when they run here, else a
# Release build of both. Then the planner benchmark (halo-q and iser in the same run, -c 1 checks
# every plan and slot id), the iser tests (plans and slot ids against plan_iser + rewrite_tokens:
# random inputs at full scale, real histograms, fused and two kernels), compute-sanitizer memcheck
# on a short run, HALO-Q's planner tests, then racecheck on the short run. Logs go to $OUT.
#   DATA=<folder holding dsv41-flash/coding.csv> PREBUILT=<dir> BUDGET=<s> HALOQ_FILTER=<gtest> \
#     bash scripts/device/iser-gpu-check.sh
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${DATA:-$PWD/../shared/data}
header
BIN=${PREBUILT:-prebuilt}
# A binary that loads answers an unknown flag with exit code 2.
"$BIN/bench_planner_gpu" -no-such-flag 0 > /dev/null 2>&1
bench_rc=$?
if ! "$BIN/iser_gpu_tests" --gtest_list_tests > /dev/null 2>&1 || [ $bench_rc -ne 2 ]; then
  echo "prebuilt binaries do not run here; building"
  build_targets build/gpu iser_gpu_tests bench_planner_gpu || exit 1
  BIN=build/gpu/bin
  mkdir -p $BIN
  cp build/gpu/tests/iser_gpu_tests build/gpu/bench/bench_planner_gpu $BIN/
fi
echo "binaries ready $(el)"
step bench 40 "$BIN/bench_planner_gpu" -w 20 -n 400 -G 1 -c 1 -P halo-q,iser \
  -p ${EPS:-2,3,4,6,8,16,32,64} -d "$ISER_SHARED_DATA/dsv41-flash/coding.csv" -J $O/bench.json
grep -v "L2 warm" $O/bench.log
T="$BIN/iser_gpu_tests"
step tests_iser 75 "$T" --gtest_filter='GpuPlannerIser.*:GpuPlanRewriteIser.*'
grep -E "GPU|\[  PASSED|\[  FAILED|FAILED  \]|SKIPPED \]|Failure|differ" $O/tests_iser.log | head -30
S=/usr/local/cuda/bin/compute-sanitizer
F='GpuPlannerIser.MatchesCpuOnRandomSkewedTokens:GpuPlanRewriteIser.MatchesCpuOnRandomSkewedTokens'
F=$F':GpuPlannerIser.RewritesAnExpertBroadcastTwice'
san() {
  step san_$1 40 env ISER_GPU_TEST_SCALE=0.002 $S --tool $1 --error-exitcode 9 "$T" \
    --gtest_filter=$F
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $O/san_$1.log | tr '\n' ' '
  echo
}
san memcheck
step tests_haloq 60 "$T" \
  --gtest_filter="${HALOQ_FILTER:-GpuPlanner.*:GpuPlanRewrite.*:-GpuPlanner.*RepairMatchesCpu}"
grep -E "GPU|\[  PASSED|\[  FAILED|FAILED  \]|SKIPPED \]" $O/tests_haloq.log | head -20
san racecheck
echo "done $(el)"
