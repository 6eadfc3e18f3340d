#!/bin/bash
# GPU machine (2 GPUs): GPU-planner, GroupedMlp and layer tests, sanitizers on the planner,
# then every GPU benchmark (planner, replication, EP layer on 2 GPUs, E3). Logs go to $OUT.
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
CSV=$ISER_SHARED_DATA/dsv41-flash/coding.csv
header
build_targets build/gpu iser_gpu_tests bench_planner_gpu bench_replicate bench_moe_e3 bench_moe_layer || exit 1
echo "build $(el)"
B=build/gpu/bench; T=build/gpu/tests/iser_gpu_tests
timeout 120 $T --gtest_filter='GpuPlan*:GroupedMlp*:Gemm/*:LogicalEpLayer*:MoeEpLayer*' > $O/tests.log 2>&1
echo "tests rc=$? $(el)"; grep -E "GPU ==|^\[  (PASSED|FAILED) |Failure" $O/tests.log | head -20
S=/usr/local/cuda/bin/compute-sanitizer
F='GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanner.RunsInsideACudaGraph:GpuPlanRewrite.MatchesCpuOnRandomSkewedTokens:GpuPlanRewrite.GraphReplaysSeeTheirOwnInput:GpuPlanRewrite.ReportsBadInputsInStatusWords'
for tool in memcheck racecheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 ISER_GPU_TEST_SCALE=0.0005 timeout 40 $S --tool $tool --error-exitcode 9 $T --gtest_filter=$F > $O/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san_$tool.log | tr '\n' ' ') $(el)"
done
CUDA_VISIBLE_DEVICES=0 timeout 60 $B/bench_planner_gpu -w 20 -n 400 -G 1 -c 1 -d $CSV -J $O/planner.json > $O/planner.txt 2>&1
echo "planner bench rc=$? $(el)"; cat $O/planner.txt | tail -25
timeout 120 $B/bench_replicate -b 1M -e 512M -f 4 -w 5 -n 20 -c 1 -G 1 -g 2 -J $O/replicate.json > $O/replicate.txt 2>&1
echo "replicate bench rc=$? $(el)"; grep -E "37|#" $O/replicate.txt | head -40
timeout 90 $B/bench_moe_layer -P 2 -E 384 -S 4 -t 8192 --routing power-law,balanced -n 20 --alpha 1.2 > $O/moe_layer.txt 2>&1
echo "moe layer rc=$? $(el)"; tail -25 $O/moe_layer.txt
CUDA_VISIBLE_DEVICES=0 timeout 150 $B/bench_moe_e3 --layers 3:39:9 --gemm lt -J $O/e3_lt.json > $O/e3.txt 2>&1
echo "e3 rc=$? $(el)"; tail -22 $O/e3.txt
