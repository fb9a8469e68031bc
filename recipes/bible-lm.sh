#!/usr/bin/env bash
# A language model of the English Bible (the World English Bible side of the Bible data):
# attn train --task lm for an hour, bits per character on held-out books, a dozen samples;
# then the same model trained in PyTorch for the same time (bench/torch_lm.py), scored the
# same way, and a summary of both.
#
#   recipes/bible-lm.sh [DATA_DIR]
#
# DATA_DIR: the shared split ../shared/data/bible (default) or the output of
# `scripts/get-data.sh bible` (data/bible); only {train,dev,test}.{en,ref} are read: one verse
# a line, and its reference ("Book C:V").
#
# The split, deterministic: the verses of the three files (train, dev, test, in that order,
# each in its order) go by book name: a verse of TEST_BOOKS is test text, of VALID_BOOKS
# validation text, and every other verse training text. The defaults are the data's own
# held-out books (docs/data.md), so the training text is train.en as it is:
#   test  = Ruth, John, Philemon, Jude              (1,013 verses, 114,828 characters with line ends)
#   valid = Esther, Lamentations, Romans, Philippians, Titus, James           (983 verses)
#
# Environment:
#   TOKENS      char (default) or bpe:N (e.g. bpe:4000: SentencePiece's BPE, N merges learned from the training
#               text); bits per character are counted on the same characters either way
#   PRECISION   auto (default), bf16 or fp32: attn's products (--precision; auto is bf16
#               where the processor multiplies bf16 natively, else fp32); PyTorch takes its
#               own faster setting (bench/torch_lm.py --autocast auto)
#   TIME_LIMIT  seconds of training, attn's and then PyTorch's (default 3600 each)
#   TORCH       1 (default): train the PyTorch twin after attn; 0: attn alone
#   TEST_BOOKS, VALID_BOOKS  comma-separated book names as the .ref files spell them
#               ("I Samuel", "Song of Solomon"); defaults above
#   OUT         the run folder (default runs/bible-lm, or runs/bible-lm-bpeN for bpe:N)
#   BUILD       the build folder holding attn (default build; built when attn is missing)
#   THREADS     threads of both (default 0: ATTN_NUM_THREADS or all cores for attn, every
#               usable core for PyTorch)
#   SEED        the samples' seed (default 1)
#   SAMPLE_TOKENS  new tokens per sample at most (default 200; a sample ends with its verse)
#   TORCH_AUTOCAST auto (default: PyTorch's faster of fp32 and bf16 autocast, timed before
#               its clock starts), off or bf16
#
# The model (both): GPT's shape as attn train --task lm makes it (pre-norm, GELU, sinusoidal
# positions, final norm, tied output), 4 layers, width 384, 6 heads, FFN 1536, windows of 256
# tokens (16 a batch), dropout 0.1, Adam at 1e-3 with attn's cosine annealed over the clock.
#
# Writes to OUT: data/{train,valid,test}.txt (the split), model.safetensors (attn's best
# validation weights), train.jsonl, train.log, scores.txt (attn eval --metric perplexity on
# data/test.txt), prompts.txt and samples.txt (attn generate, one line per prompt),
# torch/{model.pt,train.jsonl,train.log,scores.json,samples.txt}, scores.json (both runs'
# figures), summary.md (the summary printed at the end, for docs/results.md), command.txt.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=bible-lm
tokens=${TOKENS:-char}
precision=${PRECISION:-auto}
time_limit=${TIME_LIMIT:-3600}
torch_twin=${TORCH:-1}
test_books=${TEST_BOOKS:-Ruth,John,Philemon,Jude}
valid_books=${VALID_BOOKS:-Esther,Lamentations,Romans,Philippians,Titus,James}
build=${BUILD:-$repo/build}
threads=${THREADS:-0}
seed=${SEED:-1}
sample_tokens=${SAMPLE_TOKENS:-200}
torch_autocast=${TORCH_AUTOCAST:-auto}
data=${1:-$repo/../shared/data/bible}
python=/usr/bin/python3

die() { printf '%s: %s\n' "$recipe" "$*" >&2; exit 1; }

case $tokens in
  char) out=${OUT:-$repo/runs/$recipe} ;;
  bpe:[1-9]*) [[ ${tokens#bpe:} =~ ^[0-9]+$ ]] || die "TOKENS must be char or bpe:N, not '$tokens'"
    out=${OUT:-$repo/runs/$recipe-bpe${tokens#bpe:}} ;;
  *) die "TOKENS must be char or bpe:N, not '$tokens'" ;;
esac
case $precision in
  auto | fp32 | bf16) ;;
  *) die "PRECISION must be auto, fp32 or bf16, not '$precision'" ;;
esac
[[ $time_limit =~ ^[0-9]+$ && $time_limit -gt 0 ]] ||
  die "TIME_LIMIT must be a positive number of seconds, not '$time_limit'"
[[ $torch_twin == 0 || $torch_twin == 1 ]] || die "TORCH must be 0 or 1, not '$torch_twin'"
[[ $threads =~ ^[0-9]+$ ]] || die "THREADS must be a number, not '$threads'"
[[ $seed =~ ^[0-9]+$ ]] || die "SEED must be a number, not '$seed'"
[[ $sample_tokens =~ ^[0-9]+$ && $sample_tokens -gt 0 ]] ||
  die "SAMPLE_TOKENS must be a positive number, not '$sample_tokens'"
case $torch_autocast in
  auto | off | bf16) ;;
  *) die "TORCH_AUTOCAST must be auto, off or bf16, not '$torch_autocast'" ;;
esac
[ $# -le 1 ] || die "usage: recipes/$recipe.sh [DATA_DIR]"
[ -d "$data" ] || die "no data folder $data (give ../shared/data/bible or scripts/get-data.sh bible's output)"
data=$(cd "$data" && pwd)
for part in train dev test; do
  for ext in en ref; do
    [ -s "$data/$part.$ext" ] || die "missing $data/$part.$ext"
  done
  [ "$(wc -l <"$data/$part.en")" -eq "$(wc -l <"$data/$part.ref")" ] ||
    die "$data/$part.en and $data/$part.ref differ in length"
done
if [ "$torch_twin" = 1 ]; then
  "$python" -c 'import torch' 2>/dev/null ||
    die "TORCH=1 needs Debian's python3-torch under $python (or give TORCH=0)"
fi

attn=$build/attn
if [ ! -x "$attn" ]; then
  make -C "$repo" --no-print-directory BUILD="$build" build >/dev/null || die "build failed"
fi

mkdir -p "$out/data"
rm -f "$out/data/train.txt" "$out/data/valid.txt" "$out/data/test.txt" "$out/data/verses"
# A fresh run: the log is appended to, and an old checkpoint must not be mistaken for this run.
rm -rf "$out/torch"
rm -f "$out/model.safetensors" "$out/model.last.safetensors" "$out/train.jsonl" \
  "$out/train.log" "$out/scores.txt" "$out/samples.txt" "$out/scores.json" "$out/summary.md"

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

# ---- the split: whole books, by name ---------------------------------------------------------
started=$(now)
for part in train dev test; do
  paste -d '\t' "$data/$part.ref" "$data/$part.en"
done | awk -F'\t' -v test_books="$test_books" -v valid_books="$valid_books" -v dir="$out/data" '
  BEGIN {
    n = split(test_books, t, ","); for (i = 1; i <= n; i++) { test[t[i]] = 1; wanted[t[i]] = "test" }
    n = split(valid_books, v, ","); for (i = 1; i <= n; i++) {
      if (v[i] in test) { print "bible-lm: " v[i] " is in both TEST_BOOKS and VALID_BOOKS" > "/dev/stderr"; bad = 1; exit 1 }
      valid[v[i]] = 1; wanted[v[i]] = "valid" }
  }
  {
    book = $1; sub(/ [0-9]+:[0-9]+$/, "", book)
    part = (book in test) ? "test" : (book in valid) ? "valid" : "train"
    seen[book] = 1
    text = $0; sub(/^[^\t]*\t/, "", text)
    print text > (dir "/" part ".txt")
    verses[part]++
  }
  END {
    if (bad) exit 1
    for (b in wanted) if (!(b in seen)) {
      print "bible-lm: no verse of the book \"" b "\" (" wanted[b] ") in the data" > "/dev/stderr"; missing = 1 }
    if (missing) exit 1
    for (p in verses) printf "%s %d\n", p, verses[p] > (dir "/verses")
  }' || die "cannot split the data by book"
for part in train valid test; do
  [ -s "$out/data/$part.txt" ] || die "the $part text is empty"
done
chars_of() { LC_ALL=C.UTF-8 wc -m <"$1" | tr -d ' '; }
split_seconds=$(seconds_since "$started")
printf '%s: training text %s verses, %s characters; validation (%s) %s verses; test (%s) %s verses, %s characters\n' \
  "$recipe" "$(awk '$1 == "train" { print $2 }' "$out/data/verses")" "$(chars_of "$out/data/train.txt")" \
  "$valid_books" "$(awk '$1 == "valid" { print $2 }' "$out/data/verses")" \
  "$test_books" "$(awk '$1 == "test" { print $2 }' "$out/data/verses")" "$(chars_of "$out/data/test.txt")"

# Twelve prompts, each continued to the end of its verse (or 200 tokens) with its own seed.
cat >"$out/prompts.txt" <<'EOF'
In the beginning
And God said,
The LORD is my shepherd;
Jesus answered them,
Blessed are
For God so loved
Then the king
My son,
Behold, I
He went up to Jerusalem
Now it happened
I will sing
EOF

# ---- attn ---------------------------------------------------------------------------------------
model_flags=(--layers 4 --d-model 384 --heads 6 --ffn 1536 --context 256 --dropout 0.1)
printf '%s: training attn (%s tokens, %s) for %s s\n' "$recipe" "$tokens" "$precision" "$time_limit"
train_command=("$attn" train --task lm --train "$out/data/train.txt" --valid "$out/data/valid.txt"
  --out "$out/model.safetensors" --tgt-tokens "$tokens" "${model_flags[@]}" --lr 1e-3
  --precision "$precision" --time-limit "$time_limit" --eval-every 500 --threads "$threads"
  --log "$out/train.jsonl")
printf '%q ' "${train_command[@]}" >"$out/command.txt"
printf '\n' >>"$out/command.txt"
started=$(now)
"${train_command[@]}" 2>&1 | tee "$out/train.log" || die "training failed (see $out/train.log)"
# The precision the run used (auto's choice included), as attn train's plan line says.
used_precision=$(sed -n 's/^attn train: plan: .*; precision \(auto -> \)\{0,1\}\([a-z0-9]*\).*/\2/p' \
  "$out/train.log")
attn_train_seconds=$(seconds_since "$started")

started=$(now)
# attn eval has no --threads: ATTN_NUM_THREADS says it (0: all cores, as unset).
ATTN_NUM_THREADS=$([ "$threads" = 0 ] && printf '%s' "${ATTN_NUM_THREADS:-0}" || printf '%s' "$threads") \
  "$attn" eval --metric perplexity --model "$out/model.safetensors" --ref "$out/data/test.txt" | tee "$out/scores.txt" || die "attn eval failed"
attn_eval_seconds=$(seconds_since "$started")
attn_bpc=$(awk '$1 == "bits/char" { print $3 }' "$out/scores.txt")

started=$(now)
generate_flags=(--input "$out/prompts.txt" --seed "$seed" --temperature 0.8
  --max-new-tokens "$sample_tokens" --threads "$threads")
"$attn" generate --model "$out/model.safetensors" "${generate_flags[@]}" \
  --output "$out/samples.txt" || die "attn generate failed"
attn_generate_seconds=$(seconds_since "$started")
printf '%q ' "$attn" eval --metric perplexity --model "$out/model.safetensors" --ref "$out/data/test.txt" >>"$out/command.txt"
printf '\n' >>"$out/command.txt"
printf '%q ' "$attn" generate --model "$out/model.safetensors" "${generate_flags[@]}" >>"$out/command.txt"
printf '\n' >>"$out/command.txt"
printf '%s: attn samples (seed %s, temperature 0.8):\n' "$recipe" "$seed"
paste -d '' "$out/prompts.txt" "$out/samples.txt" | sed 's/^/  /'

# ---- PyTorch ------------------------------------------------------------------------------------
torch_seconds=0
if [ "$torch_twin" = 1 ]; then
  printf '%s: training the same model in PyTorch for %s s\n' "$recipe" "$time_limit"
  torch_command=("$python" "$repo/bench/torch_lm.py" --train "$out/data/train.txt"
    --valid "$out/data/valid.txt" --test "$out/data/test.txt" --out "$out/torch"
    --like "$out/model.safetensors" --time-limit "$time_limit" --eval-every 500 --lr 1e-3
    --prompts "$out/prompts.txt" --temperature 0.8 --max-new-tokens "$sample_tokens"
    --sample-seed "$seed" --autocast "$torch_autocast")
  [ "$threads" = 0 ] || torch_command+=(--threads "$threads")
  printf '%q ' "${torch_command[@]}" >>"$out/command.txt"
  printf '\n' >>"$out/command.txt"
  mkdir -p "$out/torch"
  started=$(now)
  ATTN_LIBRARY=${ATTN_LIBRARY:-$build/libattn.so} "${torch_command[@]}" 2>&1 |
    tee "$out/torch/train.log" || die "the PyTorch twin failed (see $out/torch/train.log)"
  torch_seconds=$(seconds_since "$started")
  printf '%s: PyTorch samples:\n' "$recipe"
  paste -d '' "$out/prompts.txt" "$out/torch/samples.txt" | sed 's/^/  /'
fi

# ---- the summary --------------------------------------------------------------------------------
"$python" - "$out" "$recipe" "$tokens" "$used_precision" "$time_limit" "$threads" "$data" \
  "$test_books" "$valid_books" "$attn_bpc" "$torch_twin" "$split_seconds" \
  "$attn_train_seconds" "$attn_eval_seconds" "$attn_generate_seconds" "$torch_seconds" <<'EOF' ||
import json, os, sys
from pathlib import Path
(out, recipe, tokens, precision, limit, threads, data, test_books, valid_books, attn_bpc,
 torch_twin, split_s, train_s, eval_s, generate_s, torch_s) = sys.argv[1:]
out = Path(out)
events = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines() if line]
steps = [e for e in events if e["event"] == "step"]
evals = [e for e in events if e["event"] == "eval"]
best = min(evals, key=lambda e: e["valid_loss"]) if evals else {}
config = {}
with open(out / "model.safetensors", "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    config = json.loads(header["__metadata__"]["attn_config"])
params = 0  # counted from the tensors' shapes
for name, tensor in header.items():
    if name != "__metadata__":
        n = 1
        for d in tensor["shape"]:
            n *= d
        params += n
score_lines = dict(line.split(" = ", 1) for line in (out / "scores.txt").read_text().splitlines()
                   if " = " in line)
attn = {"bits_per_char": float(attn_bpc), "steps": steps[-1]["step"] if steps else 0,
        "epochs": steps[-1]["epoch"] if steps else 0,
        "tokens_per_second": round(steps[-1]["tokens_per_second"], 1) if steps else 0,
        "best_valid_loss": best.get("valid_loss"), "best_step": best.get("step"),
        "parameters": params, "vocabulary": config["tgt_vocab"],
        "bits_per_token": float(score_lines["bits/token"]),
        "perplexity": float(score_lines["perplexity"]),
        "train_seconds": int(train_s), "eval_seconds": int(eval_s),
        "generate_seconds": int(generate_s)}
torch = json.loads((out / "torch" / "scores.json").read_text()) if torch_twin == "1" else None
summary = {"recipe": recipe, "tokens": tokens, "precision": precision, "time_limit": int(limit),
           "threads": int(threads), "data": data, "test_books": test_books,
           "valid_books": valid_books, "model": {k: config[k] for k in (
               "decoder_layers", "d_model", "num_heads", "ffn_dim", "max_len", "dropout")},
           "split_seconds": int(split_s), "attn": attn}
if torch:
    summary["torch"] = {k: torch[k] for k in (
        "bits_per_char", "bits_per_token", "perplexity", "steps", "epochs", "tokens_per_second",
        "best_valid_loss", "best_step", "parameters", "vocabulary", "autocast", "threads",
        "omp_wait_policy", "openblas_coretype", "torch")}
    summary["torch"]["seconds"] = int(torch_s)
    summary["ratio_torch_over_attn_bpc"] = torch["bits_per_char"] / attn["bits_per_char"]
(out / "scores.json").write_text(json.dumps(summary) + "\n")

m = summary["model"]
chars = score_lines["bits/char"].split("(")[1].split()[0]
lines = [f"### Bible language model ({tokens} tokens), {int(limit)} s of training each",
         "",
         f"`recipes/bible-lm.sh` (TOKENS={tokens}, PRECISION={precision}, TIME_LIMIT={limit}): "
         f"{m['decoder_layers']} layers, width {m['d_model']}, {m['num_heads']} heads, FFN "
         f"{m['ffn_dim']}, context {m['max_len']}, dropout {m['dropout']}; vocabulary "
         f"{attn['vocabulary']}, {params:,} parameters (attn). Held-out books: test {test_books.replace(',', ', ')} "
         f"({chars} characters, each line end counted), validation {valid_books.replace(',', ', ')}.",
         "",
         "| | attn | PyTorch |" if torch else "| | attn |",
         "| --- | ---: | ---: |" if torch else "| --- | ---: |"]
def row(label, a, t):
    lines.append(f"| {label} | {a} | {t} |" if torch else f"| {label} | {a} |")
t = summary.get("torch", {})
row("test bits/char", f"**{attn['bits_per_char']:.4f}**", f"{t.get('bits_per_char', 0):.4f}")
row("test bits/token", f"{attn['bits_per_token']:.4f}", f"{t.get('bits_per_token', 0):.4f}")
row("updates (epochs)", f"{attn['steps']:,} ({attn['epochs']})", f"{t.get('steps', 0):,} ({t.get('epochs', 0)})")
row("training tokens/s", f"{attn['tokens_per_second']:,.0f}", f"{t.get('tokens_per_second', 0):,.0f}")
row("best validation loss (update)", f"{attn['best_valid_loss']:.4f} ({attn['best_step']})",
    f"{t.get('best_valid_loss', 0):.4f} ({t.get('best_step', 0)})")
row("precision", precision, f"autocast {t.get('autocast')}, {t.get('threads')} threads, "
    f"OMP_WAIT_POLICY={t.get('omp_wait_policy')}")
if torch:
    lines += ["", f"PyTorch's bits per character over attn's: "
              f"**{summary['ratio_torch_over_attn_bpc']:.3f}**"]
lines += ["", f"Time: split {split_s} s, attn training {train_s} s, eval {eval_s} s, "
          f"generate {generate_s} s" + (f", PyTorch (training, scoring, samples) {torch_s} s"
                                        if torch else "") + ".",
          "", "attn's samples (`attn generate --input prompts.txt --seed 1 --temperature 0.8`):",
          ""]
prompts = (out / "prompts.txt").read_text().splitlines()
for p, s in zip(prompts, (out / "samples.txt").read_text().splitlines()):
    lines.append(f"- **{p}**{s}")
if torch:
    lines += ["", "PyTorch's (its own sampler, temperature 0.8):", ""]
    for p, s in zip(prompts, (out / "torch" / "samples.txt").read_text().splitlines()):
        lines.append(f"- **{p}**{s}")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
  die "the summary failed"
printf '%s: wrote %s/{model.safetensors,train.jsonl,train.log,scores.txt,samples.txt,scores.json,summary.md,command.txt}%s\n' \
  "$recipe" "$out" "$([ "$torch_twin" = 1 ] && printf ' and %s/torch/' "$out")"
