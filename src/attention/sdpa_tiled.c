/* Flash-attention (version 2 style) forward and backward over an instruction-set specific
 * kernel table (sdpa_kernels). The algorithm, tiling, masks and threading live here once.
 *
 * Forward, per work item (batch, head, tile of queries): the tile's queries are transposed
 * once into Q^T (d x FORWARD_Q_TILE, pre-multiplied by the scale), then tiles of keys
 * stream past: S^T = K Q^T, masks, an online softmax per query (column), and
 * O^T = O^T * rescale + V^T P^T. With queries along the vector lanes every per-query
 * statistic (running max, sum, rescale) is a plain element-wise vector operation. At the
 * end O = (O^T)^T / sum and lse = max + log(sum). Key tiles that the causal or window mask
 * excludes entirely are never visited, and per-element masks run only on tiles that cross
 * a mask boundary (or when a key is padded or an additive mask is present).
 *
 * Backward, per work item (batch, head, usually all its keys): D = rowsum(dO * O); for each
 * key tile, K and V are transposed once, then every query tile that may see it recomputes
 * S = Q K^T and P = exp(S - lse), and dV += P^T dO, dP = dO V^T, dS = P (dP - D) scale,
 * dK += dS^T Q, dQ += dS K. No two threads write the same gradient (see backward_job for
 * heads split into key groups) and the summation order is fixed: results are bit-identical
 * for a given thread count.
 *
 * Memory (scratch_per_thread): the forward uses 64 (d + dv + 67) floats per thread, the
 * backward 64 (2 d + 2 dv + 128) + Lq, plus groups * B * H * Lq * d partial dq floats when
 * heads are split into key groups; nothing grows with Lq * Lk except the optional weights
 * output. bf16 adds the packed head: about (Lk + 1) (d + dv + 1) / 2 floats in the forward,
 * Lq (d + dv + 2) in the backward. */
#include "attention/sdpa_internal.h"

#include <math.h>
#include <string.h>

/* Tile sizes. 64 x 64 keeps each tile at 16 KiB for d = 64, so the forward's Q^T, scores
 * and O^T fill the 48 KiB L1 while K and V stream from L2; on this machine 128-query or
 * 128-key tiles measured within noise of it and 32 was 5-20% slower, in both passes. */
enum {
    FORWARD_Q_TILE = 64,  /* queries per forward work item: the vector lanes */
    FORWARD_K_TILE = 64,  /* keys streamed per step */
    BACKWARD_Q_TILE = 64, /* queries per step of the backward's inner loop */
    BACKWARD_K_TILE = 64  /* keys per outer step: the vector lanes */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

const sdpa_kernels *attn_sdpa_kernels_for(attn_isa isa)
{
    switch (isa) {
    case ATTN_ISA_PORTABLE:
        return &attn_sdpa_kernels_portable;
#ifdef ATTN_SDPA_HAVE_X86
    case ATTN_ISA_AVX2:
        return &attn_sdpa_kernels_avx2;
    case ATTN_ISA_AVX512:
        return &attn_sdpa_kernels_avx512;
#elif defined(ATTN_HAVE_NEON_KERNELS)
    case ATTN_ISA_NEON:
    case ATTN_ISA_NEON_DOTPROD:
    case ATTN_ISA_NEON_BF16:
        return &attn_sdpa_kernels_neon;
#endif
    default:
        return NULL;
    }
}

const sdpa_bf16_kernels *attn_sdpa_bf16_kernels_for(attn_isa isa)
{
#ifdef ATTN_SDPA_HAVE_X86
    if (isa == ATTN_ISA_AVX512 && attn_precision_native(ATTN_PRECISION_BF16))
        return &attn_sdpa_bf16_kernels_avx512bf16;
    if (isa == ATTN_ISA_AVX512)
        return &attn_sdpa_bf16_kernels_emulated_avx512;
    if (isa == ATTN_ISA_AVX2)
        return &attn_sdpa_bf16_kernels_emulated_avx2;
#elif defined(ATTN_HAVE_NEON_KERNELS)
    if (isa == ATTN_ISA_NEON_BF16)
        return &attn_sdpa_bf16_kernels_neonbf16;
#endif
    (void)isa;
    return &attn_sdpa_bf16_kernels_emulated;
}

static int64_t pairs_of(int64_t n)
{
    return (n + 1) / 2;
}

/* The first of a tile range moved down to an even index, so that tiles start on a pair of
 * the operands packed once per head; the extra row is excluded by the masks, as
 * tile_needs_masks sees. */
static int64_t even_start(int64_t begin, int64_t end)
{
    return begin < end ? begin & ~(int64_t)1 : begin;
}

/* ---- mask geometry --------------------------------------------------------------------- */

/* Keys [*begin, *end) that the causal and window masks allow for some query in [i0, i1). */
static void keys_for_queries(const sdpa_problem *p, int64_t i0, int64_t i1, int64_t *begin,
                             int64_t *end)
{
    int64_t lo = 0, hi = p->len_k;
    if (p->causal)
        hi = min64(hi, i1);
    if (p->window >= 0) {
        lo = max64(lo, i0 - p->window);
        hi = min64(hi, i1 + p->window);
    }
    *begin = min64(lo, p->len_k);
    *end = max64(*begin, hi);
}

/* Queries [*begin, *end) that the causal and window masks allow to see some key in [j0, j1). */
static void queries_for_keys(const sdpa_problem *p, int64_t j0, int64_t j1, int64_t *begin,
                             int64_t *end)
{
    int64_t lo = 0, hi = p->len_q;
    if (p->causal)
        lo = max64(lo, j0);
    if (p->window >= 0) {
        lo = max64(lo, j0 - p->window);
        hi = min64(hi, j1 + p->window);
    }
    *begin = min64(lo, p->len_q);
    *end = max64(*begin, hi);
}

/* Whether the tile [i0, i1) x [j0, j1) needs masks applied element by element. */
static int tile_needs_masks(const sdpa_problem *p, const uint8_t *padding_row, int64_t i0,
                            int64_t i1, int64_t j0, int64_t j1)
{
    if (p->attn_mask != NULL)
        return 1;
    if (p->causal && j1 - 1 > i0)
        return 1;
    if (p->window >= 0 && (j1 - 1 - i0 > p->window || i1 - 1 - j0 > p->window))
        return 1;
    if (padding_row != NULL)
        for (int64_t j = j0; j < j1; j++)
            if (padding_row[j])
                return 1;
    return 0;
}

static void fill(float *x, int64_t n, float value)
{
    for (int64_t e = 0; e < n; e++)
        x[e] = value;
}

/* Masks a score tile laid out [keys x queries] (the forward): row jj is key j0 + jj,
 * column ii is query i0 + ii. The additive mask is multiplied by mask_scale (log2(e) for
 * the bf16 kernels' base-2 scores, 1 otherwise). */
static void mask_tile_keys_by_queries(const sdpa_problem *p, int64_t b, int64_t h,
                                      const uint8_t *padding_row, float *tile, int64_t ld,
                                      int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                                      float mask_scale)
{
    for (int64_t jj = 0; jj < nk; jj++) {
        int64_t j = j0 + jj;
        float *row = tile + jj * ld;
        if (padding_row != NULL && padding_row[j]) {
            fill(row, nq, -INFINITY);
            continue;
        }
        /* Queries [lo, hi) of this tile that may see key j. */
        int64_t lo = 0, hi = nq;
        if (p->causal)
            lo = max64(lo, j - i0);
        if (p->window >= 0) {
            lo = max64(lo, j - p->window - i0);
            hi = min64(hi, j + p->window + 1 - i0);
        }
        hi = max64(lo, hi);
        lo = min64(lo, nq);
        hi = min64(hi, nq);
        fill(row, lo, -INFINITY);
        fill(row + hi, nq - hi, -INFINITY);
        if (p->attn_mask != NULL) {
            const float *mask = sdpa_attn_mask_row(p, b, h, i0) + j;
            for (int64_t ii = lo; ii < hi; ii++)
                row[ii] += mask[ii * p->len_k] * mask_scale;
        }
    }
}

/* Masks a score tile laid out [queries x keys] (the backward). */
static void mask_tile_queries_by_keys(const sdpa_problem *p, int64_t b, int64_t h,
                                      const uint8_t *padding_row, float *tile, int64_t ld,
                                      int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                                      float mask_scale)
{
    for (int64_t ii = 0; ii < nq; ii++) {
        int64_t i = i0 + ii;
        float *row = tile + ii * ld;
        int64_t lo = 0, hi = nk; /* keys of this tile that query i may see */
        if (p->causal)
            hi = min64(hi, i + 1 - j0);
        if (p->window >= 0) {
            lo = max64(lo, i - p->window - j0);
            hi = min64(hi, i + p->window + 1 - j0);
        }
        hi = max64(lo, hi);
        lo = min64(lo, nk);
        hi = min64(hi, nk);
        fill(row, lo, -INFINITY);
        fill(row + hi, nk - hi, -INFINITY);
        if (padding_row != NULL)
            for (int64_t jj = lo; jj < hi; jj++)
                if (padding_row[j0 + jj])
                    row[jj] = -INFINITY;
        if (p->attn_mask != NULL) {
            const float *mask = sdpa_attn_mask_row(p, b, h, i) + j0;
            for (int64_t jj = lo; jj < hi; jj++)
                row[jj] += mask[jj] * mask_scale;
        }
    }
}

/* ---- scratch --------------------------------------------------------------------------- */

/* *floats = the sum of the products terms[t][0] * terms[t][1], each rounded up to whole
 * cache lines; returns 0 (with a message) on overflow. */
static int scratch_floats(const int64_t (*terms)[2], int count, size_t *floats)
{
    size_t total = 0;
    for (int t = 0; t < count; t++) {
        size_t product;
        if (!attn_mul_size((size_t)terms[t][0], (size_t)terms[t][1], &product))
            return 0;
        if (product > SIZE_MAX / 8 - total) {
            attn_fail(ATTN_ERR_OUT_OF_MEMORY, "sdpa: scratch size overflows");
            return 0;
        }
        total += (product + 15) / 16 * 16;
    }
    *floats = total;
    return 1;
}

/* The floats one thread's scratch holds, matching the take() calls of forward_tile and
 * backward_item. */
static int scratch_per_thread(const sdpa_problem *p, int backward, size_t *floats)
{
    const int64_t d2 = pairs_of(p->dim), dv2 = pairs_of(p->dim_v);
    if (p->precision == ATTN_PRECISION_BF16 && !backward) {
        const int64_t terms[][2] = {{pairs_of(p->len_k) * 2, d2},
                                    {pairs_of(p->len_k), p->dim_v},
                                    {d2, FORWARD_Q_TILE},
                                    {FORWARD_Q_TILE, p->dim_v},
                                    {FORWARD_K_TILE, FORWARD_Q_TILE},
                                    {FORWARD_K_TILE / 2, FORWARD_Q_TILE},
                                    {3, FORWARD_Q_TILE}};
        return scratch_floats(terms, 7, floats);
    }
    if (p->precision == ATTN_PRECISION_BF16) {
        const int64_t q2 = pairs_of(p->len_q);
        const int64_t terms[][2] = {{p->len_q, d2},
                                    {p->len_q, dv2},
                                    {q2, p->dim},
                                    {q2, p->dim_v},
                                    {d2, BACKWARD_K_TILE},
                                    {dv2, BACKWARD_K_TILE},
                                    {BACKWARD_K_TILE / 2, p->dim},
                                    {BACKWARD_K_TILE, p->dim},
                                    {BACKWARD_K_TILE, p->dim_v},
                                    {BACKWARD_Q_TILE, BACKWARD_K_TILE},
                                    {BACKWARD_Q_TILE, BACKWARD_K_TILE},
                                    {BACKWARD_Q_TILE / 2, BACKWARD_K_TILE},
                                    {BACKWARD_Q_TILE / 2, BACKWARD_K_TILE},
                                    {BACKWARD_Q_TILE, BACKWARD_K_TILE / 2},
                                    {p->len_q, 1},
                                    {p->len_q, 1}};
        return scratch_floats(terms, 16, floats);
    }
    if (!backward) {
        const int64_t terms[][2] = {{p->dim, FORWARD_Q_TILE},
                                    {p->dim_v, FORWARD_Q_TILE},
                                    {FORWARD_K_TILE, FORWARD_Q_TILE},
                                    {3, FORWARD_Q_TILE}};
        return scratch_floats(terms, 4, floats);
    }
    const int64_t terms[][2] = {{p->dim, BACKWARD_K_TILE},
                                {p->dim_v, BACKWARD_K_TILE},
                                {BACKWARD_K_TILE, p->dim},
                                {BACKWARD_K_TILE, p->dim_v},
                                {BACKWARD_Q_TILE, BACKWARD_K_TILE},
                                {BACKWARD_Q_TILE, BACKWARD_K_TILE},
                                {p->len_q, 1}};
    return scratch_floats(terms, 7, floats);
}

int attn_sdpa_scratch_bytes(const sdpa_problem *p, int backward, int threads, size_t *bytes)
{
    size_t floats;
    return scratch_per_thread(p, backward, &floats) &&
           attn_mul_size(floats * sizeof(float), (size_t)threads, bytes);
}

static float *alloc_scratch(size_t per_thread, int threads)
{
    size_t bytes;
    if (!attn_mul_size(per_thread * sizeof(float), (size_t)threads, &bytes))
        return NULL;
    return attn_scratch_acquire(bytes);
}

static float *take(float **cursor, int64_t count)
{
    float *start = *cursor;
    *cursor += (count + 15) / 16 * 16;
    return start;
}

/* Pairs are 32-bit words, so they share the float scratch one for one. */
static sdpa_bf16_pair *take_pairs(float **cursor, int64_t count)
{
    return (sdpa_bf16_pair *)(void *)take(cursor, count);
}

/* ---- forward --------------------------------------------------------------------------- */

typedef struct forward_job {
    const sdpa_problem *p;
    const sdpa_kernels *kern;
    const sdpa_bf16_kernels *bf16; /* NULL in float32 */
    int64_t q_tiles;
    float *scratch;
    size_t scratch_per_thread;
} forward_job;

static float *view_at(const sdpa_view *v, int64_t b, int64_t h, int64_t row)
{
    return v->data + b * v->batch_stride + h * v->head_stride + row * v->row_stride;
}

static void forward_tile(const forward_job *job, int64_t b, int64_t h, int64_t i0, float *scratch)
{
    const sdpa_problem *p = job->p;
    const sdpa_kernels *kern = job->kern;
    const int64_t nq = min64(FORWARD_Q_TILE, p->len_q - i0), ld = FORWARD_Q_TILE;
    float *cursor = scratch;
    float *q_t = take(&cursor, p->dim * ld), *o_t = take(&cursor, p->dim_v * ld);
    float *s_t = take(&cursor, FORWARD_K_TILE * ld), *run_max = take(&cursor, ld);
    float *run_sum = take(&cursor, ld), *rescale = take(&cursor, ld);

    const float *q = view_at(&p->q, b, h, i0);
    kern->transpose(q, p->q.row_stride, nq, p->dim, q_t, ld, NULL, p->scale);
    for (int64_t y = 0; y < p->dim_v; y++)
        fill(o_t + y * ld, nq, 0.0f);
    fill(run_max, nq, -INFINITY);
    fill(run_sum, nq, 0.0f);

    const uint8_t *padding_row =
        p->key_padding_mask != NULL ? p->key_padding_mask + b * p->len_k : NULL;
    const float *k_head = view_at(&p->k, b, h, 0), *v_head = view_at(&p->v, b, h, 0);
    int64_t j_begin, j_end;
    keys_for_queries(p, i0, i0 + nq, &j_begin, &j_end);
    for (int64_t j0 = j_begin; j0 < j_end; j0 += FORWARD_K_TILE) {
        const int64_t nk = min64(FORWARD_K_TILE, j_end - j0);
        kern->gemm(nk, nq, p->dim, k_head + j0 * p->k.row_stride, p->k.row_stride, 1, q_t, ld, s_t,
                   ld, SDPA_GEMM_STORE, NULL);
        if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
            mask_tile_keys_by_queries(p, b, h, padding_row, s_t, ld, i0, nq, j0, nk, 1.0f);
        kern->softmax_columns(s_t, nk, nq, ld, run_max, run_sum, rescale);
        kern->gemm(p->dim_v, nq, nk, v_head + j0 * p->v.row_stride, 1, p->v.row_stride, s_t, ld,
                   o_t, ld, SDPA_GEMM_SCALE_COLUMNS, rescale);
    }

    /* Normalise while transposing O^T back into the output rows. rescale becomes each
     * query's log-sum-exp, -inf for a fully masked query (whose output is then zeros). */
    float *lse = rescale, *inverse_sum = run_sum;
    for (int64_t ii = 0; ii < nq; ii++) {
        int masked = run_sum[ii] == 0.0f;
        lse[ii] = masked ? -INFINITY : run_max[ii] + logf(run_sum[ii]);
        inverse_sum[ii] = masked ? 0.0f : 1.0f / run_sum[ii];
    }
    float *out = view_at(&p->out, b, h, i0);
    kern->transpose(o_t, ld, p->dim_v, nq, out, p->out.row_stride, inverse_sum, 1.0f);
    for (int64_t ii = 0; ii < nq; ii++)
        if (lse[ii] == -INFINITY) /* exactly zero even if V holds infinities */
            fill(out + ii * p->out.row_stride, p->dim_v, 0.0f);
    int64_t row0 = (b * p->heads + h) * p->len_q + i0;
    if (p->lse != NULL)
        memcpy(p->lse + row0, lse, (size_t)nq * sizeof(float));
    if (p->weights == NULL)
        return;

    /* Weights: recompute the scores tile by tile and exponentiate against the final lse. */
    float *weights = p->weights + row0 * p->len_k;
    for (int64_t ii = 0; ii < nq; ii++) {
        fill(weights + ii * p->len_k, j_begin, 0.0f);
        fill(weights + ii * p->len_k + j_end, p->len_k - j_end, 0.0f);
    }
    for (int64_t j0 = j_begin; j0 < j_end; j0 += FORWARD_K_TILE) {
        const int64_t nk = min64(FORWARD_K_TILE, j_end - j0);
        kern->gemm(nk, nq, p->dim, k_head + j0 * p->k.row_stride, p->k.row_stride, 1, q_t, ld, s_t,
                   ld, SDPA_GEMM_STORE, NULL);
        if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
            mask_tile_keys_by_queries(p, b, h, padding_row, s_t, ld, i0, nq, j0, nk, 1.0f);
        kern->exp_columns(s_t, nk, nq, ld, lse);
        kern->transpose(s_t, ld, nk, nq, weights + j0, p->len_k, NULL, 1.0f);
    }
}

/* The head's keys and values as bf16 operands, packed once per thread and head rather than
 * once per tile of queries: K as rows of pairs along d (for S^T = K Q^T), V as pairs along
 * the keys, [Lk/2][dv] (for O = P V). They open the thread's scratch and outlive a tile. */
static void forward_pack_head_bf16(const forward_job *job, int64_t b, int64_t h, float *scratch)
{
    const sdpa_problem *p = job->p;
    const int64_t d2 = pairs_of(p->dim);
    float *cursor = scratch;
    sdpa_bf16_pair *k_rows = take_pairs(&cursor, pairs_of(p->len_k) * 2 * d2);
    sdpa_bf16_pair *v_pairs = take_pairs(&cursor, pairs_of(p->len_k) * p->dim_v);
    job->bf16->pack(view_at(&p->k, b, h, 0), p->k.row_stride, 1, p->len_k, p->dim, k_rows, d2, 1);
    job->bf16->pack(view_at(&p->v, b, h, 0), 1, p->v.row_stride, p->dim_v, p->len_k, v_pairs, 1,
                    p->dim_v);
}

/* forward_tile with bf16 operands. Scores keep the [keys x queries] layout (queries along
 * the lanes for the softmax statistics); the output accumulates as O [queries x dv] =
 * O * rescale + P V with P packed in pairs along the keys by the softmax itself. Scores are
 * kept in base 2 (S log2(e), the factor folded into the product's scale, which multiplies
 * the float product), so the softmax's exponential is a cheaper 2^x and the backward
 * recomputes the same scores bit for bit. The weights, an output, use natural scores. */
static void forward_tile_bf16(const forward_job *job, int64_t b, int64_t h, int64_t i0,
                              float *scratch)
{
    const sdpa_problem *p = job->p;
    const sdpa_kernels *kern = job->kern;
    const sdpa_bf16_kernels *bf16 = job->bf16;
    const int64_t nq = min64(FORWARD_Q_TILE, p->len_q - i0), ld = FORWARD_Q_TILE;
    const int64_t d2 = pairs_of(p->dim), dv = p->dim_v;
    float *cursor = scratch;
    const sdpa_bf16_pair *k_rows = take_pairs(&cursor, pairs_of(p->len_k) * 2 * d2);
    const sdpa_bf16_pair *v_pairs = take_pairs(&cursor, pairs_of(p->len_k) * dv);
    sdpa_bf16_pair *q_pairs = take_pairs(&cursor, d2 * ld);
    float *o = take(&cursor, FORWARD_Q_TILE * dv), *s_t = take(&cursor, FORWARD_K_TILE * ld);
    sdpa_bf16_pair *p_pairs = take_pairs(&cursor, FORWARD_K_TILE / 2 * ld);
    float *run_max = take(&cursor, ld), *run_sum = take(&cursor, ld);
    float *rescale = take(&cursor, ld);

    bf16->pack(view_at(&p->q, b, h, i0), p->q.row_stride, 1, nq, p->dim, q_pairs, 1, ld);
    fill(o, nq * dv, 0.0f);
    fill(run_max, nq, -INFINITY);
    fill(run_sum, nq, 0.0f);

    const uint8_t *padding_row =
        p->key_padding_mask != NULL ? p->key_padding_mask + b * p->len_k : NULL;
    int64_t j_begin, j_end;
    keys_for_queries(p, i0, i0 + nq, &j_begin, &j_end);
    j_begin = even_start(j_begin, j_end);
    const float scale_log2 = p->scale * SDPA_LOG2E;
    for (int64_t j0 = j_begin; j0 < j_end; j0 += FORWARD_K_TILE) {
        const int64_t nk = min64(FORWARD_K_TILE, j_end - j0);
        bf16->gemm(nk, nq, d2, k_rows + j0 * d2, d2, 1, q_pairs, ld, s_t, ld, scale_log2,
                   SDPA_GEMM_STORE, NULL);
        if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
            mask_tile_keys_by_queries(p, b, h, padding_row, s_t, ld, i0, nq, j0, nk, SDPA_LOG2E);
        bf16->softmax_columns(s_t, nk, nq, ld, run_max, run_sum, rescale, p_pairs);
        bf16->gemm(nq, dv, pairs_of(nk), p_pairs, 1, ld, v_pairs + j0 / 2 * dv, dv, o, dv, 1.0f,
                   SDPA_GEMM_SCALE_ROWS, rescale);
    }

    float *lse = rescale;
    int64_t row0 = (b * p->heads + h) * p->len_q + i0;
    for (int64_t ii = 0; ii < nq; ii++) {
        float *out = view_at(&p->out, b, h, i0 + ii);
        const int masked = run_sum[ii] == 0.0f;
        lse[ii] = masked ? -INFINITY : (run_max[ii] + log2f(run_sum[ii])) * SDPA_LN2;
        const float inverse_sum = masked ? 0.0f : 1.0f / run_sum[ii];
        for (int64_t y = 0; y < dv; y++) /* exactly zero when masked, even if V holds inf */
            out[y] = masked ? 0.0f : o[ii * dv + y] * inverse_sum;
    }
    if (p->lse != NULL)
        memcpy(p->lse + row0, lse, (size_t)nq * sizeof(float));
    if (p->weights == NULL)
        return;

    float *weights = p->weights + row0 * p->len_k;
    for (int64_t ii = 0; ii < nq; ii++) {
        fill(weights + ii * p->len_k, j_begin, 0.0f);
        fill(weights + ii * p->len_k + j_end, p->len_k - j_end, 0.0f);
    }
    for (int64_t j0 = j_begin; j0 < j_end; j0 += FORWARD_K_TILE) {
        const int64_t nk = min64(FORWARD_K_TILE, j_end - j0);
        bf16->gemm(nk, nq, d2, k_rows + j0 * d2, d2, 1, q_pairs, ld, s_t, ld, p->scale,
                   SDPA_GEMM_STORE, NULL);
        if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
            mask_tile_keys_by_queries(p, b, h, padding_row, s_t, ld, i0, nq, j0, nk, 1.0f);
        kern->exp_columns(s_t, nk, nq, ld, lse);
        kern->transpose(s_t, ld, nk, nq, weights + j0, p->len_k, NULL, 1.0f);
    }
}

static void forward_items(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    const forward_job *job = ctx;
    float *scratch = job->scratch + (size_t)thread_index * job->scratch_per_thread;
    int64_t packed_head = -1;
    for (int64_t item = begin; item < end; item++) {
        int64_t head = item / job->q_tiles, r = item % job->q_tiles;
        /* Alternate first and last tiles so that each thread's contiguous share of a head
         * gets as many long (late, under a causal mask) tiles as short ones. */
        int64_t tile = r % 2 == 0 ? r / 2 : job->q_tiles - 1 - r / 2;
        int64_t b = head / job->p->heads, h = head % job->p->heads;
        if (job->bf16 == NULL) {
            forward_tile(job, b, h, tile * FORWARD_Q_TILE, scratch);
            continue;
        }
        if (head != packed_head)
            forward_pack_head_bf16(job, b, h, scratch);
        packed_head = head;
        forward_tile_bf16(job, b, h, tile * FORWARD_Q_TILE, scratch);
    }
}

attn_status attn_sdpa_tiled_forward(const sdpa_problem *p, const sdpa_kernels *kern)
{
    forward_job job = {
        p,
        kern,
        p->precision == ATTN_PRECISION_BF16 ? attn_sdpa_bf16_kernels_for(attn_active_isa()) : NULL,
        (p->len_q + FORWARD_Q_TILE - 1) / FORWARD_Q_TILE,
        NULL,
        0};
    if (!scratch_per_thread(p, 0, &job.scratch_per_thread))
        return ATTN_ERR_OUT_OF_MEMORY;
    int threads = attn_parallel_threads();
    job.scratch = alloc_scratch(job.scratch_per_thread, threads);
    if (job.scratch == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_parallel_for(p->batch * p->heads * job.q_tiles, 1, forward_items, &job);
    attn_scratch_release(job.scratch);
    return ATTN_OK;
}

/* ---- backward -------------------------------------------------------------------------- */

/* Work item = (head, key group). With one group per head a thread owns the whole head and
 * adds into dq directly. When the heads do not spread evenly over the threads (fewer heads
 * than threads, or an uneven count of few heads), each head's key tiles are dealt into
 * groups instead: a group owns its key tiles' dk and dv rows but shares dq with the head's
 * other groups, so it accumulates dq into a partial buffer of its own, and the partials are
 * added to dq in group order at the end. The grouping depends only on the sizes and the
 * thread count, so results stay bit-identical at a fixed thread count. */
typedef struct backward_job {
    const sdpa_problem *p;
    const sdpa_kernels *kern;
    const sdpa_bf16_kernels *bf16; /* NULL in float32 */
    int64_t groups, key_tiles;
    float *dq_partial; /* [groups, B*H, Lq, d] when groups > 1 */
    float *scratch;
    size_t scratch_per_thread;
} backward_job;

static int64_t backward_groups(const sdpa_problem *p, int threads)
{
    const int64_t heads = p->batch * p->heads;
    const int64_t key_tiles = (p->len_k + BACKWARD_K_TILE - 1) / BACKWARD_K_TILE;
    if (threads <= 1 || heads % threads == 0 || heads >= 4 * threads)
        return 1;
    return max64(1, min64(threads, key_tiles));
}

/* The key tile at a position of a head's work: in order with one group; otherwise dealt
 * first, last, second, second to last... so that each group's contiguous share holds as
 * many early key tiles (which a causal mask lets more queries see) as late ones. */
static int64_t backward_key_tile(const backward_job *job, int64_t position)
{
    if (job->groups == 1)
        return position;
    return position % 2 == 0 ? position / 2 : job->key_tiles - 1 - position / 2;
}

static void add_rows(float *dst, int64_t dst_stride, const float *src, int64_t rows, int64_t width)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t x = 0; x < width; x++)
            dst[r * dst_stride + x] += src[r * width + x];
}

/* One work item's views of a head: its inputs and outputs, dq in the group's partial sums
 * (zeroed) when the head's key tiles are split between groups. */
typedef struct backward_head {
    const float *q, *k, *v, *out, *grad_out, *lse;
    float *dk, *dv, *dq;
    int64_t dq_stride;
    const uint8_t *padding_row;
} backward_head;

static backward_head backward_head_at(const backward_job *job, int64_t head, int64_t group)
{
    const sdpa_problem *p = job->p;
    const int64_t b = head / p->heads, h = head % p->heads;
    backward_head hd = {view_at(&p->q, b, h, 0),
                        view_at(&p->k, b, h, 0),
                        view_at(&p->v, b, h, 0),
                        view_at(&p->out, b, h, 0),
                        view_at(&p->grad_out, b, h, 0),
                        p->saved_lse + head * p->len_q,
                        view_at(&p->dk, b, h, 0),
                        view_at(&p->dv, b, h, 0),
                        view_at(&p->dq, b, h, 0),
                        p->dq.row_stride,
                        p->key_padding_mask != NULL ? p->key_padding_mask + b * p->len_k : NULL};
    if (job->groups > 1) {
        hd.dq = job->dq_partial + (group * p->batch * p->heads + head) * p->len_q * p->dim;
        hd.dq_stride = p->dim;
        fill(hd.dq, p->len_q * p->dim, 0.0f);
    }
    return hd;
}

/* delta_i = dO_i . O_i, the row term of the softmax gradient. */
static void output_gradient_dots(const sdpa_problem *p, const backward_head *hd, float *delta)
{
    for (int64_t i = 0; i < p->len_q; i++) {
        float sum = 0;
        for (int64_t y = 0; y < p->dim_v; y++)
            sum +=
                hd->grad_out[i * p->grad_out.row_stride + y] * hd->out[i * p->out.row_stride + y];
        delta[i] = sum;
    }
}

static void backward_item(const backward_job *job, int64_t head, int64_t group, float *scratch)
{
    const sdpa_problem *p = job->p;
    const sdpa_kernels *kern = job->kern;
    const int64_t b = head / p->heads, h = head % p->heads;
    const int64_t d = p->dim, dv = p->dim_v, ld = BACKWARD_K_TILE;
    float *cursor = scratch;
    float *k_t = take(&cursor, d * ld), *v_t = take(&cursor, dv * ld);
    float *dk_acc = take(&cursor, BACKWARD_K_TILE * d),
          *dv_acc = take(&cursor, BACKWARD_K_TILE * dv);
    float *probs = take(&cursor, BACKWARD_Q_TILE * ld), *grad = take(&cursor, BACKWARD_Q_TILE * ld);
    float *delta = take(&cursor, p->len_q);

    const backward_head hd = backward_head_at(job, head, group);
    const float *q = hd.q, *k = hd.k, *v = hd.v, *grad_out = hd.grad_out, *lse = hd.lse;
    float *dk = hd.dk, *dvals = hd.dv, *dq = hd.dq;
    const int64_t dq_stride = hd.dq_stride;
    const uint8_t *padding_row = hd.padding_row;
    const int64_t qs = p->q.row_stride, ks = p->k.row_stride, gs = p->grad_out.row_stride;

    output_gradient_dots(p, &hd, delta);
    const int64_t first = group * job->key_tiles / job->groups;
    const int64_t last = (group + 1) * job->key_tiles / job->groups;
    for (int64_t position = first; position < last; position++) {
        const int64_t j0 = backward_key_tile(job, position) * BACKWARD_K_TILE;
        const int64_t nk = min64(BACKWARD_K_TILE, p->len_k - j0);
        int64_t i_begin, i_end;
        queries_for_keys(p, j0, j0 + nk, &i_begin, &i_end);
        if (i_begin >= i_end)
            continue;
        /* K^T carries the scale so that S = Q K^T comes out scaled, as in the forward. */
        kern->transpose(k + j0 * ks, ks, nk, d, k_t, ld, NULL, p->scale);
        kern->transpose(v + j0 * p->v.row_stride, p->v.row_stride, nk, dv, v_t, ld, NULL, 1.0f);
        fill(dk_acc, nk * d, 0.0f);
        fill(dv_acc, nk * dv, 0.0f);
        for (int64_t i0 = i_begin; i0 < i_end; i0 += BACKWARD_Q_TILE) {
            const int64_t nq = min64(BACKWARD_Q_TILE, i_end - i0);
            kern->gemm(nq, nk, d, q + i0 * qs, qs, 1, k_t, ld, probs, ld, SDPA_GEMM_STORE, NULL);
            if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
                mask_tile_queries_by_keys(p, b, h, padding_row, probs, ld, i0, nq, j0, nk, 1.0f);
            kern->gemm(nq, nk, dv, grad_out + i0 * gs, gs, 1, v_t, ld, grad, ld, SDPA_GEMM_STORE,
                       NULL);
            kern->softmax_grad_rows(probs, grad, nq, nk, ld, lse + i0, delta + i0, p->scale);
            /* dV += P^T dO, dK += dS^T Q: P and dS are read transposed (row stride 1). */
            kern->gemm(nk, dv, nq, probs, 1, ld, grad_out + i0 * gs, gs, dv_acc, dv, SDPA_GEMM_ADD,
                       NULL);
            kern->gemm(nk, d, nq, grad, 1, ld, q + i0 * qs, qs, dk_acc, d, SDPA_GEMM_ADD, NULL);
            kern->gemm(nq, d, nk, grad, ld, 1, k + j0 * ks, ks, dq + i0 * dq_stride, dq_stride,
                       SDPA_GEMM_ADD, NULL);
        }
        add_rows(dk + j0 * p->dk.row_stride, p->dk.row_stride, dk_acc, nk, d);
        add_rows(dvals + j0 * p->dv.row_stride, p->dv.row_stride, dv_acc, nk, dv);
    }
}

/* backward_item with bf16 operands. Q and dO are packed once per work item in the two
 * layouts their products read (rows of pairs along the features for S = Q K^T and
 * dP = dO V^T; pairs along the queries for dK += dS^T Q and dV += P^T dO), K and V once per
 * key tile; P and dS are rounded as they are packed after the float softmax gradient. */
static void backward_item_bf16(const backward_job *job, int64_t head, int64_t group, float *scratch)
{
    const sdpa_problem *p = job->p;
    const sdpa_bf16_kernels *bf16 = job->bf16;
    const int64_t b = head / p->heads, h = head % p->heads;
    const int64_t d = p->dim, dv = p->dim_v, ld = BACKWARD_K_TILE;
    const int64_t d2 = pairs_of(d), dv2 = pairs_of(dv), q2 = pairs_of(p->len_q);
    const int64_t ld2 = BACKWARD_K_TILE / 2;
    float *cursor = scratch;
    sdpa_bf16_pair *q_rows = take_pairs(&cursor, p->len_q * d2);
    sdpa_bf16_pair *grad_out_rows = take_pairs(&cursor, p->len_q * dv2);
    sdpa_bf16_pair *q_pairs = take_pairs(&cursor, q2 * d);
    sdpa_bf16_pair *grad_out_pairs = take_pairs(&cursor, q2 * dv);
    sdpa_bf16_pair *k_t = take_pairs(&cursor, d2 * ld), *v_t = take_pairs(&cursor, dv2 * ld);
    sdpa_bf16_pair *k_pairs = take_pairs(&cursor, BACKWARD_K_TILE / 2 * d);
    float *dk_acc = take(&cursor, BACKWARD_K_TILE * d);
    float *dv_acc = take(&cursor, BACKWARD_K_TILE * dv);
    float *probs = take(&cursor, BACKWARD_Q_TILE * ld), *grad = take(&cursor, BACKWARD_Q_TILE * ld);
    sdpa_bf16_pair *prob_pairs = take_pairs(&cursor, BACKWARD_Q_TILE / 2 * ld);
    sdpa_bf16_pair *grad_pairs = take_pairs(&cursor, BACKWARD_Q_TILE / 2 * ld);
    sdpa_bf16_pair *grad_rows = take_pairs(&cursor, BACKWARD_Q_TILE * ld2);
    float *delta = take(&cursor, p->len_q), *lse_log2 = take(&cursor, p->len_q);

    const backward_head hd = backward_head_at(job, head, group);
    const float *q = hd.q, *k = hd.k, *v = hd.v, *grad_out = hd.grad_out, *lse = hd.lse;
    float *dk = hd.dk, *dvals = hd.dv, *dq = hd.dq;
    const int64_t dq_stride = hd.dq_stride;
    const uint8_t *padding_row = hd.padding_row;
    const int64_t qs = p->q.row_stride, ks = p->k.row_stride, vs = p->v.row_stride;
    const int64_t gs = p->grad_out.row_stride;
    const float scale_log2 = p->scale * SDPA_LOG2E;

    output_gradient_dots(p, &hd, delta);
    for (int64_t i = 0; i < p->len_q; i++)
        lse_log2[i] = lse[i] * SDPA_LOG2E;
    bf16->pack(q, qs, 1, p->len_q, d, q_rows, d2, 1);
    bf16->pack(grad_out, gs, 1, p->len_q, dv, grad_out_rows, dv2, 1);
    bf16->pack(q, 1, qs, d, p->len_q, q_pairs, 1, d);
    bf16->pack(grad_out, 1, gs, dv, p->len_q, grad_out_pairs, 1, dv);

    const int64_t first = group * job->key_tiles / job->groups;
    const int64_t last = (group + 1) * job->key_tiles / job->groups;
    for (int64_t position = first; position < last; position++) {
        const int64_t j0 = backward_key_tile(job, position) * BACKWARD_K_TILE;
        const int64_t nk = min64(BACKWARD_K_TILE, p->len_k - j0);
        int64_t i_begin, i_end;
        queries_for_keys(p, j0, j0 + nk, &i_begin, &i_end);
        if (i_begin >= i_end)
            continue;
        i_begin = even_start(i_begin, i_end);
        bf16->pack(k + j0 * ks, ks, 1, nk, d, k_t, 1, ld);
        bf16->pack(v + j0 * vs, vs, 1, nk, dv, v_t, 1, ld);
        bf16->pack(k + j0 * ks, 1, ks, d, nk, k_pairs, 1, d);
        fill(dk_acc, nk * d, 0.0f);
        fill(dv_acc, nk * dv, 0.0f);
        for (int64_t i0 = i_begin; i0 < i_end; i0 += BACKWARD_Q_TILE) {
            const int64_t nq = min64(BACKWARD_Q_TILE, i_end - i0);
            bf16->gemm(nq, nk, d2, q_rows + i0 * d2, d2, 1, k_t, ld, probs, ld, scale_log2,
                       SDPA_GEMM_STORE, NULL);
            if (tile_needs_masks(p, padding_row, i0, i0 + nq, j0, j0 + nk))
                mask_tile_queries_by_keys(p, b, h, padding_row, probs, ld, i0, nq, j0, nk,
                                          SDPA_LOG2E);
            bf16->gemm(nq, nk, dv2, grad_out_rows + i0 * dv2, dv2, 1, v_t, ld, grad, ld, 1.0f,
                       SDPA_GEMM_STORE, NULL);
            bf16->softmax_grad_rows(probs, grad, nq, nk, ld, lse_log2 + i0, delta + i0, p->scale,
                                    prob_pairs, grad_pairs, grad_rows, ld2);
            /* dV += P^T dO, dK += dS^T Q: pairs along the queries on both sides. */
            bf16->gemm(nk, dv, pairs_of(nq), prob_pairs, 1, ld, grad_out_pairs + i0 / 2 * dv, dv,
                       dv_acc, dv, 1.0f, SDPA_GEMM_ADD, NULL);
            bf16->gemm(nk, d, pairs_of(nq), grad_pairs, 1, ld, q_pairs + i0 / 2 * d, d, dk_acc, d,
                       1.0f, SDPA_GEMM_ADD, NULL);
            bf16->gemm(nq, d, pairs_of(nk), grad_rows, ld2, 1, k_pairs, d, dq + i0 * dq_stride,
                       dq_stride, 1.0f, SDPA_GEMM_ADD, NULL);
        }
        add_rows(dk + j0 * p->dk.row_stride, p->dk.row_stride, dk_acc, nk, d);
        add_rows(dvals + j0 * p->dv.row_stride, p->dv.row_stride, dv_acc, nk, dv);
    }
}

static void backward_items(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    const backward_job *job = ctx;
    float *scratch = job->scratch + (size_t)thread_index * job->scratch_per_thread;
    for (int64_t item = begin; item < end; item++) {
        if (job->bf16 != NULL)
            backward_item_bf16(job, item / job->groups, item % job->groups, scratch);
        else
            backward_item(job, item / job->groups, item % job->groups, scratch);
    }
}

/* dq += the groups' partial sums, added in group order; work item = one query row. */
static void reduce_dq_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    const backward_job *job = ctx;
    const sdpa_problem *p = job->p;
    const int64_t d = p->dim, rows_per_group = p->batch * p->heads * p->len_q;
    (void)thread_index;
    for (int64_t row = begin; row < end; row++) {
        const int64_t head = row / p->len_q, i = row % p->len_q;
        float *dq = view_at(&p->dq, head / p->heads, head % p->heads, i);
        for (int64_t x = 0; x < d; x++) {
            float sum = 0;
            for (int64_t g = 0; g < job->groups; g++)
                sum += job->dq_partial[(g * rows_per_group + row) * d + x];
            dq[x] += sum;
        }
    }
}

attn_status attn_sdpa_tiled_backward(const sdpa_problem *p, const sdpa_kernels *kern)
{
    const int threads = attn_parallel_threads();
    backward_job job = {
        p,
        kern,
        p->precision == ATTN_PRECISION_BF16 ? attn_sdpa_bf16_kernels_for(attn_active_isa()) : NULL,
        backward_groups(p, threads),
        (p->len_k + BACKWARD_K_TILE - 1) / BACKWARD_K_TILE,
        NULL,
        NULL,
        0};
    if (!scratch_per_thread(p, 1, &job.scratch_per_thread))
        return ATTN_ERR_OUT_OF_MEMORY;
    job.scratch = alloc_scratch(job.scratch_per_thread, threads);
    if (job.scratch == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    const int64_t dq_rows = p->batch * p->heads * p->len_q;
    if (job.groups > 1) {
        size_t partial_floats;
        if (attn_mul_size((size_t)(job.groups * dq_rows), (size_t)p->dim, &partial_floats))
            job.dq_partial = alloc_scratch(partial_floats, 1);
        if (job.dq_partial == NULL) {
            attn_scratch_release(job.scratch);
            return ATTN_ERR_OUT_OF_MEMORY;
        }
    }
    attn_parallel_for(p->batch * p->heads * job.groups, 1, backward_items, &job);
    if (job.groups > 1)
        attn_parallel_for(dq_rows, 64, reduce_dq_rows, &job);
    attn_scratch_release(job.dq_partial);
    attn_scratch_release(job.scratch);
    return ATTN_OK;
}
