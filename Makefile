# Thin wrapper over CMake so the common jobs are one word each.
BUILD ?= build
BUILD_TYPE ?= Release
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60

.PHONY: all build test demo bench install clean sanitize-test valgrind-test fuzz cross-test

all: build

# Each job first installs the Debian packages it needs if they are missing (as root or through
# sudo; otherwise it prints the apt-get command), so a fresh machine needs nothing by hand.
# ATTN_NO_INSTALL=1 only checks. Recipes run in order, so this holds under make -j too.
ENSURE = ./scripts/ensure-packages.sh

build:
	@$(ENSURE) build
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test:
	@$(ENSURE) test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

bench: build
	./scripts/bench.sh $(BUILD)

# The C tests again under AddressSanitizer and UndefinedBehaviorSanitizer, and the hostile
# inputs (tests/python/test_hostile_cli.py) against the sanitized attn program.
sanitize-test:
	@$(ENSURE) build test
	cmake -S . -B $(BUILD)-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_SANITIZE=ON
	cmake --build $(BUILD)-sanitize -j $(JOBS)
	cd $(BUILD)-sanitize && ctest --output-on-failure -j $(JOBS) -L '^(c|hostile)$$'

# The C tests under valgrind memcheck. Valgrind does not emulate AVX-512, so the library's
# run-time dispatch picks the AVX2 kernels there by itself. The learnability tests (label
# learn) are left out: thousands of training steps at valgrind's speed would take hours, and
# they run the same code as the unit tests, which valgrind does check (ASan runs them all).
valgrind-test:
	@$(ENSURE) build valgrind
	cmake -S . -B $(BUILD)-valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_PYTHON_TESTS=OFF \
	  -DATTN_TEST_LAUNCHER="valgrind;--quiet;--error-exitcode=99;--leak-check=full;--errors-for-leak-kinds=definite"
	cmake --build $(BUILD)-valgrind -j $(JOBS)
	cd $(BUILD)-valgrind && ctest --output-on-failure -j $(JOBS) -L c -LE learn

# Each libFuzzer harness (tests/fuzz/) for FUZZ_SECONDS seconds from its seed corpus, built with
# clang under ASan and UBSan; fails if any reports a crash (scripts/fuzz.sh).
fuzz:
	@$(ENSURE) build fuzz
	cmake -S . -B $(BUILD)-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DATTN_FUZZ=ON -DATTN_PYTHON_TESTS=OFF
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzzers
	./scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

# The C tests of a cross build under qemu-user (scripts/cross-test.sh), for an architecture
# this machine is not: make cross-test ARCH=aarch64. Installs the cross compiler, qemu and the
# target's libraries (Debian multiarch) if they are missing.
ARCH ?= aarch64
cross-test:
	./scripts/cross-test.sh $(ARCH) $(BUILD)-$(ARCH) $(JOBS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-sanitize $(BUILD)-valgrind $(BUILD)-fuzz $(BUILD)-aarch64
