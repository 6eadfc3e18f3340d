#!/bin/bash
# GPU machine (2 GPUs): build, every GPU test, compute-sanitizer (memcheck/racecheck/synccheck) on the planner and logical-rank tests. Logs go to $OUT.
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
header
build_targets build/gpu iser_gpu_tests bench_planner_gpu bench_replicate bench_moe_e3 bench_moe_layer iser || exit 1
echo "build $(el)"
(cd build/gpu && timeout ${CTEST_TIMEOUT:-300} ctest -L gpu --output-on-failure --timeout 200 2>&1) > $O/ctest.log
grep -E "GPU ==|tests passed|tests failed|\*\*\*|Failed|Passed" $O/ctest.log | tail -60
echo "tests $(el)"
S=/usr/local/cuda/bin/compute-sanitizer
export ISER_TEST_SHORT=1 ISER_GPU_TEST_SCALE=0.001
F='GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanner.RunsInsideACudaGraph:P/LogicalRanks.*:LogicalRuntime.*'
for tool in memcheck racecheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 timeout 90 $S --tool $tool --error-exitcode 9 build/gpu/tests/iser_gpu_tests --gtest_filter=$F > $O/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $O/san_$tool.log | tr '\n' ' ') $(el)"
done
