#!/usr/bin/env bash
# check_clang.sh - mixprec built with Debian's clang, and its threads under
# ThreadSanitizer. Run from anywhere; builds in the repository root.
#   0. The house style: every C file as clang-format (Debian's, 14) leaves it
#      under .clang-format.
#   1. clang, Release, -Werror: every target builds warning-free; ctest, and
#      examples/train_loop.c built with clang through pkg-config.
#   2. clang with ASan + UBSan, -Werror: builds warning-free; ctest (--quick).
#   3. clang with ThreadSanitizer on LLVM's libomp, with its Archer tool loaded
#      (OMP_TOOL_LIBRARIES) so that TSan knows OpenMP's barriers, critical
#      sections and locks: the threaded tests and short training runs of the MLP
#      and the GPT, 2 threads. Each on the CPU's best kernels, then (tests not
#      choosing their paths themselves, and the training runs) on the portable
#      ones, MIXPREC_ISA=scalar: TSan does not see AVX-512's masked loads and
#      stores, so the portable paths are the ones where it sees every access.
#      Any report fails the check. Only libomp's internals are suppressed
#      (tests/tsan.supp). Not with GCC's libgomp: TSan does not see its barriers
#      and reports a race at the end of every parallel region.
# Build directories: CLANG_BUILD (build-clang), CLANG_ASAN_BUILD
# (build-clang-asan), TSAN_BUILD (build-tsan); CLANG (clang), JOBS (2).
# Needs clang, libclang-rt-dev (the sanitizer runtimes), libomp-dev (libomp
# and libarcher) and clang-format; llvm (llvm-symbolizer) for file:line in
# reports.
# ctest runs TEST_JOBS (2 x JOBS) tests at a time, as make test does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CLANG=${CLANG:-clang}
JOBS=${JOBS:-2}
TEST_JOBS=${TEST_JOBS:-$((JOBS * 2))} # ctest in parallel, as make test (its tests wait on files and processes)
CLANG_BUILD=${CLANG_BUILD:-build-clang}
CLANG_ASAN_BUILD=${CLANG_ASAN_BUILD:-build-clang-asan}
TSAN_BUILD=${TSAN_BUILD:-build-tsan}

command -v "$CLANG" >/dev/null || { echo "check_clang: no $CLANG (apt-get install clang)" >&2; exit 1; }
llvm_lib=$(cd "$("$CLANG" -print-resource-dir)/../.." && pwd) # /usr/lib/llvm-14/lib
archer=$llvm_lib/libarcher.so
[ -f "$archer" ] || { echo "check_clang: no $archer (apt-get install libomp-dev)" >&2; exit 1; }

start=$SECONDS
t0=$SECONDS
part() { echo "check_clang: $1: $((SECONDS - t0)) s"; t0=$SECONDS; }

# 0. The house style
command -v clang-format >/dev/null || { echo "check_clang: no clang-format (apt-get install clang-format)" >&2; exit 1; }
{ git ls-files -z '*.c' '*.h' 2>/dev/null || find src include tools tests fuzz examples -name '*.[ch]' -print0; } |
    xargs -0 clang-format --dry-run -Werror ||
    { echo "check_clang: the files above are not as clang-format leaves them (clang-format -i FILE)" >&2; exit 1; }
part "clang-format"
configure() { # DIR BUILD_TYPE CMAKE_ARGS...
    local dir=$1 type=$2; shift 2
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_BUILD_TYPE="$type" -DMP_WERROR=ON "$@" >/dev/null
}

# 1. Release
configure "$CLANG_BUILD" Release
cmake --build "$CLANG_BUILD" -j "$JOBS"
part "clang build"
CC=$CLANG scripts/test_example.sh "$CLANG_BUILD"
ctest --test-dir "$CLANG_BUILD" --output-on-failure -j "$TEST_JOBS"
part "clang tests"

# 2. ASan + UBSan
configure "$CLANG_ASAN_BUILD" RelWithDebInfo -DMP_SANITIZE=ON
cmake --build "$CLANG_ASAN_BUILD" -j "$JOBS"
# intercept_tls_get_addr=0, as make test (Makefile, SAN_ENV): LLVM 14's __tls_get_addr
# interceptor mistakes a malloc'd dynamic TLS block 16 bytes past a 4 KiB boundary for
# glibc 2.19's layout, and LeakSanitizer's exit-time check dies reading the range it
# recorded ("Tracer caught signal 11")
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir "$CLANG_ASAN_BUILD" --output-on-failure -j "$TEST_JOBS"
part "clang ASan + UBSan build and tests"

# 3. ThreadSanitizer
tsan=(-fsanitize=thread -fno-omit-frame-pointer)
configure "$TSAN_BUILD" RelWithDebInfo -DCMAKE_C_FLAGS="${tsan[*]}" -DCMAKE_EXE_LINKER_FLAGS="${tsan[*]}" \
          -DCMAKE_SHARED_LINKER_FLAGS="${tsan[*]}"
threaded=(format convert scaler optim gemm ops gpt)
cmake --build "$TSAN_BUILD" -j "$JOBS" --target mixprec "${threaded[@]/#/test_}"
libs=$(ldd "$TSAN_BUILD/mixprec")
if [[ $libs == *libgomp* || $libs != *libomp.so* ]]; then
    echo "check_clang: $TSAN_BUILD/mixprec is not linked with LLVM's libomp" >&2; exit 1
fi
part "TSan build"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_TOOL_LIBRARIES=$archer ARCHER_OPTIONS=verbose=1 MIXPREC_THREADS=2 OMP_NUM_THREADS=2
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$root/tests/tsan.supp"
symbolizer=$llvm_lib/../bin/llvm-symbolizer
[ -x "$symbolizer" ] && TSAN_OPTIONS+=" external_symbolizer_path=$symbolizer"
runs=0
# tsan_run NAME CMD...: CMD must exit 0, with Archer loaded and no TSan report
tsan_run() {
    local name=$1 rc=0; shift
    "$@" >"$tmp/log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] || grep -q 'ThreadSanitizer' "$tmp/log" || ! grep -q '^Archer detected' "$tmp/log"; then
        tail -n 60 "$tmp/log"
        echo "check_clang: FAILED under TSan (exit $rc): $name: $*" >&2
        exit 1
    fi
    runs=$((runs + 1))
}

# The set-up itself: Archer loads and TSan reports a race planted in an OpenMP loop.
printf '%s\n' 'int main(void) {' '    int n = 0;' '#pragma omp parallel num_threads(2)' \
       '    n++; /* a race */' '    return n < 0;' '}' > "$tmp/race.c"
"$CLANG" -fopenmp=libomp "${tsan[@]}" -g "$tmp/race.c" -o "$tmp/race"
rc=0; "$tmp/race" >"$tmp/race.log" 2>&1 || rc=$?
if [ "$rc" -ne 66 ] || ! grep -q '^Archer detected' "$tmp/race.log"; then
    cat "$tmp/race.log"; echo "check_clang: TSan + Archer did not report a planted race" >&2; exit 1
fi

for i in $(seq 1 300); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > "$tmp/c.txt"
mlp=(train --model mlp:784-512-512-10 --batch 128 --steps 3 --threads 2)
gpt=(train --model gpt:2-4-128-64 --data "text:$tmp/c.txt" --batch 8 --steps 3 --threads 2 --eval-windows 8)
for isa in native scalar; do
    if [ $isa = scalar ]; then export MIXPREC_ISA=scalar; fi
    for t in "${threaded[@]}"; do
        # gemm and convert run every path themselves
        [ $isa = scalar ] && { [ "$t" = gemm ] || [ "$t" = convert ] || [ "$t" = format ]; } && continue
        tsan_run "$isa" "$TSAN_BUILD/tests/test_$t" --quick
    done
    for p in "fp16-dynamic --clip 1" bf16-pure fp16-dynamic+master-weights=none; do
        # shellcheck disable=SC2086 # $p: a mode and its options
        [ $isa = native ] && tsan_run "$isa" "$TSAN_BUILD/mixprec" "${mlp[@]}" --precision $p
        # shellcheck disable=SC2086
        tsan_run "$isa" "$TSAN_BUILD/mixprec" "${gpt[@]}" --precision $p
    done
done
# the MLP on the portable kernels once: its evaluation on 10,000 images is slow there
tsan_run scalar "$TSAN_BUILD/mixprec" train --model mlp:784-336-10 --batch 128 --steps 3 --threads 2 \
    --precision fp16-dynamic --accum 2 --clip 1
unset MIXPREC_ISA
part "TSan: $runs threaded runs, no report"
echo "check_clang: all passed in $((SECONDS - start)) s"
