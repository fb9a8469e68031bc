#!/usr/bin/env bash
# Spanish -> English translation of Bible verses (Reina-Valera 1909 -> World English Bible
# text): train, translate the test verses, score.
#
#   recipes/bible-es-en.sh [DATA_DIR]
#
# DATA_DIR: the shared split ../shared/data/bible (default) or the output of
# `scripts/get-data.sh bible` (data/bible); both hold {train,dev,test}.{es,en}, one verse a line.
#
# Environment:
#   ARCH        transformer (default) or rnn: the two documented configurations below; the
#               Transformer is the better model of an hour here (28.03 against 22.82 BLEU,
#               docs/results.md)
#   PRECISION   auto (default), bf16 or fp32: the operands of training's products
#               (--precision). auto is bf16 where the processor multiplies bf16 natively
#               (AVX512_BF16), where bf16 makes 1.6 times the Transformer's updates of fp32
#               (1.2 times the RNN's) with the same loss per update, and 0.75 BLEU more in the
#               hour (28.03 against 27.28, docs/results.md); elsewhere emulated bf16 trains no
#               faster than fp32, so auto is fp32 there. scores.json records the one used
#   TIME_LIMIT  seconds of training (default 3600, the documented budget)
#   TOKENS      the tokenizer of both sides, learned by SentencePiece (default spm-bpe:8000,
#               its BPE of 8,000 pieces: 34.13 BLEU, against 33.77 for spm:8000, its unigram
#               model, and 28.36 for attn's own earlier BPE, docs/results.md); bpe:N is the same
#               BPE sized in merges
#   OUT         the run folder (default runs/bible-es-en, or runs/bible-es-en-rnn for rnn)
#   BUILD       the build folder holding attn (default build; built when attn is missing)
#   THREADS     threads for training and decoding (default 0: ATTN_NUM_THREADS or all cores)
#   BEAM        beam size of attn translate (default 5; 1 decodes greedily)
#   DECODE_BATCH  sentences attn translate decodes together (default 32)
#
# Writes to OUT: model.safetensors (the best validation loss's weights),
# model.last.safetensors (checkpoint), train.jsonl (training log), train.log (progress),
# test.hyp (the English of each test verse, one line each, in the order of test.es),
# scores.txt (attn eval's BLEU and chrF) and scores.json (the same with the run's settings).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=bible-es-en
arch=${ARCH:-transformer}
precision=${PRECISION:-auto}
time_limit=${TIME_LIMIT:-3600}
build=${BUILD:-$repo/build}
threads=${THREADS:-0}
beam=${BEAM:-5}
decode_batch=${DECODE_BATCH:-32}
token_kind=${TOKENS:-spm-bpe:8000}
data=${1:-$repo/../shared/data/bible}

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

case $arch in
  transformer) out=${OUT:-$repo/runs/$recipe} ;;
  rnn) out=${OUT:-$repo/runs/$recipe-rnn} ;;
  *) die "ARCH must be transformer or rnn, not '$arch'" ;;
esac
case $precision in
  auto | fp32 | bf16) ;;
  *) die "PRECISION must be auto, fp32 or bf16, not '$precision'" ;;
esac
[[ $token_kind =~ ^(bpe|spm|spm-bpe):[0-9]+$ ]] ||
  die "TOKENS must be bpe:N, spm:N or spm-bpe:N, not '$token_kind'"
[[ $time_limit =~ ^[0-9]+$ && $time_limit -gt 0 ]] ||
  die "TIME_LIMIT must be a positive number of seconds, not '$time_limit'"
[ $# -le 1 ] || die "usage: recipes/$recipe.sh [DATA_DIR]"
[ -d "$data" ] || die "no data folder $data (give ../shared/data/bible or scripts/get-data.sh bible's output)"
data=$(cd "$data" && pwd)
for file in train.es train.en dev.es dev.en test.es test.en; do
  [ -s "$data/$file" ] || die "missing $data/$file"
done

attn=$build/attn
if [ ! -x "$attn" ]; then
  make -C "$repo" --no-print-directory BUILD="$build" build >/dev/null || die "build failed"
fi

# Both: byte-pair encoding with 8000 merges per language (TOKENS), learned from the training side
# (about 28,500 verses), mixed case as the texts are.
# Transformer: 3+3 layers of width 256, 4 heads, FFN 1024, dropout 0.1 and label smoothing
# 0.1: the base model at the size an hour on two cores can train for several epochs. Batches
# of 6000 padded tokens (about 2,400 target tokens); the rate warms up over the first 1000
# updates and then follows a cosine to zero at the time limit (attn train's plan under the
# clock), which ends a run of an hour lower than the inverse square root's slow decay.
# RNN: Luong's global attention ("general" score, input feeding) over a 2-layer bidirectional
# LSTM encoder, 2-layer LSTM decoder, 256 units.
tokens=(--src-tokens "$token_kind" --tgt-tokens "$token_kind")
case $arch in
  transformer)
    model_flags=(--layers 3 --d-model 256 --heads 4 --ffn 1024 --dropout 0.1 --label-smoothing 0.1)
    optim_flags=(--lr 1e-3 --warmup 1000 --schedule cosine --batch-tokens 6000) ;;
  rnn)
    model_flags=(--arch rnn --config "$repo/recipes/bible-rnn.json")
    optim_flags=(--lr 1e-3 --warmup 500 --schedule cosine --batch-tokens 4000) ;;
esac

mkdir -p "$out"
# A fresh run: the log is appended to, and an old checkpoint must not be mistaken for this run.
rm -f "$out/model.safetensors" "$out/model.last.safetensors" "$out/train.jsonl" \
  "$out/train.log" "$out/test.hyp" "$out/scores.txt" "$out/scores.json"

printf '%s: training the %s configuration (%s) for %s s on %s\n' "$recipe" "$arch" "$precision" \
  "$time_limit" "$data"
train_command=("$attn" train --train-src "$data/train.es" --train-tgt "$data/train.en"
  --valid-src "$data/dev.es" --valid-tgt "$data/dev.en" --out "$out/model.safetensors"
  "${tokens[@]}" "${model_flags[@]}" "${optim_flags[@]}"
  --precision "$precision" --epochs 0 --time-limit "$time_limit" --eval-every 500
  --threads "$threads" --log "$out/train.jsonl")
printf '%q ' "${train_command[@]}" >"$out/command.txt"
printf '\n' >>"$out/command.txt"
"${train_command[@]}" 2>&1 | tee "$out/train.log" || die "training failed (see $out/train.log)"
# The precision the run used (auto's choice included), as attn train's plan line says.
used_precision=$(sed -n 's/^attn train: plan: .*; precision \(auto -> \)\{0,1\}\([a-z0-9]*\).*/\2/p' \
  "$out/train.log")

decode_flags=(--threads "$threads" --batch "$decode_batch" --beam "$beam")
decoding="beam $beam"
"$attn" translate --model "$out/model.safetensors" "${decode_flags[@]}" <"$data/test.es" >"$out/test.hyp"
[ "$(wc -l <"$out/test.hyp")" -eq "$(wc -l <"$data/test.es")" ] || die "decoding lost lines"
printf '%q ' "$attn" translate --model "$out/model.safetensors" "${decode_flags[@]}" >>"$out/command.txt"
printf '\n' >>"$out/command.txt"

"$attn" eval --metric bleu,chrf --ref "$data/test.en" --hyp "$out/test.hyp" | tee "$out/scores.txt"
bleu=$("$attn" eval --metric bleu --score-only --ref "$data/test.en" --hyp "$out/test.hyp")
chrf=$("$attn" eval --metric chrf --score-only --ref "$data/test.en" --hyp "$out/test.hyp")
steps=$(awk -F'"step":' 'END { split($2, a, /[,}]/); print a[1] }' "$out/train.jsonl")
printf '{"recipe":"%s","arch":"%s","tokens":"%s","precision":"%s","data":"%s","time_limit":%s,"steps":%s,"decoding":"%s","threads":%s,"bleu":%s,"chrf":%s}\n' \
  "$recipe" "$arch" "$token_kind" "$used_precision" "$data" "$time_limit" "${steps:-0}" "$decoding" "$threads" \
  "$bleu" "$chrf" \
  >"$out/scores.json"
printf '%s: wrote %s/{model.safetensors,train.jsonl,train.log,test.hyp,scores.txt,scores.json,command.txt}\n' \
  "$recipe" "$out"
