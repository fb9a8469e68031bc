/* Adam / AdamW over flat buffers, gradient norm, clipping and scaling: argument checks,
 * dispatch, the double-precision references and the portable versions. The AVX2 and AVX-512
 * kernels are in optim_simd.h. */
#include "train/optim_internal.h"

#include <math.h>

/* Elements per thread below which splitting costs more than it saves. */
#define ADAM_MIN_CHUNK ((int64_t)1 << 14)
#define SCALE_MIN_CHUNK ((int64_t)1 << 15)
#define EMA_MIN_CHUNK ((int64_t)1 << 15)

/* The gradient norm sums blocks whose size depends only on n (at least NORM_MIN_BLOCK
 * elements, at most NORM_MAX_BLOCKS of them), then adds the block sums in order. */
#define NORM_MIN_BLOCK ((int64_t)4096)
#define NORM_MAX_BLOCKS 256

attn_adam_options attn_adam_default_options(attn_adam_variant variant)
{
    attn_adam_options options = {0};
    options.variant = variant;
    options.lr = 1e-3;
    options.beta1 = 0.9;
    options.beta2 = 0.999;
    options.eps = 1e-8;
    options.weight_decay = variant == ATTN_ADAMW ? 1e-2 : 0.0;
    return options;
}

/* ---- Adam: checks ----------------------------------------------------------------------- */

static attn_status check_adam_options(const attn_adam_options *o, int64_t n)
{
    ATTN_CHECK_ARG(o->variant == ATTN_ADAM || o->variant == ATTN_ADAMW,
                   "attn_adam_step: variant must be ATTN_ADAM or ATTN_ADAMW, got %d",
                   (int)o->variant);
    ATTN_CHECK_ARG(o->lr >= 0.0 && isfinite(o->lr),
                   "attn_adam_step: lr must be finite and >= 0, got %g", o->lr);
    ATTN_CHECK_ARG(o->beta1 >= 0.0 && o->beta1 < 1.0,
                   "attn_adam_step: beta1 must be in [0, 1), got %g", o->beta1);
    ATTN_CHECK_ARG(o->beta2 >= 0.0 && o->beta2 < 1.0,
                   "attn_adam_step: beta2 must be in [0, 1), got %g", o->beta2);
    ATTN_CHECK_ARG(o->eps > 0.0 && isfinite(o->eps),
                   "attn_adam_step: eps must be finite and > 0, got %g", o->eps);
    ATTN_CHECK_ARG(o->weight_decay >= 0.0 && isfinite(o->weight_decay),
                   "attn_adam_step: weight_decay must be finite and >= 0, got %g",
                   o->weight_decay);
    ATTN_CHECK_ARG(o->no_decay_count >= 0,
                   "attn_adam_step: no_decay_count must be >= 0, got %lld",
                   (long long)o->no_decay_count);
    if (o->no_decay_count > 0)
        ATTN_CHECK_ARG(o->no_decay != NULL,
                       "attn_adam_step: no_decay must not be NULL when no_decay_count = %lld",
                       (long long)o->no_decay_count);
    int64_t previous_end = 0;
    for (int64_t i = 0; i < o->no_decay_count; i++) {
        const attn_param_range r = o->no_decay[i];
        ATTN_CHECK_ARG(r.offset >= 0 && r.count >= 0 && r.offset <= n && r.count <= n - r.offset,
                       "attn_adam_step: no_decay[%lld] = (offset %lld, count %lld) is not "
                       "within the %lld parameters",
                       (long long)i, (long long)r.offset, (long long)r.count, (long long)n);
        ATTN_CHECK_ARG(r.offset >= previous_end,
                       "attn_adam_step: no_decay[%lld] starts at %lld, before the end (%lld) of "
                       "the range before it; ranges must be sorted and disjoint",
                       (long long)i, (long long)r.offset, (long long)previous_end);
        previous_end = r.offset + r.count;
    }
    return ATTN_OK;
}

/* ---- Adam: walking the decayed and exempt segments of a range ---------------------------- */

typedef void (*segment_fn)(const void *ctx, int64_t begin, int64_t end, int decayed);

/* Calls visit on the pieces of [begin, end) in order, each wholly decayed or wholly exempt. */
static void for_each_segment(const attn_adam_options *o, int64_t begin, int64_t end,
                             segment_fn visit, const void *ctx)
{
    const attn_param_range *ranges = o->no_decay;
    const int64_t count = o->weight_decay == 0.0 ? 0 : o->no_decay_count;
    /* The ranges are sorted and disjoint, so their ends ascend: find the first ending after
     * begin by bisection. */
    int64_t r = 0, hi = count;
    while (r < hi) {
        int64_t mid = r + (hi - r) / 2;
        if (ranges[mid].offset + ranges[mid].count <= begin)
            r = mid + 1;
        else
            hi = mid;
    }
    int64_t pos = begin;
    while (pos < end) {
        while (r < count && ranges[r].offset + ranges[r].count <= pos)
            r++;
        int64_t stop;
        int decayed;
        if (r < count && ranges[r].offset <= pos) {
            stop = ranges[r].offset + ranges[r].count;
            decayed = 0;
        } else {
            stop = r < count ? ranges[r].offset : end;
            decayed = 1;
        }
        if (stop > end)
            stop = end;
        visit(ctx, pos, stop, decayed);
        pos = stop;
    }
}

/* ---- Adam: the reference ---------------------------------------------------------------- */

typedef struct adam_reference_ctx {
    const attn_adam_options *options;
    double bias_correction1, bias_correction2;
    float *params;
    const float *grads;
    float *m, *v;
} adam_reference_ctx;

static void adam_reference_segment(const void *ctx, int64_t begin, int64_t end, int decayed)
{
    const adam_reference_ctx *c = ctx;
    const attn_adam_options *o = c->options;
    const double wd = decayed ? o->weight_decay : 0.0;
    for (int64_t i = begin; i < end; i++) {
        double p = c->params[i], g = c->grads[i];
        if (o->variant == ATTN_ADAMW)
            p *= 1.0 - o->lr * wd;
        else
            g += wd * p;
        double m = o->beta1 * c->m[i] + (1.0 - o->beta1) * g;
        double v = o->beta2 * c->v[i] + (1.0 - o->beta2) * g * g;
        double m_hat = m / c->bias_correction1;
        double v_hat = v / c->bias_correction2;
        p -= o->lr * m_hat / (sqrt(v_hat) + o->eps);
        c->params[i] = (float)p;
        c->m[i] = (float)m;
        c->v[i] = (float)v;
    }
}

/* ---- Adam: the optimized versions ------------------------------------------------------- */

/* a * b + c with one rounding of the exact product (float products are exact in double);
 * the sum is rounded twice (to double, then to float), which differs from a fused
 * multiply-add only in rare near-halfway cases, and vectorises on any x86-64. */
static inline float fused_multiply_add(float a, float b, float c)
{
    return (float)((double)a * (double)b + (double)c);
}

void attn_adam_kernel_portable(const attn_adam_coeffs *c, int64_t count, float *p,
                               const float *g, float *m, float *v)
{
    const int decoupled = c->decay_factor != 1.0f, coupled = c->l2_decay != 0.0f;
    for (int64_t i = 0; i < count; i++) {
        float param = p[i], grad = g[i];
        if (decoupled)
            param *= c->decay_factor;
        if (coupled)
            grad = fused_multiply_add(c->l2_decay, param, grad);
        float mi = fused_multiply_add(c->one_minus_beta1, grad, m[i] * c->beta1);
        float vi = fused_multiply_add(c->one_minus_beta2 * grad, grad, v[i] * c->beta2);
        float denom = sqrtf(vi) / c->bias_correction2_sqrt + c->eps;
        p[i] = param + (c->neg_step_size * mi) / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

static attn_adam_kernel_fn adam_kernel_for(attn_isa isa)
{
    return ATTN_FOR_ISA(isa, attn_adam_kernel, attn_adam_kernel_portable);
}

typedef struct adam_ctx {
    const attn_adam_options *options;
    attn_adam_kernel_fn kernel;
    attn_adam_coeffs decayed, exempt;
    float *params;
    const float *grads;
    float *m, *v;
} adam_ctx;

static void adam_segment(const void *ctx, int64_t begin, int64_t end, int decayed)
{
    const adam_ctx *c = ctx;
    c->kernel(decayed ? &c->decayed : &c->exempt, end - begin, c->params + begin,
              c->grads + begin, c->m + begin, c->v + begin);
}

static void adam_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const adam_ctx *c = ctx;
    for_each_segment(c->options, begin, end, adam_segment, c);
}

attn_status attn_adam_step(const attn_adam_options *options, int64_t *step, int64_t n,
                           float *params, const float *grads, float *m, float *v)
{
    ATTN_CHECK_NOT_NULL(options);
    ATTN_CHECK_NOT_NULL(step);
    ATTN_CHECK_ARG(n >= 0, "attn_adam_step: n must be >= 0, got %lld", (long long)n);
    ATTN_CHECK_ARG(*step >= 0 && *step < INT64_MAX,
                   "attn_adam_step: *step must be in [0, INT64_MAX), got %lld", (long long)*step);
    ATTN_TRY(check_adam_options(options, n));
    if (n > 0) {
        ATTN_CHECK_NOT_NULL(params);
        ATTN_CHECK_NOT_NULL(grads);
        ATTN_CHECK_NOT_NULL(m);
        ATTN_CHECK_NOT_NULL(v);
        ATTN_CHECK_ARG(params != m && params != v && m != v && grads != (const float *)params &&
                           grads != (const float *)m && grads != (const float *)v,
                       "attn_adam_step: params, grads, m and v must be distinct buffers");
    }
    const int64_t t = ++*step;
    if (n == 0)
        return ATTN_OK;

    /* As PyTorch: the bias corrections in double from the step as a float number. */
    const double bias_correction1 = 1.0 - pow(options->beta1, (double)t);
    const double bias_correction2 = 1.0 - pow(options->beta2, (double)t);

    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        adam_reference_ctx ctx = {options, bias_correction1, bias_correction2, params, grads,
                                  m, v};
        for_each_segment(options, 0, n, adam_reference_segment, &ctx);
        return ATTN_OK;
    }

    const attn_adam_options *o = options;
    adam_ctx ctx;
    ctx.options = o;
    ctx.kernel = adam_kernel_for(attn_active_isa());
    ctx.params = params;
    ctx.grads = grads;
    ctx.m = m;
    ctx.v = v;
    ctx.exempt.beta1 = (float)o->beta1;
    ctx.exempt.one_minus_beta1 = (float)(1.0 - o->beta1);
    ctx.exempt.beta2 = (float)o->beta2;
    ctx.exempt.one_minus_beta2 = (float)(1.0 - o->beta2);
    ctx.exempt.neg_step_size = (float)-(o->lr / bias_correction1);
    ctx.exempt.bias_correction2_sqrt = (float)sqrt(bias_correction2);
    ctx.exempt.eps = (float)o->eps;
    ctx.exempt.l2_decay = 0.0f;
    ctx.exempt.decay_factor = 1.0f;
    ctx.decayed = ctx.exempt;
    if (o->variant == ATTN_ADAMW)
        ctx.decayed.decay_factor = (float)(1.0 - o->lr * o->weight_decay);
    else
        ctx.decayed.l2_decay = (float)o->weight_decay;
    attn_parallel_for(n, ADAM_MIN_CHUNK, adam_range, &ctx);
    return ATTN_OK;
}

/* ---- exponential smoothing ----------------------------------------------------------------- */

typedef struct ema_ctx {
    float *smoothed;
    const float *values;
    float keep, take;
} ema_ctx;

/* Memory-bound like scale_range: the compiler's vectors serve every instruction set, and the
 * same two roundings happen per element in its vector and scalar code. */
static void ema_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const ema_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++)
        c->smoothed[i] = c->keep * c->smoothed[i] + c->take * c->values[i];
}

attn_status attn_ema_update(int64_t n, float *smoothed, const float *values, double rate,
                            int64_t updates_before)
{
    static const char fn[] = "attn_ema_update";
    ATTN_CHECK_ARG(n >= 0, "%s: n must be >= 0, got %lld", fn, (long long)n);
    ATTN_CHECK_ARG(rate >= 0.0 && rate < 1.0, "%s: rate must be in [0, 1), got %g", fn, rate);
    ATTN_CHECK_ARG(updates_before >= 0, "%s: updates_before must be >= 0, got %lld", fn,
                   (long long)updates_before);
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(smoothed);
    ATTN_CHECK_NOT_NULL(values);
    ATTN_CHECK_ARG(smoothed + n <= values || values + n <= smoothed,
                   "%s: smoothed and values must not overlap", fn);
    const double t = (double)updates_before;
    const double warm = 1.0 - (t + 1.0) / (t + 10.0);
    const double d = rate > warm ? rate : warm;
    ema_ctx ctx = {smoothed, values, (float)(1.0 - d), (float)d};
    attn_parallel_for(n, EMA_MIN_CHUNK, ema_range, &ctx);
    return ATTN_OK;
}

/* ---- gradient norm ---------------------------------------------------------------------- */

void attn_sum_squares_portable(const float *x, int64_t count, double acc[ATTN_SQUARES_LANES])
{
    for (int64_t i = 0; i < count; i += ATTN_SQUARES_LANES)
        for (int j = 0; j < ATTN_SQUARES_LANES; j++)
            acc[j] += (double)x[i + j] * (double)x[i + j];
}

static attn_sum_squares_fn sum_squares_for(attn_isa isa)
{
    return ATTN_FOR_ISA(isa, attn_sum_squares, attn_sum_squares_portable);
}

typedef struct norm_ctx {
    attn_sum_squares_fn sum_squares;
    const float *x;
    int64_t n, block;
    double *block_sums;
} norm_ctx;

static void norm_blocks(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const norm_ctx *c = ctx;
    for (int64_t b = begin; b < end; b++) {
        const int64_t start = b * c->block;
        const int64_t len = c->n - start < c->block ? c->n - start : c->block;
        const int64_t body = len - len % ATTN_SQUARES_LANES;
        double acc[ATTN_SQUARES_LANES] = {0};
        c->sum_squares(c->x + start, body, acc);
        for (int64_t i = body; i < len; i++)
            acc[i - body] += (double)c->x[start + i] * (double)c->x[start + i];
        c->block_sums[b] = attn_sum_squares_combine(acc);
    }
}

static double sum_of_squares(int64_t n, const float *x)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++)
            sum += (double)x[i] * (double)x[i];
        return sum;
    }
    int64_t block = (n + NORM_MAX_BLOCKS - 1) / NORM_MAX_BLOCKS;
    if (block < NORM_MIN_BLOCK)
        block = NORM_MIN_BLOCK;
    block += (ATTN_SQUARES_LANES - block % ATTN_SQUARES_LANES) % ATTN_SQUARES_LANES;
    double block_sums[NORM_MAX_BLOCKS];
    norm_ctx ctx = {sum_squares_for(attn_active_isa()), x, n, block, block_sums};
    const int64_t blocks = (n + block - 1) / block;
    attn_parallel_for(blocks, 1, norm_blocks, &ctx);
    double sum = 0.0;
    for (int64_t b = 0; b < blocks; b++)
        sum += block_sums[b];
    return sum;
}

attn_status attn_grad_norm(int64_t n, const float *grads, double *norm)
{
    ATTN_CHECK_ARG(n >= 0, "attn_grad_norm: n must be >= 0, got %lld", (long long)n);
    ATTN_CHECK_NOT_NULL(norm);
    if (n > 0)
        ATTN_CHECK_NOT_NULL(grads);
    *norm = sqrt(sum_of_squares(n, grads));
    return ATTN_OK;
}

/* ---- scaling ---------------------------------------------------------------------------- */

typedef struct scale_ctx {
    float *x;
    float factor;
} scale_ctx;

/* Memory-bound: one multiply per element loaded and stored, which the compiler vectorises;
 * intrinsics buy nothing measurable, so this serves every optimized instruction set. A
 * float product rounded once equals the reference's double product rounded to float. */
static void scale_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const scale_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++)
        c->x[i] *= c->factor;
}

static void scale_all(int64_t n, float *x, float factor)
{
    scale_ctx ctx = {x, factor};
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((double)x[i] * (double)factor);
        return;
    }
    attn_parallel_for(n, SCALE_MIN_CHUNK, scale_range, &ctx);
}

attn_status attn_scale_grads(int64_t n, float *grads, float factor)
{
    ATTN_CHECK_ARG(n >= 0, "attn_scale_grads: n must be >= 0, got %lld", (long long)n);
    ATTN_CHECK_ARG(isfinite(factor), "attn_scale_grads: factor must be finite, got %g",
                   (double)factor);
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(grads);
    scale_all(n, grads, factor);
    return ATTN_OK;
}

attn_status attn_clip_grad_norm(int64_t n, float *grads, double max_norm, double *norm)
{
    ATTN_CHECK_ARG(n >= 0, "attn_clip_grad_norm: n must be >= 0, got %lld", (long long)n);
    ATTN_CHECK_ARG(max_norm > 0.0 && isfinite(max_norm),
                   "attn_clip_grad_norm: max_norm must be finite and > 0, got %g", max_norm);
    if (n > 0)
        ATTN_CHECK_NOT_NULL(grads);
    const double total = sqrt(sum_of_squares(n, grads));
    if (norm != NULL)
        *norm = total;
    if (!isfinite(total))
        return ATTN_OK;
    const double clip = max_norm / (total + 1e-6);
    if (clip < 1.0)
        scale_all(n, grads, (float)clip);
    return ATTN_OK;
}
