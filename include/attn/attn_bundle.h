/* attn model bundle: what a model file written by attn train holds, loaded once, with text in
 * and text out (the layer after decode/).
 *
 * A bundle is a model (config and weights) with its source and target tokenizers, the three
 * read from one safetensors file: the config JSON under ATTN_MODEL_CONFIG_KEY, the tokenizers'
 * JSON under ATTN_SRC_TOKENIZER_KEY and ATTN_TGT_TOKENIZER_KEY, the weights by name.
 * attn_bundle_metadata gives the entries a writer stores beside the weights, so writing
 * and reading are described here once.
 *
 * Translating: attn_bundle_encode turns a text into source ids, attn_bundle_decode searches a
 * batch of them (attn_decode) and attn_bundle_text turns a hypothesis back into text.
 * Generating (a language model): attn_bundle_encode_prompt, attn_bundle_generate (sampling,
 * attn_generate) and attn_bundle_generated_text; attn_bundle_score_text gives perplexity.
 * Classifying (arch transformer_classifier or rnn_classifier, whose file holds the source
 * tokenizer and the class names under ATTN_LABELS_KEY instead of a target tokenizer):
 * attn_bundle_encode, then attn_bundle_classify, and attn_bundle_classes names the classes.
 * A bundle owns one graph for its searches: use a bundle from one thread at a time.
 */
#ifndef ATTN_BUNDLE_H
#define ATTN_BUNDLE_H

#include "attn/attn_autodiff.h"
#include "attn/attn_data.h"
#include "attn/attn_decode.h"
#include "attn/attn_models.h"
#include "attn/attn_tensor_file.h"
#include "attn/attn_trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_bundle attn_bundle;

/* Which of a bundle's two tokenizers: the source side's or the target side's. */
typedef enum attn_bundle_side { ATTN_BUNDLE_SOURCE = 0, ATTN_BUNDLE_TARGET = 1 } attn_bundle_side;

/* Reads the file at path once. Fails with the file's error (ATTN_ERR_IO, ATTN_ERR_FORMAT for
 * a file that is not safetensors or is truncated), ATTN_ERR_FORMAT for a file without a
 * model config ("not a model saved by attn") or without tokenizers ("use a model written by
 * 'attn train'"), or a config or tokenizer that does not parse; every message names path. */
ATTN_API attn_status attn_bundle_load(const char *path, attn_bundle **out);
/* The same from a file already open (e.g. a checkpoint, whose training state the caller
 * reads from the same file); the bundle keeps nothing of file. name is how messages call the
 * file (its path; NULL: "the file"). */
ATTN_API attn_status attn_bundle_from_file(const attn_tensor_file *file, const char *name,
                                           attn_bundle **out);
/* Frees everything; NULL is ignored. */
ATTN_API void attn_bundle_destroy(attn_bundle *bundle);
/* Hands the model and both tokenizers to the caller, who destroys them (attn_model_destroy,
 * attn_tokenizer_destroy), and frees the rest of the bundle: for a trainer, which owns the
 * model it changes. */
ATTN_API attn_status attn_bundle_release(attn_bundle *bundle, attn_model **model,
                                         attn_tokenizer **source, attn_tokenizer **target);

/* The parts, owned by the bundle. The graph is the one attn_bundle_decode runs on; a caller
 * may run the model on it too (attention maps) between searches. */
ATTN_API attn_model *attn_bundle_model(const attn_bundle *bundle);
ATTN_API const attn_model_config *attn_bundle_config(const attn_bundle *bundle);
ATTN_API const attn_tokenizer *attn_bundle_tokenizer(const attn_bundle *bundle,
                                                     attn_bundle_side side);
ATTN_API attn_graph *attn_bundle_graph(const attn_bundle *bundle);
/* The name messages give the file (its path, or attn_bundle_from_file's name). */
ATTN_API const char *attn_bundle_name(const attn_bundle *bundle);

/* ATTN_OK when the model translates (an encoder-decoder: arch transformer or rnn), else
 * ATTN_ERR_INVALID_ARGUMENT with a message naming the file and its arch. */
ATTN_API attn_status attn_bundle_check_encoder_decoder(const attn_bundle *bundle);

/* The source ids of text (malloc'ed in *ids, never NULL on success; *count of them, 0 for a
 * text of no tokens), as attn_tokenizer_encode gives them (no <s> or </s>). unknown, when
 * not NULL, receives how many of them are <unk> (tokens outside the source vocabulary).
 * ATTN_ERR_INVALID_ARGUMENT when there are more tokens than the model reads
 * (attn_bundle_source_limit; the message gives both). */
ATTN_API attn_status attn_bundle_encode(const attn_bundle *bundle, const char *text, int32_t **ids,
                                        int64_t *count, int64_t *unknown);

/* attn_bundle_encode that keeps a text's first attn_bundle_source_limit ids instead of refusing
 * a longer text; cut (NULL: not wanted) receives how many ids were left off. For classifiers,
 * whose documents may run longer than any training line. */
ATTN_API attn_status attn_bundle_encode_truncated(const attn_bundle *bundle, const char *text,
                                                  int32_t **ids, int64_t *count, int64_t *unknown,
                                                  int64_t *cut);

/* How many source ids the model reads at most: max_len, less one under cls pooling (the
 * classification token's place). 0 for NULL. */
ATTN_API int64_t attn_bundle_source_limit(const attn_bundle *bundle);

/* Searches n >= 1 sentences, ids[i] of counts[i] >= 1 source ids, with attn_decode and the
 * given options (NULL: attn_decode_default_options()). The model must be an encoder-decoder
 * (attn_bundle_check_encoder_decoder). Free *out with attn_decode_result_destroy. */
ATTN_API attn_status attn_bundle_decode(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                        const int64_t *counts, const attn_decode_options *options,
                                        attn_decode_result **out);

/* ---- language models -------------------------------------------------------------------- *
 *
 * A language model (arch "transformer_lm") reads and writes the target side only: its file
 * needs no source tokenizer. Its text is a token stream in which each line is the target
 * tokenizer's ids of the line followed by ATTN_EOS_ID (</s>, "end of line"), as attn train
 * --task lm reads it. So a prompt starts with </s> (it begins a new line), and </s> in the
 * output is a line break. */

/* ATTN_OK when the bundle is a language model, else ATTN_ERR_INVALID_ARGUMENT naming the file
 * and its arch. */
ATTN_API attn_status attn_bundle_check_language_model(const attn_bundle *bundle);

/* A prompt's ids (malloc'ed in *ids, *count of them): ATTN_EOS_ID, then the target tokenizer's
 * ids of text. A prompt needs room for one new token in the model's context: at most
 * max_len - 1 ids. A longer one is refused (ATTN_ERR_INVALID_ARGUMENT naming both lengths),
 * or with truncate nonzero cut to its last max_len - 1 ids. unknown (NULL: not wanted)
 * receives how many ids are <unk>, cut (NULL: not wanted) how many were cut off. */
ATTN_API attn_status attn_bundle_encode_prompt(const attn_bundle *bundle, const char *text,
                                               int truncate, int32_t **ids, int64_t *count,
                                               int64_t *unknown, int64_t *cut);

/* attn_generate with the bundle's model and graph: continues n prompts, ids[i] of counts[i]
 * ids (attn_bundle_encode_prompt). The model must be a language model. */
ATTN_API attn_status attn_bundle_generate(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                          const int64_t *counts, const uint64_t *stream_ids,
                                          const attn_sample_options *options,
                                          attn_generate_callback callback, void *user,
                                          attn_generate_result **out);

/* The text of count target ids (malloc'ed): each run of ids between </s> through the target
 * tokenizer, each </s> as "\n". */
ATTN_API attn_status attn_bundle_generated_text(const attn_bundle *bundle, const int32_t *ids,
                                                int64_t count, char **text);

/* How well a language model predicts a text. */
typedef struct attn_text_score {
    int64_t tokens;            /* predicted tokens: the token stream's length - 1 */
    int64_t characters;        /* UTF-8 characters, each line's newline counted as one */
    int64_t unknown;           /* <unk> ids in the stream */
    double nats;               /* the summed cross-entropy of the predicted tokens */
    double cross_entropy;      /* nats / tokens */
    double perplexity;         /* exp(cross_entropy) */
    double bits_per_token;     /* cross_entropy / ln 2 */
    double bits_per_character; /* nats / ln 2 / characters */
} attn_text_score;

/* Scores n >= 1 lines of text with the language model: their token stream (above) is cut into
 * consecutive windows of max_len + 1 ids overlapping by one, so every id after the first is
 * predicted exactly once, from the earlier ids of its window; batch_rows >= 1 windows per
 * forward pass, in the graph's precision with no dropout; the log-probabilities are summed in
 * double. A bf16 or int8 model (attn quantize) is scored by its step decoder instead, whose
 * products round the activations as well as the weights: the perplexity attn_generate's path
 * gives. Fails (ATTN_ERR_INVALID_ARGUMENT) when the stream has fewer than 2 ids. */
ATTN_API attn_status attn_bundle_score_text(attn_bundle *bundle, const char *const *lines,
                                            int64_t n, int64_t batch_rows, attn_text_score *out);

/* ---- masked language models -------------------------------------------------------------- */

/* How well a masked language model (arch transformer_mlm) restores a text's masked tokens. */
typedef struct attn_masked_score {
    int64_t lines;        /* texts read (empty lines are skipped: they have no tokens) */
    int64_t tokens;       /* tokens of the texts */
    int64_t masked;       /* chosen, scored tokens */
    int64_t correct;      /* of them, restored as the logits' arg-max */
    int64_t unknown;      /* <unk> ids in the texts (never chosen) */
    double nats;          /* the summed cross-entropy of the chosen tokens */
    double cross_entropy; /* nats / masked */
    double perplexity;    /* exp(cross_entropy) */
} attn_masked_score;

/* Scores n >= 1 lines of text, one text a line as the model was trained: line i is masked by
 * BERT's rule as training masks it (attn_mlm_mask with seed, epoch 0 and sequence i, so a seed
 * gives the same masks every time), batch_rows lines per forward pass (no dropout), and the
 * cross-entropy of the chosen tokens is summed in double. A line longer than max_len is
 * ATTN_ERR_INVALID_ARGUMENT naming it; so is a text of which no token was chosen at all. An
 * fp32 model only. */
ATTN_API attn_status attn_bundle_score_masked(attn_bundle *bundle, const char *const *lines,
                                              int64_t n, uint64_t seed, int64_t batch_rows,
                                              attn_masked_score *out);

/* ---- classifiers ----------------------------------------------------------------------- */

/* ATTN_OK when the bundle is a text classifier, else ATTN_ERR_INVALID_ARGUMENT naming the
 * file. */
ATTN_API attn_status attn_bundle_check_classifier(const attn_bundle *bundle);
/* A classifier's classes (NULL for other models), class i the model's output i. */
ATTN_API const attn_labels *attn_bundle_classes(const attn_bundle *bundle);
/* The class probabilities of n >= 1 texts, ids[i] of counts[i] >= 1 source ids
 * (attn_bundle_encode), as one padded batch: probabilities [n, classes] receives each row's
 * softmax of the logits (no dropout, the graph's precision). */
ATTN_API attn_status attn_bundle_classify(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                          const int64_t *counts, float *probabilities);
/* Which tokens the classifier's pooling reads in one text, ids of count >= 1 source ids:
 * weights [count], as attn_model_pooling_weights gives them (the labels of the ids:
 * attn_bundle_labels, side ATTN_BUNDLE_SOURCE). */
ATTN_API attn_status attn_bundle_pooling_weights(attn_bundle *bundle, const int32_t *ids,
                                                 int64_t count, float *weights);

/* ---- ensembles and averaging ------------------------------------------------------------ */

/* ATTN_OK when count >= 1 bundles can decode as one ensemble: each is an encoder-decoder and
 * has the first one's source and target tokenizers (kind, vocabulary, BPE merges); their
 * architectures may differ. Else ATTN_ERR_INVALID_ARGUMENT with a message naming both files
 * and what differs (e.g. the first id whose token differs). */
ATTN_API attn_status attn_bundle_check_ensemble(attn_bundle *const *bundles, int64_t count);
/* ATTN_OK when the bundle tokenizes as source and target do (kind, vocabulary, BPE merges):
 * a teacher for a student learning from the data those tokenizers were learned on. Else
 * ATTN_ERR_INVALID_ARGUMENT naming the file, name (what the tokenizers are, e.g. "the training
 * data's tokenizers"; NULL: "the tokenizers") and what differs. */
ATTN_API attn_status attn_bundle_check_tokenizers(const attn_bundle *bundle,
                                                  const attn_tokenizer *source,
                                                  const attn_tokenizer *target, const char *name);
/* attn_bundle_decode with the ensemble of count >= 1 bundles (attn_decode_ensemble: the mean
 * of the models' log-probabilities, renormalised; alignments from the first model). ids are
 * source ids from any of them (attn_bundle_encode of the first: the tokenizers agree, which
 * this checks with attn_bundle_check_ensemble). Texts of the hypotheses: attn_bundle_text of
 * any of them. count 1 is attn_bundle_decode. */
ATTN_API attn_status attn_bundle_decode_ensemble(attn_bundle *const *bundles, int64_t count,
                                                 int64_t n, const int32_t *const *ids,
                                                 const int64_t *counts,
                                                 const attn_decode_options *options,
                                                 attn_decode_result **out);

/* Writes to out_path (atomically, as every model file) the element-wise mean of the weights
 * of count >= 1 model files or checkpoints (fairseq's average_checkpoints), accumulated in
 * double, with the first file's config and tokenizers. The files must have the same config
 * and tokenizers (attn_bundle_check_ensemble's rules), hence the same tensor names and
 * shapes; else ATTN_ERR_INVALID_ARGUMENT naming both files and what differs. A checkpoint's
 * optimizer moments and training state are not carried over: the output is a model file.
 * out_path may be one of the inputs (all are read before it is written). */
ATTN_API attn_status attn_bundle_average(const char *const *paths, int64_t count,
                                         const char *out_path);

/* The text of a hypothesis (malloc'ed): its tokens through the target tokenizer. */
ATTN_API attn_status attn_bundle_text(const attn_bundle *bundle, const attn_hypothesis *hypothesis,
                                      char **text);

/* The vocabulary strings of ids on one side, for the labels of a picture: labels[i] points
 * into the tokenizer ("<s>", "<unk>", ... for specials; "?" for an id outside the
 * vocabulary). labels has room for count pointers. */
ATTN_API attn_status attn_bundle_labels(const attn_bundle *bundle, attn_bundle_side side,
                                        const int32_t *ids, int64_t count, const char **labels);

/* ---- writing what a bundle reads ------------------------------------------------------- */

#define ATTN_BUNDLE_METADATA_COUNT 2

/* The metadata entries that, beside a model's weights and config (attn_model_save, the
 * trainer's files), make a file a bundle: the tokenizers' JSON under ATTN_SRC_TOKENIZER_KEY
 * and ATTN_TGT_TOKENIZER_KEY. Values are malloc'ed: free them with attn_bundle_metadata_free
 * (also after a failure, which leaves every value NULL). */
ATTN_API attn_status attn_bundle_metadata(const attn_tokenizer *source,
                                          const attn_tokenizer *target,
                                          attn_metadata_entry entries[ATTN_BUNDLE_METADATA_COUNT]);
ATTN_API void attn_bundle_metadata_free(attn_metadata_entry entries[ATTN_BUNDLE_METADATA_COUNT]);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_BUNDLE_H */
