# Cross build for 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu, its tests run under
# qemu-aarch64 (Debian's qemu-user): `make cross-test ARCH=aarch64` (scripts/cross-test.sh).
# The target's libraries (libcjson-dev:arm64 and the others) come from Debian's arm64
# multiarch packages, found through pkg-config's aarch64 directories.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# -cpu max: every feature qemu emulates (dotprod, i8mm, bf16), the best path attn can take.
# The programs' loader and libraries are libc6:arm64's and the other :arm64 packages', in
# their multiarch places (/lib/ld-linux-aarch64.so.1, /usr/lib/aarch64-linux-gnu), where
# qemu-aarch64 finds them without -L.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;max CACHE STRING
  "How to run a target program on the build machine")
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
