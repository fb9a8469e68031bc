#!/usr/bin/env bash
# What `make demo` runs. Until the trained grapheme-to-phoneme demo arrives, it shows what exists:
# the examples (attention as a lookup, self-attention, multi-head attention) and a short
# attention benchmark against the plain scalar reference.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."

for example in kv_lookup self_attention multi_head; do
  if [ -x "$build/examples/$example" ]; then
    printf '\n== examples/%s.c\n' "$example"
    "$build/examples/$example"
  fi
done

printf '\n== attn bench attention --quick\n'
"$build/attn" bench attention --quick
