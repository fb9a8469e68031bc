#!/usr/bin/env bash
# fastText, the peer of attn's classifiers (issue 32), on a classification data set: tuned on
# valid over a small grid, scored on test, its prediction speed measured.
#
#   recipes/classify-fasttext.sh wordlang|fortunes [DATA_DIR]
#
# DATA_DIR holds train.tsv, valid.tsv and test.tsv, lines `label<TAB>text` (default
# data/TASK, made by `scripts/get-data.sh TASK`). Debian's fasttext is installed when missing
# (scripts/ensure-packages.sh classify-data).
#
# Steps: the TSVs become fastText's `__label__X text` lines, the training file SHUFFLED (by a
# fixed seed; fastText learns from the file in order, with a decaying rate, so a file sorted
# by class would leave it far below its best); `fasttext supervised` trains once per setting
# of the grid with THREADS threads, each timed; the setting with the best valid score (accuracy
# for wordlang, macro-F1 for fortunes: each task's target) is scored on test with the same
# scorer as recipes/classify.sh (scripts/classify-tools.py score), and `fasttext predict`'s
# speed measured on the test texts (lines per second, the model's load time apart; the fastest
# of three runs).
#
# The grids (one training each; SETTING words are fastText's own options):
#   wordlang  -minn/-maxn 1/4, 2/5, 3/6 (character n-grams: every test word is unseen, so they
#             are the only signal) x -epoch 10, 30 x -lr 0.2, 0.5
#   fortunes  -wordNgrams 1, 2 x -epoch 5, 20 x -lr 0.25, 1.0
#
# Environment:
#   GRID     the settings to try instead, separated by ";", each fastText options, e.g.
#            "-minn 2 -maxn 5 -epoch 10;-minn 3 -maxn 6 -epoch 30"
#   THREADS  training threads (default 2: the machine of issue 32's targets)
#   SEED     the shuffle's seed (default 1)
#   OUT      the run folder (default runs/classify-fasttext-TASK)
#
# Writes to OUT: grid.tsv (each setting's valid accuracy and macro-F1 and training seconds),
# model.bin (the best setting's model), test.pred (its test predictions), test.scores.json
# (accuracy, macro-F1, per-class precision/recall/F1), summary.json and summary.md.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=classify-fasttext
python=/usr/bin/python3
tools=$repo/scripts/classify-tools.py

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: recipes/$recipe.sh wordlang|fortunes [DATA_DIR]"
task=$1
case $task in
  wordlang)
    select=accuracy
    default_grid=()
    for ngrams in "1 4" "2 5" "3 6"; do
      for epoch in 10 30; do
        for lr in 0.2 0.5; do
          default_grid+=("-minn ${ngrams% *} -maxn ${ngrams#* } -epoch $epoch -lr $lr")
        done
      done
    done ;;
  fortunes)
    select=macro_f1
    default_grid=()
    for ngrams in 1 2; do
      for epoch in 5 20; do
        for lr in 0.25 1.0; do
          default_grid+=("-wordNgrams $ngrams -epoch $epoch -lr $lr")
        done
      done
    done ;;
  *) die "the task is wordlang or fortunes, not '$task'" ;;
esac
data=${2:-$repo/data/$task}
threads=${THREADS:-2}
seed=${SEED:-1}
out=${OUT:-$repo/runs/$recipe-$task}
[[ $threads =~ ^[1-9][0-9]*$ ]] || die "THREADS must be a positive integer, not '$threads'"
[[ $seed =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$seed'"
if [ -n "${GRID:-}" ]; then
  IFS=';' read -r -a grid <<<"$GRID"
else
  grid=("${default_grid[@]}")
fi
[ -d "$data" ] || die "no data folder $data (scripts/get-data.sh $task makes it)"
data=$(cd "$data" && pwd)
for part in train valid test; do
  [ -s "$data/$part.tsv" ] || die "missing $data/$part.tsv"
done
command -v fasttext >/dev/null || "$repo/scripts/ensure-packages.sh" classify-data ||
  die "needs Debian's fasttext"
[ -x "$python" ] || die "needs $python"

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
json_field() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

mkdir -p "$out"
rm -f "$out"/grid.tsv "$out"/model.bin "$out"/test.pred "$out"/test.scores.json "$out"/summary.*
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" "$tools" fasttext --in "$data/train.tsv" --out "$work/train.txt" --shuffle "$seed"
"$python" "$tools" fasttext --in "$data/valid.tsv" --out "$work/valid.txt" --text "$work/valid.text"
"$python" "$tools" fasttext --in "$data/test.tsv" --out "$work/test.txt" --text "$work/test.text"
printf '%s: %s, %s training lines (shuffled, seed %s), %s settings, %s threads\n' "$recipe" "$task" \
  "$(wc -l <"$work/train.txt")" "$seed" "${#grid[@]}" "$threads"

printf 'setting\tvalid_accuracy\tvalid_macro_f1\ttrain_seconds\n' >"$out/grid.tsv"
best_score=-1 best_setting='' best_seconds='' best_index=0 index=0
for setting in "${grid[@]}"; do
  index=$((index + 1))
  # shellcheck disable=SC2086
  read -r -a options <<<"$setting"
  start=$(now)
  fasttext supervised -input "$work/train.txt" -output "$work/model-$index" -thread "$threads" \
    -verbose 0 "${options[@]}" >"$work/train-$index.log" 2>&1 ||
    die "fasttext supervised $setting failed: $(tail -n 3 "$work/train-$index.log")"
  seconds=$(seconds_since "$start")
  rm -f "$work/model-$index.vec"
  fasttext predict "$work/model-$index.bin" "$work/valid.text" >"$work/valid-$index.pred"
  "$python" "$tools" score --ref "$data/valid.tsv" --hyp "$work/valid-$index.pred" \
    --json "$work/valid-$index.json" >/dev/null
  accuracy=$(json_field "$work/valid-$index.json" accuracy)
  macro_f1=$(json_field "$work/valid-$index.json" macro_f1)
  score=$(json_field "$work/valid-$index.json" "$select")
  printf '%s\t%.4f\t%.4f\t%s\n' "$setting" "$accuracy" "$macro_f1" "$seconds" >>"$out/grid.tsv"
  printf '%s: [%d/%d] %-40s valid accuracy %.2f%%, macro-F1 %.2f%%, %s s\n' "$recipe" "$index" \
    "${#grid[@]}" "$setting" "$(awk -v x="$accuracy" 'BEGIN { print 100 * x }')" \
    "$(awk -v x="$macro_f1" 'BEGIN { print 100 * x }')" "$seconds"
  if awk -v a="$score" -v b="$best_score" 'BEGIN { exit !(a > b) }'; then
    [ -z "$best_setting" ] || rm -f "$work/model-$best_index.bin"
    best_score=$score best_setting=$setting best_seconds=$seconds best_index=$index
  else
    rm -f "$work/model-$index.bin"
  fi
done
mv "$work/model-$best_index.bin" "$out/model.bin"

fasttext predict "$out/model.bin" "$work/test.text" >"$out/test.pred"
printf '%s: best on valid (%s): %s; on test: ' "$recipe" "$select" "$best_setting"
"$python" "$tools" score --ref "$data/test.tsv" --hyp "$out/test.pred" --json "$out/test.scores.json"

# Prediction speed: the test texts repeated to 200,000 lines or more, timed against one line,
# so that loading the model (hundreds of MB with n-gram buckets) is not counted per line; the
# fastest of three runs of each, since a shared machine makes single timings noisy.
lines=$(wc -l <"$work/test.text")
repeat=$(( (200000 + lines - 1) / lines ))
awk -v r="$repeat" '{ line[NR] = $0 } END { for (i = 0; i < r; i++) for (j = 1; j <= NR; j++) print line[j] }' \
  "$work/test.text" >"$work/speed.text"
head -n 1 "$work/test.text" >"$work/one.text"
speed_lines=$(wc -l <"$work/speed.text")
fastest_predict() {
  local best= start seconds
  for _ in 1 2 3; do
    start=$(now)
    fasttext predict "$out/model.bin" "$1" >/dev/null
    seconds=$(seconds_since "$start")
    if [ -z "$best" ] || awk -v a="$seconds" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$seconds; fi
  done
  printf '%s' "$best"
}
load_seconds=$(fastest_predict "$work/one.text")
all_seconds=$(fastest_predict "$work/speed.text")
lines_per_second=$(awk -v n="$speed_lines" -v a="$all_seconds" -v l="$load_seconds" \
  'BEGIN { d = a - l; if (d <= 0) d = 0.001; printf "%.0f", n / d }')

test_accuracy=$(json_field "$out/test.scores.json" accuracy)
test_macro_f1=$(json_field "$out/test.scores.json" macro_f1)
classes=$(json_field "$out/test.scores.json" classes)
total_seconds=$(awk -F'\t' 'NR > 1 { s += $4 } END { printf "%.1f", s }' "$out/grid.tsv")
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
version=$(dpkg-query -W -f='${Version}' fasttext 2>/dev/null || echo unknown)
"$python" - "$out/summary.json" <<PY
import json, sys
summary = {"recipe": "$recipe", "task": "$task", "data": "$data", "fasttext": "$version",
           "cpu": "$cpu", "threads": $threads, "seed": $seed, "selected_on": "valid $select",
           "settings_tried": ${#grid[@]}, "grid_train_seconds": $total_seconds,
           "best_setting": "$best_setting", "best_train_seconds": $best_seconds,
           "classes": $classes, "test_lines": $lines,
           "test_accuracy": $test_accuracy, "test_macro_f1": $test_macro_f1,
           "predict_lines_per_second": $lines_per_second, "predict_load_seconds": $load_seconds}
json.dump(summary, open(sys.argv[1], "w"), indent=1)
open(sys.argv[1], "a").write("\n")
PY
{
  printf '# fastText on %s\n\n' "$task"
  printf 'fastText %s (Debian), %s training threads, on %s; training file shuffled (seed %s).\n\n' \
    "$version" "$threads" "${cpu:-an unknown CPU}" "$seed"
  printf '| setting | valid accuracy | valid macro-F1 | training s |\n| --- | ---: | ---: | ---: |\n'
  awk -F'\t' 'NR > 1 { printf "| `%s` | %.2f%% | %.2f%% | %s |\n", $1, 100 * $2, 100 * $3, $4 }' "$out/grid.tsv"
  printf '\nBest on valid %s: `%s`, trained in %s s (the whole grid %s s).\n\n' "$select" \
    "$best_setting" "$best_seconds" "$total_seconds"
  printf 'Test (%s lines, %s classes): accuracy %.2f%%, macro-F1 %.2f%%.\n\n' "$lines" "$classes" \
    "$(awk -v x="$test_accuracy" 'BEGIN { print 100 * x }')" "$(awk -v x="$test_macro_f1" 'BEGIN { print 100 * x }')"
  printf '`fasttext predict`: %s lines/s on one thread (%s lines; loading the model %s s apart).\n' \
    "$lines_per_second" "$speed_lines" "$load_seconds"
} >"$out/summary.md"
cat "$out/summary.md"
printf '%s: wrote %s/{grid.tsv,model.bin,test.pred,test.scores.json,summary.json,summary.md}\n' "$recipe" "$out"
