#!/bin/sh
# Cross-compiles attn for another architecture and runs its C tests under qemu-user, on a
# machine without that hardware: `make cross-test ARCH=aarch64`.
#
# usage: scripts/cross-test.sh aarch64 [build dir] [jobs]
#
# The build leaves out MPI (-DATTN_MPI=OFF), SentencePiece (-DATTN_SENTENCEPIECE=OFF: its C++
# shim would need a C++ cross compiler and libsentencepiece's arm64 packages, for a tokenizer
# that is not architecture-specific) and the Python tests (they load the library into the
# host's Python). Every C test runs once on the best path of qemu's `-cpu max` (neon-bf16:
# ATTN_ISA set, so each test checks that path alone against the reference,
# tests/support/harness.h), then the kernel tests (label kernels) once more per other ARM
# path (neon-dotprod, neon, portable) and the attention tests with them on the portable
# and reference paths. neon-dotprod and neon differ from neon-bf16 only in the int8 and bf16
# products, which only the kernel tests reach, so the attention tests are not repeated there.
# Last, the detection: attn info and test_core on CPUs without the extensions (cortex-a53: no
# dot product; neoverse-n1: dot product without I8MM or BF16), and the int8 rows' SDOT-only blocks, which a
# CPU with I8MM never runs, on neoverse-n1. The learnability tests (label learn: thousands of
# training steps, their code the unit tests' code) are left out: under emulation they alone
# would take longer than everything else together.
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
# A test run with ATTN_ISA naming a path the CPU lacks reports itself skipped, which ctest
# does not count as a failure: make sure every path forced below is there.
if ! qemu-$arch -cpu max ./attn info | grep -q '^  neon-bf16 *supported'; then
    echo "cross-test: this qemu's -cpu max has no BF16 or dot product: the ARM paths cannot be tested" >&2
    exit 1
fi
echo "cross-test: every C test on the best path (neon-bf16)"
ATTN_ISA=neon-bf16 ctest --output-on-failure -j "$jobs" -L '^c$' -LE '^learn$'
for isa in neon-dotprod neon; do
    echo "cross-test: the kernel tests with ATTN_ISA=$isa"
    ATTN_ISA=$isa ctest --output-on-failure -j "$jobs" -L '^kernels$'
done
for isa in portable reference; do
    echo "cross-test: the kernel and attention tests with ATTN_ISA=$isa"
    ATTN_ISA=$isa ctest --output-on-failure -j "$jobs" -L '^(kernels|attention)$'
done
for cpu in cortex-a53 neoverse-n1; do
    echo "cross-test: detection on -cpu $cpu"
    qemu-$arch -cpu "$cpu" ./attn info | grep -E '^  (neon|neon-dotprod|neon-bf16) |^(bf16|int8):'
    qemu-$arch -cpu "$cpu" ./tests/test_core
done
echo "cross-test: the int8 rows by SDOT alone (-cpu neoverse-n1: no I8MM)"
ATTN_ISA=neon-dotprod qemu-$arch -cpu neoverse-n1 ./tests/test_quantized_rows
finished=$(date +%s)
echo "cross-test: $arch build $((built - start)) s, tests under qemu $((finished - built)) s"
