#!/usr/bin/env bash
# What `make demo` runs: trains a small Transformer to pronounce English words (letters ->
# CMUdict phonemes) on the sample shipped in data/cmudict-sample/, for about two minutes, then
# shows held-out words beside the truth, scores the whole held-out set, draws an alignment and
# the loss curve. No network: everything it needs is in the repository.
#
#   scripts/demo.sh [BUILD_DIR]      (default build; built first if attn is missing)
#
# Environment: DEMO_SECONDS (training time, default 120), DEMO_OUT (run folder, default
# runs/demo), ATTN_NUM_THREADS (threads, default every core).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."

seconds=${DEMO_SECONDS:-120}
out=${DEMO_OUT:-runs/demo}
data=data/cmudict-sample
attn=$build/attn
model=$out/g2p.safetensors

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ -t 1 ] || say() { printf '\n== %s\n' "$*"; }

if [ ! -x "$attn" ]; then
  say "building attn (make BUILD=$build)"
  make --no-print-directory BUILD="$build" build >/dev/null
fi

mkdir -p "$out"
# The log is appended to and a checkpoint would be resumed from: start the run afresh.
rm -f "$model" "$out/g2p.last.safetensors" "$out/train.jsonl" "$out/test.hyp" \
  "$out/alignment.svg" "$out/alignment.png" "$out/loss.svg" "$out/loss.png"

count_words() { cut -f1 "$1" | uniq | wc -l | tr -d ' '; }
say "attn demo: from spelling to pronunciation, learned from scratch in $seconds seconds"
printf 'Data: %s, %s training words of the CMU Pronouncing Dictionary (%s dev, %s held out).\n' \
  "$data" "$(count_words "$data/train.tsv")" "$(count_words "$data/dev.tsv")" \
  "$(count_words "$data/test.tsv")"
printf 'Model: a Transformer encoder-decoder (2 + 2 layers, width 128, 4 heads) reading\n'
printf 'letters and writing phonemes, trained for %s s with Adam on this CPU.\n\n' "$seconds"

# Sized so that two minutes on two cores reach a useful model: small enough for about 55 epochs
# of the sample, in small batches (1024 tokens, about 50 words), which used the CPU time better
# than larger ones; dropout 0.2 against over-fitting 4,000 words in that many epochs.
# Validating every 350 updates (5 epochs) rather than every epoch keeps the output short.
# docs/results.md has the measurements.
"$attn" train --train "$data/train.tsv" --valid "$data/dev.tsv" --out "$model" \
  --src-tokens char --tgt-tokens word \
  --layers 2 --d-model 128 --heads 4 --ffn 512 --dropout 0.2 \
  --batch-tokens 1024 --lr 1.5e-3 --warmup 300 \
  --epochs 0 --time-limit "$seconds" --eval-every 350 \
  --log "$out/train.jsonl" --log-every 100

cut -f1 "$data/test.tsv" | uniq >"$out/test.words"
"$attn" translate --model "$model" <"$out/test.words" | paste "$out/test.words" - >"$out/test.hyp"
rm -f "$out/test.words"

say "held-out words (never seen in training): the model's pronunciation and the dictionary's"
# Every 25th held-out word; several dictionary pronunciations are shown separated by " / " and a
# prediction is right when it equals any of them.
shown=$(awk -F'\t' '
  NR == FNR { if ($1 in truth) truth[$1] = truth[$1] " / " $2; else truth[$1] = $2; next }
  (FNR - 1) % 25 == 0 {
    right = 0
    n = split(truth[$1], refs, " / ")
    for (i = 1; i <= n; i++) if (refs[i] == $2) right = 1
    printf "%s\t%s\t%s\t%d\n", $1, $2, truth[$1], right
  }' "$data/test.tsv" "$out/test.hyp")
printf '%s\n' "$shown" | awk -F'\t' '
  BEGIN { printf "  %-14s %-24s %-30s\n", "word", "predicted", "dictionary" }
  { printf "  %-14s %-24s %-30s %s\n", $1, $2, $3, ($4 ? "✓" : "") }'

say "scores on all $(count_words "$data/test.tsv") held-out words (attn eval)"
"$attn" eval --metric wer,per --ref "$data/test.tsv" --hyp "$out/test.hyp"
printf '(WER: share of words not exactly right; PER: phoneme edits per dictionary phoneme)\n'

# The alignment of a longer word the model got right, else of the first word shown.
word=$(printf '%s\n' "$shown" | awk -F'\t' '$4 == 1 && length($1) >= 6 { print $1; exit }')
[ -n "$word" ] || word=$(printf '%s\n' "$shown" | head -n 1 | cut -f1)
pictures=()
say "where the model looks: cross-attention while it pronounces \"$word\""
if "$attn" viz --help 2>&1 | grep -q -- '--model'; then
  "$attn" viz --model "$model" --text "$word"
  for picture in alignment.svg alignment.png; do
    "$attn" viz --model "$model" --text "$word" --out "$out/$picture" >/dev/null &&
      pictures+=("$out/$picture  the same alignment as a picture")
  done
else
  printf 'skipped: this build'"'"'s attn viz has no --model yet (attention maps of a trained\n'
  printf 'model arrive with the decoding work); the loss curve is drawn all the same.\n'
fi

for picture in loss.svg loss.png; do
  "$attn" viz --log "$out/train.jsonl" --out "$out/$picture" --title "attn demo: G2P training" \
    >/dev/null && pictures+=("$out/$picture  training and validation loss")
done

say "what the demo wrote"
printf '  %s  the trained model: try  echo attention | %s translate --model %s\n' \
  "$model" "$attn" "$model"
printf '  %s  its pronunciation of every held-out word (word<TAB>phonemes)\n' "$out/test.hyp"
printf '  %s  the training log, one JSON object per update and validation\n' "$out/train.jsonl"
for line in "${pictures[@]}"; do printf '  %s\n' "$line"; done
