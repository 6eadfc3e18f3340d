#!/usr/bin/env bash
# Builds the CLI and replays the bundled real routing data (DeepSeek-V4.1-Flash) at EP 4/8/16/24.
# Extra arguments go to `iser replay`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The replay is pure C++: its own build folder, without the CUDA part, builds in about a minute.
cmake -S . -B build/replay -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=OFF -DISER_BUILD_TESTS=OFF \
  -DISER_BUILD_BENCH=OFF >/dev/null
cmake --build build/replay -j "$(nproc)" --target iser >/dev/null
exec ./build/replay/iser replay "$@"
