/* attn train's options: the table, the checks on the command line, and the trainer's options
 * the flags give. */
#include "cli/train.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#define FIELD(name) offsetof(train_args, name)

static const char *const arch_names[] = {"transformer", "rnn", NULL};
static const int arch_values[] = {ATTN_ARCH_TRANSFORMER, ATTN_ARCH_RNN};
static const char *const cell_names[] = {"gru", "lstm", NULL};
static const int cell_values[] = {ATTN_RNN_GRU, ATTN_RNN_LSTM};
static const char *const norm_names[] = {"layer", "rms", NULL};
static const int norm_values[] = {ATTN_NORM_LAYER, ATTN_NORM_RMS};
static const char *const ffn_kind_names[] = {"mlp", "swiglu", NULL};
static const int ffn_kind_values[] = {ATTN_FFN_MLP, ATTN_FFN_SWIGLU};
static const char *const positions_names[] = {"sinusoidal", "learned", "rope", NULL};
static const int positions_values[] = {ATTN_POSITIONS_SINUSOIDAL, ATTN_POSITIONS_LEARNED,
                                       ATTN_POSITIONS_ROPE};
static const char *const attention_names[] = {"bahdanau",     "luong-dot", "luong-general",
                                              "luong-concat", "none",      NULL};
static const int attention_values[] = {ATTN_RNN_BAHDANAU, ATTN_RNN_LUONG_DOT,
                                       ATTN_RNN_LUONG_GENERAL, ATTN_RNN_LUONG_CONCAT,
                                       ATTN_RNN_NO_ATTENTION};
static const char *const local_names[] = {"m", "p", NULL};
static const int local_values[] = {ATTN_RNN_LOCAL_M, ATTN_RNN_LOCAL_P};
static const char *const schedule_names[] = {"inverse-sqrt", "noam", "cosine", "constant", NULL};
static const int schedule_values[] = {ATTN_LR_INVERSE_SQRT, ATTN_LR_NOAM, ATTN_LR_COSINE,
                                      ATTN_LR_CONSTANT};
static const char *const optimizer_names[] = {"adam", "adamw", NULL};
static const int optimizer_values[] = {ATTN_ADAM, ATTN_ADAMW};
static const char *const task_names[] = {"translate", "lm", "classify", "mlm", NULL};
static const int task_values[] = {TRAIN_TASK_TRANSLATE, TRAIN_TASK_LM, TRAIN_TASK_CLASSIFY,
                                  TRAIN_TASK_MLM};
static const char *const pooling_names[] = {"mean", "cls", "attention", NULL};
static const int pooling_values[] = {ATTN_POOLING_MEAN, ATTN_POOLING_CLS, ATTN_POOLING_ATTENTION};
static const char *const shuffle_names[] = {"random", "none", NULL};
static const char *const precision_names[] = {"auto", "fp32", "bf16", NULL};
static const int precision_values[] = {ATTN_PRECISION_AUTO, ATTN_PRECISION_FP32,
                                       ATTN_PRECISION_BF16};

static const cli_option train_options[] = {
    {CLI_OPTION("--task", CLI_CHOICE, FIELD(task), "translate|lm|classify|mlm",
                "translate: sentence pairs to an encoder-decoder; lm: plain text to a language "
                "model (a decoder alone, GPT); classify: labelled lines to a text classifier (an "
                "encoder alone with a pooled head); mlm: plain text, one text a line, to a masked "
                "language model (an encoder alone, BERT's pretraining) [translate]"),
     .choices = task_names, .choice_values = task_values, .group = GROUP_DATA},
    {CLI_OPTION("--train", CLI_STRING, FIELD(train), "FILE",
                "training pairs, one 'source<TAB>target' per line; --task lm: plain UTF-8 text, "
                "each line ending in </s>; --task classify: one 'label<TAB>text' per line; --task "
                "mlm: one text per line"),
     .group = GROUP_DATA},
    {CLI_OPTION("--train-tokens", CLI_STRING, FIELD(train_tokens), "FILE.bin",
                "--task lm: training tokens in llm.c's token file format (memory-mapped, never "
                "read whole), instead of --train"),
     .group = GROUP_DATA},
    {CLI_OPTION("--valid-tokens", CLI_STRING, FIELD(valid_tokens), "FILE.bin",
                "--task lm: validation tokens in llm.c's format"),
     .group = GROUP_DATA},
    {CLI_OPTION("--valid", CLI_STRING, FIELD(valid), "FILE",
                "validation pairs (TSV): loss and token accuracy, keep-best, early stopping "
                "[without it: from 1000 training pairs up, 5% of them (at most 1000) held out, "
                "chosen by --seed]"),
     .group = GROUP_DATA},
    {CLI_OPTION("--no-valid", CLI_FLAG, FIELD(no_valid), NULL,
                "no validation: train on every pair and keep the last weights"),
     .group = GROUP_DATA},
    {CLI_OPTION("--train-src", CLI_STRING, FIELD(train_src), "FILE",
                "training sources, one sentence per line (with --train-tgt)"),
     .group = GROUP_DATA},
    {CLI_OPTION("--train-tgt", CLI_STRING, FIELD(train_tgt), "FILE",
                "training targets, line i translating line i of --train-src"),
     .group = GROUP_DATA},
    {CLI_OPTION("--valid-src", CLI_STRING, FIELD(valid_src), "FILE", "validation sources"),
     .group = GROUP_DATA},
    {CLI_OPTION("--valid-tgt", CLI_STRING, FIELD(valid_tgt), "FILE", "validation targets"),
     .group = GROUP_DATA},
    {CLI_OPTION("--max-len", CLI_INT, FIELD(max_len), "N",
                "skip training and validation pairs whose source or target has more than N "
                "tokens, and say how many (0: keep every pair; one very long pair sets the size "
                "of every batch it lands in) [256]"),
     .min = 0, .max = INFINITY, .group = GROUP_DATA},
    {CLI_OPTION("--out", CLI_STRING, FIELD(out), "MODEL.safetensors",
                "the model file: the best validation loss's weights (the last without --valid)"),
     .group = GROUP_RUN},
    {CLI_OPTION("--arch", CLI_CHOICE, FIELD(arch), "transformer|rnn",
                "architecture [transformer, or --config's]; --task classify --arch rnn: a GRU or "
                "LSTM encoder with attention pooling (Yang et al. 2016)"),
     .choices = arch_names, .choice_values = arch_values, .group = GROUP_MODEL},
    {CLI_OPTION("--src-tokens", CLI_STRING, FIELD(src_tokens), "char|word|bpe:N|spm:N|spm-bpe:N",
                "source tokenizer, learned from the training sources (with --teacher: the "
                "teachers'); SentencePiece learns bpe:N, its BPE of N merges, spm:N, its "
                "unigram model of N pieces, and spm-bpe:N, its BPE of N pieces [char]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--tgt-tokens", CLI_STRING, FIELD(tgt_tokens), "char|word|bpe:N|spm:N|spm-bpe:N",
                "target tokenizer, learned from the training targets (with --teacher: the "
                "teachers'); --task lm: the model's one tokenizer [char]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--src-spm", CLI_STRING, FIELD(src_spm), "FILE.model",
                "source tokenizer: a SentencePiece model of your own, used unchanged (its ids "
                "are spm_encode's; it is stored in the model file)"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--tgt-spm", CLI_STRING, FIELD(tgt_spm), "FILE.model",
                "target tokenizer (--task lm: the model's one): a SentencePiece model of your "
                "own, used unchanged"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--init", CLI_STRING, FIELD(init), "MODEL.safetensors",
                "--task lm: start from this model's config, weights and tokenizer (e.g. one "
                "'attn convert --from llmc' wrote) with a new optimizer and schedule; --task "
                "classify: start the encoder (its shape, weights and tokenizer) from this masked "
                "language model ('attn train --task mlm') and learn a new pooled head"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--freeze-encoder", CLI_FLAG, FIELD(freeze_encoder), NULL,
                "--task classify --init: keep the pretrained encoder's weights fixed; only the "
                "pooling and the classifier layer learn"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--tokenizer", CLI_STRING, FIELD(tokenizer), "FILE.json",
                "--task lm: a new model's tokenizer, from the file 'attn tokenize' wrote beside "
                "--train-tokens (the model keeps it, so attn generate reads text); with --train "
                "text, instead of learning one"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--config", CLI_STRING, FIELD(config), "FILE.json",
                "model config JSON (as stored in model files); the flags below override it and the "
                "vocabulary sizes come from the tokenizers"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--layers", CLI_INT, FIELD(layers), "N",
                "encoder and decoder layers [transformer 3, rnn 1]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--d-model", CLI_INT, FIELD(d_model), "N", "transformer: model width [256]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--heads", CLI_INT, FIELD(heads), "N", "transformer: attention heads [4]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--ffn", CLI_INT, FIELD(ffn), "N", "transformer: feed-forward hidden width [1024]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--norm", CLI_CHOICE, FIELD(norm), "layer|rms",
                "--task lm, classify, mlm: every norm a LayerNorm or an RMSNorm [layer]"),
     .choices = norm_names, .choice_values = norm_values, .group = GROUP_MODEL},
    {CLI_OPTION("--ffn-kind", CLI_CHOICE, FIELD(ffn_kind), "mlp|swiglu",
                "--task lm, classify, mlm: the feed-forward, MLP or SwiGLU (--ffn its hidden width) "
                "[mlp]"),
     .choices = ffn_kind_names, .choice_values = ffn_kind_values, .group = GROUP_MODEL},
    {CLI_OPTION("--positions", CLI_CHOICE, FIELD(positions), "sinusoidal|learned|rope",
                "--task lm, classify, mlm: positions added to the embeddings, or rotary in the "
                "attention [sinusoidal]"),
     .choices = positions_names, .choice_values = positions_values, .group = GROUP_MODEL},
    {CLI_OPTION("--no-bias", CLI_FLAG, FIELD(no_bias), NULL,
                "--task lm, classify, mlm: no bias anywhere (blocks, norms, output layer), as LLaMA"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--pooling", CLI_CHOICE, FIELD(pooling), "mean|cls|attention",
                "--task classify: how the encoder's states become one vector: their mean, the "
                "state of a classification token read first (BERT's [CLS]; not with --arch rnn), "
                "or a learned query attending over them (Yang et al. 2016) [transformer: mean; "
                "rnn: attention]"),
     .choices = pooling_names, .choice_values = pooling_values, .group = GROUP_MODEL},
    {CLI_OPTION("--cell", CLI_CHOICE, FIELD(cell), "gru|lstm", "rnn: recurrent cell [gru]"),
     .choices = cell_names, .choice_values = cell_values, .group = GROUP_MODEL},
    {CLI_OPTION("--hidden", CLI_INT, FIELD(hidden), "N",
                "rnn: units per encoder direction and in the decoder (the rnn's width) [256]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--embedding-dim", CLI_INT, FIELD(embedding_dim), "N",
                "rnn: source and target embedding width [256]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--attention", CLI_CHOICE, FIELD(attention),
                "bahdanau|luong-dot|luong-general|luong-concat|none",
                "rnn: the decoder's attention (see above) [bahdanau]"),
     .choices = attention_names, .choice_values = attention_values, .group = GROUP_MODEL},
    {CLI_OPTION("--attention-dim", CLI_INT, FIELD(attention_dim), "N",
                "rnn: hidden width of the bahdanau, luong-concat and local-p scoring nets [256]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--local", CLI_CHOICE, FIELD(local), "m|p",
                "rnn, luong-*: local attention over a window at i (m) or at a predicted p_i (p) "
                "[global]"),
     .choices = local_names, .choice_values = local_values, .group = GROUP_MODEL},
    {CLI_OPTION("--window", CLI_INT, FIELD(window), "D",
                "rnn, --local: the window's half width D >= 1 [10]"),
     .min = 1, .max = INFINITY, .group = GROUP_MODEL},
    {CLI_OPTION("--bidirectional", CLI_FLAG, FIELD(bidirectional), NULL,
                "rnn: the encoder reads both ways; annotations are 2 x hidden wide [on, except "
                "luong-dot]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--no-bidirectional", CLI_FLAG, FIELD(no_bidirectional), NULL,
                "rnn: a one-direction encoder (luong-dot needs one)"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--input-feeding", CLI_FLAG, FIELD(input_feeding), NULL,
                "rnn, luong-*: feed the last attentional state h~_{i-1} into step i [off]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--reverse-source", CLI_FLAG, FIELD(reverse_source), NULL,
                "rnn: read each source sentence backwards (Sutskever et al.) [off]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--dropout", CLI_NUMBER, FIELD(dropout), "P", "dropout probability [0.1]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--label-smoothing", CLI_NUMBER, FIELD(label_smoothing), "E",
                "label smoothing of the training loss [0.1]"),
     .group = GROUP_MODEL},
    {CLI_OPTION("--lr", CLI_NUMBER, FIELD(lr), "RATE",
                "peak learning rate [1e-3]; noam: the factor [1]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--warmup", CLI_INT, FIELD(warmup), "STEPS",
                "warm-up updates [cosine: 5% of the planned updates (of the time limit under the "
                "clock), at most 1000; other schedules: 1000]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--schedule", CLI_CHOICE, FIELD(schedule), "inverse-sqrt|noam|cosine|constant",
                "learning-rate schedule [cosine]; cosine decays to --min-lr at the last step (by "
                "--max-steps, else --epochs), or over the --time-limit when the clock alone ends "
                "the run (not reproducible to the bit)"),
     .choices = schedule_names, .choice_values = schedule_values, .group = GROUP_TRAINING},
    {CLI_OPTION("--min-lr", CLI_NUMBER, FIELD(min_lr), "RATE", "cosine: final rate [0]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--optimizer", CLI_CHOICE, FIELD(optimizer), "adam|adamw",
                "Adam (betas 0.9, 0.98, eps 1e-9) or AdamW [adam]"),
     .choices = optimizer_names, .choice_values = optimizer_values, .group = GROUP_TRAINING},
    {CLI_OPTION("--weight-decay", CLI_NUMBER, FIELD(weight_decay), "W",
                "weight decay; biases and norms are exempt [0; adamw: 0.01]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--clip-norm", CLI_NUMBER, FIELD(clip_norm), "N",
                "clip the global gradient norm (0: off) [1]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--context", CLI_INT, FIELD(context), "N",
                "--task lm: tokens the model reads per window (a new model's max_len) [128]"),
     .min = 1, .max = 1 << 20, .group = GROUP_TRAINING},
    {CLI_OPTION("--batch-sequences", CLI_INT, FIELD(batch_sequences), "B",
                "--task lm: windows per batch [4096 tokens' worth: 4096 / --context, at least 1]"),
     .min = 1, .max = 1 << 20, .group = GROUP_TRAINING},
    {CLI_OPTION("--shuffle", CLI_CHOICE, FIELD(shuffle_none), "random|none",
                "random: batches in an order drawn from --seed each epoch; none: in file order "
                "(--task lm: llm.c's loader's order, wrapping at the end) [random]"),
     .choices = shuffle_names, .group = GROUP_TRAINING},
    {CLI_OPTION("--beta1", CLI_NUMBER, FIELD(beta1), "B1", "Adam's first-moment decay [0.9]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--beta2", CLI_NUMBER, FIELD(beta2), "B2", "Adam's second-moment decay [0.98]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--eps", CLI_NUMBER, FIELD(eps), "E", "Adam's epsilon [1e-9]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--batch-tokens", CLI_INT, FIELD(batch_tokens), "N",
                "padded source + target tokens per batch [the training tokens / 100 (about 100 "
                "batches an epoch), rounded down to a multiple of 256, within 512-4096]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--accumulate", CLI_INT, FIELD(accumulate), "K",
                "batches per update, per process under mpirun [1]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--precision", CLI_CHOICE, FIELD(precision), "auto|fp32|bf16",
                "operands of the model's products: bf16 is mixed precision (bf16 operands, fp32 "
                "sums, fp32 weights, gradients and optimizer state; fast with AVX512_BF16, "
                "emulated and slower elsewhere); auto is bf16 where native, else fp32 [auto]"),
     .choices = precision_names, .choice_values = precision_values, .group = GROUP_TRAINING},
    {CLI_OPTION("--ema", CLI_NUMBER, FIELD(ema), "RATE",
                "exponential smoothing of the weights (Marian's): validate and save a moving "
                "average S of the weights, S = (1-d) S + d W after each update with d = max(RATE, "
                "9 / (updates + 10)); e.g. --ema 1e-3. The checkpoint keeps the training weights "
                "and S (0: off) [0]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--teacher", CLI_STRING, FIELD(teacher), "A.safetensors[,B...]",
                "token-level distillation: before training, these models (sharing their "
                "tokenizers, which the student takes) read every training pair, and the mean of "
                "their distributions at each target position joins the training loss (validation "
                "stays the gold cross-entropy); needs 4 bytes x target vocabulary x target tokens "
                "of memory. Give them again on --resume"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--teacher-weight", CLI_NUMBER, FIELD(teacher_weight), "W",
                "with --teacher: the loss is (1-W) x the smoothed gold cross-entropy + W x the "
                "cross-entropy against the teachers [0.5]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--spm-alpha", CLI_NUMBER, FIELD(spm_alpha), "A",
                "subword regularisation for SentencePiece tokenizers (bpe:N, spm:N, spm-bpe:N, "
                "--src-spm/--tgt-spm; every such side): each epoch trains on a segmentation of "
                "each sentence sampled anew from (--seed, epoch, line), A in (0, 1]: a unigram "
                "model's inverse temperature (0.1-0.5 usual; smaller samples more freely), a BPE "
                "model's probability of dropping each merge (BPE-dropout; 0.1 usual). "
                "Validation and inference keep the best segmentation [off]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--spm-nbest", CLI_INT, FIELD(spm_nbest), "N",
                "with --spm-alpha and a unigram model: sample among the N best segmentations, "
                "2..512 (-1: among all of them, the lattice); a BPE model ignores it [-1]"),
     .group = GROUP_TRAINING},
    {CLI_OPTION("--seed", CLI_INT, FIELD(seed), "N",
                "seed of the initial weights, batch order and dropout [1]"),
     .min = 0, .max = INFINITY, .group = GROUP_TRAINING},
    {CLI_OPTION("--epochs", CLI_INT, FIELD(epochs), "N",
                "stop after N epochs (0: no limit) [10 when neither --max-steps nor --time-limit "
                "is given, else 0]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--max-steps", CLI_INT, FIELD(max_steps), "N",
                "stop at update N (0: no limit) [0]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--time-limit", CLI_NUMBER, FIELD(time_limit), "SECONDS",
                "stop after this long, writing a checkpoint (0: none) [0]; counts this run "
                "only: on --resume of a cosine over the time limit, give the time left"),
     .group = GROUP_RUN},
    {CLI_OPTION("--eval-every", CLI_INT, FIELD(eval_every), "N",
                "validate every N updates (0: each epoch) [0]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--patience", CLI_INT, FIELD(patience), "N",
                "stop after N validations without a new best (0: never) [0]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--checkpoint", CLI_STRING, FIELD(checkpoint), "FILE",
                "resume checkpoint: weights, Adam moments, state [MODEL.last.safetensors]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--checkpoint-every", CLI_INT, FIELD(checkpoint_every), "N",
                "also write the checkpoint every N updates (it is written after each "
                "validation and at the end) [0]"),
     .group = GROUP_RUN},
    {CLI_OPTION("--max-skipped", CLI_INT, FIELD(max_skipped), "N",
                "stop with an error after N updates in a row skipped for non-finite gradients, "
                "writing no file after them (0: never) [20]"),
     .min = 0, .max = INFINITY, .group = GROUP_RUN},
    {CLI_OPTION("--check-every", CLI_INT, FIELD(check_every), "N",
                "under mpirun, compare a checksum of the parameters on every process every N "
                "updates and stop with an error if they differ (0: never) [100]"),
     .min = 0, .max = INFINITY, .group = GROUP_RUN},
    {CLI_OPTION("--resume", CLI_STRING, FIELD(resume), "CKPT",
                "continue the run a checkpoint holds (same data; the model, tokenizers and "
                "curve-shaping options come from it; stopping rules may change)"),
     .group = GROUP_RUN},
    {CLI_OPTION("--log", CLI_STRING, FIELD(log), "FILE.jsonl",
                "append one JSON object per update, validation and end, for plots"),
     .group = GROUP_RUN},
    {CLI_OPTION("--log-every", CLI_INT, FIELD(log_every), "N",
                "plain progress line every N updates when stderr is not a terminal [50]"),
     .min = 1, .max = INFINITY, .group = GROUP_RUN},
    {CLI_OPTION(
         "--threads", CLI_INT, FIELD(threads), "N",
         "threads (0: ATTN_NUM_THREADS or all cores); exact resume needs the same count [0]"),
     .min = 0, .max = 1 << 16, .group = GROUP_RUN},
};
#define N_TRAIN_OPTIONS (sizeof train_options / sizeof train_options[0])
_Static_assert(N_TRAIN_OPTIONS <= TRAIN_MAX_OPTIONS, "train_args.given is too short");

static const cli_command train_command = {
    "train",
    "attn train --train TRAIN.tsv [--valid VALID.tsv] --out MODEL.safetensors [options]\n"
    "       attn train --train-src S --train-tgt T [--valid-src S --valid-tgt T] "
    "--out MODEL.safetensors [options]\n"
    "       attn train --task lm --train BOOK.txt [--valid HELD.txt] --out LM.safetensors\n"
    "       attn train --task classify --train LABELLED.tsv [--valid V.tsv] --out CLF.safetensors\n"
    "       attn train --resume MODEL.last.safetensors --train ... --out ... [stopping rules]",
    "Trains a sequence-to-sequence model (--task lm: a language model; --task classify: a\n"
    "text classifier on 'label<TAB>text' lines, which 'attn classify' runs). Files are\n"
    "UTF-8. MODEL.safetensors holds the weights, the model config and the tokenizers (a\n"
    "classifier's: the text's, and the class names; 'attn translate --model' reads it);\n"
    "the checkpoint also holds Adam's moments and the training state, and a run resumed\n"
    "from it reproduces the uninterrupted run's losses exactly at the same thread count.\n"
    "Progress goes to stderr: a bar on a terminal, plain lines otherwise. Ctrl-C or\n"
    "SIGTERM stops within a moment (an unfinished update is dropped), writes the\n"
    "checkpoint and exits 130 or 143.\n\n"
    "--arch transformer is the encoder-decoder of \"Attention Is All You Need\" (sized by\n"
    "--layers, --d-model, --heads, --ffn). --arch rnn is a GRU or LSTM encoder-decoder\n"
    "(sized by --layers, --hidden, --embedding-dim) whose decoder attends by --attention:\n"
    "  bahdanau       additive scores v.tanh(W s_{i-1} + U h_j) from the previous state\n"
    "                 (Bahdanau et al. 2015)\n"
    "  luong-dot      scores s_i . h_j from the current state (Luong et al. 2015); needs\n"
    "                 a one-direction encoder, which is then the default\n"
    "  luong-general  scores s_i . W h_j\n"
    "  luong-concat   scores v.tanh(W [s_i; h_j])\n"
    "  none           no attention: the encoder's last state is the context of every\n"
    "                 step (Cho et al. 2014; with --reverse-source, Sutskever et al. 2014)\n"
    "--task classify --arch rnn is Yang et al.'s (2016) word encoder and attention: the\n"
    "rnn's encoder (--cell, --layers, --hidden, --embedding-dim, bidirectional unless\n"
    "--no-bidirectional) pooled by a learned query (--pooling attention) or the mean.\n"
    "--config FILE.json gives the whole model (arch \"transformer\" or \"rnn\"; --task\n"
    "classify: \"transformer_classifier\" or \"rnn_classifier\"); flags of that\n"
    "architecture override it, flags of the other are an error.\n",
    train_options,
    N_TRAIN_OPTIONS,
    NULL};

int train_usage_error(const char *format, ...)
{
    char message[1024];
    va_list list;
    va_start(list, format);
    vsnprintf(message, sizeof message, format, list);
    va_end(list);
    return cli_usage_error(&train_command, "%s", message);
}

int train_args_given(const train_args *a, const char *name)
{
    return cli_was_given(&train_command, a->given, name);
}

static void set_defaults(train_args *a)
{
    memset(a, 0, sizeof *a);
    a->arch = ATTN_ARCH_TRANSFORMER;
    a->task = TRAIN_TASK_TRANSLATE;
    a->context = 128;
    a->src_tokens = "char";
    a->tgt_tokens = "char";
    a->schedule = ATTN_LR_COSINE;
    a->optimizer = ATTN_ADAM;
    a->precision = ATTN_PRECISION_AUTO;
    a->cell = a->attention = a->local = -1;
    a->layers = 3;
    a->d_model = 256;
    a->heads = 4;
    a->ffn = 1024;
    a->dropout = 0.1;
    a->label_smoothing = 0.1;
    a->lr = 1e-3;
    a->warmup = TRAIN_WARMUP_CAP;
    a->clip_norm = 1.0;
    a->batch_tokens = 0; /* chosen from the corpus: train_default_batch_tokens */
    a->accumulate = 1;
    a->ranks = 1;
    a->epochs = 10;
    a->seed = 1;
    a->log_every = 50;
    a->max_len = 256;
    a->teacher_weight = 0.5;
    a->spm_nbest = -1;
    a->max_skipped = attn_trainer_default_options().max_skipped_updates;
    a->check_every = attn_trainer_default_options().check_every;
}

/* What the options allow together. Returns 0 or the usage exit code after a message. */
static int check_lm_args(const train_args *a)
{
    static const char *const pairs_only[] = {"--train-src", "--train-tgt",    "--valid-src",
                                             "--valid-tgt", "--src-tokens",   "--teacher",
                                             "--arch",      "--batch-tokens", "--src-spm"};
    for (size_t i = 0; i < sizeof pairs_only / sizeof *pairs_only; i++)
        if (train_args_given(a, pairs_only[i]))
            return train_usage_error("%s is for sentence pairs, not --task lm", pairs_only[i]);
    if (train_args_given(a, "--spm-alpha"))
        return train_usage_error("--spm-alpha is not there yet for --task lm: a language model "
                                 "reads windows cut from one tokenization of its text");
    if ((a->train != NULL) == (a->train_tokens != NULL))
        return train_usage_error("--task lm: give the training text as --train FILE.txt or "
                                 "--train-tokens FILE.bin (one of them)");
    if (a->valid != NULL && a->valid_tokens != NULL)
        return train_usage_error("give --valid or --valid-tokens, not both");
    if (a->train_tokens != NULL && a->valid != NULL && a->tokenizer == NULL && a->tgt_spm == NULL)
        return train_usage_error("--train-tokens has no tokenizer to read --valid text with: "
                                 "give --valid-tokens, or the --tokenizer that made the tokens");
    if (a->train != NULL && a->valid_tokens != NULL && a->init == NULL && a->tokenizer == NULL &&
        a->tgt_spm == NULL)
        return train_usage_error("--valid-tokens holds ids of another tokenizer than the one "
                                 "--train's text will learn: give --valid text, or the "
                                 "--tokenizer that made the tokens");
    if (a->tokenizer != NULL && (train_args_given(a, "--tgt-tokens") || a->tgt_spm != NULL))
        return train_usage_error("%s makes a tokenizer and --tokenizer reads one: give one of "
                                 "them",
                                 a->tgt_spm != NULL ? "--tgt-spm" : "--tgt-tokens");
    if (a->init != NULL && a->resume != NULL)
        return train_usage_error("--init starts a run and --resume continues one: give one");
    static const char *const shape[] = {"--layers",    "--d-model",    "--heads",     "--ffn",
                                        "--config",    "--tgt-tokens", "--norm",      "--ffn-kind",
                                        "--positions", "--no-bias",    "--tokenizer", "--tgt-spm"};
    for (size_t i = 0; a->init != NULL && i < sizeof shape / sizeof *shape; i++)
        if (train_args_given(a, shape[i]))
            return train_usage_error("%s cannot be used with --init: the model and its tokenizer "
                                     "come from %s (--dropout and --label-smoothing may change)",
                                     shape[i], a->init);
    if (a->no_valid && (a->valid != NULL || a->valid_tokens != NULL))
        return train_usage_error("give --valid (or --valid-tokens) or --no-valid, not both");
    return 0;
}

/* --task classify reads one file of labelled lines into an encoder with a pooled head;
 * --task mlm one file of texts into an encoder with an output over the vocabulary. */
static int check_encoder_args(const train_args *a)
{
    const int classify = a->task == TRAIN_TASK_CLASSIFY;
    const char *task = classify ? "classify" : "mlm";
    const char *data = classify ? "label<TAB>text lines" : "texts, one a line";
    static const char *const not_here[] = {"--train-src",       "--train-tgt",    "--valid-src",
                                           "--valid-tgt",       "--tgt-tokens",   "--teacher",
                                           "--train-tokens",    "--valid-tokens", "--context",
                                           "--batch-sequences", "--tokenizer",    "--tgt-spm"};
    for (size_t i = 0; i < sizeof not_here / sizeof *not_here; i++)
        if (train_args_given(a, not_here[i]))
            return train_usage_error("%s is not for --task %s (its data is --train FILE of %s, "
                                     "read with --src-tokens or --src-spm)",
                                     not_here[i], task, data);
    if (a->arch == ATTN_ARCH_RNN && !classify)
        return train_usage_error("--task mlm trains a Transformer encoder; an RNN masked language "
                                 "model is not there yet (leave out --arch rnn)");
    if (a->arch == ATTN_ARCH_RNN && a->init != NULL)
        return train_usage_error("--init %s starts a Transformer encoder (a masked language "
                                 "model's); --arch rnn trains its recurrent encoder from scratch: "
                                 "leave out --init, or --arch rnn to fine-tune the Transformer",
                                 a->init);
    if (a->train == NULL)
        return train_usage_error("--task %s: give the %s as --train FILE", task, data);
    if (!classify && a->init != NULL)
        return train_usage_error("--init is for --task classify (start a classifier from a "
                                 "masked language model) and --task lm; --task mlm starts anew");
    if (a->freeze_encoder && (!classify || a->init == NULL))
        return train_usage_error("--freeze-encoder keeps a pretrained encoder fixed: give it with "
                                 "--task classify --init ENCODER.safetensors");
    if (a->init != NULL && a->resume != NULL)
        return train_usage_error("--init starts a run and --resume continues one: give one");
    /* The encoder comes whole from --init: its tokenizer and its shape. A flag that agrees
     * with it is allowed (the model is checked against them in train_classify.c). */
    if (a->init != NULL && (train_args_given(a, "--src-tokens") || a->src_spm != NULL))
        return train_usage_error("%s cannot be used with --init: the classifier reads text with "
                                 "%s's tokenizer, the one its encoder learned",
                                 a->src_spm != NULL ? "--src-spm" : "--src-tokens", a->init);
    if (a->init != NULL && train_args_given(a, "--config"))
        return train_usage_error("--config cannot be used with --init: the encoder's shape comes "
                                 "from %s (give --pooling, --dropout and --label-smoothing for "
                                 "the new run)",
                                 a->init);
    return 0;
}

/* Whether a tokenizer flag asks for SentencePiece. */
static int asks_spm(const char *tokens, const char *spm_file)
{
    return spm_file != NULL || strncmp(tokens, "spm", 3) == 0 || strncmp(tokens, "bpe:", 4) == 0;
}

/* --spm-alpha and --spm-nbest. Sides whose tokenizer comes from a checkpoint, teachers or
 * --init are checked once they are read (train.c). */
static int check_subword_sampling(const train_args *a)
{
    const int alpha = train_args_given(a, "--spm-alpha");
    if (!alpha && train_args_given(a, "--spm-nbest"))
        return train_usage_error("--spm-nbest chooses among segmentations that --spm-alpha "
                                 "samples: give --spm-alpha too");
    if (!alpha)
        return 0;
    if (!attn_tokenizer_spm_available())
        return train_usage_error("--spm-alpha: built without SentencePiece; install "
                                 "libsentencepiece-dev and rebuild");
    if (!(a->spm_alpha > 0.0 && a->spm_alpha <= 1.0))
        return train_usage_error("--spm-alpha %g must be in (0, 1]: a unigram model's inverse "
                                 "temperature (0.1-0.5 usual) or a BPE model's merge-dropout "
                                 "probability (0.1 usual); leave it out to train on the best "
                                 "segmentation",
                                 a->spm_alpha);
    if (!(a->spm_nbest == -1 || (a->spm_nbest >= 2 && a->spm_nbest <= ATTN_SPM_MAX_NBEST)))
        return train_usage_error("--spm-nbest %lld must be -1 (every segmentation) or in [2, %d] "
                                 "(1 would always give the best one)",
                                 (long long)a->spm_nbest, ATTN_SPM_MAX_NBEST);
    if (a->resume != NULL || a->teacher != NULL || a->init != NULL)
        return 0;
    const int pairs = a->task == TRAIN_TASK_TRANSLATE;
    if (!asks_spm(a->src_tokens, a->src_spm) && !(pairs && asks_spm(a->tgt_tokens, a->tgt_spm))) {
        if (pairs)
            return train_usage_error("--spm-alpha samples SentencePiece segmentations, but the "
                                     "source tokens are %s and the target tokens %s: give "
                                     "bpe:N, spm:N, spm-bpe:N or --src-spm/--tgt-spm FILE.model "
                                     "on a side",
                                     a->src_tokens, a->tgt_tokens);
        return train_usage_error("--spm-alpha samples SentencePiece segmentations, but the "
                                 "tokens are %s: give --src-tokens bpe:N, spm:N or spm-bpe:N, "
                                 "or --src-spm FILE.model",
                                 a->src_tokens);
    }
    return 0;
}

static int check_args(const train_args *a)
{
    if (a->task == TRAIN_TASK_LM) {
        const int code = check_lm_args(a);
        if (code != 0)
            return code;
    } else if (a->task == TRAIN_TASK_CLASSIFY || a->task == TRAIN_TASK_MLM) {
        const int code = check_encoder_args(a);
        if (code != 0)
            return code;
    } else {
        static const char *const lm_only[] = {"--train-tokens", "--valid-tokens", "--context",
                                              "--batch-sequences", "--init", "--tokenizer"};
        for (size_t i = 0; i < sizeof lm_only / sizeof *lm_only; i++)
            if (train_args_given(a, lm_only[i]))
                return train_usage_error("%s is for --task lm", lm_only[i]);
        static const char *const blocks[] = {"--norm", "--ffn-kind", "--positions", "--no-bias"};
        for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
            if (train_args_given(a, blocks[i]))
                return train_usage_error("%s is for --task lm, classify and mlm", blocks[i]);
    }
    if (a->task != TRAIN_TASK_CLASSIFY && train_args_given(a, "--pooling"))
        return train_usage_error("--pooling is for --task classify");
    if (a->task != TRAIN_TASK_CLASSIFY && a->freeze_encoder)
        return train_usage_error("--freeze-encoder is for --task classify --init");
    int tsv = a->train != NULL || a->task == TRAIN_TASK_LM,
        files = a->train_src != NULL || a->train_tgt != NULL;
    if (!tsv && !files)
        return train_usage_error("no training data: give --train FILE.tsv or --train-src and "
                                 "--train-tgt");
    if (tsv && files)
        return train_usage_error("give --train or --train-src/--train-tgt, not both");
    if (files && (a->train_src == NULL || a->train_tgt == NULL))
        return train_usage_error("--train-src and --train-tgt go together");
    if (a->valid != NULL && (a->valid_src != NULL || a->valid_tgt != NULL))
        return train_usage_error("give --valid or --valid-src/--valid-tgt, not both");
    if ((a->valid_src == NULL) != (a->valid_tgt == NULL))
        return train_usage_error("--valid-src and --valid-tgt go together");
    if (a->out == NULL)
        return train_usage_error("--out MODEL.safetensors is required");
    if (a->bidirectional && a->no_bidirectional)
        return train_usage_error("give --bidirectional or --no-bidirectional, not both");
    if (a->no_valid && (a->valid != NULL || a->valid_src != NULL))
        return train_usage_error("give --valid (or --valid-src/--valid-tgt) or --no-valid, not "
                                 "both");
    if (train_args_given(a, "--beta1") && !(a->beta1 >= 0.0 && a->beta1 < 1.0))
        return train_usage_error("--beta1 %g must be in [0, 1)", a->beta1);
    if (train_args_given(a, "--beta2") && !(a->beta2 >= 0.0 && a->beta2 < 1.0))
        return train_usage_error("--beta2 %g must be in [0, 1)", a->beta2);
    if (train_args_given(a, "--eps") && !(a->eps > 0.0))
        return train_usage_error("--eps %g must be positive", a->eps);
    if (!(a->ema >= 0.0 && a->ema < 1.0))
        return train_usage_error("--ema %g: the smoothing rate must be in [0, 1) (1e-4 to 1e-3 "
                                 "are usual; 0 turns it off)",
                                 a->ema);
    const int code = check_subword_sampling(a);
    if (code != 0)
        return code;
    /* Checked for every run: with --teacher or --resume the tokenizers come from elsewhere,
     * and a bad value must not pass unread. */
    attn_tokenizer_config tokens;
    if (attn_tokenizer_config_parse(a->src_tokens, &tokens) != ATTN_OK)
        return train_usage_error("--src-tokens %s: expected char, word, bpe:N (N > 0 merges), "
                                 "spm:N or spm-bpe:N (N >= 8 pieces)",
                                 a->src_tokens);
    if (attn_tokenizer_config_parse(a->tgt_tokens, &tokens) != ATTN_OK)
        return train_usage_error("--tgt-tokens %s: expected char, word, bpe:N (N > 0 merges), "
                                 "spm:N or spm-bpe:N (N >= 8 pieces)",
                                 a->tgt_tokens);
    if (a->src_spm != NULL && train_args_given(a, "--src-tokens"))
        return train_usage_error("--src-tokens learns a tokenizer and --src-spm reads one: give "
                                 "one of them");
    if (a->tgt_spm != NULL && train_args_given(a, "--tgt-tokens"))
        return train_usage_error("--tgt-tokens learns a tokenizer and --tgt-spm reads one: give "
                                 "one of them");
    if (a->teacher != NULL && (a->src_spm != NULL || a->tgt_spm != NULL))
        return train_usage_error("the student reads and writes with its --teacher models' "
                                 "tokenizers: leave out %s",
                                 a->src_spm != NULL ? "--src-spm" : "--tgt-spm");
    if (a->teacher == NULL && train_args_given(a, "--teacher-weight"))
        return train_usage_error("--teacher-weight weighs the --teacher models: give them too");
    if (!(a->teacher_weight > 0.0 && a->teacher_weight <= 1.0))
        return train_usage_error("--teacher-weight %g: the teachers' share of the loss must be in "
                                 "(0, 1] (0.5 is usual)",
                                 a->teacher_weight);
    /* The checkpoint holds a resumed run's schedule; a new one must know where it ends. */
    if (a->resume == NULL && a->schedule == ATTN_LR_COSINE && a->max_steps <= 0 && a->epochs <= 0 &&
        !(a->time_limit > 0.0))
        return train_usage_error(
            "the cosine schedule (the default) needs --max-steps, --epochs or --time-limit to know "
            "where it ends; a run with no end needs --schedule inverse-sqrt (or constant)");
    if (a->resume != NULL)
        for (size_t k = 0; k < N_TRAIN_OPTIONS; k++)
            if (a->given[k] && train_options[k].group == GROUP_MODEL)
                return train_usage_error("%s cannot be used with --resume: the checkpoint fixes "
                                         "the model and its tokenizers",
                                         train_options[k].name);
    return 0;
}

int train_args_parse(int argc, char **argv, train_args *a)
{
    set_defaults(a);
    const int code = cli_parse(&train_command, argc, argv, a, a->given);
    if (code != CLI_GO_ON)
        return code;
    /* A step or time budget given alone is the budget: the default epochs would cut it short. */
    if (!train_args_given(a, "--epochs"))
        a->epochs = a->max_steps > 0 || a->time_limit > 0.0 ? 0 : 10;
    return check_args(a) != 0 ? CLI_EXIT_USAGE : CLI_GO_ON;
}

/* ---- the trainer's options ------------------------------------------------------------------ */

int64_t train_default_batch_tokens(int64_t training_tokens)
{
    int64_t tokens = training_tokens / 100 / 256 * 256;
    return tokens < 512 ? 512 : tokens > 4096 ? 4096 : tokens;
}

attn_status train_count_batches(const train_args *a, const attn_corpus *train, int64_t batch_tokens,
                                const attn_tokenizer *source, const attn_tokenizer *target,
                                int64_t *batches)
{
    attn_batcher *counting = NULL;
    attn_batcher_config in_order = {batch_tokens, 0, 0};
    attn_status status = attn_batcher_create(train, &in_order, &counting);
    const attn_tokenizer *sources = attn_tokenizer_can_sample(source) ? source : NULL;
    const attn_tokenizer *targets = attn_tokenizer_can_sample(target) ? target : NULL;
    /* Samples are longer than the best segmentation (by 2% to 74% on the Bible, as alpha
     * goes from 0.5 to 0.1): a schedule planned over epochs counts their batches. */
    if (status == ATTN_OK && a->spm_alpha > 0.0 && (sources != NULL || targets != NULL))
        status =
            attn_batcher_sample_subwords(counting, sources, targets, a->spm_alpha, a->spm_nbest);
    *batches = attn_batcher_num_batches(counting);
    attn_batcher_destroy(counting);
    return status;
}

attn_status train_options_for_corpus(const train_args *a, const attn_corpus *train, int64_t width,
                                     const char *tokenizer_json, attn_trainer_options *o)
{
    int64_t tokens = 0;
    for (int64_t i = 0; i < attn_corpus_size(train); i++) {
        const int32_t *ids;
        int64_t source, target;
        attn_corpus_source_ids(train, i, &ids, &source);
        attn_corpus_target_ids(train, i, &ids, &target);
        tokens += source + target;
    }
    const int64_t batch_tokens = train_args_given(a, "--batch-tokens")
                                     ? a->batch_tokens
                                     : train_default_batch_tokens(tokens);
    attn_tokenizer *tokenizer = NULL;
    int64_t batches = 0;
    attn_status status = ATTN_OK;
    if (a->spm_alpha > 0.0 && tokenizer_json != NULL)
        status = attn_tokenizer_from_json(tokenizer_json, &tokenizer);
    if (status == ATTN_OK)
        status = train_count_batches(a, train, batch_tokens, tokenizer, NULL, &batches);
    attn_tokenizer_destroy(tokenizer);
    if (status != ATTN_OK)
        return status;
    return train_options_for_new_run(a, width, batch_tokens, batches, o);
}

void train_adam_flags(const train_args *a, attn_trainer_options *o)
{
    if (train_args_given(a, "--beta1"))
        o->adam.beta1 = a->beta1;
    if (train_args_given(a, "--beta2"))
        o->adam.beta2 = a->beta2;
    if (train_args_given(a, "--eps"))
        o->adam.eps = a->eps;
}

attn_status train_options_for_new_run(const train_args *a, int64_t width, int64_t batch_tokens,
                                      int64_t batches_per_epoch, attn_trainer_options *o)
{
    *o = attn_trainer_default_options();
    o->batch_tokens = batch_tokens;
    o->shuffle = !a->shuffle_none;
    o->accumulate = a->accumulate * a->ranks;
    o->seed = (uint64_t)a->seed;
    o->clip_norm = a->clip_norm;
    o->precision = (attn_precision)a->precision;
    o->ema = a->ema;
    o->teacher_weight = a->teacher != NULL ? a->teacher_weight : 0.0;
    o->spm_alpha = a->spm_alpha;
    o->spm_nbest = a->spm_nbest;
    /* The trainer's betas and epsilon (the paper's), the variant's weight decay. */
    const double beta2 = o->adam.beta2, eps = o->adam.eps;
    o->adam = attn_adam_default_options((attn_adam_variant)a->optimizer);
    o->adam.beta2 = beta2;
    o->adam.eps = eps;
    train_adam_flags(a, o);
    if (train_args_given(a, "--weight-decay"))
        o->adam.weight_decay = a->weight_decay;
    attn_lr_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.kind = (attn_lr_kind)a->schedule;
    plan.lr = a->lr;
    /* --lr is Noam's factor, 1 unless given. */
    plan.noam_factor = train_args_given(a, "--lr") ? a->lr : 1.0;
    plan.d_model = width;
    plan.warmup_steps = a->warmup;
    /* An explicit --warmup is the warm-up; the default is sized to the run. */
    if (plan.kind == ATTN_LR_COSINE && !train_args_given(a, "--warmup"))
        plan.warmup_share = TRAIN_WARMUP_SHARE;
    plan.min_lr = a->min_lr;
    plan.max_steps = a->max_steps;
    plan.epochs = a->epochs;
    plan.batches_per_epoch = batches_per_epoch;
    /* The trainer refuses a bad --accumulate, naming it; the plan only needs a count. */
    plan.accumulate = a->accumulate > 0 ? a->accumulate * a->ranks : 1;
    plan.time_limit = a->time_limit;
    const attn_status status = attn_lr_schedule_plan(&plan, &o->schedule);
    if (status != ATTN_OK)
        return status;
    const attn_lr_schedule *s = &o->schedule;
    if (s->kind == ATTN_LR_COSINE && s->total_steps > 0 && plan.warmup_share == 0.0 &&
        s->warmup_steps != plan.warmup_steps)
        fprintf(stderr,
                "attn train: the warm-up is not shorter than the %lld cosine steps; "
                "using %lld warm-up steps\n",
                (long long)s->total_steps, (long long)s->warmup_steps);
    return ATTN_OK;
}

void train_options_overlay(const train_args *a, attn_trainer_options *o)
{
    if (train_args_given(a, "--batch-tokens"))
        o->batch_tokens = a->batch_tokens;
    if (train_args_given(a, "--accumulate"))
        o->accumulate = a->accumulate * a->ranks;
    if (train_args_given(a, "--seed"))
        o->seed = (uint64_t)a->seed;
    if (train_args_given(a, "--clip-norm"))
        o->clip_norm = a->clip_norm;
    if (train_args_given(a, "--precision"))
        o->precision = (attn_precision)a->precision;
    if (train_args_given(a, "--ema"))
        o->ema = a->ema;
    if (train_args_given(a, "--teacher-weight"))
        o->teacher_weight = a->teacher_weight;
    if (train_args_given(a, "--spm-alpha"))
        o->spm_alpha = a->spm_alpha;
    if (train_args_given(a, "--spm-nbest"))
        o->spm_nbest = a->spm_nbest;
    if (train_args_given(a, "--weight-decay"))
        o->adam.weight_decay = a->weight_decay;
    if (train_args_given(a, "--optimizer"))
        o->adam.variant = (attn_adam_variant)a->optimizer;
    train_adam_flags(a, o);
    if (train_args_given(a, "--shuffle"))
        o->shuffle = !a->shuffle_none;
    if (train_args_given(a, "--batch-sequences"))
        o->batch_sequences = a->batch_sequences;
    if (train_args_given(a, "--context"))
        o->context = a->context;
    if (train_args_given(a, "--lr")) {
        if (o->schedule.kind == ATTN_LR_NOAM)
            o->schedule.factor = a->lr;
        else
            o->schedule.lr = a->lr;
    }
    if (train_args_given(a, "--warmup"))
        o->schedule.warmup_steps = a->warmup;
    if (train_args_given(a, "--min-lr"))
        o->schedule.min_lr = a->min_lr;
    if (train_args_given(a, "--schedule"))
        o->schedule.kind = (attn_lr_kind)a->schedule;
}

void train_options_for_this_run(const train_args *a, const char *checkpoint,
                                attn_trainer_options *o)
{
    o->max_epochs = a->epochs;
    o->max_steps = a->max_steps;
    o->time_limit = a->time_limit;
    o->eval_every = a->eval_every;
    o->patience = a->patience;
    o->checkpoint_every = a->checkpoint_every;
    o->max_skipped_updates = a->max_skipped;
    o->check_every = a->check_every;
    o->best_path = a->out;
    o->checkpoint_path = checkpoint;
}
