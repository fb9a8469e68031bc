/* The per-step engine behind additive and Luong attention. Both reduce to one pipeline per
 * sentence b of the batch, once the query has been projected:
 *   score e_j      DOT: u . k_j           MLP: v . tanh(q + k_j)
 *   window         all positions, or [lo, hi] around a target position (Luong local)
 *   weights        masked softmax over the window, times a Gaussian for Luong local-p
 *   context        sum_j weights_j values_j
 * so the projections (attn_gemm) stay in additive.c / luong.c and the row loops live here,
 * in a double reference and a threaded float version. */
#ifndef ATTN_CLASSIC_INTERNAL_H
#define ATTN_CLASSIC_INTERNAL_H

#include "attn/attn_attention.h"
#include "core/internal.h"

/* Argument checks for functions that validate in a helper: name the public function. */
#define ATTN_CLASSIC_NOT_NULL(fn, ptr)                                                             \
    do {                                                                                           \
        if ((ptr) == NULL)                                                                         \
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s must not be NULL", (fn), #ptr);    \
    } while (0)

typedef enum attn_classic_score {
    ATTN_CLASSIC_DOT = 0, /* e_j = query . keys_j */
    ATTN_CLASSIC_MLP = 1  /* e_j = v . tanh(query + keys_j) */
} attn_classic_score;

typedef struct attn_classic_step {
    attn_classic_score score;
    attn_luong_align align; /* ATTN_LUONG_GLOBAL for additive attention */
    int64_t batch;
    int64_t src_len;
    int64_t key_dim; /* length of query rows and key vectors */
    int64_t value_dim;
    const float *query;   /* [B, key_dim]: u for DOT, the projected query q for MLP */
    const float *keys;    /* [B, src_len, key_dim] */
    const float *v;       /* MLP: [key_dim] */
    const float *values;  /* [B, src_len, value_dim] */
    const uint8_t *mask;  /* [B, src_len] or NULL */
    int64_t window;       /* D, local alignments */
    int64_t position;     /* t, local-m */
    const float *centers; /* p_t [B], local-p */
} attn_classic_step;

/* Gradient outputs of the engine. The overwritten ones are scratch rows that the callers
 * turn into parameter gradients with a fixed-order reduction over the batch. */
typedef struct attn_classic_grads {
    float *dquery;   /* [B, key_dim], overwritten */
    float *dkeys;    /* [B, src_len, key_dim], accumulated, or NULL */
    float *dvalues;  /* [B, src_len, value_dim], accumulated, or NULL */
    float *dv_rows;  /* MLP: [B, key_dim] per-row d(v), overwritten, or NULL */
    float *dcenters; /* local-p: [B], overwritten */
    float *dscores;  /* [B, src_len] scratch */
} attn_classic_grads;

/* The MLP score of one key, v . tanh(q + k) over n features, and its backward for a score
 * gradient de: with t = tanh(q + k) and g = de v (1 - t^2), dq += g, dk += g (dk may be
 * NULL) and dv_row += de t (may be NULL). The float versions use the kernels' tanh
 * (attn_fast_tanh and vf_tanh, within 1.53 ulp), since glibc's tanhf costs ~30 ns and a step
 * takes B * Lk * da of them. */
typedef float (*attn_classic_mlp_score_fn)(const float *q, const float *k, const float *v,
                                           int64_t n);
typedef void (*attn_classic_mlp_backward_fn)(const float *q, const float *k, const float *v,
                                             float de, int64_t n, float *dq, float *dk,
                                             float *dv_row);
ATTN_INTERNAL float attn_classic_mlp_score_portable(const float *q, const float *k, const float *v,
                                                    int64_t n);
ATTN_INTERNAL void attn_classic_mlp_backward_portable(const float *q, const float *k,
                                                      const float *v, float de, int64_t n,
                                                      float *dq, float *dk, float *dv_row);
ATTN_INTERNAL float attn_classic_mlp_score_avx2(const float *q, const float *k, const float *v,
                                                int64_t n);
ATTN_INTERNAL void attn_classic_mlp_backward_avx2(const float *q, const float *k, const float *v,
                                                  float de, int64_t n, float *dq, float *dk,
                                                  float *dv_row);
ATTN_INTERNAL float attn_classic_mlp_score_avx512(const float *q, const float *k, const float *v,
                                                  int64_t n);
ATTN_INTERNAL void attn_classic_mlp_backward_avx512(const float *q, const float *k, const float *v,
                                                    float de, int64_t n, float *dq, float *dk,
                                                    float *dv_row);
ATTN_INTERNAL float attn_classic_mlp_score_neon(const float *q, const float *k, const float *v,
                                                int64_t n);
ATTN_INTERNAL void attn_classic_mlp_backward_neon(const float *q, const float *k, const float *v,
                                                  float de, int64_t n, float *dq, float *dk,
                                                  float *dv_row);

/* Nonzero when a * b * c (all >= 0) stays below 2^60: every element count and index the
 * steps compute is a small sum of such products, so none can overflow int64_t. */
ATTN_INTERNAL int attn_classic_count_fits(int64_t a, int64_t b, int64_t c);

/* 1 + the last unmasked position of sentence b: its length before padding. */
ATTN_INTERNAL int64_t attn_classic_sentence_length(const uint8_t *mask, int64_t src_len, int64_t b);

/* Raw scores [B, src_len] for every position (no mask, no window). */
ATTN_INTERNAL void attn_classic_scores(const attn_classic_step *step, float *scores);
ATTN_INTERNAL void attn_classic_forward(const attn_classic_step *step, float *context,
                                        float *weights);
/* dweights may be NULL. */
ATTN_INTERNAL void attn_classic_backward(const attn_classic_step *step, const float *weights,
                                         const float *dcontext, const float *dweights,
                                         const attn_classic_grads *grads);

/* out[j] += sum_b rows[b, j] for b in order, summed in double: the deterministic
 * reduction of per-row gradient pieces into a parameter gradient. */
ATTN_INTERNAL void attn_classic_sum_rows(int64_t rows, int64_t cols, const float *in, float *out);

/* attn_additive_forward after the query's projection, which the caller wrote to saved's first
 * batch * attn_dim floats (W_s s + b: a model decoding with stored bf16 or int8 matrices
 * multiplies them itself). */
ATTN_INTERNAL attn_status attn_additive_forward_projected(const attn_additive_dims *dims,
                                                          const attn_additive_params *params,
                                                          const float *keys, const float *values,
                                                          const uint8_t *mask, float *context,
                                                          float *weights, float *saved);

#endif /* ATTN_CLASSIC_INTERNAL_H */
