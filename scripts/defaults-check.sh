#!/usr/bin/env bash
# Issue 12's check: does `attn train` with nothing but its defaults and a time limit learn a
# small transduction task? Generates a task of its own (a fixed letter map composed with a
# reversal, over strings of 3-9 letters: 4,000 training pairs, 500 unseen test strings; not the
# tests' strings), trains the Transformer, the RNN with Bahdanau attention and the RNN with
# Luong "general" attention for S seconds each with default settings, and prints the exact
# match of greedy output on the test strings, one line per architecture.
# usage: scripts/defaults-check.sh [SECONDS]   (default 150; run on a quiet machine)
# env: BUILD (default build), THREADS (default 2), WORK (default a fresh temporary folder)
set -euo pipefail
seconds=${1:-150}
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$repo/build}
attn=$build/attn
[ -x "$attn" ] || { echo "defaults-check: no $attn; build first" >&2; exit 1; }
threads=${THREADS:-2}
work=${WORK:-$(mktemp -d /tmp/defaults-check.XXXXXX)}
mkdir -p "$work"

/usr/bin/python3 - "$work" <<'PY'
import random, sys
work = sys.argv[1]
rng = random.Random(20261126)
letters = "abcdefghijklmnop"
image = list(letters)
rng.shuffle(image)
mapping = dict(zip(letters, image))
words = set()
while len(words) < 4500:
    words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
words = sorted(words)
rng.shuffle(words)
def target(w):
    return " ".join(mapping[c] for c in reversed(w))
with open(f"{work}/train.tsv", "w") as f:
    f.writelines(f"{' '.join(w)}\t{target(w)}\n" for w in words[:4000])
with open(f"{work}/test.src", "w") as f:
    f.writelines(f"{' '.join(w)}\n" for w in words[4000:])
with open(f"{work}/test.ref", "w") as f:
    f.writelines(f"{target(w)}\n" for w in words[4000:])
PY

declare -A flags=([transformer]="" [rnn-bahdanau]="--arch rnn"
                  [rnn-luong-general]="--arch rnn --cell lstm --attention luong-general --input-feeding")
for arch in transformer rnn-bahdanau rnn-luong-general; do
  # shellcheck disable=SC2086 # the flags are words
  "$attn" train --train "$work/train.tsv" --out "$work/$arch.safetensors" --tgt-tokens word \
    --src-tokens word --time-limit "$seconds" --threads "$threads" ${flags[$arch]} \
    >"$work/$arch.log" 2>&1 || { echo "$arch: training failed (see $work/$arch.log)"; continue; }
  "$attn" translate --model "$work/$arch.safetensors" --beam 1 --threads "$threads" \
    <"$work/test.src" >"$work/$arch.hyp"
  exact=$(paste -d '\t' "$work/$arch.hyp" "$work/test.ref" | awk -F'\t' '$1 == $2 { n++ } END { print n + 0 }')
  total=$(wc -l <"$work/test.ref")
  awk -v a="$arch" -v e="$exact" -v t="$total" -v s="$seconds" \
    'BEGIN { printf "%-18s %3d s  exact match %d / %d = %.1f%%\n", a, s, e, t, 100 * e / t }'
done
echo "defaults-check: files in $work"
