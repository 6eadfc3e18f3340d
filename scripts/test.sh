#!/usr/bin/env bash
# Builds everything (the CUDA part too where nvcc exists) and runs every test. GPU tests (ctest
# label `gpu`) skip themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset ci -DISER_REQUIRE_RAPIDCHECK=ON >/dev/null
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
