#!/usr/bin/env bash
# What `make fuzz` runs: each libFuzzer harness of a fuzz build (cmake -DATTN_FUZZ=ON, with
# clang) for SECONDS seconds, one after the other, starting from its committed seed corpus in
# tests/fuzz/corpus/<name>/. The corpus is copied to a scratch folder first, so the inputs
# libFuzzer adds do not touch the repository; the harnesses' temporary files go there too
# (TMPDIR). A crash, leak, sanitizer report, timeout or out-of-memory leaves its input in
# BUILD/fuzz-artifacts/ and makes the script fail after every harness has run.
#
#   scripts/fuzz.sh BUILD_DIR [SECONDS [NAME...]]   (default 60 seconds; every harness, or
#                                                    the named ones, e.g. tensor_file)
set -euo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
cd "$(dirname "$0")/.."

artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/attn-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

programs=()
if [ $# -gt 0 ]; then
  for name in "$@"; do programs+=("$build/fuzz/fuzz_${name#fuzz_}"); done
else
  programs=("$build"/fuzz/fuzz_*)
fi

failed=()
for program in "${programs[@]}"; do
  name=$(basename "$program")
  corpus=${name#fuzz_}
  mkdir -p "$scratch/$corpus/tmp"
  cp -R "tests/fuzz/corpus/$corpus" "$scratch/$corpus/inputs"
  printf '\n==== %s: %s s from %s inputs\n' "$name" "$seconds" \
    "$(find "tests/fuzz/corpus/$corpus" -type f | wc -l)"
  if ! TMPDIR="$scratch/$corpus/tmp" "$program" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" \
    "$scratch/$corpus/inputs" 2>"$scratch/$corpus/log"; then
    failed+=("$name")
  fi
  # The figures docs/reliability.md records: coverage, features, executions, corpus size.
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' \
    "$scratch/$corpus/log" || true
  grep -E 'ERROR|SUMMARY|fuzz invariant' "$scratch/$corpus/log" | head -20 || true
  printf 'corpus after the run: %s inputs\n' "$(find "$scratch/$corpus/inputs" -type f | wc -l)"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in $artifacts/)" >&2
  exit 1
fi
echo "fuzz: no findings"
