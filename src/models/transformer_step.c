/* The Transformer's step decoder (step_decoder.h): its key/value cache.
 *
 * A Transformer step runs the decoder for ONE new position of every row, straight on the
 * kernels (no tape): per layer, the new token's query, key and value come from one product,
 * the key and value are appended to the row's cache, and the query attends over the cache
 * (which holds only the past, so no causal mask is needed); the cross-attention query attends
 * over the encoder memory's keys and values, projected once by attn_model_step_start. Every
 * buffer is sized at the start for max_rows rows and max_steps steps, so steps allocate
 * nothing and their memory does not grow with the steps taken.
 *
 * Products: a decoder of a few rows (greedy or beam search of one sentence) is bound by
 * reading the weights, which attn_step_linear does once per step straight from PyTorch's
 * [out, in] layout; a larger one is compute-bound and multiplies with attn_gemm on copies of
 * the weights transposed once at the start (attn_gemm reads a [k, n] operand in place, but
 * would repack [out, in] at every call). A bf16 or int8 model (quantized.c) multiplies every
 * row count with its stored matrices instead (attn_quantized_linear), the cross-attention's
 * keys and values of the memory included.
 *
 * Rows reach their cache through a slab index. Selecting rows mostly moves indices: a row
 * kept once keeps its slab, only a duplicated row's history is copied into a free slab, and
 * the read-only cross-attention slabs (one per source sentence) are shared by every row
 * decoding that sentence. */
#include "models/models_internal.h"
#include "models/step_decoder.h"
#include "models/step_attention.h"
#include "models/step_linear.h"

#include "kernels/bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y [rows, out] = x [rows, in] W^T + b, W [out, in] (PyTorch's layout). */
typedef struct linear_weights {
    const float *w, *b; /* b may be NULL */
    int64_t in, out;
    const float *w_t; /* W^T [in, out], the decoder's copy (see transpose_weights), or NULL */
    const attn_quantized_matrix *q; /* the model's bf16 or int8 W, or NULL (fp32) */
} linear_weights;

/* Sublayers of a decoder layer, in order; the language model's blocks have no cross. */
enum { SELF_ATTENTION = 0, CROSS_ATTENTION = 1, FEED_FORWARD = 2, SUBLAYERS = 3 };

typedef struct layer_weights {
    linear_weights self_qkv, self_out;
    linear_weights cross_q, cross_kv, cross_out; /* w NULL without cross-attention */
    linear_weights ff1, ff2;
    linear_weights ff3; /* SwiGLU's up projection (w NULL for the MLP) */
    const float *norm_w[SUBLAYERS], *norm_b[SUBLAYERS]; /* norm_b NULL: none (RMSNorm) */
    float norm_eps[SUBLAYERS];
} layer_weights;

typedef struct transformer_step_decoder {
    attn_step_decoder base;
    int64_t d_model, heads, d_head, ffn_dim, n_layers;
    int norm_first, has_cross;
    attn_norm_kind norm_kind; /* of every norm */
    attn_ffn_kind ffn_kind;
    attn_activation activation; /* SiLU for SwiGLU's gate */
    double rope_base;           /* 0, or the new q and k turn by the step's position */
    float embed_scale, attn_scale;
    layer_weights *layers;
    const float *embed_table, *positions;
    const float *final_norm_w, *final_norm_b; /* NULL: no final norm */
    float final_norm_eps;
    linear_weights generator;
    float *transposed; /* the w_t copies, one block */
    /* The caches hold bf16 values (kv_bf16: a bf16 or int8 model, whose products round their
     * operands to bf16 or coarser anyway; a large batch's step then reads half the bytes) or
     * floats; slab sizes and offsets count elements. */
    int kv_bf16;
    size_t kv_bytes; /* of an element */
    /* Self-attention keys and values: max_rows slabs of [layers][2][heads][max_steps][d_head]
     * (keys, then values, of each layer). */
    void *self_pool;
    int64_t self_slab;
    int64_t *self_slab_of_row, *self_slab_spare; /* [max_rows] */
    unsigned char *claimed;                      /* select: slabs given out [max_rows] */
    /* Cross-attention keys and values, one slab of [layers][2][heads][src_len][d_head] per
     * source sentence. */
    void *cross_pool;
    int64_t cross_slab;
    int64_t *cross_slab_of_row, *cross_slab_spare; /* [max_rows] */
    int32_t *src_length_of_row, *src_length_spare; /* [max_rows] */
    /* Scratch for `capacity` rows: a step's rows, or a prefill's rows x positions (position
     * major: the rows of one position are consecutive). rows is the current pass's count. */
    int64_t capacity, rows;
    int32_t *pass_ids; /* [capacity] a prefill's ids, position major */
    float *x, *normed, *sub, *qkv, *ctx, *hidden;
    float *probs; /* [max_rows, heads, probs_len]: one position's rows at a time */
    float *up;               /* SwiGLU's up projection [max_rows, ffn_dim]; NULL for the MLP */
    void *quantized_scratch; /* the activations of a bf16 or int8 product (NULL in fp32) */
    int64_t probs_len;       /* max(max_steps, src_len) per row and head */
} transformer_step_decoder;

/* ---- the Transformer step ------------------------------------------------------------------ */

static attn_status gemm_linear(const linear_weights *l, int64_t rows, const float *x, int64_t ldx,
                               float *y, int64_t ldy)
{
    if (l->b != NULL)
        for (int64_t r = 0; r < rows; r++)
            memcpy(y + r * ldy, l->b, (size_t)l->out * sizeof(float));
    const float beta = l->b != NULL ? 1.0f : 0.0f;
    if (l->w_t != NULL)
        return attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, l->out, l->in, 1.0f, x, ldx, l->w_t,
                         l->out, beta, y, ldy);
    return attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, rows, l->out, l->in, 1.0f, x, ldx, l->w, l->in,
                     beta, y, ldy);
}

/* A decoder of at most this many rows multiplies with attn_step_linear. The choice depends
 * on max_rows only, never on the current size, so that a row's results never depend on how
 * many rows are decoded beside it. */
#define STEP_LINEAR_MAX_ROWS 8

/* rows of x: the pass's (d->rows), or fewer (the output layer reads a prefill's last
 * position only). */
static attn_status linear_rows(const transformer_step_decoder *d, const linear_weights *l,
                               int64_t rows, const float *x, int64_t ldx, float *y, int64_t ldy)
{
    if (l->q != NULL) {
        const quantized_linear_args args = {rows, x, ldx, l->q, l->b, y, ldy, d->quantized_scratch};
        attn_quantized_linear(&args);
        return ATTN_OK;
    }
    if (d->base.max_rows > STEP_LINEAR_MAX_ROWS)
        return gemm_linear(l, rows, x, ldx, y, ldy);
    const step_linear_args args = {rows, l->in, l->out, x, ldx, l->w, l->b, y, ldy};
    attn_step_linear(&args);
    return ATTN_OK;
}

static attn_status linear(const transformer_step_decoder *d, const linear_weights *l,
                          const float *x, int64_t ldx, float *y, int64_t ldy)
{
    return linear_rows(d, l, d->rows, x, ldx, y, ldy);
}

static attn_status norm_of_rows(const transformer_step_decoder *d, int64_t rows,
                                const float *weight, const float *bias, float eps, const float *x,
                                float *y)
{
    if (d->norm_kind == ATTN_NORM_RMS)
        return attn_rms_norm_forward(rows, d->d_model, x, weight, eps, y, NULL);
    return attn_layer_norm_forward(rows, d->d_model, x, weight, bias, eps, y, NULL, NULL);
}

/* y = the model's norm (LayerNorm or RMSNorm) of x, for the pass's rows. */
static attn_status norm_rows(const transformer_step_decoder *d, const float *weight,
                             const float *bias, float eps, const float *x, float *y)
{
    return norm_of_rows(d, d->rows, weight, bias, eps, x, y);
}

/* A sublayer's input: norm(x) before a pre-norm sublayer, x itself after a post-norm one. */
static attn_status open_sublayer(transformer_step_decoder *d, const layer_weights *w, int which,
                                 const float **in)
{
    *in = d->x;
    if (!d->norm_first)
        return ATTN_OK;
    *in = d->normed;
    return norm_rows(d, w->norm_w[which], w->norm_b[which], w->norm_eps[which], d->x, d->normed);
}

/* x = x + sub (pre-norm) or norm(x + sub) (post-norm). */
static attn_status close_sublayer(transformer_step_decoder *d, const layer_weights *w, int which)
{
    const int64_t count = d->rows * d->d_model;
    if (d->norm_first) {
        for (int64_t i = 0; i < count; i++)
            d->x[i] += d->sub[i];
        return ATTN_OK;
    }
    for (int64_t i = 0; i < count; i++)
        d->sub[i] += d->x[i];
    return norm_rows(d, w->norm_w[which], w->norm_b[which], w->norm_eps[which], d->sub, d->x);
}

static kv_cache_view self_cache_view(const transformer_step_decoder *d, int64_t layer)
{
    const int64_t head_stride = d->base.max_steps * d->d_head;
    return (kv_cache_view){d->self_pool,
                           d->kv_bf16,
                           d->self_slab_of_row,
                           d->self_slab,
                           layer * 2 * d->heads * head_stride,
                           head_stride,
                           d->heads * head_stride,
                           d->base.steps + 1,
                           NULL};
}

static kv_cache_view cross_cache_view(const transformer_step_decoder *d, int64_t layer)
{
    const int64_t head_stride = d->base.src_len * d->d_head;
    return (kv_cache_view){d->cross_pool,
                           d->kv_bf16,
                           d->cross_slab_of_row,
                           d->cross_slab,
                           layer * 2 * d->heads * head_stride,
                           head_stride,
                           d->heads * head_stride,
                           d->base.src_len,
                           d->src_length_of_row};
}

/* n values of x into the cache at element at, rounded to bf16 in a bf16 cache. */
static void store_kv(const transformer_step_decoder *d, void *pool, int64_t at, const float *x,
                     int64_t n)
{
    if (!d->kv_bf16) {
        memcpy((float *)pool + at, x, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *to = (uint16_t *)pool + at;
    for (int64_t i = 0; i < n; i++)
        to[i] = attn_bf16_from_float(x[i]);
}

/* The pass's positions steps .. steps + positions - 1 of every row: each position's keys and
 * values join the cache, then its queries attend over the cache up to itself, so a prefill's
 * row sees what the same row would have seen one step at a time. */
static attn_status self_attention(transformer_step_decoder *d, int64_t layer,
                                  const layer_weights *w)
{
    const int64_t n = d->base.size, E = d->d_model, dh = d->d_head, first = d->base.steps;
    const int64_t positions = d->rows / n;
    const float *in;
    ATTN_TRY(open_sublayer(d, w, SELF_ATTENTION, &in));
    ATTN_TRY(linear(d, &w->self_qkv, in, E, d->qkv, 3 * E));
    kv_cache_view kv = self_cache_view(d, layer);
    for (int64_t p = 0; p < positions; p++) {
        const int64_t t = first + p;
        float *qkv = d->qkv + p * n * 3 * E;
        if (d->rope_base > 0.0) { /* the query and key of position t turn; the cache keeps
                                   * keys turned */
            ATTN_TRY(attn_rope_rotate(qkv, n, 1, t, 3 * E, d->heads, dh, d->rope_base, 0));
            ATTN_TRY(attn_rope_rotate(qkv + E, n, 1, t, 3 * E, d->heads, dh, d->rope_base, 0));
        }
        for (int64_t r = 0; r < n; r++) {
            const int64_t slab = d->self_slab_of_row[r] * d->self_slab + kv.offset;
            for (int64_t h = 0; h < d->heads; h++) {
                const int64_t key = slab + h * kv.head_stride + t * dh;
                store_kv(d, d->self_pool, key, qkv + r * 3 * E + E + h * dh, dh);
                store_kv(d, d->self_pool, key + kv.value_offset, qkv + r * 3 * E + 2 * E + h * dh,
                         dh);
            }
        }
        kv.count = t + 1;
        step_attention a = {d->heads,     dh, d->attn_scale,      qkv,
                            3 * E,        kv, d->probs,           d->heads * d->probs_len,
                            d->probs_len, 0,  d->ctx + p * n * E, E};
        attn_step_attend(&a, n, t + 1);
    }
    ATTN_TRY(linear(d, &w->self_out, d->ctx, E, d->sub, E));
    return close_sublayer(d, w, SELF_ATTENTION);
}

/* cross (NULL: not wanted) [size, layers * heads, src_len]. */
static attn_status cross_attention(transformer_step_decoder *d, int64_t layer,
                                   const layer_weights *w, float *cross)
{
    const int64_t n = d->base.size, E = d->d_model, S = d->base.src_len;
    const float *in;
    ATTN_TRY(open_sublayer(d, w, CROSS_ATTENTION, &in));
    ATTN_TRY(linear(d, &w->cross_q, in, E, d->qkv, E));
    step_attention a = {d->heads,
                        d->d_head,
                        d->attn_scale,
                        d->qkv,
                        E,
                        cross_cache_view(d, layer),
                        d->probs,
                        d->heads * d->probs_len,
                        d->probs_len,
                        0,
                        d->ctx,
                        E};
    if (cross != NULL) {
        a.probs = cross + layer * d->heads * S;
        a.probs_row_stride = d->n_layers * d->heads * S;
        a.probs_head_stride = S;
        a.probs_fill = S;
    }
    attn_step_attend(&a, n, S);
    ATTN_TRY(linear(d, &w->cross_out, d->ctx, E, d->sub, E));
    return close_sublayer(d, w, CROSS_ATTENTION);
}

static attn_status feed_forward(transformer_step_decoder *d, const layer_weights *w)
{
    const int64_t n = d->rows, E = d->d_model, F = d->ffn_dim;
    const float *in;
    ATTN_TRY(open_sublayer(d, w, FEED_FORWARD, &in));
    ATTN_TRY(linear(d, &w->ff1, in, E, d->hidden, F));
    ATTN_TRY(attn_activation_forward(d->activation, n * F, d->hidden, d->hidden));
    if (w->ff3.w != NULL) { /* SwiGLU: silu(gate) * up */
        ATTN_TRY(linear(d, &w->ff3, in, E, d->up, F));
        for (int64_t i = 0; i < n * F; i++)
            d->hidden[i] *= d->up[i];
    }
    ATTN_TRY(linear(d, &w->ff2, d->hidden, F, d->sub, E));
    return close_sublayer(d, w, FEED_FORWARD);
}

/* Runs the blocks over d->rows rows of ids (position major) at positions steps .. steps +
 * rows / size - 1, then the output layer over the last position's rows only. */
static attn_status run_pass(transformer_step_decoder *d, const int32_t *ids, float *logits,
                            float *cross)
{
    const int64_t n = d->base.size, E = d->d_model, rows = d->rows;
    ATTN_TRY(attn_embedding_forward(rows, d->base.vocab, E, d->embed_table, ids, d->embed_scale,
                                    d->x));
    for (int64_t p = 0; d->positions != NULL && p < rows / n; p++) {
        const float *position = d->positions + (d->base.steps + p) * E;
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < E; i++)
                d->x[(p * n + r) * E + i] += position[i];
    }
    for (int64_t l = 0; l < d->n_layers; l++) {
        const layer_weights *w = &d->layers[l];
        ATTN_TRY(self_attention(d, l, w));
        if (d->has_cross)
            ATTN_TRY(cross_attention(d, l, w, cross));
        ATTN_TRY(feed_forward(d, w));
    }
    const float *top = d->x + (rows - n) * E;
    if (d->final_norm_w != NULL) {
        ATTN_TRY(norm_of_rows(d, n, d->final_norm_w, d->final_norm_b, d->final_norm_eps, top,
                              d->normed));
        top = d->normed;
    }
    return linear_rows(d, &d->generator, n, top, E, logits, d->base.vocab);
}

static attn_status transformer_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                                    float *cross)
{
    transformer_step_decoder *d = (transformer_step_decoder *)decoder;
    d->rows = d->base.size;
    return run_pass(d, ids, logits, cross);
}

/* As many positions a pass as the scratch holds: each weight matrix is then read once for
 * all of them rather than once a position. A row's every product goes through the same
 * operations as in a step (the choice of product depends on max_rows only, and each output
 * row of a product is computed alone), so a prefill equals its steps bit for bit. The
 * decoder's steps count stays the caller's (step_decoder.c adds count after). */
static attn_status transformer_prefill(attn_step_decoder *decoder, const int32_t *ids,
                                       int64_t count, float *logits)
{
    transformer_step_decoder *d = (transformer_step_decoder *)decoder;
    const int64_t n = d->base.size, first = d->base.steps;
    const int64_t per_pass = d->has_cross ? 1 : d->capacity / n;
    attn_status status = ATTN_OK;
    for (int64_t done = 0; done < count && status == ATTN_OK;) {
        const int64_t positions = count - done < per_pass ? count - done : per_pass;
        for (int64_t p = 0; p < positions; p++)
            for (int64_t r = 0; r < n; r++)
                d->pass_ids[p * n + r] = ids[r * count + done + p];
        d->rows = positions * n;
        d->base.steps = first + done;
        status = run_pass(d, d->pass_ids, logits, NULL);
        done += positions;
    }
    d->base.steps = first;
    return status;
}

/* ---- start --------------------------------------------------------------------------------- */

static const float *param(const attn_model *m, attn_param_id id)
{
    return id < 0 ? NULL : attn_params_data(m->params, id, ATTN_PARAM_VALUES);
}

static linear_weights linear_of(const attn_model *m, const attn_nn_linear *l)
{
    return (linear_weights){param(m, l->weight),
                            param(m, l->bias),
                            l->in_features,
                            l->out_features,
                            NULL,
                            attn_model_quantized(m, l->weight)};
}

static void set_norm(const attn_model *m, layer_weights *w, int which,
                     const attn_nn_layer_norm *norm)
{
    w->norm_w[which] = param(m, norm->weight);
    w->norm_b[which] = param(m, norm->bias);
    w->norm_eps[which] = norm->eps;
}

static void attention_weights(const attn_model *m, const attn_nn_mha *mha, linear_weights *qkv,
                              linear_weights *out)
{
    const int64_t E = mha->embed_dim;
    *qkv = (linear_weights){param(m, mha->in_proj_weight),
                            param(m, mha->in_proj_bias),
                            E,
                            3 * E,
                            NULL,
                            attn_model_quantized(m, mha->in_proj_weight)};
    *out = (linear_weights){param(m, mha->out_proj_weight),
                            param(m, mha->out_proj_bias),
                            E,
                            E,
                            NULL,
                            attn_model_quantized(m, mha->out_proj_weight)};
}

static void gather_weights(transformer_step_decoder *d, const attn_model *m)
{
    const int64_t E = d->d_model;
    for (int64_t l = 0; l < d->n_layers; l++) {
        layer_weights *w = &d->layers[l];
        if (d->has_cross) {
            const attn_nn_decoder_layer *layer = &m->decoder_layers[l];
            attention_weights(m, &layer->self_attn, &w->self_qkv, &w->self_out);
            linear_weights packed;
            attention_weights(m, &layer->multihead_attn, &packed, &w->cross_out);
            /* The packed [3E, E] projection: Q's rows first, then K's and V's. */
            w->cross_q = (linear_weights){
                packed.w, packed.b, E, E, NULL, m->cross_q != NULL ? &m->cross_q[l] : NULL};
            w->cross_kv = (linear_weights){packed.w + E * E,
                                           packed.b != NULL ? packed.b + E : NULL,
                                           E,
                                           2 * E,
                                           NULL,
                                           m->cross_kv != NULL ? &m->cross_kv[l] : NULL};
            w->ff1 = linear_of(m, &layer->ff.linear1);
            w->ff2 = linear_of(m, &layer->ff.linear2);
            w->ff3 = linear_of(m, &layer->ff.linear3);
            set_norm(m, w, SELF_ATTENTION, &layer->norm1);
            set_norm(m, w, CROSS_ATTENTION, &layer->norm2);
            set_norm(m, w, FEED_FORWARD, &layer->norm3);
        } else {
            const attn_nn_encoder_layer *block = &m->blocks[l];
            attention_weights(m, &block->self_attn, &w->self_qkv, &w->self_out);
            w->ff1 = linear_of(m, &block->ff.linear1);
            w->ff2 = linear_of(m, &block->ff.linear2);
            w->ff3 = linear_of(m, &block->ff.linear3);
            set_norm(m, w, SELF_ATTENTION, &block->norm1);
            set_norm(m, w, FEED_FORWARD, &block->norm2);
        }
    }
    d->embed_table = param(m, m->tgt_embed.weight);
    d->positions = attn_model_position_rows(m, 0);
    if (m->has_decoder_norm) {
        d->final_norm_w = param(m, m->decoder_norm.weight);
        d->final_norm_b = param(m, m->decoder_norm.bias);
        d->final_norm_eps = m->decoder_norm.eps;
    }
    d->generator = linear_of(m, &m->generator);
}

/* The linears of a step, for transposing their weights. */
static int step_linears(transformer_step_decoder *d, linear_weights **out)
{
    int n = 0;
    for (int64_t l = 0; l < d->n_layers; l++) {
        layer_weights *w = &d->layers[l];
        out[n++] = &w->self_qkv;
        out[n++] = &w->self_out;
        if (d->has_cross) {
            out[n++] = &w->cross_q;
            out[n++] = &w->cross_out;
        }
        out[n++] = &w->ff1;
        out[n++] = &w->ff2;
        if (w->ff3.w != NULL)
            out[n++] = &w->ff3;
    }
    out[n++] = &d->generator;
    return n;
}

/* With many rows the steps multiply with attn_gemm, which reads a [k, n] right-hand side in
 * place but would repack W [out, in] at every call: transposing every weight once here
 * costs about one step's repacking and saves it at all the others. */
static attn_status transpose_weights(const char *fn, transformer_step_decoder *d)
{
    linear_weights **all = malloc((size_t)(7 * d->n_layers + 1) * sizeof *all);
    if (all == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    const int n = step_linears(d, all);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (all[i]->q == NULL)
            total += (size_t)(all[i]->in * all[i]->out);
    d->transposed = attn_aligned_alloc((total > 0 ? total : 1) * sizeof(float));
    if (d->transposed == NULL) {
        free(all);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu floats of weights", fn,
                         total);
    }
    float *next = d->transposed;
    /* Sixteen outputs at a time: sixteen rows of W read as sequential streams, each k writing
     * one whole cache line of W^T (square blocks write lines that alias in L1 at the
     * power-of-two strides of these matrices). */
    enum { BLOCK = 16 };
    for (int i = 0; i < n; i++) {
        if (all[i]->q != NULL)
            continue;
        const int64_t in = all[i]->in, out = all[i]->out;
        const float *w = all[i]->w;
        for (int64_t o0 = 0; o0 < out; o0 += BLOCK) {
            const int64_t width = out - o0 < BLOCK ? out - o0 : BLOCK;
            for (int64_t k = 0; k < in; k++)
                for (int64_t o = 0; o < width; o++)
                    next[k * out + o0 + o] = w[(o0 + o) * in + k];
        }
        all[i]->w_t = next;
        next += in * out;
    }
    free(all);
    return ATTN_OK;
}

/* count floats (at least one, so that empty batches need no special case), 64-byte aligned;
 * *fits is cleared on overflow or when the allocation fails. */
/* a x b elements of the given size; *fits becomes 0 when they cannot be had. */
static void *alloc_elements(int64_t a, int64_t b, size_t bytes, int *fits)
{
    size_t count;
    if (!attn_mul_size((size_t)a, (size_t)b, &count) || count > SIZE_MAX / bytes / 2) {
        *fits = 0;
        return NULL;
    }
    void *p = attn_aligned_alloc((count > 0 ? count : 1) * bytes);
    if (p == NULL)
        *fits = 0;
    return p;
}

static float *alloc_floats(int64_t a, int64_t b, int *fits)
{
    return alloc_elements(a, b, sizeof(float), fits);
}

/* A prefill's rows x positions a pass at least (transformer_prefill): enough to read each
 * weight matrix once for many positions, little memory beside the cache. */
#define PREFILL_ROWS 64

static attn_status allocate(const char *fn, transformer_step_decoder *d, int64_t sentences)
{
    const int64_t max_rows = d->base.max_rows, E = d->d_model;
    const int64_t rows = max_rows > PREFILL_ROWS ? max_rows : PREFILL_ROWS;
    int fits = 1;
    d->capacity = rows;
    d->self_slab = d->n_layers * 2 * d->heads * d->base.max_steps * d->d_head;
    d->cross_slab = d->n_layers * 2 * d->heads * d->base.src_len * d->d_head;
    d->probs_len = d->base.max_steps > d->base.src_len ? d->base.max_steps : d->base.src_len;
    d->self_pool = alloc_elements(max_rows, d->self_slab, d->kv_bytes, &fits);
    d->cross_pool =
        d->has_cross ? alloc_elements(sentences, d->cross_slab, d->kv_bytes, &fits) : NULL;
    d->x = alloc_floats(rows, E, &fits);
    d->normed = alloc_floats(rows, E, &fits);
    d->sub = alloc_floats(rows, E, &fits);
    d->qkv = alloc_floats(rows, 3 * E, &fits);
    d->ctx = alloc_floats(rows, E, &fits);
    d->hidden = alloc_floats(rows, d->ffn_dim, &fits);
    if (d->ffn_kind == ATTN_FFN_SWIGLU)
        d->up = alloc_floats(rows, d->ffn_dim, &fits);
    d->probs = alloc_floats(max_rows * d->heads, d->probs_len, &fits);
    d->pass_ids = malloc((size_t)rows * sizeof(int32_t));
    const size_t n = (size_t)(max_rows > 0 ? max_rows : 1);
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    d->self_slab_of_row = malloc(n * sizeof(int64_t));
    d->self_slab_spare = malloc(n * sizeof(int64_t));
    d->cross_slab_of_row = malloc(n * sizeof(int64_t));
    d->cross_slab_spare = malloc(n * sizeof(int64_t));
    d->src_length_of_row = malloc(n * sizeof(int32_t));
    d->src_length_spare = malloc(n * sizeof(int32_t));
    d->claimed = malloc(n);
    if (!fits || d->pass_ids == NULL || d->layers == NULL || d->self_slab_of_row == NULL ||
        d->self_slab_spare == NULL ||
        d->cross_slab_of_row == NULL || d->cross_slab_spare == NULL ||
        d->src_length_of_row == NULL || d->src_length_spare == NULL || d->claimed == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                         "%s: out of memory for %lld rows of %lld steps (the key/value cache "
                         "takes %lld bytes per row)",
                         fn, (long long)rows, (long long)d->base.max_steps,
                         (long long)(d->self_slab * (int64_t)d->kv_bytes));
    return ATTN_OK;
}

/* The cross-attention keys and values of every layer from memory [B, S, E], into slab b of
 * sentence b, head by head. */
static attn_status project_memory(const char *fn, transformer_step_decoder *d, const float *memory,
                                  int64_t sentences)
{
    const int64_t E = d->d_model, S = d->base.src_len, dh = d->d_head, H = d->heads;
    const int64_t tokens = sentences * S;
    if (tokens == 0)
        return ATTN_OK;
    int fits = 1;
    float *kv = alloc_floats(tokens, 2 * E, &fits);
    const attn_quantized_matrix *q = d->layers[0].cross_kv.q;
    void *scratch =
        q != NULL ? attn_aligned_alloc(attn_quantized_linear_scratch_bytes(tokens, q)) : NULL;
    if (!fits || (q != NULL && scratch == NULL)) {
        attn_aligned_free(kv);
        attn_aligned_free(scratch);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    attn_status status = ATTN_OK;
    for (int64_t l = 0; l < d->n_layers && status == ATTN_OK; l++) {
        const linear_weights *w = &d->layers[l].cross_kv;
        if (w->q != NULL) {
            const quantized_linear_args args = {tokens, memory, E, w->q, w->b, kv, 2 * E, scratch};
            attn_quantized_linear(&args);
        } else {
            status = gemm_linear(w, tokens, memory, E, kv, 2 * E);
        }
        const kv_cache_view view = cross_cache_view(d, l);
        for (int64_t b = 0; b < sentences && status == ATTN_OK; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t s = 0; s < S; s++) {
                    const int64_t key =
                        b * d->cross_slab + view.offset + h * view.head_stride + s * dh;
                    const float *row = kv + (b * S + s) * 2 * E;
                    store_kv(d, d->cross_pool, key, row + h * dh, dh);
                    store_kv(d, d->cross_pool, key + view.value_offset, row + E + h * dh, dh);
                }
    }
    attn_aligned_free(scratch);
    attn_aligned_free(kv);
    return status;
}

/* Room for the converted activations of the widest bf16 or int8 product. */
static attn_status allocate_quantized_scratch(const char *fn, transformer_step_decoder *d)
{
    linear_weights **all = malloc((size_t)(7 * d->n_layers + 1) * sizeof *all);
    if (all == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    const int n = step_linears(d, all);
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        if (all[i]->q != NULL) {
            const size_t need = attn_quantized_linear_scratch_bytes(d->capacity, all[i]->q);
            bytes = need > bytes ? need : bytes;
        }
    free(all);
    if (bytes == 0)
        return ATTN_OK;
    d->quantized_scratch = attn_aligned_alloc(bytes);
    if (d->quantized_scratch == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of activations",
                         fn, bytes);
    return ATTN_OK;
}

static attn_status check_memory(const char *fn, const attn_model *m, const attn_var *memory,
                                const int32_t *src_lengths)
{
    const attn_model_config *c = &m->config;
    if (c->arch == ATTN_ARCH_TRANSFORMER_LM) {
        ATTN_CHECK_ARG(memory == NULL && src_lengths == NULL,
                       "%s: a language model decodes from no memory (pass NULL for memory and "
                       "src_lengths)",
                       fn);
        return ATTN_OK;
    }
    ATTN_CHECK_ARG(memory != NULL, "%s: memory must not be NULL (attn_model_encode's output)", fn);
    ATTN_CHECK_ARG(memory->value.ndim == 3 && memory->value.shape[1] >= 1 &&
                       memory->value.shape[2] == c->d_model &&
                       attn_tensor_is_contiguous(&memory->value),
                   "%s: memory must be a contiguous [size, src_len >= 1, %lld] "
                   "(attn_model_encode's output)",
                   fn, (long long)c->d_model);
    const int64_t size = memory->value.shape[0], src_len = memory->value.shape[1];
    ATTN_CHECK_ARG(size == 0 || memory->value.data != NULL, "%s: memory has no data", fn);
    if (src_lengths != NULL)
        for (int64_t b = 0; b < size; b++)
            ATTN_CHECK_ARG(src_lengths[b] >= 0 && src_lengths[b] <= src_len,
                           "%s: src_lengths[%lld] = %d is outside [0, %lld]", fn, (long long)b,
                           (int)src_lengths[b], (long long)src_len);
    return ATTN_OK;
}

static attn_status transformer_start(const char *fn, transformer_step_decoder *d,
                                     const attn_model *m, const attn_var *memory,
                                     const int32_t *src_lengths)
{
    const attn_model_config *c = &m->config;
    const int lm = c->arch == ATTN_ARCH_TRANSFORMER_LM;
    ATTN_CHECK_ARG(d->base.max_steps <= c->max_len,
                   "%s: max_steps %lld is above the model's max_len %lld", fn,
                   (long long)d->base.max_steps, (long long)c->max_len);
    const int64_t sentences = lm ? 0 : memory->value.shape[0];
    ATTN_CHECK_ARG(lm || d->base.max_rows >= sentences,
                   "%s: max_rows %lld is below the memory's batch size %lld", fn,
                   (long long)d->base.max_rows, (long long)sentences);
    d->base.size = lm ? d->base.max_rows : sentences;
    d->base.src_len = lm ? 0 : memory->value.shape[1];
    d->d_model = c->d_model;
    d->heads = c->num_heads;
    d->d_head = c->d_model / c->num_heads;
    d->ffn_dim = c->ffn_dim;
    d->has_cross = !lm;
    d->n_layers = lm ? m->n_blocks : m->n_decoder_layers;
    d->base.cross_layers = lm ? 0 : d->n_layers;
    d->base.cross_maps = d->base.cross_layers * d->heads;
    d->norm_first = c->norm_first;
    d->norm_kind = c->norm;
    d->ffn_kind = c->ffn;
    d->activation = c->ffn == ATTN_FFN_SWIGLU ? ATTN_ACT_SILU : c->activation;
    d->rope_base = c->positions == ATTN_POSITIONS_ROPE ? c->rope_base : 0.0;
    d->embed_scale = attn_model_embedding_scale(c);
    d->attn_scale = (float)(1.0 / sqrt((double)d->d_head));
    d->kv_bf16 = attn_model_precision(m) != ATTN_PRECISION_FP32;
    d->kv_bytes = d->kv_bf16 ? sizeof(uint16_t) : sizeof(float);
    ATTN_TRY(allocate(fn, d, sentences));
    gather_weights(d, m);
    ATTN_TRY(allocate_quantized_scratch(fn, d));
    if (d->base.max_rows > STEP_LINEAR_MAX_ROWS)
        ATTN_TRY(transpose_weights(fn, d));
    for (int64_t r = 0; r < d->base.size; r++) {
        d->self_slab_of_row[r] = r;
        d->cross_slab_of_row[r] = lm ? 0 : r;
        d->src_length_of_row[r] = src_lengths != NULL ? src_lengths[r] : (int32_t)d->base.src_len;
    }
    return lm ? ATTN_OK : project_memory(fn, d, memory->value.data, sentences);
}

/* ---- selecting rows -------------------------------------------------------------------------- */

static void copy_history(transformer_step_decoder *d, int64_t to, int64_t from)
{
    const size_t bytes = d->kv_bytes;
    const int64_t prefix = d->base.steps * d->d_head, per_head = d->base.max_steps * d->d_head;
    const char *source = (const char *)d->self_pool + (size_t)(from * d->self_slab) * bytes;
    char *target = (char *)d->self_pool + (size_t)(to * d->self_slab) * bytes;
    for (int64_t block = 0; block < d->n_layers * 2 * d->heads; block++)
        memcpy(target + (size_t)(block * per_head) * bytes,
               source + (size_t)(block * per_head) * bytes, (size_t)prefix * bytes);
}

static void swap_indices(int64_t **a, int64_t **b)
{
    int64_t *t = *a;
    *a = *b;
    *b = t;
}

static attn_status transformer_select(attn_step_decoder *decoder, const int64_t *rows,
                                      int64_t new_size)
{
    transformer_step_decoder *d = (transformer_step_decoder *)decoder;
    /* The first new row of each old row takes over its slab; further copies get free slabs,
     * which no new row reads from (every slab read is claimed by its first reader). */
    memset(d->claimed, 0, (size_t)(d->base.max_rows > 0 ? d->base.max_rows : 1));
    for (int64_t r = 0; r < new_size; r++) {
        const int64_t slab = d->self_slab_of_row[rows[r]];
        d->self_slab_spare[r] = d->claimed[slab] ? -1 : slab;
        d->claimed[slab] = 1;
    }
    int64_t free_slab = 0;
    for (int64_t r = 0; r < new_size; r++) {
        if (d->self_slab_spare[r] >= 0)
            continue;
        while (d->claimed[free_slab])
            free_slab++;
        d->claimed[free_slab] = 1;
        copy_history(d, free_slab, d->self_slab_of_row[rows[r]]);
        d->self_slab_spare[r] = free_slab;
    }
    for (int64_t r = 0; r < new_size; r++) {
        d->cross_slab_spare[r] = d->cross_slab_of_row[rows[r]];
        d->src_length_spare[r] = d->src_length_of_row[rows[r]];
    }
    swap_indices(&d->self_slab_of_row, &d->self_slab_spare);
    swap_indices(&d->cross_slab_of_row, &d->cross_slab_spare);
    int32_t *lengths = d->src_length_of_row;
    d->src_length_of_row = d->src_length_spare;
    d->src_length_spare = lengths;
    return ATTN_OK;
}

static void transformer_destroy(attn_step_decoder *decoder)
{
    transformer_step_decoder *d = (transformer_step_decoder *)decoder;
    attn_aligned_free(d->transposed);
    attn_aligned_free(d->quantized_scratch);
    attn_aligned_free(d->self_pool);
    attn_aligned_free(d->cross_pool);
    attn_aligned_free(d->x);
    attn_aligned_free(d->normed);
    attn_aligned_free(d->sub);
    attn_aligned_free(d->qkv);
    attn_aligned_free(d->ctx);
    attn_aligned_free(d->hidden);
    attn_aligned_free(d->up);
    attn_aligned_free(d->probs);
    free(d->pass_ids);
    free(d->layers);
    free(d->self_slab_of_row);
    free(d->self_slab_spare);
    free(d->cross_slab_of_row);
    free(d->cross_slab_spare);
    free(d->src_length_of_row);
    free(d->src_length_spare);
    free(d->claimed);
    free(d);
}

static const attn_step_decoder_ops transformer_ops = {transformer_step, transformer_select,
                                                      transformer_destroy, transformer_prefill};

attn_status attn_transformer_step_start(const char *fn, attn_model *model, attn_var *memory,
                                        const int32_t *src_lengths, int64_t max_rows,
                                        int64_t max_steps, attn_step_decoder **out)
{
    *out = NULL;
    ATTN_TRY(check_memory(fn, model, memory, src_lengths));
    transformer_step_decoder *d = calloc(1, sizeof *d);
    if (d == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    d->base = (attn_step_decoder){&transformer_ops,        0, max_rows, max_steps, 0,
                                  model->config.tgt_vocab, 0, 0,        0};
    const attn_status status = transformer_start(fn, d, model, memory, src_lengths);
    if (status != ATTN_OK) {
        transformer_destroy(&d->base);
        return status;
    }
    *out = &d->base;
    return ATTN_OK;
}
