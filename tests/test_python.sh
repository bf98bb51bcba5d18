#!/usr/bin/env bash
# test_python.sh - the Python package (python/mixprec) against this build's
# libmixprec and mixprec command: pytest with Debian's python3 and torch 1.13
# (fp32 and bf16 autocast), then, where the bench scripts' virtual environment
# exists (scripts/bench_venv.sh: torch 2.x), the same tests there, which adds
# fp16 autocast and GradScaler on the CPU. Needs MIXPREC and MIXPREC_LIB.
set -eu
: "${MIXPREC:?set MIXPREC to the mixprec binary}" "${MIXPREC_LIB:?set MIXPREC_LIB to libmixprec.so}"
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider -rs "$root/python/tests"
venv="$root/bench/.venv/bin/python"
# found, not imported: importing torch alone takes seconds
if [ -x "$venv" ] && "$venv" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("pytest")))' 2>/dev/null; then
    "$venv" -m pytest -q -p no:cacheprovider -rs "$root/python/tests"
else
    echo "test_python.sh: no torch 2.x environment (scripts/bench_venv.sh creates bench/.venv): fp16 autocast untested"
fi
