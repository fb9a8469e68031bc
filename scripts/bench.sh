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

# Transformer training steps (forward, backward, Adam) on the issue's SMALL and BASE shapes,
# PyTorch's nn.Transformer with its default threading and with OMP_WAIT_POLICY=PASSIVE on every
# core; the ratio is to the better of the two.
section_train() {
    echo "== train"
    steps=""
    if [ -n "$quick" ]; then steps="--steps 3"; fi
    "$build/attn" bench train --json $steps >"$work/attn_train.json"
    "$python" "$root/bench/torch_train.py" --json $steps >"$work/torch_train_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_train.py" --json $steps \
        --threads "$(nproc)" >"$work/torch_train_passive.json"
    "$python" "$root/bench/torch_train.py" --report "$work/attn_train.json" \
        "$work/torch_train_default.json" "$work/torch_train_passive.json"
}

section_attention
section_train
