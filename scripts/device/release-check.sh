#!/bin/bash
# GPU machine (2 GPUs): the release check of main in one call, under a wall-clock budget
# (BUDGET seconds, default 540): build, every GPU test (ctest -L gpu), compute-sanitizer on the GPU
# planner, then the planner, EP-layer and E3 benchmarks. Each step gets what is left of the budget;
# a step that cannot start in time is reported as skipped. Logs and JSON go to $OUT.
# SKIP: space-separated steps to leave out (san planner moe_layer e3); LAYER_ARGS / E3_ARGS replace
# the EP-layer / E3 benchmark flags; SAN_FILTER the tests run under compute-sanitizer.
DEFAULT_BUDGET=540
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
export ISER_DATA_DIR=${ISER_DATA_DIR:-$PWD/data}
CSV=$ISER_SHARED_DATA/dsv41-flash/coding.csv
header
B=build/gpu
configure $B || exit 1
step build 240 cmake --build $B -j"$(nproc)" --target iser_gpu_tests bench_planner_gpu bench_moe_layer bench_moe_e3
build_errors
[ -x $B/tests/iser_gpu_tests ] || exit 1
step ctest 200 ctest --test-dir $B -L gpu --output-on-failure --timeout 150
grep -E "GPU ==|GPU iser|tests passed|tests failed|\*\*\*Failed|Failed  |Not Run" $O/ctest.log | tail -20
T=$B/tests/iser_gpu_tests
SAN=/usr/local/cuda/bin/compute-sanitizer
F=${SAN_FILTER:-'GpuPlannerIser.MatchesCpuOnRandomSkewedTokens:GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.RunsInsideACudaGraph:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanRewrite.MatchesCpuOnRandomSkewedTokens:GpuPlanRewrite.GraphReplaysSeeTheirOwnInput:GpuPlanRewrite.ReportsBadInputsInStatusWords:GpuPlanner.ScheduledRepairMatchesCpu'}
# Scale 0.002: at 0.0005 racecheck missed the scheduled repair's reports (docs/benchmarks.md).
for tool in racecheck memcheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 ISER_GPU_TEST_SCALE=0.002 step san_$tool 60 \
    $SAN --tool $tool --error-exitcode 9 $T --gtest_filter=$F
  grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san_$tool.log
done
CUDA_VISIBLE_DEVICES=0 step planner 45 $B/bench/bench_planner_gpu -w 20 -n 400 -G 1 -c 1 \
  -P halo-q,iser -d $CSV -J $O/planner.json
tail -16 $O/planner.log
step moe_layer 90 $B/bench/bench_moe_layer ${LAYER_ARGS:--P 2 -E 384 -S 4 -t 8192 \
  --routing power-law,balanced -n 20 --alpha 1.2}
tail -8 $O/moe_layer.log
CUDA_VISIBLE_DEVICES=0 step e3 150 $B/bench/bench_moe_e3 ${E3_ARGS:---layers 3:39:9 -n 10 -w 2} \
  -J $O/e3.json
grep -E "^# (mean|balanced|variant)" $O/e3.log
echo "done $(el)"
