#!/bin/sh
# Cross-compiles attn for another architecture and runs its C tests under qemu-user, on a
# machine without that hardware: `make cross-test ARCH=aarch64`.
#
# usage: scripts/cross-test.sh aarch64 [build dir] [jobs]
#
# The build leaves out MPI (-DATTN_MPI=OFF), SentencePiece (-DATTN_SENTENCEPIECE=OFF: its C++
# shim would need a C++ cross compiler and libsentencepiece's arm64 packages, for a tokenizer
# that is not architecture-specific) and the Python tests (they load the library into the
# host's Python). Every C test runs once on the best path of qemu's `-cpu max` (neon),
# then the kernel and attention tests (labels kernels, attention) once more per other path
# the library offers there (ATTN_ISA=portable, reference: with it set, those tests check that
# path alone against the reference, tests/support/harness.h). The learnability tests (label
# learn: thousands of training steps, their code the unit tests' code) are left out: under
# emulation they alone would take longer than everything else together.
set -eu
cd "$(dirname "$0")/.."

arch=${1:-}
case "$arch" in
aarch64) ;;
*) echo "cross-test: ARCH must be aarch64 (the only cross target so far), got '$arch'" >&2; exit 2 ;;
esac
build=${2:-build-$arch}
jobs=${3:-2}

./scripts/ensure-packages.sh "cross-$arch"

start=$(date +%s)
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="cmake/$arch-linux-gnu.cmake" \
        -DCMAKE_BUILD_TYPE=Release -DATTN_MPI=OFF -DATTN_SENTENCEPIECE=OFF -DATTN_PYTHON_TESTS=OFF
fi
cmake --build "$build" -j "$jobs"
built=$(date +%s)

cd "$build"
# The emulator that ctest runs each test under (CMAKE_CROSSCOMPILING_EMULATOR) runs attn
# info too, so the log says which paths the emulated CPU offers.
qemu-$arch -cpu max ./attn info
echo "cross-test: every C test on the best path"
ctest --output-on-failure -j "$jobs" -L '^c$' -LE '^learn$'
for isa in portable reference; do
    echo "cross-test: the kernel and attention tests with ATTN_ISA=$isa"
    ATTN_ISA=$isa ctest --output-on-failure -j "$jobs" -L '^(kernels|attention)$'
done
finished=$(date +%s)
echo "cross-test: $arch build $((built - start)) s, tests under qemu $((finished - built)) s"
