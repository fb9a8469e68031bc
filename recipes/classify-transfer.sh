#!/usr/bin/env bash
# Does pretraining transfer? (issue 32, real task 3): a Transformer encoder pretrained as BERT's
# masked language model on every text of the task, labels ignored (`attn train --task mlm`), then
# fine-tuned with a small share of the labels (`attn train --task classify --init`), against the
# same model trained from scratch on the same labels for the same time.
#
#   recipes/classify-transfer.sh [DATA_DIR]
#
# DATA_DIR holds train.tsv, valid.tsv and test.tsv, lines `label<TAB>text` (default
# data/wordlang, made by `scripts/get-data.sh wordlang`). The unlabelled text is the texts of
# train.tsv and valid.tsv (never test.tsv). For each share in SHARES, the first share of
# train.tsv's lines in a seeded shuffle are the labels both runs learn from, validated on
# valid.tsv; `attn classify` labels test.tsv and scripts/classify-tools.py scores it, as
# recipes/classify.sh does. Both runs have the shape `attn train --task mlm` gives the encoder
# (its defaults, or MODEL_FLAGS for both); the pretraining's time is not counted in the fine-tuning's.
#
# Environment:
#   PRETRAIN_TIME  seconds of masked-language-model pretraining (default 900)
#   TIME_LIMIT     seconds of each fine-tuning and each run from scratch (default 300)
#   SHARES         label shares in percent (default "1 10")
#   MODEL_FLAGS    shape flags for both models (default none: attn train's defaults)
#   THREADS        threads (default 2)
#   OUT            the run folder (default runs/classify-transfer)
#   BUILD          the build folder holding attn (default build; built when attn is missing)
#
# Writes to OUT: text.txt (the unlabelled texts), encoder.safetensors and pretrain.log, for each
# share P: labels-P.tsv, finetuned-P/ and scratch-P/ (model.safetensors, train.log, test.pred,
# test.scores.json), and summary.json (test accuracy and macro-F1 of every run).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=classify-transfer
python=/usr/bin/python3
tools=$repo/scripts/classify-tools.py

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

[ $# -le 1 ] || die "usage: recipes/$recipe.sh [DATA_DIR]"
data=${1:-$repo/data/wordlang}
pretrain_time=${PRETRAIN_TIME:-900}
time_limit=${TIME_LIMIT:-300}
shares=${SHARES:-1 10}
threads=${THREADS:-2}
build=${BUILD:-$repo/build}
out=${OUT:-$repo/runs/$recipe}
read -r -a model_flags <<<"${MODEL_FLAGS:-}"
for limit in "$pretrain_time" "$time_limit"; do
  [[ $limit =~ ^[0-9]+$ && $limit -gt 0 ]] ||
    die "PRETRAIN_TIME and TIME_LIMIT must be positive numbers of seconds, not '$limit'"
done
for share in $shares; do
  [[ $share =~ ^[0-9]+$ && $share -ge 1 && $share -le 100 ]] ||
    die "SHARES must be percentages from 1 to 100, not '$share'"
done
[[ $threads =~ ^[0-9]+$ ]] || die "THREADS must be a non-negative integer, not '$threads'"
[ -d "$data" ] || die "no data folder $data (scripts/get-data.sh wordlang makes it)"
data=$(cd "$data" && pwd)
for part in train valid test; do
  [ -s "$data/$part.tsv" ] || die "missing $data/$part.tsv"
done

attn=$build/attn
if [ ! -x "$attn" ]; then
  make -C "$repo" --no-print-directory BUILD="$build" build >/dev/null || die "build failed"
fi
mkdir -p "$out"

# The unlabelled text: every text of train and valid, one a line.
cut -f2- "$data/train.tsv" "$data/valid.tsv" >"$out/text.txt"
cut -f2- "$data/valid.tsv" >"$out/held.txt"
printf '%s: pretraining on %s texts for %s s\n' "$recipe" "$(wc -l <"$out/text.txt")" "$pretrain_time"
rm -f "$out/encoder.safetensors" "$out/encoder.last.safetensors"
"$attn" train --task mlm --train "$out/text.txt" --no-valid --out "$out/encoder.safetensors" \
  "${model_flags[@]}" --time-limit "$pretrain_time" --threads "$threads" \
  --log "$out/pretrain.jsonl" 2>&1 | tee "$out/pretrain.log" || die "pretraining failed"
"$attn" eval --metric perplexity --model "$out/encoder.safetensors" --ref "$out/held.txt" |
  tee "$out/pretrain.eval"

# One run: train (with the extra flags), classify test.tsv, score. Prints accuracy and macro-F1.
run_one() {
  local name=$1 labels=$2
  shift 2
  local folder=$out/$name
  mkdir -p "$folder"
  rm -f "$folder/model.safetensors" "$folder/model.last.safetensors"
  "$attn" train --task classify --train "$labels" --valid "$data/valid.tsv" \
    --out "$folder/model.safetensors" --time-limit "$time_limit" --threads "$threads" \
    --log "$folder/train.jsonl" "$@" >"$folder/train.log" 2>&1 ||
    die "$name: training failed (see $folder/train.log)"
  "$attn" classify --model "$folder/model.safetensors" --input "$data/test.tsv" \
    --threads "$threads" --truncate >"$folder/test.pred" || die "$name: attn classify failed"
  printf '%s: %-14s ' "$recipe" "$name"
  "$python" "$tools" score --ref "$data/test.tsv" --hyp "$folder/test.pred" \
    --json "$folder/test.scores.json"
}

runs=()
for share in $shares; do
  labels=$out/labels-$share.tsv
  "$python" - "$data/train.tsv" "$labels" "$share" <<'PY'
import random, sys
lines = open(sys.argv[1], encoding="utf-8").readlines()
random.Random(32).shuffle(lines)
kept = lines[:max(1, len(lines) * int(sys.argv[3]) // 100)]
open(sys.argv[2], "w", encoding="utf-8").writelines(kept)
PY
  printf '%s: %s%% of the labels: %s lines\n' "$recipe" "$share" "$(wc -l <"$labels")"
  run_one "finetuned-$share" "$labels" --init "$out/encoder.safetensors"
  run_one "scratch-$share" "$labels" "${model_flags[@]}"
  runs+=("finetuned-$share" "scratch-$share")
done

"$python" - "$out" "${runs[@]}" <<'PY'
import json, sys
out, runs = sys.argv[1], sys.argv[2:]
summary = {}
for name in runs:
    scores = json.load(open(f"{out}/{name}/test.scores.json"))
    summary[name] = {"test_accuracy": scores["accuracy"], "test_macro_f1": scores["macro_f1"]}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
open(f"{out}/summary.json", "a").write("\n")
PY
printf '%s: wrote %s/summary.json\n' "$recipe" "$out"
