#!/usr/bin/env bash
# Builds the CLI and runs the main job: real drift over the bundled DeepSeek-V4.1-Flash topics
# (coding, cpp, medical) at EP 4/8/16/24, per-invocation replication against static EPLB planned
# from the past, with memory and traffic for DeepSeek-V4-Flash, ending in one summary line.
# Extra arguments go to `iser replay` (e.g. --paper-e1 for the paper's E1 on the coding set).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The replay is pure C++: its own build folder, without the CUDA part, builds in about a minute.
cmake -S . -B build/replay -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=OFF -DISER_BUILD_TESTS=OFF \
  -DISER_BUILD_BENCH=OFF >/dev/null
cmake --build build/replay -j "$(nproc)" --target iser >/dev/null
exec ./build/replay/iser replay "$@"
