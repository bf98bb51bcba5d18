#!/usr/bin/env bash
# check_package.sh - the Python package as a user installs it: pip install of
# the checkout into a fresh virtual environment (--system-site-packages, so
# Debian's torch and numpy are seen; pip fetches scikit-build-core from PyPI
# and builds libmixprec with the project's CMakeLists.txt); the package's tests
# against that installation (no PYTHONPATH, no MIXPREC_LIB); then a source
# distribution built from the checkout, installed into a second environment
# and tested the same way; and examples/torch_monitor.py. About 2 minutes.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} PIP_DISABLE_PIP_VERSION_CHECK=1 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH MIXPREC_LIB MIXPREC

check() { # check VENV: the tests, from a copy outside the checkout, against what VENV holds
    cp -r "$root/python/tests" "$T/tests"
    (cd "$T" && PATH="$1/bin:$PATH" "$1/bin/python" -m pytest -q -p no:cacheprovider -rs tests)
    rm -rf "$T/tests"
    # the library the package loaded is the one pip installed into VENV
    V="$1" "$1/bin/python" -c 'import mixprec, os; p = mixprec._lib.lib._name; assert p.startswith(os.environ["V"]), p'
    # and the package's version is the library's (both CMakeLists.txt's)
    "$1/bin/python" -c 'import mixprec, importlib.metadata as m; v = m.version("mixprec"); assert v == mixprec.version(), v'
}

echo "check_package.sh: pip install $root"
/usr/bin/python3 -m venv --system-site-packages "$T/a"
"$T/a/bin/pip" install -q "$root"
check "$T/a"

echo "check_package.sh: sdist"
"$T/a/bin/pip" install -q build
"$T/a/bin/python" -m build --sdist --outdir "$T/dist" "$root" > "$T/build.log" 2>&1 || { tail -20 "$T/build.log"; exit 1; }
sdist=$(ls "$T"/dist/mixprec-*.tar.gz)
echo "check_package.sh: $(basename "$sdist"), $(tar tzf "$sdist" | wc -l) files; pip install it"
/usr/bin/python3 -m venv --system-site-packages "$T/b"
"$T/b/bin/pip" install -q "$sdist"
check "$T/b"

echo "check_package.sh: examples/torch_monitor.py"
(cd "$T" && "$T/b/bin/python" "$root/examples/torch_monitor.py" --steps 30 --out "$T/ex") > "$T/ex.txt"
grep -q '^wrote .*report.html' "$T/ex.txt" && [ -s "$T/ex/report.html" ] || { cat "$T/ex.txt"; exit 1; }
echo "check_package.sh: ok"
