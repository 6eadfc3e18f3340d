#!/usr/bin/env bash
# Builds everything (the CUDA part too where nvcc exists) and runs every test: the ctest suites,
# then the Python package (pip install . into the venv build/venv, pytest tests/python). GPU tests
# (ctest label `gpu`, pytest marker `gpu`) skip themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset ci -DISER_REQUIRE_RAPIDCHECK=ON >/dev/null
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
# The Python package as a user installs it. The ci build above already compiled the CUDA part, so
# the package is built without it here (a GPU user's `pip install .` builds it: docs/python.md).
python3 -m venv build/venv
build/venv/bin/pip install -q --upgrade pip
build/venv/bin/pip install -q --config-settings=cmake.define.ISER_CUDA=OFF ".[test]"
PATH="$PWD/build/venv/bin:$PATH" build/venv/bin/python -m pytest -q tests/python
