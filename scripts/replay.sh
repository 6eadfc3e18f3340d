#!/usr/bin/env bash
# Builds the CLI and replays the bundled real routing data (DeepSeek-V4.1-Flash) at EP 4/8/16/24.
# Extra arguments go to `iser replay`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release -DISER_BUILD_TESTS=OFF -DISER_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$(nproc)" --target iser >/dev/null
exec ./build/release/iser replay "$@"
