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
 * ATTN_ERR_INVALID_ARGUMENT when there are more tokens than the model's max_len (the
 * message gives both). */
ATTN_API attn_status attn_bundle_encode(const attn_bundle *bundle, const char *text, int32_t **ids,
                                        int64_t *count, int64_t *unknown);

/* Searches n >= 1 sentences, ids[i] of counts[i] >= 1 source ids, with attn_decode and the
 * given options (NULL: attn_decode_default_options()). The model must be an encoder-decoder
 * (attn_bundle_check_encoder_decoder). Free *out with attn_decode_result_destroy. */
ATTN_API attn_status attn_bundle_decode(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                        const int64_t *counts, const attn_decode_options *options,
                                        attn_decode_result **out);

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
