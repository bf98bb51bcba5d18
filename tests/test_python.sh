#!/usr/bin/env bash
# test_python.sh [PYTHON] - the Python package (python/mixprec) against this
# build's libmixprec and mixprec command (needs MIXPREC and MIXPREC_LIB).
# Without PYTHON (make test): pytest with Debian's python3 and torch 1.13 (fp32
# and bf16 autocast); the tests that need torch 2.x (fp16 autocast and
# GradScaler on the CPU, torch.compile, the Lightning, Hugging Face and
# TensorBoard integrations) are skipped, and the summary names them.
# With PYTHON (make check-torch: bench/.venv/bin/python, PyPI's torch 2.x and
# those libraries), every test, and one of those skipped is a failure.
set -eu
: "${MIXPREC:?set MIXPREC to the mixprec binary}" "${MIXPREC_LIB:?set MIXPREC_LIB to libmixprec.so}"
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
if [ $# -eq 0 ]; then
    exec /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs "$root/python/tests"
fi
"$1" -c 'import torch; v = tuple(int(x) for x in torch.__version__.split(".")[:2]); assert v >= (2, 3), torch.__version__' ||
    { echo "test_python.sh: $1 has no torch >= 2.3"; exit 1; }
MIXPREC_TORCH2=1 exec "$1" -m pytest -q -p no:cacheprovider -rs "$root/python/tests"
