# lib.sh - what the shell tests share: the binary, a scratch directory removed
# on exit, pass/fail counters and the closing line. Source it, then call done_.
set -u
M=${MIXPREC:?set MIXPREC to the mixprec binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fails=0
ok() { pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# Fashion-MNIST as plain IDX files in $T/fmnist, for --data: the loader reads
# them as it reads the .gz ones, without inflating 26 MB again in every run.
plain_fashion_mnist() {
    mkdir -p "$T/fmnist"
    for f in /usr/share/datasets/fashion-mnist/*-ubyte.gz; do gzip -dc "$f" > "$T/fmnist/$(basename "$f" .gz)"; done
}
# The command-line tests' checks (a script may define its own instead).
# expect STATUS CMD... : exit status is STATUS; stdout in $out, stderr in $err
expect() {
    local want=$1; shift
    out=$("$@" 2>"$T/stderr"); local got=$?
    err=$(cat "$T/stderr")
    if [ "$got" -ne "$want" ]; then fail "'$*' exited $got, expected $want (stderr: $err)"; return 1; fi
    ok
}
has() { if printf '%s\n' "$1" | grep -qE -- "$2"; then ok; else fail "expected /$2/ in: $1"; fi; }
one_line() { if [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [ -n "$err" ]; then ok; else fail "expected a one-line error, got: $err"; fi; }
done_() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ]
}
