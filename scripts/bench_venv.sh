#!/usr/bin/env bash
# bench_venv.sh [DIR] - the virtual environment with PyPI's torch 2.x that
# `make bench` measures next to Debian's torch 1.13 (default DIR: bench/.venv).
# The wheel is a CUDA build that runs on the CPU once its dependencies are in
# (about 3 GB), and pytest (tests/test_python.sh runs the package's tests there
# too: fp16 autocast needs torch >= 2.3), and the references of the fp8/fp4
# cross-checks (bench/crosscheck_formats.py, crosscheck_mx.py, crosscheck_fp8.py):
# ml_dtypes and torchao; and the optimizers the state formats are compared with
# (torchao's low-bit AdamW, torch-optimi's Kahan summation: bench/torchao_sparse.py); and the libraries the
# PyTorch monitor plugs into, for its tests (python/tests/test_integrations.py): tensorboard, lightning,
# transformers with accelerate.
# Creates it (or adds what is missing) and says what it does.
set -eu
dir=${1:-$(dirname "$0")/../bench/.venv}
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "import torch, numpy, pytest, ml_dtypes, torchao, optimi, tensorboard, lightning, transformers, accelerate" 2>/dev/null; then
    exit 0
fi
if ! [ -x "$dir/bin/python" ]; then
    echo "bench_venv.sh: creating $dir with torch 2.x and numpy from PyPI (about 3 GB)"
    /usr/bin/python3 -m venv "$dir"
fi
echo "bench_venv.sh: installing torch, numpy, pytest, ml_dtypes, torchao, torch-optimi, tensorboard, lightning," \
     "transformers and accelerate into $dir"
"$dir/bin/pip" install -q --disable-pip-version-check torch numpy pytest ml_dtypes torchao torch-optimi tensorboard \
    lightning transformers accelerate
"$dir/bin/python" -c 'import torch, ml_dtypes, torchao, optimi; print("bench_venv.sh: torch", torch.__version__, "ml_dtypes", ml_dtypes.__version__, "torchao", torchao.__version__, "torch-optimi", optimi.__version__)'
