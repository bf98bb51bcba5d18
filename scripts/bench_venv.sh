#!/usr/bin/env bash
# bench_venv.sh [DIR] - the virtual environment with PyPI's torch 2.x that
# `make bench` measures next to Debian's torch 1.13 (default DIR: bench/.venv).
# The wheel is a CUDA build that runs on the CPU once its dependencies are in
# (about 3 GB), and pytest (tests/test_python.sh runs the package's tests there
# too: fp16 autocast needs torch >= 2.3). Creates it only when missing; says
# what it does.
set -eu
dir=${1:-$(dirname "$0")/../bench/.venv}
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "import torch, numpy, pytest" 2>/dev/null; then exit 0; fi
echo "bench_venv.sh: creating $dir with torch 2.x and numpy from PyPI (about 3 GB)"
/usr/bin/python3 -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check torch numpy pytest
"$dir/bin/python" -c 'import torch; print("bench_venv.sh: torch", torch.__version__)'
