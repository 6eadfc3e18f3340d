#!/bin/bash
# GPU machine (1 or 2 GPUs): the expert-compute scheduling of GroupedMlp on the E3 analogue
#. GroupedMlp / cublasLt / layer tests (the 2-GPU layer test needs 2 GPUs), then the E3
# variant matrix (lanes:chain:tails), then the full E3 run of the best variant beside the
# variant with the fastest balanced time (the fair baseline). Logs and JSON go to $OUT.
# Binaries: prebuilt ones in $PREBUILT (built elsewhere with CUDA 13.0) when they run here,
# else a Release build in build/dev.
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
export ISER_DATA_DIR=${ISER_DATA_DIR:-$PWD/data}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MATRIX=${MATRIX:-4:0:off,4:1:off,4:1:128,4:1:32,4:1:8,8:1:8}
header
BIN=${PREBUILT:-prebuilt}
if ! $BIN/iser_gpu_tests --gtest_list_tests > /dev/null 2>&1 || ! $BIN/bench_moe_e3 --help > /dev/null 2>&1; then
  echo "prebuilt binaries do not run here; building"
  build_targets build/dev iser_gpu_tests bench_moe_e3 || exit 1
  BIN=$O/bin; mkdir -p $BIN; cp build/dev/tests/iser_gpu_tests build/dev/bench/bench_moe_e3 $BIN/
fi
echo "binaries ready $(el)"
timeout ${TEST_TIMEOUT:-30} $BIN/iser_gpu_tests --gtest_filter="${TEST_FILTER:-LtGemm*:GroupedMlp*:Gemm/*:LogicalEpLayer*:MoeEpLayer*}" > $O/tests.log 2>&1
echo "tests rc=$? $(el)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|Failure|tail|granule" $O/tests.log | head -40
CUDA_VISIBLE_DEVICES=0 timeout ${MATRIX_TIMEOUT:-100} $BIN/bench_moe_e3 --layers 3:39:9 -n 5 -w 1 \
  --variants $MATRIX -J $O/e3_matrix.json > $O/e3_matrix.txt 2>&1
echo "e3 matrix rc=$? $(el)"; grep -E "^# (variant|mean|balanced|variants|  )" $O/e3_matrix.txt
# Best variant: lowest mean ON over both tau relative to the best balanced time of any variant.
PICK=$(python3 - "$O/e3_matrix.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["variants"]
taus = len(d[0]["balanced_us"])
best_bal = [min(v["balanced_us"][t] for v in d) for t in range(taus)]
def mean_on(v, t):
    ts = sorted({c["tokens_per_rank"] for c in v["cells"]})
    sel = [c["on_us"] for c in v["cells"] if c["tokens_per_rank"] == ts[t]]
    return sum(sel) / len(sel)
score = lambda v: sum(mean_on(v, t) / best_bal[t] for t in range(taus))
on = min(d, key=score)["variant"]
bal = min(d, key=lambda v: sum(v["balanced_us"][t] / best_bal[t] for t in range(taus)))["variant"]
print(on if on == bal else on + "," + bal)
PY
)
PICK=${PICK:-4:1:32,4:0:off}
echo "final variants: $PICK"
CUDA_VISIBLE_DEVICES=0 timeout ${FINAL_TIMEOUT:-130} $BIN/bench_moe_e3 --layers 3:39:6 -n 15 -w 2 \
  --variants $PICK -J $O/e3_final.json > $O/e3_final.txt 2>&1
echo "e3 final rc=$? $(el)"; cat $O/e3_final.txt
