#!/usr/bin/env bash
# attn's classifier on a classification data set (issue 32), scored exactly as fastText is by
# recipes/classify-fasttext.sh: the same files, the same scorer (scripts/classify-tools.py).
#
#   recipes/classify.sh wordlang|fortunes [DATA_DIR]
#
# DATA_DIR holds train.tsv, valid.tsv and test.tsv, lines `label<TAB>text` (default
# data/TASK, made by `scripts/get-data.sh TASK`). attn trains on train.tsv, validates on
# valid.tsv, within TIME_LIMIT seconds, every other choice left to `attn train --task
# classify`; `attn classify` then labels the test texts, timed.
# When this attn has no `attn train --task classify` (its --help does not name it) the recipe
# says so and stops without failing.
#
# Environment:
#   TIME_LIMIT  seconds of training (default 900: issue 32's budget for wordlang)
#   THREADS     threads for training and classifying (default 2)
#   OUT         the run folder (default runs/classify-TASK)
#   BUILD       the build folder holding attn (default build; built when attn is missing)
#   TRAIN_OPTIONS  more `attn train` options, split at spaces (default none: the defaults'
#               run), e.g. "--d-model 192 --ffn 768 --pooling attention"
#
# Writes to OUT: model.safetensors, train.jsonl, train.log, command.txt, test.pred (one
# `label<TAB>probability` line per test line), test.scores.json (accuracy, macro-F1, per
# class) and summary.json.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=classify
python=/usr/bin/python3
tools=$repo/scripts/classify-tools.py

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: recipes/$recipe.sh wordlang|fortunes [DATA_DIR]"
task=$1
[[ $task =~ ^[A-Za-z0-9_-]+$ ]] || die "bad task name '$task'"
data=${2:-$repo/data/$task}
time_limit=${TIME_LIMIT:-900}
threads=${THREADS:-2}
build=${BUILD:-$repo/build}
out=${OUT:-$repo/runs/$recipe-$task}
[[ $time_limit =~ ^[0-9]+$ && $time_limit -gt 0 ]] ||
  die "TIME_LIMIT must be a positive number of seconds, not '$time_limit'"
[[ $threads =~ ^[0-9]+$ ]] || die "THREADS must be a non-negative integer, not '$threads'"
[ -d "$data" ] || die "no data folder $data (scripts/get-data.sh $task makes it)"
data=$(cd "$data" && pwd)
for part in train valid test; do
  [ -s "$data/$part.tsv" ] || die "missing $data/$part.tsv"
done

attn=$build/attn
if [ ! -x "$attn" ]; then
  make -C "$repo" --no-print-directory BUILD="$build" build >/dev/null || die "build failed"
fi
# The help is read whole before it is searched: grep -q would stop reading at the first match,
# and attn, writing the rest into a closed pipe, would fail the pipeline (pipefail).
train_help=$("$attn" train --help 2>&1 || true)
if ! grep -q classify <<<"$train_help"; then
  printf '%s: this attn has no `attn train --task classify` yet (%s train --help does not name it); skipped\n' \
    "$recipe" "$attn"
  exit 0
fi

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
json_field() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

mkdir -p "$out"
rm -f "$out/model.safetensors" "$out/model.last.safetensors" "$out/train.jsonl" "$out/train.log" \
  "$out/test.pred" "$out/test.scores.json" "$out/summary.json"

train_command=("$attn" train --task classify --train "$data/train.tsv" --valid "$data/valid.tsv"
  --out "$out/model.safetensors" --time-limit "$time_limit" --threads "$threads"
  --log "$out/train.jsonl")
read -r -a extra_options <<<"${TRAIN_OPTIONS:-}"
train_command+=("${extra_options[@]}")
printf '%q ' "${train_command[@]}" >"$out/command.txt"
printf '\n' >>"$out/command.txt"
printf '%s: training on %s for %s s\n' "$recipe" "$data/train.tsv" "$time_limit"
start=$(now)
"${train_command[@]}" 2>&1 | tee "$out/train.log" || die "training failed (see $out/train.log)"
train_seconds=$(seconds_since "$start")

# The texts alone, whitespace as fastText sees it, so that both read the same words.
"$python" "$tools" fasttext --in "$data/test.tsv" --out /dev/null --text "$out/test.text"
classify_command=("$attn" classify --model "$out/model.safetensors" --input "$out/test.text")
classify_help=$("$attn" classify --help 2>&1 || true)
! grep -q -- --threads <<<"$classify_help" || classify_command+=(--threads "$threads")
# Every test text gets a label: one longer than the model reads keeps its first tokens.
! grep -q -- --truncate <<<"$classify_help" || classify_command+=(--truncate)
printf '%q ' "${classify_command[@]}" >>"$out/command.txt"
printf '\n' >>"$out/command.txt"
start=$(now)
"${classify_command[@]}" >"$out/test.pred" || die "attn classify failed"
classify_seconds=$(seconds_since "$start")
lines=$(wc -l <"$out/test.text")
[ "$(wc -l <"$out/test.pred")" -eq "$lines" ] || die "attn classify wrote $(wc -l <"$out/test.pred") lines for $lines"
rm -f "$out/test.text"

printf '%s: on test: ' "$recipe"
"$python" "$tools" score --ref "$data/test.tsv" --hyp "$out/test.pred" --json "$out/test.scores.json"
lines_per_second=$(awk -v n="$lines" -v s="$classify_seconds" 'BEGIN { if (s <= 0) s = 0.001; printf "%.0f", n / s }')
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
"$python" - "$out/summary.json" <<PY
import json, sys
summary = {"recipe": "$recipe", "task": "$task", "data": "$data", "cpu": "$cpu",
           "threads": $threads, "time_limit": $time_limit, "train_seconds": $train_seconds,
           "test_lines": $lines, "classes": $(json_field "$out/test.scores.json" classes),
           "test_accuracy": $(json_field "$out/test.scores.json" accuracy),
           "test_macro_f1": $(json_field "$out/test.scores.json" macro_f1),
           "classify_seconds": $classify_seconds,
           "classify_lines_per_second": $lines_per_second}
json.dump(summary, open(sys.argv[1], "w"), indent=1)
open(sys.argv[1], "a").write("\n")
PY
printf '%s: attn classify: %s lines in %s s (%s lines/s, the model load included)\n' "$recipe" \
  "$lines" "$classify_seconds" "$lines_per_second"
printf '%s: wrote %s/{model.safetensors,train.jsonl,train.log,command.txt,test.pred,test.scores.json,summary.json}\n' \
  "$recipe" "$out"
