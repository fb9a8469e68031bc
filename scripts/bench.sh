#!/bin/sh
# Benchmarks, one section each: attn's own benchmark beside its PyTorch counterpart.
# usage: scripts/bench.sh <build-dir> [--quick]
# Timings are medians and only indicative on a shared machine; nothing here fails on speed.
set -eu

build=${1:?usage: scripts/bench.sh <build-dir> [--quick]}
quick=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Scaled dot-product attention against PyTorch's bmm -> softmax -> bmm. PyTorch runs twice:
# with its default threading, and with OMP_WAIT_POLICY=PASSIVE on every core (its default
# here can be a single thread); the better of the two counts for each row.
section_attention() {
    echo "== attention"
    "$build/attn" bench attention --json $quick >"$work/attn_attention.json"
    "$python" "$root/bench/torch_attention.py" $quick >"$work/torch_attention_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_attention.py" $quick \
        --threads "$(nproc)" >"$work/torch_attention_passive.json"
    "$python" "$root/bench/torch_attention.py" --report "$work/attn_attention.json" \
        "$work/torch_attention_default.json" "$work/torch_attention_passive.json"
}

# Greedy decoding of the small Transformer (10 tokens, batch 1 and 64) against nn.Transformer
# re-running its decoder over the prefix, PyTorch again with both threading settings.
section_decode() {
    echo "== decode"
    torch_quick=""
    if [ -n "$quick" ]; then torch_quick="--reps 3 --min-seconds 0.2"; fi
    "$build/attn" bench decode --json $quick >"$work/attn_decode.json"
    "$python" "$root/bench/torch_decode.py" --json $torch_quick >"$work/torch_decode_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_decode.py" --json $torch_quick \
        --threads "$(nproc)" >"$work/torch_decode_passive.json"
    "$python" "$root/bench/torch_decode.py" --report "$work/attn_decode.json" \
        "$work/torch_decode_default.json" "$work/torch_decode_passive.json"
}

section_attention
section_decode
