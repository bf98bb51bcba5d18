#!/usr/bin/env bash
# fuzz.sh - the libFuzzer harnesses of fuzz/ (docs/FUZZING.md): builds them
# with clang under ASan + UBSan, runs each for FUZZ_SECONDS on a copy of its
# corpus (fuzz/corpus/NAME), prints each one's executions, and fails if any
# finds a crash, a hang, a leak, an out-of-memory or a broken invariant; the
# input that did it is kept in FUZZ_BUILD/fuzz/findings/NAME/.
#   FUZZ_SECONDS  seconds per harness (60)
#   FUZZ_BUILD    build directory (build-fuzz)
#   FUZZ_ONLY     the harnesses to run, e.g. "npy idx" (all)
#   FUZZ_CC       the compiler (clang)
#   JOBS          build jobs (2)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-build-fuzz}
read -r -a names <<< "${FUZZ_ONLY:-safetensors npy idx text checkpoint gpt_file scaler options}"

cmake -S . -B "$build" -DCMAKE_C_COMPILER="${FUZZ_CC:-clang}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DMP_SANITIZE=ON -DMP_FUZZ=ON > /dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${names[@]/#/fuzz_}" > "$build/fuzz-build.log" 2>&1 ||
    { cat "$build/fuzz-build.log"; exit 1; }

# the corpus copies and the files the harnesses write, in memory where possible
work=$(mktemp -d -p "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")")
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
failed=()
printf '%-12s %12s %10s  %s\n' harness executions "per second" result
for n in "${names[@]}"; do
    found="$build/fuzz/findings/$n"
    mkdir -p "$work/$n" "$found"
    cp fuzz/corpus/"$n"/* "$work/$n"/
    # options: the command-line parser prints its usage errors; keep them out of the log
    mask=1
    [ "$n" = options ] && mask=3
    log="$build/fuzz/$n.log"
    result=ok
    "$build/fuzz/fuzz_$n" "$work/$n" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -close_fd_mask=$mask -artifact_prefix="$found/" > "$log" 2>&1 ||
        { result="FAILED (log: $log, input: $found/)"; failed+=("$n"); }
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    printf '%-12s %12s %10s  %s\n' "$n" "${execs:-?}" "${rate:-?}" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: findings in: ${failed[*]}" >&2
    exit 1
fi
