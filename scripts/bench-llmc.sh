#!/usr/bin/env bash
# GPT-2 training speed, attn beside llm.c's train_gpt2.c in one run: both train the same random
# GPT-2 checkpoint (124M by default: 12 layers, 12 heads, 768 channels, V 50257) on the same
# token file at B x T, and each step's time is read from their own output. Prints the median
# tokens per second of each and the ratio. llm.c is built from ../shared/peers/llmc as its
# Makefile builds it; nothing of it is kept.
#
#   scripts/bench-llmc.sh [BUILD_DIR]    (env: LAYERS HEADS CHANNELS B T STEPS THREADS PRECISION)
#
# PRECISION (attn's products): bf16 where the CPU has it natively (attn info: "bf16: native"),
# fp32 elsewhere, as the issue measures; llm.c computes in fp32 either way.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
peer="${LLMC_SOURCE:-$root/../shared/peers/llmc}"
LAYERS="${LAYERS:-12}" HEADS="${HEADS:-12}" CHANNELS="${CHANNELS:-768}"
B="${B:-4}" T="${T:-64}" STEPS="${STEPS:-5}" THREADS="${THREADS:-$(nproc)}"
[ -f "$peer/train_gpt2.c" ] || { echo "bench-llmc: no llm.c source at $peer" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cp -r "$peer" "$work/src"
(cd "$work/src" && gcc -Ofast -Wno-unused-result -march=native -fopenmp -DOMP train_gpt2.c -lm \
    -o "$work/train_gpt2")
/usr/bin/python3 "$root/tests/python/make_llmc_checkpoint.py" "$work/gpt2_124M.bin" \
    --tokens "$work/tokens.bin" --layers "$LAYERS" --heads "$HEADS" --channels "$CHANNELS" \
    --vocab 50257 --padded-vocab 50304 --max-t 1024 --count $((B * T * 64 + 1)) --seed 1 >/dev/null
mkdir -p "$work/dev/data/tinyshakespeare"
cp "$work/tokens.bin" "$work/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
cp "$work/tokens.bin" "$work/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"

if [ -z "${PRECISION:-}" ]; then
  PRECISION=fp32
  "$build/attn" info | grep -q "^bf16: native" && PRECISION=bf16
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); attn in $PRECISION"
"$build/attn" info | grep -iE "instruction|bf16|threads" || true

# llm.c's main trains 40 steps at B 4, T 64 (its own constants) after a validation pass; the
# first STEPS + 1 step lines are enough (the first is dropped as warm-up).
# exec: $! is train_gpt2 itself, so the kill below reaches it (stdbuf keeps its lines coming).
(cd "$work" && exec env OMP_NUM_THREADS="$THREADS" stdbuf -oL ./train_gpt2) >"$work/llmc.log" 2>&1 &
llmc=$!
for _ in $(seq 1800); do
  kill -0 "$llmc" 2>/dev/null || break
  [ "$(grep -c '^step ' "$work/llmc.log" || true)" -gt "$STEPS" ] && break
  sleep 1
done
kill "$llmc" 2>/dev/null || true
wait "$llmc" 2>/dev/null || true

"$build/attn" convert --from llmc "$work/gpt2_124M.bin" --out "$work/gpt2.safetensors" >/dev/null
"$build/attn" train --task lm --init "$work/gpt2.safetensors" --train-tokens "$work/tokens.bin" \
    --no-valid --out "$work/out.safetensors" --shuffle none --batch-sequences "$B" --context "$T" \
    --optimizer adamw --lr 1e-4 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0 \
    --schedule constant --warmup 0 --clip-norm 0 --max-steps $((STEPS + 1)) --precision "$PRECISION" \
    --threads "$THREADS" --log "$work/attn.jsonl" 2>"$work/attn.log" || { cat "$work/attn.log"; exit 1; }

/usr/bin/python3 - "$work/llmc.log" "$work/attn.jsonl" "$B" "$T" <<'EOF'
import json, re, statistics, sys
llmc_log, attn_log, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ms = [float(m) for m in re.findall(r"^step \d+: train loss [0-9.]+ \(took ([0-9.]+) ms\)",
                                   open(llmc_log).read(), re.M)][1:]
steps = [json.loads(l) for l in open(attn_log) if '"event":"step"' in l]
# The log's elapsed clock is cumulative: each step's time is the difference.
times = [b["elapsed"] - a["elapsed"] for a, b in zip(steps, steps[1:])]
llmc_tps = B * T / (statistics.median(ms) / 1000)
attn_tps = B * T / statistics.median(times)
print(f"llm.c: {len(ms)} steps, median {statistics.median(ms) / 1000:.2f} s, {llmc_tps:.0f} tokens/s")
print(f"attn:  {len(times)} steps, median {statistics.median(times):.2f} s, {attn_tps:.0f} tokens/s")
print(f"ratio attn / llm.c: {attn_tps / llmc_tps:.2f}x")
EOF
