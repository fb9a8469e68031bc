/* Scaled dot-product attention: the checked problem description shared by the entry points
 * (sdpa.c), the double-precision reference and the optimized kernels. */
#ifndef ATTN_SDPA_INTERNAL_H
#define ATTN_SDPA_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_attention.h"

/* A [B, H, L, x] view with a contiguous last dimension: element (b, h, l, x) lives at
 * data[b * batch_stride + h * head_stride + l * row_stride + x]. */
typedef struct sdpa_view {
    float *data;
    int64_t batch_stride, head_stride, row_stride;
} sdpa_view;

/* Everything a kernel needs, validated by the entry point. scale is already resolved
 * (never 0), window < 0 means none, lengths and dims may be 0. */
typedef struct sdpa_problem {
    int64_t batch, heads, len_q, len_k, dim, dim_v;
    float scale;
    int causal;
    int64_t window;
    const uint8_t *key_padding_mask; /* [B, Lk] or NULL */
    const float *attn_mask;          /* [Lq, Lk], [B, H, Lq, Lk] or NULL */
    int attn_mask_per_head;
    sdpa_view q, k, v, out;
    /* forward outputs (may be NULL); the backward reads lse */
    float *lse, *weights;
    /* backward only */
    const float *saved_lse;
    sdpa_view grad_out, dq, dk, dv;
} sdpa_problem;

/* The additive mask row of query i in head (b, h), or NULL when there is none. */
static inline const float *sdpa_attn_mask_row(const sdpa_problem *p, int64_t b, int64_t h,
                                              int64_t i)
{
    if (p->attn_mask == NULL)
        return NULL;
    int64_t plane = p->attn_mask_per_head ? (b * p->heads + h) : 0;
    return p->attn_mask + (plane * p->len_q + i) * p->len_k;
}

/* Whether the boolean masks (padding, causal, window) keep key j for query i. The additive
 * mask is applied separately: a -INFINITY there also excludes the pair. */
static inline int sdpa_pair_allowed(const sdpa_problem *p, const uint8_t *padding_row,
                                    int64_t i, int64_t j)
{
    if (padding_row != NULL && padding_row[j])
        return 0;
    if (p->causal && j > i)
        return 0;
    if (p->window >= 0 && (j - i > p->window || i - j > p->window))
        return 0;
    return 1;
}

/* ---- double-precision reference ------------------------------------------------------- */

/* Contiguous double arrays: q [B,H,Lq,d], k [B,H,Lk,d], v [B,H,Lk,dv], out [B,H,Lq,dv],
 * lse [B,H,Lq], weights [B,H,Lq,Lk]. The masks and scale come from p (its views are
 * ignored). Textbook formulas, one row of scores at a time. lse and weights may be NULL. */
ATTN_INTERNAL attn_status attn_sdpa_reference_forward_f64(const sdpa_problem *p, const double *q,
                                                          const double *k, const double *v,
                                                          double *out, double *lse,
                                                          double *weights);
/* Accumulates dq, dk, dv (same layouts as q, k, v) for grad_out [B,H,Lq,dv]. Recomputes each
 * row's softmax in double rather than trusting a saved lse. */
ATTN_INTERNAL attn_status attn_sdpa_reference_backward_f64(const sdpa_problem *p, const double *q,
                                                           const double *k, const double *v,
                                                           const double *grad_out, double *dq,
                                                           double *dk, double *dv);

#endif /* ATTN_SDPA_INTERNAL_H */
