/* attn decoding: greedy and beam search over the encoder-decoder models (layer 5), batched,
 * with n-best lists, the GNMT length penalty and, on request, the cross-attention maps that
 * produced each returned hypothesis; and sampling from the language model (attn_generate, at
 * the end).
 *
 * Search. Every sentence of a batch keeps up to beam_size live hypotheses; all of them are
 * rows of one step decoder (attn_model_step_start), so a batch of B sentences runs at most
 * B * beam_size rows per step, and a sentence that stops has its rows dropped. One step:
 *  - each live row's logits go through log-softmax; a candidate is a row and a next token,
 *    scored log P(prefix) + log p(token | prefix) (summed in double). <pad> and <s> are never
 *    candidates (their probability still counts in the normalisation, so log-probs equal the
 *    model's: teacher forcing the returned tokens gives the same log P).
 *  - candidates are ranked by that log-prob (ties: lower row, then lower token id). Walking
 *    down the ranking, a </s> candidate ranked among the first beam_size becomes a finished
 *    hypothesis (a </s> ranked lower is dropped), and the first beam_size other candidates
 *    become the next step's live hypotheses. So the beam stays full while hypotheses finish.
 *  - a sentence stops when (a) it has nbest finished hypotheses and no live one can still
 *    score above the worst of them (below), or (b) its live hypotheses reach the maximum
 *    length: they are then taken as finished, cut (without </s>), or (c) no candidate is left.
 *    beam_size 1 is greedy decoding: the arg-max token each step, stopping at the first </s>.
 * Scores. score = log P(Y | X) / lp(|Y|) with lp(n) = ((5 + n) / 6)^alpha (Wu et al. 2016,
 * "Google's Neural Machine Translation System"), |Y| counting the output tokens without </s>.
 * Returned hypotheses are the best nbest by score among all finished ones, best first (ties:
 * the one finished earlier first).
 * Why rule (a) is safe with alpha > 0: any hypothesis that can still finish extends a live
 * one, so its log P is at most the best live log P, l <= 0 (log-probs only fall as tokens are
 * added), and its length is at most the sentence's maximum length L. As lp grows with the
 * length, its score is at most l / lp(L). The search stops only when the worst kept finished
 * score is >= that bound, so no hypothesis the beam could still produce would enter the
 * n-best list: stopping never returns a shorter hypothesis than running on to the maximum
 * length would. (Comparing with l / lp(current length) instead would be wrong: a longer
 * hypothesis is divided by a larger lp and can overtake a short one that finished early.)
 *
 * Maximum output length of a sentence of n source tokens: max_len if set, else
 * floor(max_len_ratio * n) + max_len_offset; at least 1 and at most the model's max_len.
 *
 * Determinism: at a fixed thread count and instruction set, the same inputs give the same
 * hypotheses and bits. The search treats every sentence as if decoded alone, so a batch gives
 * what decoding each sentence by itself gives, bit for bit, as far as the model's step decoder
 * computes a row the same way whatever the number of rows: the rnn models do; the
 * Transformer's step decoder uses a small-row kernel up to 8 rows and GEMM above, which agree
 * to float rounding only (a near tie between two hypotheses could then break differently).
 */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H

#include "attn/attn_models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The widest beam (and n-best list) the search accepts. */
#define ATTN_DECODE_MAX_BEAM 1024

typedef struct attn_decode_options {
    int64_t beam_size; /* 1 <= K <= ATTN_DECODE_MAX_BEAM live hypotheses per sentence; 1: greedy */
    int64_t nbest;     /* hypotheses returned per sentence, 1 <= nbest <= beam_size */
    double length_penalty;  /* alpha >= 0 of lp(n) = ((5 + n) / 6)^alpha; 0: plain log P */
    double max_len_ratio;   /* >= 0: the maximum output length grows with the source ... */
    int64_t max_len_offset; /* >= 0: ... by this much */
    int64_t max_len;        /* > 0: a fixed maximum output length instead; 0: ratio, offset */
    int alignments;         /* nonzero: return each hypothesis's cross-attention maps */
} attn_decode_options;

/* Beam 1 (greedy), nbest 1, alpha 0.6, maximum length 1.5 * source + 10, no alignments. */
ATTN_API attn_decode_options attn_decode_default_options(void);
/* Checks the options (message naming the field). */
ATTN_API attn_status attn_decode_options_validate(const attn_decode_options *options);

/* lp(length) = ((5 + length) / 6)^alpha. */
ATTN_API double attn_decode_length_penalty(int64_t length, double alpha);
/* The maximum output length for a source of src_length tokens under options (see above),
 * for a model whose positions cover model_max_len. */
ATTN_API int64_t attn_decode_max_output_length(const attn_decode_options *options,
                                               int64_t src_length, int64_t model_max_len);

/* One hypothesis. */
typedef struct attn_hypothesis {
    int32_t *tokens; /* [length] output ids, without <s> and </s> */
    int64_t length;
    int finished;    /* 1: the model emitted </s> (its probability is in log_prob);
                        0: cut at the maximum length */
    double log_prob; /* log P(tokens, then </s> when finished | source) */
    double score;    /* log_prob / lp(length) */
    /* With alignments: [steps, cross_maps, src_length], steps = length + finished, the
     * cross-attention of the decoder step that produced output token i (row i; the last row
     * of a finished hypothesis is the step that produced </s>); NULL without. */
    float *cross;
    int64_t steps;
} attn_hypothesis;

typedef struct attn_decode_sentence {
    int64_t src_length;
    int64_t count;               /* hypotheses: nbest (fewer only when the vocabulary has
                                    fewer candidates than that) */
    attn_hypothesis *hypotheses; /* [count], best score first */
} attn_decode_sentence;

typedef struct attn_decode_result {
    int64_t size;                    /* sentences */
    attn_decode_sentence *sentences; /* [size], in input order */
    /* The layout of the cross maps (0 without alignments): cross_maps = layers * heads,
     * map l * heads + h for decoder layer l and head h (transformer); 1 layer, 1 head (rnn;
     * all zeros for attention "none"). */
    int64_t cross_maps, cross_layers, cross_heads;
} attn_decode_result;

/* Decodes a batch: src [size, src_len] (row-major, padded after each row's length) with
 * src_lengths [size] in [1, src_len]. model: arch "transformer" or "rnn". graph: a graph of
 * the model's store; it is reset and left in inference mode. *out is malloc'ed: free it
 * with attn_decode_result_destroy. size 0 gives an empty result. */
ATTN_API attn_status attn_decode(attn_model *model, attn_graph *graph, int64_t size,
                                 int64_t src_len, const int32_t *src, const int32_t *src_lengths,
                                 const attn_decode_options *options, attn_decode_result **out);
/* attn_decode with an ensemble of count >= 1 models (models[m] on graphs[m], one graph per
 * model): every model reads the same source ids with its own encoder, and each step's
 * distribution is the mean of the models' log-probabilities, renormalised
 * (attn_model_step_ensemble). The models may differ in architecture but must share the
 * vocabularies (their sizes are checked here; that the tokens agree is the caller's to
 * check, as attn_bundle_check_ensemble does). Alignments are the first model's cross maps
 * (the result's cross_* are its layout). The maximum output length is bounded by the
 * smallest max_len. count 1 is attn_decode. */
ATTN_API attn_status attn_decode_ensemble(attn_model *const *models, attn_graph *const *graphs,
                                          int64_t count, int64_t size, int64_t src_len,
                                          const int32_t *src, const int32_t *src_lengths,
                                          const attn_decode_options *options,
                                          attn_decode_result **out);
/* NULL is ignored. */
ATTN_API void attn_decode_result_destroy(attn_decode_result *result);

/* The alignment of a hypothesis as one matrix [steps, src_length]: the maps of decoder layer
 * `layer` (0-based; -1: the last) averaged over its heads (head -1), or one head's map.
 * out has room for steps * src_length floats. Fails when the result has no alignments. */
ATTN_API attn_status attn_decode_alignment(const attn_decode_result *result,
                                           const attn_hypothesis *hypothesis, int64_t src_length,
                                           int64_t layer, int64_t head, float *out);

/* Greedy decoding for the encoder-decoders (arch "transformer" and "rnn") into plain
 * fixed-width arrays, for validation and tests: attn_decode with a beam of one,
 * which encodes once and steps the decoder with its cache, until every row has produced </s>
 * or max_len tokens. src [size, src_len] with src_lengths [size] in [1, src_len].
 * out [size, max_len] receives each row's tokens after <s>, up to and without </s>, padded
 * with ATTN_PAD_ID; out_lengths [size] their counts. graph is a graph of the model's store; it
 * is reset first and left in inference mode. max_len in [1, the model's max_len]. */
ATTN_API attn_status attn_greedy_decode(attn_model *model, attn_graph *graph, int64_t size,
                                        int64_t src_len, const int32_t *src,
                                        const int32_t *src_lengths, int64_t max_len, int32_t *out,
                                        int64_t *out_lengths);

/* ---- sampling from a language model ---------------------------------------------------- *
 *
 * attn_generate continues prompts with the language model (arch "transformer_lm") through its
 * step decoder. All prompts run as rows of one decoder in lockstep: at step t a row feeds
 * token t of its prompt while it has one, then the token it drew last; a row draws its first
 * new token from the step that read its prompt's last token. So rows of different prompt
 * lengths share one batch and each row computes what it would alone.
 *
 * Drawing a token from a row's logits z (in double, in a fixed order, so the result is
 * deterministic): greedy takes the arg-max (the lowest id on ties) and ignores the rest.
 * Otherwise p ~ exp(z / temperature); top_k > 0 keeps the k most probable tokens (ties: lower
 * id first); top_p < 1 then keeps the smallest set of most probable tokens whose renormalised
 * probability reaches top_p (nucleus sampling, Holtzman et al. 2020); the token is drawn from
 * what is kept, renormalised, with one uniform double of 53 bits.
 * Randomness: each row draws from its own attn_rng seeded by (seed, the row's stream id), so a
 * prompt's continuation does not depend on the other prompts of the call, their order or the
 * thread count, as far as the model computes a row's logits the same way in every batch (the
 * Transformer's step decoder uses a small-row kernel up to 8 rows and GEMM above, which agree
 * to float rounding only: a draw landing within that rounding of a boundary could differ).
 * Stopping: a row stops after max_new_tokens new tokens, at the stop token, or when its text
 * (prompt and new tokens) fills the model's context of max_len positions. */

typedef struct attn_sample_options {
    double temperature;     /* > 0: logits are divided by it; 1 leaves them */
    int64_t top_k;          /* >= 0: keep the k most probable tokens; 0: all */
    double top_p;           /* in (0, 1]: nucleus sampling; 1: off */
    uint64_t seed;          /* with a row's stream id, seeds that row's generator */
    int greedy;             /* nonzero: arg-max, ignoring temperature, top_k, top_p, seed */
    int64_t max_new_tokens; /* >= 1: new tokens per row at most */
    int32_t stop_token;     /* a row stops when it draws this id (e.g. ATTN_EOS_ID); -1: none */
} attn_sample_options;

/* Temperature 1, no top-k or top-p, seed 0, not greedy, 200 new tokens, no stop token. */
ATTN_API attn_sample_options attn_sample_default_options(void);
/* Checks the options (message naming the field and its range). */
ATTN_API attn_status attn_sample_options_validate(const attn_sample_options *options);

/* Why a row stopped. */
typedef enum attn_generate_stop {
    ATTN_GENERATE_MAX_NEW_TOKENS = 0, /* it drew max_new_tokens tokens */
    ATTN_GENERATE_STOP_TOKEN = 1,     /* it drew the stop token */
    ATTN_GENERATE_CONTEXT = 2         /* its prompt and new tokens fill the model's max_len */
} attn_generate_stop;

typedef struct attn_generation {
    int32_t *tokens; /* [length] the new tokens, without the stop token */
    int64_t length;
    attn_generate_stop stop;
} attn_generation;

typedef struct attn_generate_result {
    int64_t size;                 /* prompts */
    attn_generation *generations; /* [size], in input order */
} attn_generate_result;

/* Called with each new token as soon as it is drawn (the stop token too), in the order drawn:
 * prompt is the prompt's index in the call. A status other than ATTN_OK stops the generation,
 * which then returns that status (with a message naming the prompt; the callback keeps or
 * reports its own details). */
typedef attn_status (*attn_generate_callback)(void *user, int64_t prompt, int32_t token);

/* Continues n >= 0 prompts: prompts[i] holds prompt_lengths[i] ids of the target vocabulary,
 * 1 <= prompt_lengths[i] <= the model's max_len - 1 (room for one new token). stream_ids
 * (NULL: i) gives prompt i's random stream: pass the same id to get the same continuation in
 * another call (e.g. a prompt's line number when a file is decoded in batches). model: arch
 * "transformer_lm"; graph: a graph of its store, reset and left in inference mode. callback
 * may be NULL. *out is malloc'ed: free it with attn_generate_result_destroy. */
ATTN_API attn_status attn_generate(attn_model *model, attn_graph *graph, int64_t n,
                                   const int32_t *const *prompts, const int64_t *prompt_lengths,
                                   const uint64_t *stream_ids, const attn_sample_options *options,
                                   attn_generate_callback callback, void *user,
                                   attn_generate_result **out);
/* NULL is ignored. */
ATTN_API void attn_generate_result_destroy(attn_generate_result *result);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DECODE_H */
