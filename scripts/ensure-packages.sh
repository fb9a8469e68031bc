#!/bin/sh
# Makes sure the Debian packages a job needs are installed, so that `make demo` and `make test`
# work on a fresh machine. Installs what is missing with apt-get when it can (as root, or through
# sudo without a password), saying what it installs; otherwise prints the one command to run.
#
# usage: scripts/ensure-packages.sh build|test|valgrind|fuzz|cross-aarch64|classify-data ...
# ATTN_NO_INSTALL=1: only check and print the command (exit 1 when something is missing).
set -eu

packages_of() {
    case "$1" in
    # Open MPI is optional for the build (data-parallel training under mpirun); without it attn
    # trains in one process.
    # libsentencepiece-dev is optional too (the spm tokenizers); its tools (sentencepiece) are
    # what the tests compare attn's ids and text with.
    build) echo "build-essential cmake pkg-config libcjson-dev libpng-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin libsentencepiece-dev" ;;
    # The reference checks run under /usr/bin/python3 with Debian's NumPy and PyTorch; the
    # attention page is tested in Debian's chromium, headless.
    test) echo "build-essential cmake pkg-config libcjson-dev libpng-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin libsentencepiece-dev sentencepiece python3 python3-numpy python3-torch python3-pytest chromium" ;;
    valgrind) echo "valgrind" ;;
    fuzz) echo "clang libclang-rt-14-dev" ;;
    # The AArch64 cross build and its tests under qemu (make cross-test ARCH=aarch64): the
    # cross compiler, qemu-user, and the target's libraries from Debian's arm64 multiarch
    # packages (libc6:arm64 is the loader and C library qemu-aarch64 runs the tests with).
    cross-aarch64) echo "cmake pkg-config make gcc-aarch64-linux-gnu qemu-user libc6:arm64 libcjson-dev:arm64 libpng-dev:arm64 libmicrohttpd-dev:arm64" ;;
    # The classification tasks' data (scripts/get-data.sh wordlang|fortunes: Debian's word lists
    # of 20 languages and the fortune collections) and their peer, fastText
    # (recipes/classify-fasttext.sh).
    classify-data) echo "python3 fasttext fortunes fortunes-min wamerican wbritish wfrench wngerman witalian wspanish wportuguese wdutch wswedish wdanish wnorwegian wpolish wcatalan wukrainian wbulgarian wesperanto wirish wgaelic wmanx wfaroese wgalician-minimos" ;;
    *) echo "ensure-packages: unknown group '$1' (build, test, valgrind, fuzz, cross-aarch64 or classify-data)" >&2; exit 2 ;;
    esac
}

wanted=""
for group in "$@"; do
    wanted="$wanted $(packages_of "$group")"
done

if ! command -v dpkg-query >/dev/null 2>&1; then
    # Not Debian: the build's own checks (CMake, the tests) name what is missing.
    exit 0
fi

missing=""
for p in $wanted; do
    case " $missing " in *" $p "*) continue ;; esac
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
missing=${missing# }
# The commands to print for someone without root: another architecture's packages first need
# dpkg to accept that architecture.
install_command="sudo apt-get install $missing"
case " $missing" in
*:arm64*) install_command="sudo dpkg --add-architecture arm64 && sudo apt-get update && $install_command" ;;
esac

if [ -n "${ATTN_NO_INSTALL:-}" ]; then
    echo "attn needs these Debian packages: $missing" >&2
    echo "install them with: $install_command" >&2
    exit 1
fi
if [ "$(id -u)" = 0 ]; then
    run_as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    run_as_root="sudo"
else
    echo "attn needs these Debian packages: $missing" >&2
    echo "install them with: $install_command" >&2
    echo "(then run the same make command again)" >&2
    exit 1
fi

echo "attn: installing the Debian packages it needs: $missing"
export DEBIAN_FRONTEND=noninteractive
# Packages of another architecture (name:arm64) install only once dpkg accepts it; the
# apt-get update below then fetches its package lists.
for p in $missing; do
    case "$p" in
    *:*)
        arch=${p#*:}
        dpkg --print-foreign-architectures | grep -qx "$arch" || $run_as_root dpkg --add-architecture "$arch"
        ;;
    esac
done
# An old package list on a fresh machine often lacks the versions its mirror still has.
$run_as_root apt-get update -qq
# shellcheck disable=SC2086
$run_as_root apt-get install -y -qq --no-install-recommends $missing
