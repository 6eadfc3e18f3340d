#!/bin/bash
# GPU machine (1 or 2 GPUs): the runtime GPU tests (logical ranks P = 4/8/16, graph replay,
# stalled copy / consumer, and with 2 GPUs the two-process tests), then compute-sanitizer
# (memcheck, racecheck, synccheck) on the logical-rank and graph-replay tests. Logs go to $OUT.
# PREBUILT=dir runs binaries built elsewhere (iser_gpu_tests); otherwise builds into $BUILD.
source "$(dirname "$0")/common.sh"
header
B=${BUILD:-build/gpu}
if [ -z "$PREBUILT" ]; then
  build_targets $B iser_gpu_tests || exit 1
  T=$B/tests/iser_gpu_tests
else
  T=$PREBUILT/iser_gpu_tests
fi
echo "build $(el)"
F='*LogicalRanks*:*LogicalRuntime*:*RuntimeFaults*:*MultiProcess*:*GraphReplay*'
timeout ${TEST_TIMEOUT:-150} $T --gtest_filter="$F" > $O/tests.log 2>&1
echo "tests rc=$? $(el)"
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|tests ran|PASSED" $O/tests.log | head -60
S=/usr/local/cuda/bin/compute-sanitizer
SF=${SAN_FILTER:-'P/LogicalRanks.*/0:P/LogicalRanks.*/1:LogicalRuntime.*:P/GraphReplay.*/0:GraphReplayLimits.*'}
for tool in ${SAN_TOOLS-memcheck racecheck synccheck}; do
  CUDA_VISIBLE_DEVICES=0 ISER_TEST_SHORT=1 timeout ${SAN_TIMEOUT:-80} $S --tool $tool --error-exitcode 9 $T --gtest_filter=$SF > $O/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|tests ran|PASSED|FAILED' $O/san_$tool.log | tr '\n' ' ') $(el)"
done
