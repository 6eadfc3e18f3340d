#!/usr/bin/env bash
# Fails when a C++/CUDA source of the repository is not formatted by the repository's
# .clang-format (clang-format --dry-run --Werror). Exit 77 (a skip for ctest) without clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check-format: $clang_format not found; skipped" >&2
  exit 77
fi
patterns=('*.cpp' '*.h' '*.cu' '*.cuh')
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- "${patterns[@]}")
else
  mapfile -t files < <(find include src tools tests bench fuzz python \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
fi
log=$(mktemp)
if "$clang_format" --dry-run --Werror "${files[@]}" 2>"$log"; then
  echo "check-format: ${#files[@]} files clean"
  rm -f "$log"
  exit 0
fi
grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$log" | cut -d: -f1 | sort -u |
  sed 's/^/check-format: not clang-format clean (clang-format -i): /' >&2
rm -f "$log"
exit 1
