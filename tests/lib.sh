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
done_() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ]
}
