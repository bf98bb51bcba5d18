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
done_() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ]
}
