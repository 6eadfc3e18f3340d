#!/bin/bash
# GPU machine (1 GPU): the count kernel and the decode control path. Count tests and the planner,
# fused and logical-runtime tests (count exchange) they feed; compute-sanitizer on the count
# tests; bench_decode_path (count section and count -> exchange -> plan + rewrite in one graph,
# -c 1 checks every matrix, plan and slot id against the CPU). Logs go to $OUT.
#   DATA=<folder holding dsv41-flash/coding.csv> [BIN=<prebuilt folder>] bash scripts/device/decode-path.sh
# BIN: a folder holding iser_gpu_tests and bench_decode_path built elsewhere (else built here).
source "$(dirname "$0")/common.sh"
DATA=${DATA:-$PWD/../shared/data}
header
if [ -z "$BIN" ]; then
  build_targets build/gpu iser_gpu_tests bench_decode_path || exit 1
  BIN=build/gpu
  T=$BIN/tests/iser_gpu_tests B=$BIN/bench/bench_decode_path
else
  T=$BIN/iser_gpu_tests B=$BIN/bench_decode_path
fi
echo "build $(el)"
timeout ${BENCH_TIMEOUT:-60} $B -w 20 -n ${ITERS:-300} -c 1 -d $DATA/dsv41-flash/coding.csv \
  ${BENCH_ARGS:-} > $O/bench.log 2>&1
echo "bench rc=$? $(el)"
cat $O/bench.log
F='GpuCount*:GpuPlanner.*:GpuPlanRewrite.*:*LogicalRanks.CountExchange*:GraphReplay*:RuntimeOrdering.LateCount*:LogicalRuntime.ThousandGenerationsMonotone'
ISER_GPU_TEST_SCALE=${SCALE:-0.05} timeout ${TEST_TIMEOUT:-60} $T --gtest_filter="$F" > $O/tests.log 2>&1
echo "tests rc=$? $(el)"
grep -E "\[  PASSED|\[  FAILED|FAILED  \]" $O/tests.log | head -20
S=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck synccheck; do
  timeout ${SAN_TIMEOUT:-30} $S --tool $tool --error-exitcode 9 $T \
    --gtest_filter='GpuCount.BadIds*:GpuCount.Skewed*:GpuCount.Planner*' > $O/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $O/san_$tool.log | tr '\n' ' ') $(el)"
done
