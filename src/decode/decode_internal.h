/* The search behind attn_decode. It drives a step decoder through attn_model_step and
 * attn_model_step_select, whatever is behind the decoder's table (models/step_decoder.h): the
 * models' decoders, or the scripted models whose best hypotheses the tests know. */
#ifndef ATTN_DECODE_INTERNAL_H
#define ATTN_DECODE_INTERNAL_H

#include "attn/attn_decode.h"
#include "core/internal.h"
#include "models/step_decoder.h"

/* Searches for every sentence of the batch (size sentences, decoder row s starting as sentence
 * s, each fed <s> first) and fills result->sentences (allocated here; result->size, cross_*
 * set by the caller). max_lengths [size] >= 1: each sentence's maximum output length;
 * src_lengths [size]: the columns of its cross maps kept in the result. The decoder must allow
 * size * beam_size rows and max(max_lengths) steps. On failure result->sentences is freed and
 * NULL. */
ATTN_INTERNAL attn_status attn_search_run(attn_step_decoder *decoder, int64_t size,
                                          const int32_t *src_lengths, const int64_t *max_lengths,
                                          const attn_decode_options *options,
                                          attn_decode_result *result);

/* Frees result->sentences and everything in them, and sets it to NULL. */
ATTN_INTERNAL void attn_decode_free_sentences(attn_decode_result *result);

/* The steps a step decoder needs to continue n prompts of prompt_lengths ids by at most
 * options->max_new_tokens tokens each in a context of `context` positions (attn_generate's
 * rules; the lengths already checked). */
ATTN_INTERNAL int64_t attn_sample_steps_needed(int64_t n, const int64_t *prompt_lengths,
                                               const attn_sample_options *options, int64_t context);

/* attn_generate on a started step decoder of n rows (row i continuing prompt i) that allows
 * attn_sample_steps_needed steps; context is the model's max_len. Arguments checked by the
 * caller (options, prompt lengths in [1, context - 1], ids in [0, decoder->vocab)). result's
 * size is set and its generations allocated here; on failure they are freed and NULL. */
ATTN_INTERNAL attn_status attn_sample_run(attn_step_decoder *decoder, int64_t context, int64_t n,
                                          const int32_t *const *prompts,
                                          const int64_t *prompt_lengths, const uint64_t *stream_ids,
                                          const attn_sample_options *options,
                                          attn_generate_callback callback, void *user,
                                          attn_generate_result *result);

#endif /* ATTN_DECODE_INTERNAL_H */
