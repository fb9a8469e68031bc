#!/usr/bin/env bash
# G2P ensembles and distillation on the CMU Pronouncing Dictionary (issue 17): train several
# models of one configuration with different seeds (each one run of recipes/g2p-cmudict.sh),
# one after the other or JOBS at a time, join them to any models trained elsewhere (JOIN),
# decode the test words with their ensemble (`attn translate --model A,B,...`: each step's
# log-probabilities averaged), and optionally distil one student of the same configuration
# from the ensemble: from its token distributions on the training data (token-level
# distillation, attn train --teacher; Sun et al. 2019), or from its pronunciations of the
# training words (sequence-level, Kim and Rush 2016).
#
#   recipes/g2p-ensemble.sh [DATA_DIR]
#
# Environment:
#   MEMBERS     models the recipe trains, with seeds 1..MEMBERS (default 4; the ensemble needs
#               two or more with those JOIN adds)
#   DISTILL     token: also train a student on the data and the ensemble's token
#               distributions (the members and JOIN are its --teacher models); 1: a student
#               on the ensemble's pronunciations of the training words instead; 0: no
#               student (default). One hour of the 2-layer LSTM taught by six members gave
#               21.67% WER against 22.28% for the same seed alone (docs/results.md); the
#               sequence-level student gained nothing on its configuration
#   UNLABELLED  a word list (one word per line, e.g. /usr/share/dict/american-english-large
#               from Debian's wamerican-large) whose words the student also learns, as the
#               ensemble pronounces them (unlabelled.tsv): lower-cased, possessives ('s) and
#               words with letters the training words lack dropped, and none of the training
#               or test words kept, so no test word reaches the student. Needs DISTILL.
#               Measured once: 76,677 such words gained the hour-long taught LSTM nothing
#               (21.76% WER against 21.67%), a little as an ensemble member (docs/results.md)
#   JOBS        members trained at the same time (default 1). On two cores, JOBS=2 trains two
#               members in the hour one takes, each with about 55-70% of the updates: the
#               one-layer default RNN in bf16 read 8,650-8,730 target tokens/s a core against
#               12,280 in fp32 on both; the recipe's 2+2 GRU 6,950 against 11,620 on both,
#               and gave 23.23% WER (seed 2) against 22.26% (seed 1, both cores;
#               docs/results.md)
#   MEMBER_THREADS  threads of each member's training and decoding (default 1 when JOBS > 1,
#               else THREADS)
#   JOIN        model files trained elsewhere, comma-separated, that join the members in the
#               ensemble (and in the student's teacher): e.g. recipes/g2p-cmudict.sh's
#               Transformer, whose errors differ most from the RNNs'
#   OUT         the run folder (default runs/g2p-ensemble-rnn, or runs/g2p-ensemble for the
#               transformer)
#   ARCH, SETTINGS, PRECISION, TIME_LIMIT, THREADS, BEAM, DECODE_BATCH, BUILD: as for
#               recipes/g2p-cmudict.sh, for every member and the student (TIME_LIMIT each)
#
# A member or student whose folder already holds scores.json is not trained again, and an
# existing distilled.tsv is not translated again: a run stopped part way continues where it
# stopped, and the members may be trained in separate sittings. Delete a folder to redo it.
#
# Writes to OUT: member-N/ (a g2p-cmudict run folder each), ensemble/ (test.hyp, scores.txt,
# scores.json, command.txt); with DISTILL=1 distilled.tsv (each distinct training word with
# the ensemble's pronunciation) and student/ (a g2p-cmudict run folder trained on it); with
# DISTILL=token student/ (a g2p-cmudict run folder taught by the ensemble's members); with
# UNLABELLED also unlabelled.tsv (each kept word with the ensemble's pronunciation) and
# student-train.tsv (the student's training pairs: the data or distilled.tsv, then those).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=g2p-ensemble
arch=${ARCH:-rnn}
members=${MEMBERS:-4}
distill=${DISTILL:-0}
build=${BUILD:-$repo/build}
threads=${THREADS:-0}
beam=${BEAM:-5}
decode_batch=${DECODE_BATCH:-32}
jobs=${JOBS:-1}
join=${JOIN:-}
unlabelled=${UNLABELLED:-}
data=${1:-$repo/../shared/data/g2p-std}

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

case $arch in
  transformer) out=${OUT:-$repo/runs/$recipe} ;;
  rnn) out=${OUT:-$repo/runs/$recipe-rnn} ;;
  *) die "ARCH must be transformer or rnn, not '$arch'" ;;
esac
[[ $jobs =~ ^[0-9]+$ && $jobs -ge 1 ]] || die "JOBS must be a number of members of at least 1, not '$jobs'"
member_threads=${MEMBER_THREADS:-$([ "$jobs" -gt 1 ] && echo 1 || echo "$threads")}
[[ $member_threads =~ ^[0-9]+$ ]] || die "MEMBER_THREADS must be a number of threads, not '$member_threads'"
joined=()
if [ -n "$join" ]; then
  IFS=, read -r -a joined <<<"$join"
  for model in "${joined[@]}"; do
    [ -s "$model" ] || die "JOIN: no model file '$model'"
  done
fi
[[ $members =~ ^[0-9]+$ && $members -ge 1 && $((members + ${#joined[@]})) -ge 2 ]] ||
  die "MEMBERS must be a number of models, at least 2 with those JOIN adds, not '$members'"
case $distill in
  0 | 1 | token) ;;
  *) die "DISTILL must be 0, 1 or token, not '$distill'" ;;
esac
if [ -n "$unlabelled" ]; then
  [ "$distill" != 0 ] || die "UNLABELLED needs a student to teach: set DISTILL to token or 1"
  [ -s "$unlabelled" ] || die "UNLABELLED: no word list '$unlabelled' (apt-get install wamerican-large gives /usr/share/dict/american-english-large)"
fi
[ $# -le 1 ] || die "usage: recipes/$recipe.sh [DATA_DIR]"
[ -d "$data" ] || die "no data folder $data (give the standard split or scripts/get-data.sh cmudict's output)"
data=$(cd "$data" && pwd)
if [ -f "$data/train_full.tsv" ]; then train=$data/train_full.tsv; else train=$data/train.tsv; fi
[ -s "$data/test.tsv" ] || die "missing $data/test.tsv"

attn=$build/attn
if [ ! -x "$attn" ]; then
  make -C "$repo" --no-print-directory BUILD="$build" build >/dev/null || die "build failed"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One member: the single-model recipe with its own seed and folder (ARCH, SETTINGS, PRECISION,
# TIME_LIMIT, ... pass through the environment).
train_model() { # folder seed threads [training file [teachers]]
  if [ -s "$1/scores.json" ]; then
    printf '%s: %s is trained already (scores.json), kept\n' "$recipe" "$1"
    return
  fi
  OUT=$1 SEED=$2 THREADS=$3 TRAIN=${4:-} TEACHERS=${5:-} BUILD=$build \
    "$repo/recipes/g2p-cmudict.sh" "$data" || die "training $1 failed"
}

# JOBS members at a time, each writing its progress to member-N.log, so that their lines do
# not interleave; the next starts as soon as one ends. Each runs in its own process group,
# which the recipe stops when it ends early (a member failed, Ctrl-C, a kill): bash starts
# background commands with Ctrl-C ignored, so they would otherwise train on, unwatched.
declare -A member_of=() # process id -> member number, for the members training now
stop_members() {
  for pid in "${!member_of[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
}
trap stop_members EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
wait_for_members() { # until no more than $1 members train
  local pid status i
  while [ "${#member_of[@]}" -gt "$1" ]; do
    status=0
    wait -n -p pid "${!member_of[@]}" || status=$?
    i=${member_of[$pid]}
    unset "member_of[$pid]"
    [ "$status" -eq 0 ] || die "training member $i failed (see $out/member-$i.log)"
    cat "$out/member-$i.log"
  done
}
models=()
for ((i = 1; i <= members; i++)); do
  if [ "$jobs" -gt 1 ]; then
    wait_for_members $((jobs - 1))
    set -m
    train_model "$out/member-$i" "$i" "$member_threads" >"$out/member-$i.log" 2>&1 &
    set +m
    member_of[$!]=$i
  else
    train_model "$out/member-$i" "$i" "$member_threads"
  fi
  models+=("$out/member-$i/model.safetensors")
done
wait_for_members 0
for model in "${joined[@]}"; do
  models+=("$(cd "$(dirname "$model")" && pwd)/$(basename "$model")")
done
ensemble=$(IFS=,; printf '%s' "${models[*]}")
decode_flags=(--threads "$threads" --batch "$decode_batch" --beam "$beam")

# Each distinct word once, in the order it first appears, as the single-model recipe does.
distinct_words() { awk -F'\t' '!seen[$1]++ { print $1 }' "$1"; }

mkdir -p "$out/ensemble"
distinct_words "$data/test.tsv" >"$out/ensemble/test.words"
"$attn" translate --model "$ensemble" "${decode_flags[@]}" <"$out/ensemble/test.words" |
  paste "$out/ensemble/test.words" - >"$out/ensemble/test.hyp"
[ "$(wc -l <"$out/ensemble/test.hyp")" -eq "$(wc -l <"$out/ensemble/test.words")" ] ||
  die "decoding lost lines"
rm -f "$out/ensemble/test.words"
printf '%q ' "$attn" translate --model "$ensemble" "${decode_flags[@]}" >"$out/ensemble/command.txt"
printf '\n' >>"$out/ensemble/command.txt"
"$attn" eval --metric wer,per --ref "$data/test.tsv" --hyp "$out/ensemble/test.hyp" |
  tee "$out/ensemble/scores.txt"
wer=$("$attn" eval --metric wer --score-only --ref "$data/test.tsv" --hyp "$out/ensemble/test.hyp")
per=$("$attn" eval --metric per --score-only --ref "$data/test.tsv" --hyp "$out/ensemble/test.hyp")
printf '{"recipe":"%s","arch":"%s","members":%s,"joined":%s,"data":"%s","decoding":"beam %s","wer":%s,"per":%s}\n' \
  "$recipe" "$arch" "$members" "${#joined[@]}" "$data" "$beam" "$wer" "$per" \
  >"$out/ensemble/scores.json"

# Translates the words of $1 with the ensemble into $2 as "word<TAB>pronunciation", leaving
# out the words it pronounced with nothing (they teach the student nothing, and attn train
# refuses empty targets) and saying how many. Written under other names first, so that a
# stopped translation is not taken for a finished one by the next run.
translate_words() { # words pairs what
  "$attn" translate --model "$ensemble" "${decode_flags[@]}" <"$1" | paste "$1" - >"$2.partial"
  [ "$(wc -l <"$2.partial")" -eq "$(wc -l <"$1")" ] || die "translating the $3 lost lines"
  awk -F'\t' '$2 != ""' "$2.partial" >"$2.kept"
  printf '%s: %s of %s %s got an empty pronunciation from the ensemble and are left out of %s\n' \
    "$recipe" "$(($(wc -l <"$1") - $(wc -l <"$2.kept")))" "$(wc -l <"$1")" "$3" "$(basename "$2")"
  [ -s "$2.kept" ] || die "the ensemble pronounced every one of the $3 with nothing"
  mv "$2.kept" "$2"
  rm -f "$2.partial"
}

student_train=
if [ "$distill" = 1 ]; then
  if [ ! -s "$out/distilled.tsv" ]; then
    printf '%s: translating the training words with the ensemble of %s\n' "$recipe" \
      "$((members + ${#joined[@]}))"
    distinct_words "$train" >"$out/train.words"
    translate_words "$out/train.words" "$out/distilled.tsv" "training words"
    rm -f "$out/train.words"
  fi
  student_train=$out/distilled.tsv
fi
if [ -n "$unlabelled" ]; then
  if [ ! -s "$out/unlabelled.tsv" ]; then
    # Each character of the training words is one source token: a word with any other would
    # be read with <unk>. The test words are left out so that no test word is learnt.
    awk -F'\t' -v possessive="'s\$" '
      FILENAME == ARGV[1] { known[$1] = 1; n = split($1, c, ""); for (i = 1; i <= n; i++) letter[c[i]] = 1; next }
      FILENAME == ARGV[2] { known[$1] = 1; next }
      {
        sub(/\r$/, ""); word = tolower($0)
        if (word == "" || $0 ~ possessive || (word in known) || (word in seen)) next
        n = split(word, c, ""); for (i = 1; i <= n; i++) if (!(c[i] in letter)) next
        seen[word] = 1; print word
      }' "$train" "$data/test.tsv" "$unlabelled" >"$out/unlabelled.words"
    [ -s "$out/unlabelled.words" ] || die "UNLABELLED: no word of '$unlabelled' is new to the training and test words"
    printf '%s: translating %s words of %s with the ensemble of %s\n' "$recipe" \
      "$(wc -l <"$out/unlabelled.words")" "$unlabelled" "$((members + ${#joined[@]}))"
    translate_words "$out/unlabelled.words" "$out/unlabelled.tsv" "unlabelled words"
    rm -f "$out/unlabelled.words"
  fi
  cat "${student_train:-$train}" "$out/unlabelled.tsv" >"$out/student-train.tsv"
  student_train=$out/student-train.tsv
fi
teachers=
[ "$distill" != token ] || teachers=$ensemble
[ "$distill" = 0 ] || train_model "$out/student" "$((members + 1))" "$threads" "$student_train" "$teachers"
written=
case $distill in
  1) written=,distilled.tsv,student ;;
  token) written=,student ;;
esac
[ -z "$unlabelled" ] || written=$written,unlabelled.tsv,student-train.tsv
printf '%s: wrote %s/{member-1..%s,ensemble%s}\n' "$recipe" "$out" "$members" "$written"
