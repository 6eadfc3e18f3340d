#!/bin/bash
# GPU machine (2 GPUs): GPU-planner, GroupedMlp and layer tests, sanitizers on the planner,
# then every GPU benchmark (planner, replication, EP layer on 2 GPUs, E3). Logs go to $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
CSV=$ISER_SHARED_DATA/dsv41-flash/coding.csv
date -u | tee ${OUT:-/tmp}/date.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a ${OUT:-/tmp}/date.log
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DISER_BUILD_BENCH=ON > ${OUT:-/tmp}/cfg.log 2>&1 || { tail -30 ${OUT:-/tmp}/cfg.log; exit 1; }
cmake --build build/gpu -j32 --target iser_gpu_tests bench_planner_gpu bench_replicate bench_moe_e3 bench_moe_layer > ${OUT:-/tmp}/build.log 2>&1 || { grep -B2 -A8 -E "error|Error" ${OUT:-/tmp}/build.log | head -60; exit 1; }
echo "build $(el)"
B=build/gpu/bench; T=build/gpu/tests/iser_gpu_tests
timeout 120 $T --gtest_filter='GpuPlan*:GroupedMlp*:Gemm/*:LogicalEpLayer*:MoeEpLayer*' > ${OUT:-/tmp}/tests.log 2>&1
echo "tests rc=$? $(el)"; grep -E "GPU ==|^\[  (PASSED|FAILED) |Failure" ${OUT:-/tmp}/tests.log | head -20
S=/usr/local/cuda/bin/compute-sanitizer
F='GpuPlanner.MatchesCpuOnRandomSkewedTokens:GpuPlanner.ReportsBadInputsInStatusWords:GpuPlanner.RunsInsideACudaGraph:GpuPlanRewrite.MatchesCpuOnRandomSkewedTokens:GpuPlanRewrite.GraphReplaysSeeTheirOwnInput:GpuPlanRewrite.ReportsBadInputsInStatusWords'
for tool in memcheck racecheck synccheck; do
  CUDA_VISIBLE_DEVICES=0 ISER_GPU_TEST_SCALE=0.0005 timeout 40 $S --tool $tool --error-exitcode 9 $T --gtest_filter=$F > ${OUT:-/tmp}/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' ${OUT:-/tmp}/san_$tool.log | tr '\n' ' ') $(el)"
done
CUDA_VISIBLE_DEVICES=0 timeout 60 $B/bench_planner_gpu -w 20 -n 400 -G 1 -c 1 -d $CSV -J ${OUT:-/tmp}/planner.json > ${OUT:-/tmp}/planner.txt 2>&1
echo "planner bench rc=$? $(el)"; cat ${OUT:-/tmp}/planner.txt | tail -25
timeout 120 $B/bench_replicate -b 1M -e 512M -f 4 -w 5 -n 20 -c 1 -G 1 -g 2 -J ${OUT:-/tmp}/replicate.json > ${OUT:-/tmp}/replicate.txt 2>&1
echo "replicate bench rc=$? $(el)"; grep -E "37|#" ${OUT:-/tmp}/replicate.txt | head -40
timeout 90 $B/bench_moe_layer -P 2 -E 384 -S 4 -t 8192 --routing power-law,balanced -n 20 --alpha 1.2 > ${OUT:-/tmp}/moe_layer.txt 2>&1
echo "moe layer rc=$? $(el)"; tail -25 ${OUT:-/tmp}/moe_layer.txt
CUDA_VISIBLE_DEVICES=0 timeout 150 $B/bench_moe_e3 --layers 3:39:9 --gemm lt -J ${OUT:-/tmp}/e3_lt.json > ${OUT:-/tmp}/e3.txt 2>&1
echo "e3 rc=$? $(el)"; tail -22 ${OUT:-/tmp}/e3.txt
