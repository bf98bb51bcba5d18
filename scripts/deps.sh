#!/usr/bin/env bash
# deps.sh - install the Debian packages mixprec needs, only those missing.
#   scripts/deps.sh build   what compiling needs: compiler, CMake, make, pkg-config,
#                           zlib and cJSON headers (OpenMP comes with gcc; OpenMPI
#                           is optional: CMake builds data parallelism in when it
#                           finds it)
#   scripts/deps.sh demo    build + fortunes (and fortunes-min, which it depends
#                           on): the GPT's default corpus, /usr/share/games/fortunes
#   scripts/deps.sh test    demo + what the tests read and run: python3 (the CLI
#                           test reads JSON), Fashion-MNIST (dataset-fashion-mnist:
#                           /usr/share/datasets/fashion-mnist), chromium (the report
#                           test renders the page headless), python3-numpy,
#                           python3-torch, python3-pytest and python3-venv (the Python
#                           package's tests, its pip install in make check-package),
#                           OpenMPI (openmpi-bin, libopenmpi-dev: the data-parallel
#                           test under mpirun), strace (the crash test kills a
#                           comparison at each rename of its commit), util-linux
#                           (flock: the crash test holds an output's lock)
#   scripts/deps.sh bench   test + the peers make bench measures: OpenBLAS (pthread
#                           build); numpy and PyTorch as above
#   scripts/deps.sh clang   test + clang, its sanitizer runtimes (libclang-rt-dev,
#                           only recommended by clang), LLVM's libomp with its Archer
#                           tool (ThreadSanitizer), llvm (llvm-symbolizer) and
#                           clang-format (the house style, .clang-format)
# Says what it installs; installs nothing when everything is there.
set -eu
what=${1:-build}
build=(gcc g++ make cmake pkg-config libc6-dev zlib1g-dev libcjson-dev)
demo=("${build[@]}" fortunes)
test=("${demo[@]}" python3 dataset-fashion-mnist chromium python3-numpy python3-torch python3-pytest python3-venv
      openmpi-bin libopenmpi-dev strace util-linux)
case "$what" in
    build) pkgs=("${build[@]}") ;;
    demo) pkgs=("${demo[@]}") ;;
    test) pkgs=("${test[@]}") ;;
    bench) pkgs=("${test[@]}" libopenblas0-pthread) ;;
    clang) pkgs=("${test[@]}" clang libclang-rt-dev libomp-dev llvm clang-format) ;;
    *) echo "deps.sh: unknown set '$what' (build, demo, test, bench or clang)" >&2; exit 2 ;;
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
