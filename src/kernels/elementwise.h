/* The optimized element-wise and row-wise kernels behind attn_kernels.h, as the public
 * entry points see them: each is an attn_range_fn over rows (or element blocks) that
 * attn_parallel_for calls with a pointer to one of the job structs below. Each op has a
 * portable version (in its own .c file) and _avx2 / _avx512 / _neon versions (compiled from
 * one *_simd.h template, or written per instruction set for dropout). Embedding, a plain
 * copy, keeps its one portable kernel private to embedding.c. */
#ifndef ATTN_KERNELS_ELEMENTWISE_H
#define ATTN_KERNELS_ELEMENTWISE_H

#include "attn/attn_kernels.h"
#include "core/internal.h"

/* Enough work per chunk that waking a thread pays for itself. */
#define ATTN_MIN_ELEMENTS_PER_CHUNK 16384

/* Rows per chunk for rows of cols > 0 values. */
static inline int64_t attn_rows_per_chunk(int64_t cols)
{
    return cols >= ATTN_MIN_ELEMENTS_PER_CHUNK ? 1 : ATTN_MIN_ELEMENTS_PER_CHUNK / cols;
}

/* Element-wise kernels split their n values into blocks of this many, and threads take
 * whole blocks, so that no two threads write the same cache line. */
#define ATTN_ELEMENT_BLOCK 64

/* The version of kernel `name` for instruction set isa (the entry points run the
 * double-precision reference themselves for ATTN_ISA_REFERENCE). */
#define ATTN_PICK_KERNEL(isa, name) ATTN_FOR_ISA(isa, name, name##_portable)

/* Declares name_portable, name_avx2, name_avx512 and name_neon as attn_range_fn. */
#define ATTN_DECLARE_KERNEL(name)                                                                  \
    ATTN_INTERNAL void name##_portable(void *job, int64_t begin, int64_t end, int thread);         \
    ATTN_INTERNAL void name##_avx2(void *job, int64_t begin, int64_t end, int thread);             \
    ATTN_INTERNAL void name##_avx512(void *job, int64_t begin, int64_t end, int thread);           \
    ATTN_INTERNAL void name##_neon(void *job, int64_t begin, int64_t end, int thread)

/* ---- softmax and log-softmax: ranges of rows ---------------------------------------------- */

typedef struct attn_softmax_job {
    int64_t cols;
    const float *in; /* x for the forward, y for the backward */
    const float *dy; /* backward only */
    float *out;      /* y for the forward; dx (accumulated) for the backward */
} attn_softmax_job;

ATTN_DECLARE_KERNEL(attn_softmax_forward_rows);
ATTN_DECLARE_KERNEL(attn_softmax_backward_rows);
ATTN_DECLARE_KERNEL(attn_log_softmax_forward_rows);
ATTN_DECLARE_KERNEL(attn_log_softmax_backward_rows);

/* ---- cross-entropy: ranges of rows -------------------------------------------------------- */

typedef struct attn_cross_entropy_job {
    int64_t vocab;
    const float *logits;
    const int32_t *targets;
    int32_t ignore_index;
    float smoothing;
    double *row_loss;        /* forward: each row's loss (0 for ignored rows) */
    float *row_lse_out;      /* forward, may be NULL: log-sum-exp (0 for ignored rows) */
    const float *row_lse_in; /* backward */
    float grad_scale;        /* backward */
    float *dlogits;          /* backward, accumulated */
} attn_cross_entropy_job;

ATTN_DECLARE_KERNEL(attn_cross_entropy_forward_rows);
ATTN_DECLARE_KERNEL(attn_cross_entropy_backward_rows);

/* ---- layer norm ----------------------------------------------------------------------------- */

typedef struct attn_layer_norm_job {
    int64_t rows, dim;
    const float *x, *gamma, *beta, *dy;
    float eps;
    float *y, *mean_out, *rstd_out; /* forward outputs (mean_out, rstd_out may be NULL) */
    const float *mean, *rstd;       /* backward inputs */
    float *dx;                      /* backward */
    int accumulate;                 /* backward: dx += (1) or dx = (0) */
    /* Backward over blocks of block_rows rows: block b adds its rows' dy * xhat and dy to
     * row b of gamma_partial / beta_partial [blocks, dim] (each NULL when not wanted),
     * which the caller then sums over blocks in a fixed order. */
    int64_t block_rows;
    float *gamma_partial, *beta_partial;
} attn_layer_norm_job;

/* forward: a range of rows; backward: a range of row blocks */
ATTN_DECLARE_KERNEL(attn_layer_norm_forward_rows);
ATTN_DECLARE_KERNEL(attn_layer_norm_backward_blocks);

/* ---- activations: ranges of element blocks --------------------------------------------------- */

typedef struct attn_activation_job {
    attn_activation act;
    int64_t n;
    const float *x;
    const float *dy; /* backward only */
    float *out;      /* y for the forward; dx for the backward */
    int accumulate;  /* backward: dx += (1) or dx = (0) */
} attn_activation_job;

ATTN_DECLARE_KERNEL(attn_activation_forward_range);
ATTN_DECLARE_KERNEL(attn_activation_backward_range);

/* ---- dropout: ranges of element blocks
 * -------------------------------------------------------------- */

typedef struct attn_dropout_job {
    int64_t n;
    uint64_t seed, offset;
    /* keep element i iff the top 24 bits of its hash are >= keep_threshold, which equals
     * attn_hash_uniform(seed, offset + i) >= p */
    uint64_t keep_threshold;
    float scale;     /* 1 / (1 - p) */
    const float *in; /* x for the forward, dy for the backward */
    float *out;      /* y for the forward; dx for the backward */
    int accumulate;  /* the backward from bits: dx += (1) or dx = (0); the other adds */
    uint8_t *mask;   /* forward, one byte per element, may be NULL */
    /* The mask one bit per element, bit i % 8 of byte i / 8: written by the forward (may be
     * NULL), read by the backward from bits. A range starts at a multiple of
     * ATTN_ELEMENT_BLOCK elements, so threads never share a byte. */
    uint8_t *keep_bits_out;
    const uint8_t *keep_bits_in;
} attn_dropout_job;

ATTN_DECLARE_KERNEL(attn_dropout_forward_range);
ATTN_DECLARE_KERNEL(attn_dropout_backward_range);
ATTN_DECLARE_KERNEL(attn_dropout_backward_bits_range);

/* The backward entry points with a choice the public ones (which accumulate) do not offer:
 * accumulate 0 writes dx instead of adding to it, bit for bit what adding to zeros gives.
 * The graph uses it for the first contribution to a gradient, which then needs no zeroing
 * and no read before the write. */
ATTN_INTERNAL attn_status attn_activation_backward_to(attn_activation act, int64_t n,
                                                      const float *x, const float *dy, float *dx,
                                                      int accumulate);
ATTN_INTERNAL attn_status attn_dropout_backward_bits_to(int64_t n, float p,
                                                        const uint8_t *keep_bits, const float *dy,
                                                        float *dx, int accumulate);
ATTN_INTERNAL attn_status attn_layer_norm_backward_to(int64_t rows, int64_t dim, const float *x,
                                                      const float *gamma, const float *mean,
                                                      const float *rstd, const float *dy, float *dx,
                                                      float *dgamma, float *dbeta, int accumulate);
ATTN_INTERNAL attn_status attn_rms_norm_backward_to(int64_t rows, int64_t dim, const float *x,
                                                    const float *gamma, const float *rstd,
                                                    const float *dy, float *dx, float *dgamma,
                                                    int accumulate);

#endif /* ATTN_KERNELS_ELEMENTWISE_H */
