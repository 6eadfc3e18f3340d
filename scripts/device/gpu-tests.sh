#!/bin/bash
# GPU machine (2 GPUs): every GPU test (ctest -L gpu). Logs go to $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
date -u; git log --oneline -1 2>/dev/null
t0=$(date +%s)
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DISER_BUILD_BENCH=OFF > ${OUT:-/tmp}/cfg.log 2>&1 || { tail -30 ${OUT:-/tmp}/cfg.log; exit 1; }
cmake --build build/gpu -j32 --target iser_gpu_tests > ${OUT:-/tmp}/build.log 2>&1 || { grep -B2 -A8 -E "error|Error" ${OUT:-/tmp}/build.log | head -60; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
(cd build/gpu && timeout 240 ctest -L gpu --output-on-failure --timeout 200 2>&1) > ${OUT:-/tmp}/ctest.log
grep -E "GPU|tests passed|tests failed|\*\*\*Failed" ${OUT:-/tmp}/ctest.log | grep -vE "^\s+Start" | tail -20
echo "tests $(( $(date +%s) - t0 )) s"
