#!/bin/sh
# Benchmarks, one section each: attn's own benchmark beside its PyTorch counterpart.
# usage: [BENCH_SECTIONS="attention train decode gemm"] scripts/bench.sh <build-dir> [--quick]
# Timings are medians and only indicative on a shared machine; nothing here fails on speed.
set -eu

build=${1:?usage: scripts/bench.sh <build-dir> [--quick]}
quick=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# PyTorch at its best here: Debian's torch calls the system libblas.so.3, which is the slow
# reference BLAS unless OpenBLAS is installed (apt-get install libopenblas0-pthread), and
# OpenBLAS 0.3.21 only uses its AVX-512 kernels on this Xeon when told the core type.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
if ! ls /usr/lib/x86_64-linux-gnu/libopenblas*.so* /usr/lib/x86_64-linux-gnu/openblas*/libblas.so* \
        >/dev/null 2>&1; then
    echo "bench: note: OpenBLAS is not installed, so PyTorch runs on the reference BLAS and every"
    echo "bench: ratio below flatters attn; apt-get install libopenblas0-pthread for a fair race."
fi

# Scaled dot-product attention against PyTorch's bmm -> softmax -> bmm, attn in fp32 and in bf16.
# PyTorch runs in three settings: its default threading, OMP_WAIT_POLICY=PASSIVE on every core
# (its default here can be a single thread), and bf16 autocast (plus its fused
# scaled_dot_product_attention in both precisions when the torch has it, >= 2.0); each row is
# compared with the best of them.
section_attention() {
    echo "== attention"
    "$build/attn" bench attention --json $quick --precision fp32 >"$work/attn_attention.json"
    "$build/attn" bench attention --json $quick --precision bf16 >"$work/attn_attention_bf16.json"
    "$python" "$root/bench/torch_attention.py" $quick >"$work/torch_attention_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_attention.py" $quick \
        --threads "$(nproc)" >"$work/torch_attention_passive.json"
    "$python" "$root/bench/torch_attention.py" $quick --autocast bf16 \
        >"$work/torch_attention_autocast.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_attention.py" $quick --autocast bf16 \
        --threads "$(nproc)" >"$work/torch_attention_autocast_passive.json"
    "$python" "$root/bench/torch_attention.py" $quick --autocast bf16 --threads "$(nproc)" \
        >"$work/torch_attention_autocast_all_cores.json"
    torch_runs="$work/torch_attention_default.json $work/torch_attention_passive.json"
    torch_runs="$torch_runs $work/torch_attention_autocast.json"
    torch_runs="$torch_runs $work/torch_attention_autocast_passive.json"
    torch_runs="$torch_runs $work/torch_attention_autocast_all_cores.json"
    if "$python" -c "import sys, torch.nn.functional as F
sys.exit(0 if hasattr(F, 'scaled_dot_product_attention') else 1)"; then
        for autocast in off bf16; do
            "$python" "$root/bench/torch_attention.py" $quick --fused --autocast $autocast \
                >"$work/torch_attention_fused_$autocast.json"
            torch_runs="$torch_runs $work/torch_attention_fused_$autocast.json"
        done
    fi
    # shellcheck disable=SC2086 # the list of files splits on purpose
    "$python" "$root/bench/torch_attention.py" --report "$work/attn_attention.json" \
        "$work/attn_attention_bf16.json" $torch_runs
}

# Matrix multiplication: attn's GEMM (best ISA) against torch.mm (better threading setting).
section_gemm() {
    echo "== gemm"
    "$build/attn" bench gemm --json >"$work/attn_gemm.json"
    "$build/attn" bench gemm --json --precision bf16 >"$work/attn_gemm_bf16.json"
    "$python" "$root/bench/torch_gemm.py" --json >"$work/torch_gemm.json"
    "$python" "$root/bench/torch_gemm.py" --json --autocast bf16 >"$work/torch_gemm_bf16.json"
    "$python" "$root/bench/torch_gemm.py" --report "$work/attn_gemm.json" \
        "$work/attn_gemm_bf16.json" "$work/torch_gemm.json" "$work/torch_gemm_bf16.json"
}

# Greedy decoding of the small Transformer (10 tokens, batch 1 and 64) against nn.Transformer
# re-running its decoder over the prefix, PyTorch again with both threading settings and bf16
# autocast; attn in fp32, bf16 and int8.
section_decode() {
    echo "== decode"
    torch_quick=""
    if [ -n "$quick" ]; then torch_quick="--reps 3 --min-seconds 0.2"; fi
    for precision in fp32 bf16 int8; do
        "$build/attn" bench decode --json $quick --precision $precision
    done >"$work/attn_decode.json"
    "$python" "$root/bench/torch_decode.py" --json $torch_quick >"$work/torch_decode_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_decode.py" --json $torch_quick \
        --threads "$(nproc)" >"$work/torch_decode_passive.json"
    "$python" "$root/bench/torch_decode.py" --json $torch_quick --precision bf16 \
        >"$work/torch_decode_bf16.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_decode.py" --json $torch_quick \
        --precision bf16 --threads "$(nproc)" >"$work/torch_decode_bf16_passive.json"
    "$python" "$root/bench/torch_decode.py" --report "$work/attn_decode.json" \
        "$work/torch_decode_default.json" "$work/torch_decode_passive.json" \
        "$work/torch_decode_bf16.json" "$work/torch_decode_bf16_passive.json"
}

# Transformer training steps (forward, backward, Adam) on the issue's SMALL and BASE shapes,
# attn in fp32 and in bf16 (mixed precision), PyTorch's nn.Transformer with its default
# threading and with OMP_WAIT_POLICY=PASSIVE on every core, each without and with bf16
# autocast; every attn row's ratio is to the best of the four.
section_train() {
    echo "== train"
    steps=""
    if [ -n "$quick" ]; then steps="--steps 3"; fi
    "$build/attn" bench train --json $steps --precision fp32 >"$work/attn_train.json"
    "$build/attn" bench train --json $steps --precision bf16 >>"$work/attn_train.json"
    "$python" "$root/bench/torch_train.py" --json $steps >"$work/torch_train_default.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_train.py" --json $steps \
        --threads "$(nproc)" >"$work/torch_train_passive.json"
    "$python" "$root/bench/torch_train.py" --json $steps --autocast bf16 \
        >"$work/torch_train_autocast.json"
    OMP_WAIT_POLICY=PASSIVE "$python" "$root/bench/torch_train.py" --json $steps --autocast bf16 \
        --threads "$(nproc)" >"$work/torch_train_autocast_passive.json"
    # autocast's best here (bench/torch_train.py --sweep, 26 Nov 2026): default policy, every core
    "$python" "$root/bench/torch_train.py" --json $steps --autocast bf16 --threads "$(nproc)" \
        >"$work/torch_train_autocast_all_cores.json"
    "$python" "$root/bench/torch_train.py" --report "$work/attn_train.json" \
        "$work/torch_train_default.json" "$work/torch_train_passive.json" \
        "$work/torch_train_autocast.json" "$work/torch_train_autocast_passive.json" \
        "$work/torch_train_autocast_all_cores.json"
}

# BENCH_SECTIONS="attention decode" runs only those sections, in that order.
for section in ${BENCH_SECTIONS:-attention train decode gemm}; do
    if [ "$section" = gemm ] && [ -n "$quick" ]; then continue; fi
    "section_$section"
done
