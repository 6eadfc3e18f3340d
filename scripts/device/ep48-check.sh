#!/bin/bash
# GPU machine with 4 or 8 GPUs (nvidia-h200-x4 / -x8): the EP4/EP8 layer and replication runs,
# in one call
# under BUDGET seconds (default 570), for each g in $GS (default "4 8") the machine has:
#   replicate_g<g>      bench_replicate -g <g>, bundles section: 1 / 4 / 8 bundles of 37.16 MB,
#                       owner outside and inside the group, every transport and tuned
#                       ncclBroadcast; time until the slowest rank holds the bundles
#   layer_g<g>_t<tau>   bench_moe_layer -P <g> at tau = 8192 and 16384 on the bundled trace,
#                       power-law and balanced routing, GPU planner: count exchange, planner,
#                       replication and READY gate inside each ON invocation; OFF vs ON layer
#                       time, exposed copy, and the bitwise ON = OFF check (last column)
# Multicast stays off: common.sh exports NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1; every transport here is P2P.
# NOTE: written while no 4- or 8-GPU machine was lent (2026-12-01); not run yet. Run one g per
# call if the budget is short: GS=4 bash scripts/device/ep48-check.sh, then GS=8.
DEFAULT_BUDGET=570
source "$(dirname "$0")/common.sh"
export ISER_DATA_DIR=${ISER_DATA_DIR:-$PWD/data}
header
num_gpus=$(nvidia-smi -L | wc -l)
B=build/gpu
build_targets $B bench_replicate bench_moe_layer || exit 1
echo "build $(el)"
for g in ${GS:-4 8}; do
  if [ "$g" -gt "$num_gpus" ]; then
    echo "g=$g: this machine has $num_gpus GPUs, skipped"
    continue
  fi
  step replicate_g$g 180 $B/bench/bench_replicate -x bundles -N 1,4,8 -O both -w 3 -n 20 -c 1 \
    -G 1 -g "$g" -J $O/replicate_g$g.json
  tail -40 $O/replicate_g$g.log
  for tau in 8192 16384; do
    step layer_g${g}_t$tau 150 $B/bench/bench_moe_layer -P "$g" -E 384 -S 4 -t $tau \
      --routing trace,power-law,balanced -w 3 -n 20 --planner gpu
    tail -12 $O/layer_g${g}_t$tau.log
  done
done
echo "done $(el)"
