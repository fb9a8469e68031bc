/* A linear layer for the few rows of a decoding step, y = x W^T + b with W [out, in] read
 * in place (PyTorch's layout): one pass over W per group of up to eight rows (AVX-512; four
 * with AVX2), each output a dot product of contiguous rows. attn_gemm would first repack W^T, which costs more than
 * the multiply when x has one row. Not part of the public API. */
#ifndef ATTN_STEP_LINEAR_H
#define ATTN_STEP_LINEAR_H

#include "core/internal.h"

typedef struct step_linear_args {
    int64_t rows, in, out;
    const float *x; /* [rows, in], row stride ldx */
    int64_t ldx;
    const float *w; /* [out, in] */
    const float *b; /* [out] or NULL */
    float *y;       /* [rows, out], row stride ldy */
    int64_t ldy;
} step_linear_args;

/* Computes outputs [begin, end) of every row. Each output of each row goes through the
 * same operations whatever the number of rows, the group it is in and the thread that runs
 * it, so a row's result never depends on the others. */
typedef void (*step_linear_fn)(const step_linear_args *a, int64_t begin, int64_t end);

ATTN_INTERNAL void attn_step_linear_avx2(const step_linear_args *a, int64_t begin, int64_t end);
ATTN_INTERNAL void attn_step_linear_avx512(const step_linear_args *a, int64_t begin,
                                           int64_t end);
ATTN_INTERNAL void attn_step_linear_neon(const step_linear_args *a, int64_t begin, int64_t end);

/* Checked by the caller: rows, in, out >= 1 and the pointers valid. Threads split the
 * outputs when there is enough work. */
ATTN_INTERNAL void attn_step_linear(const step_linear_args *a);

#endif /* ATTN_STEP_LINEAR_H */
