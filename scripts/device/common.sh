# Sourced by the scripts beside it (GPU machine): the multicast-off environment, the log folder
# ($O = $OUT), the elapsed-time and budget helpers, the run header, and the Release build.
#   el                     seconds since the script started ("N s")
#   step NAME WANT CMD...  runs CMD under `timeout` with WANT seconds, at most what is left of
#                          BUDGET (default $DEFAULT_BUDGET, else 540) minus 5 s; logs to
#                          $O/NAME.log; skipped when NAME or its prefix before "_" is in $SKIP,
#                          or when less than 10 s are left
#   header                 date, commit and GPUs into $O/date.log (and stdout)
#   configure DIR          cmake -S . -B DIR (Release, sm_90a, benches on)
#   build_errors           the first errors of $O/build.log
#   build_targets DIR T... configure DIR and build targets T; non-zero (errors printed) on failure
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp}
t0=$(date +%s)
deadline=$((t0 + ${BUDGET:-${DEFAULT_BUDGET:-540}}))
el() { echo "$(($(date +%s) - t0)) s"; }
cap() {  # cap WANT: seconds for the next step (0 = skip)
  local left=$((deadline - $(date +%s) - 5))
  if [ "$left" -lt 10 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
step() {
  local name=$1 want=$2; shift 2
  case " $SKIP " in *" $name "* | *" ${name%%_*} "*) echo "$name: skipped (SKIP)"; return ;; esac
  local t; t=$(cap "$want")
  if [ "$t" = 0 ]; then echo "$name: skipped (budget)"; return; fi
  timeout "$t" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? $(el)"
}
header() {
  date -u | tee $O/date.log
  git log --oneline -1 2>/dev/null | tee -a $O/date.log
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a $O/date.log
}
configure() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DISER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DISER_BUILD_BENCH=ON > $O/cfg.log 2>&1 || { tail -30 $O/cfg.log; return 1; }
}
build_errors() { grep -B2 -A8 -E "error:|Error " $O/build.log | head -60; }
build_targets() {
  local dir=$1; shift
  configure "$dir" || return 1
  cmake --build "$dir" -j"$(nproc)" --target "$@" > $O/build.log 2>&1 || { build_errors; return 1; }
}
