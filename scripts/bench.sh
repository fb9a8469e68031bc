#!/bin/sh
# Benchmarks, one section each: attn's own benchmark beside its PyTorch counterpart.
# usage: [BENCH_SECTIONS="attention train decode gemm"] [BENCH_ISA=avx2] scripts/bench.sh <build-dir> [--quick]
# Timings are medians and only indicative on a shared machine; nothing here fails on speed.
set -eu

build=${1:?usage: scripts/bench.sh <build-dir> [--quick]}
quick=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# BENCH_ISA=avx2 races both programs on AVX2 and FMA alone, as on a machine without AVX-512
# (AMD Zen 2/3, Intel Haswell to Comet Lake): attn on its avx2 path, PyTorch with ATen's kernels,
# OpenBLAS and oneDNN held to the same instructions. attn's emulated bf16 rows are left out
# there (auto is fp32 on that path); PyTorch keeps every setting, so its best is still taken.
bench_isa=${BENCH_ISA:-}
attn_precisions_attention="fp32 bf16"
attn_precisions_train="fp32 bf16"
attn_precisions_decode="fp32 bf16 int8"
case "$bench_isa" in
    "") ;;
    avx2)
        export ATTN_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell DNNL_MAX_CPU_ISA=AVX2
        attn_precisions_attention="fp32"
        attn_precisions_train="fp32"
        attn_precisions_decode="fp32 int8"
        ;;
    *) echo "bench: BENCH_ISA=$bench_isa is not one this script restricts; use avx2 or leave it unset" >&2
       exit 2 ;;
esac

# Every figure names its processor and the paths that made it.
echo "bench: CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
    "($(nproc) cores)"
"$build/attn" info | sed -n -e 's/^/bench: attn: /' -e '/ISA\|^bench: attn: bf16\|int8:\|default precision/p'

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

echo "bench: PyTorch: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}" \
    "ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-auto} DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-auto}"

# One PyTorch setting, named: its JSON joins $torch_runs, or, where the setting cannot run on
# this machine, a note says so and the race goes on without it (oneDNN has no bf16 kernels
# below AVX-512, so PyTorch's bf16 autocast fails under BENCH_ISA=avx2, as it would on a
# machine without AVX-512).
torch_try() {
    name=$1
    shift
    if "$@" >"$work/torch_$name.json" 2>"$work/torch_$name.err"; then
        torch_runs="$torch_runs $work/torch_$name.json"
    else
        echo "bench: PyTorch's $name setting failed here, left out: $(tail -n 1 "$work/torch_$name.err")"
    fi
}

# PyTorch's four usual settings of one script (its arguments after the first two): its default
# threading and OMP_WAIT_POLICY=PASSIVE on every core, each in fp32 and with the script's bf16
# flag ($2: "--autocast bf16", or decoding's "--precision bf16"); the JSONs are named after $1.
torch_settings() {
    # (sh has no locals: torch_try's own variable is "name")
    setting=$1
    bf16=$2
    shift 2
    torch_try "${setting}_default" "$python" "$@"
    torch_try "${setting}_passive" env OMP_WAIT_POLICY=PASSIVE "$python" "$@" --threads "$(nproc)"
    # shellcheck disable=SC2086 # the flag and its value split on purpose
    torch_try "${setting}_autocast" "$python" "$@" $bf16
    # shellcheck disable=SC2086
    torch_try "${setting}_autocast_passive" env OMP_WAIT_POLICY=PASSIVE "$python" "$@" $bf16 \
        --threads "$(nproc)"
}

# Scaled dot-product attention against PyTorch's bmm -> softmax -> bmm, attn in fp32 and in bf16.
# PyTorch runs in three settings: its default threading, OMP_WAIT_POLICY=PASSIVE on every core
# (its default here can be a single thread), and bf16 autocast (plus its fused
# scaled_dot_product_attention in both precisions when the torch has it, >= 2.0); each row is
# compared with the best of them.
section_attention() {
    echo "== attention"
    attn_runs=""
    for precision in $attn_precisions_attention; do
        "$build/attn" bench attention --json $quick --precision $precision \
            >"$work/attn_attention_$precision.json"
        attn_runs="$attn_runs $work/attn_attention_$precision.json"
    done
    torch_runs=""
    torch=$root/bench/torch_attention.py
    torch_settings attention "--autocast bf16" "$torch" $quick
    torch_try attention_autocast_all_cores "$python" "$torch" $quick --autocast bf16 \
        --threads "$(nproc)"
    if "$python" -c "import sys, torch.nn.functional as F
sys.exit(0 if hasattr(F, 'scaled_dot_product_attention') else 1)"; then
        for autocast in off bf16; do
            torch_try "attention_fused_$autocast" "$python" "$torch" $quick --fused \
                --autocast $autocast
        done
    fi
    # shellcheck disable=SC2086 # the list of files splits on purpose
    "$python" "$torch" --report $attn_runs $torch_runs
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
    for precision in $attn_precisions_decode; do
        "$build/attn" bench decode --json $quick --precision $precision
    done >"$work/attn_decode.json"
    torch_runs=""
    torch=$root/bench/torch_decode.py
    torch_settings decode "--precision bf16" "$torch" --json $torch_quick
    # shellcheck disable=SC2086 # the list of files splits on purpose
    "$python" "$torch" --report "$work/attn_decode.json" $torch_runs
}

# Transformer training steps (forward, backward, Adam) on the issue's SMALL and BASE shapes,
# attn in fp32 and in bf16 (mixed precision), PyTorch's nn.Transformer with its default
# threading and with OMP_WAIT_POLICY=PASSIVE on every core, each without and with bf16
# autocast; every attn row's ratio is to the best of them.
section_train() {
    echo "== train"
    steps=""
    if [ -n "$quick" ]; then steps="--steps 3"; fi
    for precision in $attn_precisions_train; do
        "$build/attn" bench train --json $steps --precision $precision
    done >"$work/attn_train.json"
    torch_runs=""
    torch=$root/bench/torch_train.py
    torch_settings train "--autocast bf16" "$torch" --json $steps
    # autocast's best here (bench/torch_train.py --sweep, 26 Nov 2026): default policy, every core
    torch_try train_autocast_all_cores "$python" "$torch" --json $steps --autocast bf16 \
        --threads "$(nproc)"
    # shellcheck disable=SC2086 # the list of files splits on purpose
    "$python" "$torch" --report "$work/attn_train.json" $torch_runs
}

# BENCH_SECTIONS="attention decode" runs only those sections, in that order.
for section in ${BENCH_SECTIONS:-attention train decode gemm}; do
    if [ "$section" = gemm ] && [ -n "$quick" ]; then continue; fi
    "section_$section"
done
