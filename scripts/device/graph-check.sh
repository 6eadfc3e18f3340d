#!/bin/bash
# GPU machine (2 GPUs): the EP layer's graph mode in one call under a wall-clock budget (BUDGET
# seconds, default 340): build, the graph-mode tests, the graph-mode benchmark rows (tau = 64 and
# 128 per rank, EP2, E = 384, S = 4; fixed M and size-aware) and the eager EP-layer tests. Each step gets what is left of
# the budget (most important first); logs go to $OUT.
DEFAULT_BUDGET=340
source "$(dirname "$0")/common.sh"
header
B=build/gpu
configure $B || exit 1
step build 240 cmake --build $B -j"$(nproc)" --target iser_gpu_tests bench_moe_layer
build_errors
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
