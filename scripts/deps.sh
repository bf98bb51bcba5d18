#!/usr/bin/env bash
# deps.sh - install the Debian packages mixprec needs, only those missing.
#   scripts/deps.sh build   compiler, CMake, make, zlib and cJSON headers, python3
#                           (the CLI test reads JSON), and Fashion-MNIST
#                           (dataset-fashion-mnist: /usr/share/datasets/fashion-mnist),
#                           chromium (the report test renders the page headless),
#                           fortunes (and fortunes-min, which it depends on): the
#                           default text corpus, /usr/share/games/fortunes;
#                           python3-numpy, python3-torch, python3-pytest and
#                           python3-venv: the Python package's tests (make test)
#                           and its pip install (make check-package); OpenMPI
#                           (openmpi-bin, libopenmpi-dev): data-parallel training,
#                           `mpirun -np N mixprec train`, built in when CMake finds it
#   scripts/deps.sh bench   the above + the peers make bench measures:
#                           OpenBLAS (pthread build); numpy and PyTorch as above
#   scripts/deps.sh clang   the above + clang, its sanitizer runtimes
#                           (libclang-rt-dev, only recommended by clang), LLVM's
#                           libomp with its Archer tool (ThreadSanitizer), and
#                           llvm (llvm-symbolizer: file and line in reports)
# Says what it installs; installs nothing when everything is there.
set -eu
what=${1:-build}
pkgs=(gcc g++ make cmake pkg-config libc6-dev zlib1g-dev libcjson-dev python3 dataset-fashion-mnist chromium fortunes
      python3-numpy python3-torch python3-pytest python3-venv openmpi-bin libopenmpi-dev)
case "$what" in
    build) ;;
    bench) pkgs+=(libopenblas0-pthread) ;;
    clang) pkgs+=(clang libclang-rt-dev libomp-dev llvm) ;;
    *) echo "deps.sh: unknown set '$what' (build, bench or clang)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: not root; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -q --no-install-recommends "${missing[@]}"
