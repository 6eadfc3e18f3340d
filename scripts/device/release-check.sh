#!/bin/bash
# GPU machine (2 GPUs): the release check of main in one call, under a wall-clock budget
# (BUDGET seconds, default 540): build, every GPU test (ctest -L gpu), compute-sanitizer on the GPU
# planner, then the planner, EP-layer and E3 benchmarks. Each step gets what is left of the budget;
# a step that cannot start in time is reported as skipped. Logs and JSON go to $OUT.
# SKIP: space-separated steps to leave out (san planner moe_layer e3); LAYER_ARGS / E3_ARGS replace
# the EP-layer / E3 benchmark flags; SAN_FILTER the tests run under compute-sanitizer.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
export ISER_DATA_DIR=${ISER_DATA_DIR:-$PWD/data}
O=${OUT:-/tmp}
CSV=$ISER_SHARED_DATA/dsv41-flash/coding.csv
t0=$(date +%s)
deadline=$((t0 + ${BUDGET:-540}))
el() { echo "$(($(date +%s) - t0)) s"; }
# cap WANT: seconds for the next step, at most what is left (minus a 5 s margin), 0 = skip.
cap() {
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt 10 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
step() {  # step NAME WANT CMD...: runs CMD under its cap, logs to $O/NAME.log
  local name=$1 want=$2; shift 2
  case " $SKIP " in *" $name "* | *" ${name%%_*} "*) echo "$name: skipped (SKIP)"; return ;; esac
  local t; t=$(cap "$want")
  if [ "$t" = 0 ]; then echo "$name: skipped (budget)"; return; fi
  timeout "$t" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? $(el)"
}
date -u | tee $O/date.log
git log --oneline -1 2>/dev/null | tee -a $O/date.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a $O/date.log
B=build/gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DISER_BUILD_BENCH=ON > $O/cfg.log 2>&1 || { tail -30 $O/cfg.log; exit 1; }
step build 240 cmake --build $B -j32 --target iser_gpu_tests bench_planner_gpu bench_moe_layer bench_moe_e3
grep -B2 -A8 -E "error:|Error " $O/build.log | head -40
[ -x $B/tests/iser_gpu_tests ] || exit 1
step ctest 200 ctest --test-dir $B -L gpu --output-on-failure --timeout 150
grep -E "GPU ==|GPU iser|tests passed|tests failed|\*\*\*Failed|Failed  |Not Run" $O/ctest.log | tail -20
T=$B/tests/iser_gpu_tests
SAN=/usr/local/cuda/bin/compute-sanitizer
F=${SAN_FILTER:-'GpuPlannerIser.MatchesCpuOnRandomSkewedTokens:GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.RunsInsideACudaGraph:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanRewrite.MatchesCpuOnRandomSkewedTokens:GpuPlanRewrite.GraphReplaysSeeTheirOwnInput:GpuPlanRewrite.ReportsBadInputsInStatusWords'}
for tool in racecheck memcheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 ISER_GPU_TEST_SCALE=0.0005 step san_$tool 30 \
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
