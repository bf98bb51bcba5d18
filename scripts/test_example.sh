#!/usr/bin/env bash
# test_example.sh BUILD - installs the library from BUILD into a temporary
# prefix, builds each of examples/*.c against it through pkg-config, as a user
# would (with $CC, default cc), and runs it: train_loop.c (a training loop of
# your own) and custom_model.c (a model of your own trained by mp_compare in
# fp32 and fp16-dynamic, its report written) exit non-zero unless they learned.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH=$libdir
for name in train_loop custom_model; do
    "${CC:-cc}" -std=c11 -Wall -Wextra -Werror "$root/examples/$name.c" $(pkg-config --cflags --libs mixprec) \
       -Wl,-rpath,"$(dirname "$libdir")" -o "$prefix/$name"
done
"$prefix/train_loop"
echo "example: examples/train_loop.c, built through pkg-config against the installed library, learned"
(cd "$prefix" && ./custom_model "$prefix/report" >/dev/null)
for f in report.html summary.json fp32.csv fp16-dynamic.json; do
    [ -s "$prefix/report/$f" ] || { echo "examples/custom_model.c wrote no $f" >&2; exit 1; }
done
echo "example: examples/custom_model.c, a model of its own trained by mp_compare in fp32 and fp16-dynamic, learned; report written"
