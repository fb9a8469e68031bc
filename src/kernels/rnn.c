/* GRU and LSTM: argument checks, the layout of the caller's buffers, dispatch, and the float
 * engine, which does every matrix product with attn_gemm:
 *   forward   one GEMM for the input projection of all B * T positions; per step one GEMM
 *             h W_hh^T over the sentences still running, then the fused gate math
 *             (rnn_gates*.c) threaded over them
 *   backward  per step (in reverse) the gate gradients, threaded, then one GEMM for the
 *             state's gradient; at the end one GEMM each for dx, dW_ih and dW_hh (two for
 *             GRU) over all positions, and column sums for the biases.
 * Sentences are sorted by length once (longest first, ties by index), so the ones still
 * running at a step are a prefix of the running state [B, H] and each step's GEMM covers
 * exactly them. Each sentence's rows are written by one thread and every sum has a fixed
 * order, so results do not depend on the thread count. A cell is a layer with T = 1. */
#include "kernels/rnn_internal.h"

#include "attn/attn_kernels.h"

#include <stdint.h>
#include <string.h>

/* ---- sizes and layout ---------------------------------------------------------------- */

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Nonzero when a * b * c (all >= 0) stays below 2^60, so that no count or index derived
 * from the sizes (a few such products added up) can overflow. */
static int product_fits(int64_t a, int64_t b, int64_t c)
{
    const int64_t limit = (int64_t)1 << 60;
    if (a == 0 || b == 0 || c == 0)
        return 1;
    return a <= limit / b && a * b <= limit / c;
}

static int make_layout(const attn_rnn_layer_dims *d, attn_rnn_layout *l)
{
    if (d == NULL || (d->cell != ATTN_RNN_GRU && d->cell != ATTN_RNN_LSTM) || d->batch < 0 ||
        d->seq_len < 0 || d->input_size < 1 || d->hidden_size < 1 ||
        (d->output_stride != 0 && d->output_stride < d->hidden_size) ||
        (d->precision != ATTN_PRECISION_FP32 && d->precision != ATTN_PRECISION_BF16))
        return 0;
    int64_t B = d->batch, T = d->seq_len, I = d->input_size, H = d->hidden_size;
    int64_t stride = d->output_stride != 0 ? d->output_stride : H;
    if (!product_fits(B, T, 8 * H) || !product_fits(B, T, I) || !product_fits(B, T, stride) ||
        !product_fits(4, H, I) || !product_fits(4, H, H) || !product_fits(B, 8, H))
        return 0;
    int lstm = d->cell == ATTN_RNN_LSTM;
    memset(l, 0, sizeof *l);
    l->cell = d->cell;
    l->reverse = d->reverse != 0;
    l->batch = B;
    l->seq_len = T;
    l->input_size = I;
    l->hidden_size = H;
    l->gate_rows = (lstm ? 4 : 3) * H;
    l->gate_stride = (lstm ? 5 : 4) * H;
    l->grad_stride = 4 * H;
    l->output_stride = stride;
    l->precision = d->precision;

    size_t positions = (size_t)B * (size_t)T, h = (size_t)H;
    l->saved_h = round16(positions * (size_t)l->gate_stride);
    l->saved_c = l->saved_h + round16(positions * h);
    l->saved_floats = l->saved_c + (lstm ? round16(positions * h) : 0);

    l->work_state_h = round16(2 * (size_t)B); /* the order, one int64 in two floats each */
    l->work_state_c = l->work_state_h + round16((size_t)B * h);
    l->work_rows = l->work_state_c + (lstm ? round16((size_t)B * h) : 0);
    l->work_dgates = l->work_rows + round16((size_t)B * (size_t)l->gate_rows);
    l->workspace_floats = l->work_dgates + round16(positions * (size_t)l->grad_stride);
    return 1;
}

static attn_rnn_layer_dims layer_of_cell(const attn_rnn_cell_dims *d)
{
    attn_rnn_layer_dims layer = {d->cell,        d->batch, 1, d->input_size,
                                 d->hidden_size, 0,        0, ATTN_PRECISION_FP32};
    return layer;
}

size_t attn_rnn_layer_saved_floats(const attn_rnn_layer_dims *dims)
{
    attn_rnn_layout l;
    return make_layout(dims, &l) ? l.saved_floats : 0;
}

size_t attn_rnn_layer_workspace_floats(const attn_rnn_layer_dims *dims)
{
    attn_rnn_layout l;
    return make_layout(dims, &l) ? l.workspace_floats : 0;
}

size_t attn_rnn_cell_saved_floats(const attn_rnn_cell_dims *dims)
{
    if (dims == NULL)
        return 0;
    attn_rnn_layer_dims layer = layer_of_cell(dims);
    return attn_rnn_layer_saved_floats(&layer);
}

size_t attn_rnn_cell_workspace_floats(const attn_rnn_cell_dims *dims)
{
    if (dims == NULL)
        return 0;
    attn_rnn_layer_dims layer = layer_of_cell(dims);
    return attn_rnn_layer_workspace_floats(&layer);
}

/* ---- argument checks ----------------------------------------------------------------- */

#define RNN_NOT_NULL(fn, ptr)                                                                      \
    do {                                                                                           \
        if ((ptr) == NULL)                                                                         \
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s must not be NULL", (fn), #ptr);    \
    } while (0)

static attn_status check_layer_dims(const char *fn, const attn_rnn_layer_dims *dims,
                                    attn_rnn_layout *l)
{
    RNN_NOT_NULL(fn, dims);
    if (!make_layout(dims, l))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: bad dims cell=%d batch=%lld seq_len=%lld input_size=%lld "
                         "hidden_size=%lld output_stride=%lld precision=%s (cell GRU or LSTM, "
                         "batch and seq_len >= 0, sizes >= 1, output_stride 0 or >= "
                         "hidden_size, precision fp32 or bf16, products below 2^60)",
                         fn, (int)dims->cell, (long long)dims->batch, (long long)dims->seq_len,
                         (long long)dims->input_size, (long long)dims->hidden_size,
                         (long long)dims->output_stride, attn_precision_name(dims->precision));
    return ATTN_OK;
}

static attn_status check_cell_dims(const char *fn, const attn_rnn_cell_dims *dims,
                                   attn_rnn_layout *l)
{
    RNN_NOT_NULL(fn, dims);
    attn_rnn_layer_dims layer = layer_of_cell(dims);
    if (!make_layout(&layer, l))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: bad dims cell=%d batch=%lld input_size=%lld hidden_size=%lld "
                         "(cell GRU or LSTM, batch >= 0, sizes >= 1, products below 2^60)",
                         fn, (int)dims->cell, (long long)dims->batch, (long long)dims->input_size,
                         (long long)dims->hidden_size);
    return ATTN_OK;
}

static attn_status check_params(const char *fn, const attn_rnn_params *params)
{
    RNN_NOT_NULL(fn, params);
    RNN_NOT_NULL(fn, params->weight_ih);
    RNN_NOT_NULL(fn, params->weight_hh);
    return ATTN_OK;
}

static attn_status check_lengths(const char *fn, const int64_t *lengths, int64_t batch,
                                 int64_t seq_len)
{
    if (lengths == NULL)
        return ATTN_OK;
    for (int64_t b = 0; b < batch; b++)
        if (lengths[b] < 0 || lengths[b] > seq_len)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "%s: lengths[%lld] = %lld is outside [0, seq_len = %lld]", fn,
                             (long long)b, (long long)lengths[b], (long long)seq_len);
    return ATTN_OK;
}

/* ---- the float engine ---------------------------------------------------------------- */

/* The sentence order lives in the float workspace as int64 values, two floats each;
 * memcpy keeps the accesses well defined. */
static int64_t order_at(const float *order, int64_t k)
{
    int64_t b;
    memcpy(&b, order + 2 * k, sizeof b);
    return b;
}

static void set_order(float *order, int64_t k, int64_t b)
{
    memcpy(order + 2 * k, &b, sizeof b);
}

/* Longest first, ties by index: a stable insertion sort, linear on sorted batches. */
static void sort_by_length(const int64_t *lengths, int64_t batch, int64_t seq_len, float *order)
{
    for (int64_t b = 0; b < batch; b++) {
        int64_t length = attn_rnn_length(lengths, seq_len, b), k = b;
        for (; k > 0; k--) {
            int64_t before = order_at(order, k - 1);
            if (attn_rnn_length(lengths, seq_len, before) >= length)
                break;
            set_order(order, k, before);
        }
        set_order(order, k, b);
    }
}

/* Sentences per thread chunk: enough gate math (about 8k values) to pay for a wake-up. */
static int64_t rows_per_chunk(const attn_rnn_layout *l)
{
    int64_t rows = 8192 / l->gate_stride;
    return rows > 1 ? rows : 1;
}

static void fill_rows(float *dst, int64_t rows, int64_t cols, int64_t ld, const float *row)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * ld, row, (size_t)cols * sizeof(float));
}

typedef struct step_job {
    const attn_rnn_layout *layout;
    const float *order;
    const int64_t *lengths;
    int64_t step;
    float *state_h, *state_c, *rows;
    /* forward */
    const attn_rnn_forward_args *fwd;
    attn_rnn_gru_forward_fn gru;
    attn_rnn_lstm_forward_fn lstm;
    /* backward */
    const attn_rnn_backward_args *bwd;
    float *dgates;
} step_job;

static int64_t row_of(const step_job *job, int64_t k)
{
    const attn_rnn_layout *l = job->layout;
    int64_t b = order_at(job->order, k);
    int64_t length = attn_rnn_length(job->lengths, l->seq_len, b);
    return b * l->seq_len + attn_rnn_position(l->reverse, length, job->step);
}

static void forward_step_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const step_job *job = ctx;
    const attn_rnn_layout *l = job->layout;
    const attn_rnn_forward_args *a = job->fwd;
    int64_t H = l->hidden_size;
    for (int64_t k = begin; k < end; k++) {
        int64_t row = row_of(job, k);
        float *h = job->state_h + k * H;
        float *gates = a->saved + row * l->gate_stride;
        const float *gh = job->rows + k * l->gate_rows;
        float *out = a->output + row * l->output_stride;
        memcpy(a->saved + l->saved_h + row * H, h, (size_t)H * sizeof(float));
        if (l->cell == ATTN_RNN_GRU) {
            job->gru(H, gates, gh, h, out);
        } else {
            float *c = job->state_c + k * H;
            memcpy(a->saved + l->saved_c + row * H, c, (size_t)H * sizeof(float));
            job->lstm(H, gates, gh, h, c, out);
        }
    }
}

static void select_gate_math(step_job *job)
{
    const attn_isa isa = attn_active_isa();
    job->gru = ATTN_FOR_ISA(isa, attn_rnn_gru_forward, attn_rnn_gru_forward_portable);
    job->lstm = ATTN_FOR_ISA(isa, attn_rnn_lstm_forward, attn_rnn_lstm_forward_portable);
}

static attn_status fast_forward(const attn_rnn_forward_args *a)
{
    const attn_rnn_layout *l = &a->layout;
    const attn_rnn_params *pr = a->params;
    int64_t B = l->batch, T = l->seq_len, I = l->input_size, H = l->hidden_size;
    int64_t G = l->gate_rows;
    int lstm = l->cell == ATTN_RNN_LSTM;
    float *order = a->workspace;
    step_job job = {.layout = l,
                    .order = order,
                    .lengths = a->lengths,
                    .state_h = a->workspace + l->work_state_h,
                    .state_c = a->workspace + l->work_state_c,
                    .rows = a->workspace + l->work_rows,
                    .fwd = a};
    select_gate_math(&job);
    sort_by_length(a->lengths, B, T, order);

    if (a->stored != NULL && B * T > 0) {
        const quantized_linear_args input = {B * T,
                                             a->x,
                                             I,
                                             a->stored->w_ih,
                                             pr->bias_ih,
                                             a->saved,
                                             l->gate_stride,
                                             a->stored->scratch};
        attn_quantized_linear(&input);
    } else if (a->stored == NULL) {
        /* Biases are preloaded so that the GEMMs add them in their own precision. */
        if (pr->bias_ih != NULL)
            fill_rows(a->saved, B * T, G, l->gate_stride, pr->bias_ih);
        ATTN_TRY(attn_gemm_precision(l->precision, ATTN_NO_TRANS, ATTN_TRANS, B * T, G, I, 1.0f,
                                     a->x, I, pr->weight_ih, I, pr->bias_ih != NULL ? 1.0f : 0.0f,
                                     a->saved, l->gate_stride));
    }

    for (int64_t k = 0; k < B; k++) {
        int64_t b = order_at(order, k);
        if (a->h0 != NULL)
            memcpy(job.state_h + k * H, a->h0 + b * H, (size_t)H * sizeof(float));
        else
            memset(job.state_h + k * H, 0, (size_t)H * sizeof(float));
        if (lstm && a->c0 != NULL)
            memcpy(job.state_c + k * H, a->c0 + b * H, (size_t)H * sizeof(float));
        else if (lstm)
            memset(job.state_c + k * H, 0, (size_t)H * sizeof(float));
    }

    int64_t running = B;
    int64_t longest = B > 0 ? attn_rnn_length(a->lengths, T, order_at(order, 0)) : 0;
    for (int64_t s = 0; s < longest; s++) {
        while (attn_rnn_length(a->lengths, T, order_at(order, running - 1)) <= s)
            running--;
        if (a->stored != NULL) {
            const quantized_linear_args recurrent = {
                running,     job.state_h, H, a->stored->w_hh,
                pr->bias_hh, job.rows,    G, a->stored->scratch};
            attn_quantized_linear(&recurrent);
        } else {
            if (pr->bias_hh != NULL)
                fill_rows(job.rows, running, G, G, pr->bias_hh);
            ATTN_TRY(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, running, G, H, 1.0f, job.state_h, H,
                               pr->weight_hh, H, pr->bias_hh != NULL ? 1.0f : 0.0f, job.rows, G));
        }
        job.step = s;
        attn_parallel_for(running, rows_per_chunk(l), forward_step_rows, &job);
    }

    for (int64_t b = 0; b < B; b++)
        for (int64_t p = attn_rnn_length(a->lengths, T, b); p < T; p++) {
            int64_t row = b * T + p;
            memset(a->output + row * l->output_stride, 0, (size_t)H * sizeof(float));
            memset(a->saved + l->saved_h + row * H, 0, (size_t)H * sizeof(float));
            if (lstm)
                memset(a->saved + l->saved_c + row * H, 0, (size_t)H * sizeof(float));
        }
    for (int64_t k = 0; k < B; k++) {
        int64_t b = order_at(order, k);
        if (a->h_n != NULL)
            memcpy(a->h_n + b * H, job.state_h + k * H, (size_t)H * sizeof(float));
        if (lstm && a->c_n != NULL)
            memcpy(a->c_n + b * H, job.state_c + k * H, (size_t)H * sizeof(float));
    }
    return ATTN_OK;
}

static void backward_step_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const step_job *job = ctx;
    const attn_rnn_layout *l = job->layout;
    const attn_rnn_backward_args *a = job->bwd;
    int64_t H = l->hidden_size;
    for (int64_t k = begin; k < end; k++) {
        int64_t row = row_of(job, k);
        const float *gates = a->saved + row * l->gate_stride;
        const float *dout = a->doutput != NULL ? a->doutput + row * l->output_stride : NULL;
        float *dgates = job->dgates + row * l->grad_stride;
        float *dgh = job->rows + k * l->gate_rows;
        if (l->cell == ATTN_RNN_GRU)
            attn_rnn_gru_backward_row(H, gates, a->saved + l->saved_h + row * H, dout,
                                      job->state_h + k * H, dgates, dgh);
        else
            attn_rnn_lstm_backward_row(H, gates, a->saved + l->saved_c + row * H, dout,
                                       job->state_h + k * H, job->state_c + k * H, dgates, dgh);
    }
}

typedef struct column_job {
    int64_t rows, ld;
    const float *src;
    float *out;
} column_job;

/* out[c] += sum over rows of src[r, c], in double, rows in order. */
static void sum_column_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const column_job *job = ctx;
    enum { BLOCK = 64 };
    for (int64_t c0 = begin; c0 < end; c0 += BLOCK) {
        int64_t width = end - c0 < BLOCK ? end - c0 : BLOCK;
        double sum[BLOCK] = {0};
        for (int64_t r = 0; r < job->rows; r++)
            for (int64_t c = 0; c < width; c++)
                sum[c] += job->src[r * job->ld + c0 + c];
        for (int64_t c = 0; c < width; c++)
            job->out[c0 + c] = (float)(job->out[c0 + c] + sum[c]);
    }
}

static void sum_columns(int64_t rows, int64_t cols, const float *src, int64_t ld, float *out)
{
    column_job job = {rows, ld, src, out};
    attn_parallel_for(cols, 64, sum_column_range, &job);
}

static attn_status fast_backward(const attn_rnn_backward_args *a)
{
    const attn_rnn_layout *l = &a->layout;
    const attn_rnn_params *pr = a->params;
    const attn_rnn_grads *g = &a->grads;
    int64_t B = l->batch, T = l->seq_len, I = l->input_size, H = l->hidden_size;
    int64_t G = l->gate_rows, GW = l->grad_stride;
    int lstm = l->cell == ATTN_RNN_LSTM;
    float *order = a->workspace;
    step_job job = {.layout = l,
                    .order = order,
                    .lengths = a->lengths,
                    .state_h = a->workspace + l->work_state_h,
                    .state_c = a->workspace + l->work_state_c,
                    .rows = a->workspace + l->work_rows,
                    .bwd = a,
                    .dgates = a->workspace + l->work_dgates};
    sort_by_length(a->lengths, B, T, order);

    for (int64_t b = 0; b < B; b++)
        for (int64_t p = attn_rnn_length(a->lengths, T, b); p < T; p++)
            memset(job.dgates + (b * T + p) * GW, 0, (size_t)GW * sizeof(float));
    for (int64_t k = 0; k < B; k++) {
        int64_t b = order_at(order, k);
        if (a->dh_n != NULL)
            memcpy(job.state_h + k * H, a->dh_n + b * H, (size_t)H * sizeof(float));
        else
            memset(job.state_h + k * H, 0, (size_t)H * sizeof(float));
        if (lstm && a->dc_n != NULL)
            memcpy(job.state_c + k * H, a->dc_n + b * H, (size_t)H * sizeof(float));
        else if (lstm)
            memset(job.state_c + k * H, 0, (size_t)H * sizeof(float));
    }

    int64_t running = 0;
    int64_t longest = B > 0 ? attn_rnn_length(a->lengths, T, order_at(order, 0)) : 0;
    for (int64_t s = longest - 1; s >= 0; s--) {
        while (running < B && attn_rnn_length(a->lengths, T, order_at(order, running)) > s)
            running++;
        job.step = s;
        attn_parallel_for(running, rows_per_chunk(l), backward_step_rows, &job);
        /* GRU rows hold the direct share dh' * z already; LSTM rows are overwritten. */
        ATTN_TRY(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, running, H, G, 1.0f, job.rows, G,
                           pr->weight_hh, H, lstm ? 0.0f : 1.0f, job.state_h, H));
    }
    for (int64_t k = 0; k < B; k++) {
        int64_t b = order_at(order, k);
        for (int64_t j = 0; j < H; j++) {
            if (a->dh0 != NULL)
                a->dh0[b * H + j] += job.state_h[k * H + j];
            if (lstm && a->dc0 != NULL)
                a->dc0[b * H + j] += job.state_c[k * H + j];
        }
    }

    /* Over every position at once; padding rows of dgates are zero. */
    int64_t positions = B * T;
    const float *hs = a->saved + l->saved_h;
    if (a->dx != NULL)
        ATTN_TRY(attn_gemm_precision(l->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, positions, I, G,
                                     1.0f, job.dgates, GW, pr->weight_ih, I, 1.0f, a->dx, I));
    if (g->weight_ih != NULL)
        ATTN_TRY(attn_gemm_precision(l->precision, ATTN_TRANS, ATTN_NO_TRANS, G, I, positions, 1.0f,
                                     job.dgates, GW, a->x, I, 1.0f, g->weight_ih, I));
    if (g->bias_ih != NULL)
        sum_columns(positions, G, job.dgates, GW, g->bias_ih);
    /* The gradient fed to W_hh is dgates itself for LSTM; for GRU its n rows take r * dn,
     * kept in the fourth block. */
    int64_t shared = lstm ? G : 2 * H;
    if (g->weight_hh != NULL) {
        ATTN_TRY(attn_gemm_precision(l->precision, ATTN_TRANS, ATTN_NO_TRANS, shared, H, positions,
                                     1.0f, job.dgates, GW, hs, H, 1.0f, g->weight_hh, H));
        if (!lstm)
            ATTN_TRY(attn_gemm_precision(l->precision, ATTN_TRANS, ATTN_NO_TRANS, H, H, positions,
                                         1.0f, job.dgates + 3 * H, GW, hs, H, 1.0f,
                                         g->weight_hh + 2 * H * H, H));
    }
    if (g->bias_hh != NULL) {
        sum_columns(positions, shared, job.dgates, GW, g->bias_hh);
        if (!lstm)
            sum_columns(positions, H, job.dgates + 3 * H, GW, g->bias_hh + 2 * H);
    }
    return ATTN_OK;
}

static attn_status run_forward(const attn_rnn_forward_args *args)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        attn_rnn_reference_forward(args);
        return ATTN_OK;
    }
    return fast_forward(args);
}

static attn_status run_backward(const attn_rnn_backward_args *args)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        attn_rnn_reference_backward(args);
        return ATTN_OK;
    }
    return fast_backward(args);
}

static attn_rnn_grads grads_or_none(const attn_rnn_grads *grads)
{
    attn_rnn_grads none = {NULL, NULL, NULL, NULL};
    return grads != NULL ? *grads : none;
}

/* ---- public entry points ------------------------------------------------------------- */

/* The checks of a whole layer's forward (with stored matrices, that they fit), then the run. */
static attn_status checked_layer_forward(const char *fn, const attn_rnn_layer_dims *dims,
                                         attn_rnn_forward_args *args)
{
    ATTN_TRY(check_layer_dims(fn, dims, &args->layout));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(fn, args->params));
    ATTN_TRY(check_lengths(fn, args->lengths, dims->batch, dims->seq_len));
    const attn_rnn_stored *stored = args->stored;
    ATTN_CHECK_ARG(stored == NULL ||
                       (stored->w_ih->out == args->layout.gate_rows &&
                        stored->w_ih->in == dims->input_size &&
                        stored->w_hh->out == args->layout.gate_rows &&
                        stored->w_hh->in == dims->hidden_size && stored->scratch != NULL),
                   "%s: the stored matrices do not fit the layer", fn);
    const float *x = args->x, *output = args->output, *saved = args->saved,
                *workspace = args->workspace;
    if (dims->seq_len > 0) {
        RNN_NOT_NULL(fn, x);
        RNN_NOT_NULL(fn, output);
    }
    RNN_NOT_NULL(fn, saved);
    RNN_NOT_NULL(fn, workspace);
    return run_forward(args);
}

attn_status attn_rnn_layer_forward(const attn_rnn_layer_dims *dims, const attn_rnn_params *params,
                                   const float *x, const int64_t *lengths, const float *h0,
                                   const float *c0, float *output, float *h_n, float *c_n,
                                   float *saved, float *workspace)
{
    const char *fn = __func__;
    attn_rnn_forward_args args = {.params = params,
                                  .x = x,
                                  .lengths = lengths,
                                  .h0 = h0,
                                  .c0 = c0,
                                  .output = output,
                                  .h_n = h_n,
                                  .c_n = c_n,
                                  .saved = saved,
                                  .workspace = workspace};
    return checked_layer_forward(fn, dims, &args);
}

size_t attn_rnn_stored_scratch_bytes(const attn_rnn_layer_dims *dims, const attn_rnn_stored *stored)
{
    const int64_t positions = dims->batch * dims->seq_len;
    const size_t input =
        attn_quantized_linear_scratch_bytes(positions > 0 ? positions : 1, stored->w_ih);
    const size_t recurrent =
        attn_quantized_linear_scratch_bytes(dims->batch > 0 ? dims->batch : 1, stored->w_hh);
    return input > recurrent ? input : recurrent;
}

attn_status attn_rnn_layer_forward_stored(const attn_rnn_layer_dims *dims,
                                          const attn_rnn_params *params,
                                          const attn_rnn_stored *stored, const float *x,
                                          const int64_t *lengths, float *output, float *saved,
                                          float *workspace)
{
    const char *fn = "attn_rnn_layer_forward";
    attn_rnn_forward_args args = {.params = params,
                                  .stored = stored,
                                  .x = x,
                                  .lengths = lengths,
                                  .output = output,
                                  .saved = saved,
                                  .workspace = workspace};
    return checked_layer_forward(fn, dims, &args);
}

attn_status attn_rnn_layer_backward(const attn_rnn_layer_dims *dims, const attn_rnn_params *params,
                                    const float *x, const int64_t *lengths, const float *saved,
                                    const float *doutput, const float *dh_n, const float *dc_n,
                                    float *workspace, float *dx, float *dh0, float *dc0,
                                    const attn_rnn_grads *grads)
{
    const char *fn = __func__;
    attn_rnn_backward_args args = {.params = params,
                                   .x = x,
                                   .lengths = lengths,
                                   .saved = saved,
                                   .doutput = doutput,
                                   .dh_n = dh_n,
                                   .dc_n = dc_n,
                                   .workspace = workspace,
                                   .dx = dx,
                                   .dh0 = dh0,
                                   .dc0 = dc0,
                                   .grads = grads_or_none(grads)};
    ATTN_TRY(check_layer_dims(fn, dims, &args.layout));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(fn, params));
    ATTN_TRY(check_lengths(fn, lengths, dims->batch, dims->seq_len));
    if (dims->seq_len > 0)
        RNN_NOT_NULL(fn, x);
    RNN_NOT_NULL(fn, saved);
    RNN_NOT_NULL(fn, workspace);
    return run_backward(&args);
}

attn_status attn_rnn_cell_forward(const attn_rnn_cell_dims *dims, const attn_rnn_params *params,
                                  const float *x, const float *h, const float *c, float *h_out,
                                  float *c_out, float *saved, float *workspace)
{
    const char *fn = __func__;
    attn_rnn_forward_args args = {.params = params,
                                  .x = x,
                                  .h0 = h,
                                  .c0 = c,
                                  .output = h_out,
                                  .c_n = c_out,
                                  .saved = saved,
                                  .workspace = workspace};
    ATTN_TRY(check_cell_dims(fn, dims, &args.layout));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(fn, params));
    RNN_NOT_NULL(fn, x);
    RNN_NOT_NULL(fn, h_out);
    RNN_NOT_NULL(fn, saved);
    RNN_NOT_NULL(fn, workspace);
    return run_forward(&args);
}

attn_status attn_rnn_cell_backward(const attn_rnn_cell_dims *dims, const attn_rnn_params *params,
                                   const float *x, const float *saved, const float *dh_out,
                                   const float *dc_out, float *workspace, float *dx, float *dh,
                                   float *dc, const attn_rnn_grads *grads)
{
    const char *fn = __func__;
    attn_rnn_backward_args args = {.params = params,
                                   .x = x,
                                   .saved = saved,
                                   .doutput = dh_out,
                                   .dc_n = dc_out,
                                   .workspace = workspace,
                                   .dx = dx,
                                   .dh0 = dh,
                                   .dc0 = dc,
                                   .grads = grads_or_none(grads)};
    ATTN_TRY(check_cell_dims(fn, dims, &args.layout));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(fn, params));
    RNN_NOT_NULL(fn, x);
    RNN_NOT_NULL(fn, saved);
    RNN_NOT_NULL(fn, workspace);
    return run_backward(&args);
}

/* ---- one step from the caller's projections ------------------------------------------- */

int64_t attn_rnn_cell_gate_stride(attn_rnn_cell cell, int64_t hidden)
{
    return (cell == ATTN_RNN_LSTM ? 5 : 4) * hidden;
}

typedef struct projected_job {
    step_job gates;
    attn_rnn_cell cell;
    int64_t hidden;
    float *rows;
    const float *gh, *h, *c;
    float *h_out, *c_out;
} projected_job;

static void projected_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const projected_job *job = ctx;
    const int64_t H = job->hidden, G = (job->cell == ATTN_RNN_LSTM ? 4 : 3) * H;
    const int64_t stride = attn_rnn_cell_gate_stride(job->cell, H);
    for (int64_t b = begin; b < end; b++) {
        float *h = job->h_out + b * H;
        if (job->h == NULL)
            memset(h, 0, (size_t)H * sizeof(float));
        else if (job->h + b * H != h)
            memcpy(h, job->h + b * H, (size_t)H * sizeof(float));
        if (job->cell == ATTN_RNN_GRU) {
            job->gates.gru(H, job->rows + b * stride, job->gh + b * G, h, h);
            continue;
        }
        float *c = job->c_out + b * H;
        if (job->c == NULL)
            memset(c, 0, (size_t)H * sizeof(float));
        else if (job->c + b * H != c)
            memcpy(c, job->c + b * H, (size_t)H * sizeof(float));
        job->gates.lstm(H, job->rows + b * stride, job->gh + b * G, h, c, h);
    }
}

void attn_rnn_cell_forward_projected(attn_rnn_cell cell, int64_t batch, int64_t hidden,
                                     float *gates, const float *gh, const float *h, const float *c,
                                     float *h_out, float *c_out)
{
    projected_job job = {.cell = cell,
                         .hidden = hidden,
                         .rows = gates,
                         .gh = gh,
                         .h = h,
                         .c = c,
                         .h_out = h_out,
                         .c_out = c_out};
    select_gate_math(&job.gates);
    const attn_rnn_layout layout = {.gate_stride = attn_rnn_cell_gate_stride(cell, hidden)};
    attn_parallel_for(batch, rows_per_chunk(&layout), projected_rows, &job);
}
