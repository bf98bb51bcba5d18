#!/usr/bin/env bash
# test_example.sh BUILD - installs the library from BUILD into a temporary
# prefix, builds examples/train_loop.c against it through pkg-config, as a
# user would (with $CC, default cc), and runs it (it exits non-zero unless it
# learned).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH=$libdir
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror "$root/examples/train_loop.c" $(pkg-config --cflags --libs mixprec) \
   -Wl,-rpath,"$(dirname "$libdir")" -o "$prefix/train_loop"
"$prefix/train_loop"
echo "example: examples/train_loop.c, built through pkg-config against the installed library, learned"
