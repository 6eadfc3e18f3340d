#!/bin/bash
# GPU machine (2 GPUs): every GPU test (ctest -L gpu). Logs go to $OUT.
source "$(dirname "$0")/common.sh"
export ISER_SHARED_DATA=${ISER_SHARED_DATA:-$PWD/../shared/data}
header
build_targets build/gpu iser_gpu_tests || exit 1
echo "build $(el)"
(cd build/gpu && timeout 240 ctest -L gpu --output-on-failure --timeout 200 2>&1) > $O/ctest.log
grep -E "GPU|tests passed|tests failed|\*\*\*Failed" $O/ctest.log | grep -vE "^\s+Start" | tail -20
echo "tests $(el)"
