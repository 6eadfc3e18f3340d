#!/usr/bin/env bash
# Fails when a function (or kernel) under src/ is longer than LIMIT lines (default 150), from its
# signature to its closing brace, as Universal Ctags sees it (Debian universal-ctags; the JSON
# output gives each function's first and last line). Lists every function over the limit.
# Exit 77 (a skip for ctest) without a ctags that writes JSON.
#
# Exclusions (one glob a line below, each with its reason here); none today.
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${1:-150}"
excluded=()
ctags="${CTAGS:-ctags}"
if ! "$ctags" --list-features 2>/dev/null | grep -q '^json'; then
  echo "check-function-size: Universal Ctags with JSON output not found; skipped" >&2
  exit 77
fi
mapfile -t files < <(find src \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
  | sort)
report=$("$ctags" --output-format=json --fields=+ne --kinds-C++=f --langmap=C++:+.cu.cuh \
  -f - "${files[@]}" 2>/dev/null |
  python3 -c '
import json, re, sys
limit = int(sys.argv[1])
for line in sys.stdin:
    tag = json.loads(line)
    if tag.get("_type") != "tag" or "end" not in tag:
        continue
    size = tag["end"] - tag["line"] + 1
    if size > limit:
        scope = tag.get("scope", "")
        name = re.sub(r"__anon[0-9a-f]+", "(anonymous)", (scope + "::" if scope else "") + tag["name"])
        print(size, "%s:%d" % (tag["path"], tag["line"]), name)
' "$limit" | sort -rn)
failed=0
while read -r size where name; do
  [[ -z "$size" ]] && continue
  path="${where%%:*}"
  status="FAIL"
  for glob in "${excluded[@]}"; do
    # shellcheck disable=SC2053  # the glob is matched on purpose
    if [[ "$path" == $glob ]]; then status="excluded ($glob)"; fi
  done
  echo "check-function-size: $size lines: $where $name [$status]"
  [[ "$status" == "FAIL" ]] && failed=1
done <<<"$report"
if ((failed)); then
  echo "check-function-size: functions over $limit lines in src/ (split them into named steps)" >&2
  exit 1
fi
echo "check-function-size: no function over $limit lines in src/ outside the exclusions"
