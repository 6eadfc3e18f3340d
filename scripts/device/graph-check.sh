#!/bin/bash
# GPU machine (2 GPUs): the EP layer's graph mode in one call under a wall-clock budget (BUDGET
# seconds, default 340): build, the graph-mode tests, the graph-mode benchmark rows (tau = 64 and
# 128 per rank, EP2, E = 384, S = 4; fixed M and size-aware) and the eager EP-layer tests. Each step gets what is left of
# the budget (most important first); logs go to $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp}
t0=$(date +%s)
deadline=$((t0 + ${BUDGET:-340}))
el() { echo "$(($(date +%s) - t0)) s"; }
cap() {  # seconds for the next step: WANT, at most what is left minus 5 s; 0 = skip
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt 10 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
step() {  # step NAME WANT CMD...
  local name=$1 want=$2; shift 2
  local t; t=$(cap "$want")
  if [ "$t" = 0 ]; then echo "$name: skipped (budget)"; return; fi
  timeout "$t" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? $(el)"
}
date -u | tee $O/date.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $O/date.log
B=build/gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DISER_BUILD_BENCH=ON > $O/cfg.log 2>&1 || { tail -30 $O/cfg.log; exit 1; }
step build 240 cmake --build $B -j32 --target iser_gpu_tests bench_moe_layer
grep -B2 -A8 -E "error:|Error " $O/build.log | head -40
[ -x $B/tests/iser_gpu_tests ] || exit 1
T=$B/tests/iser_gpu_tests
summary() { grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|actual|iser:|rank [0-9]" "$1" | head -${2:-40}; }
step graph_tests 90 $T --gtest_filter='MoeGraphKernels.*:MoeEpGraph*'
summary $O/graph_tests.log 60
LAYER="$B/bench/bench_moe_layer -P 2 -E 384 -S 4 --routing power-law,balanced -n 20 -w 3"
# --graph 1: every slot at M = C; --graph 2: size-aware GEMMs (switch nodes). GRAPH_MODES picks.
for g in ${GRAPH_MODES:-1 2}; do
  for t in 64 128; do
    step bench_g${g}_t$t 60 $LAYER --graph $g -t $t
    cat $O/bench_g${g}_t$t.log
  done
done
step layer_tests 120 $T --gtest_filter='MoeEpLayer.*'
summary $O/layer_tests.log 30
echo "done $(el)"
