/* The step decoder's single-query attention (src/models/step_attention.h) over a cache of
 * floats and over a cache of bf16 values, on every instruction set: against the textbook
 * formula in double; a bf16 cache gives the bits a float cache holding the same rounded
 * values gives; and its error against the unrounded values stays within FlashAttention's
 * rule, twice that of a plain float computation on the rounded values. */
#include "harness.h"
#include "kernels/bf16.h"
#include "models/step_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const attn_isa isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE,  ATTN_ISA_AVX2,
                                ATTN_ISA_AVX512,    ATTN_ISA_NEON,      ATTN_ISA_NEON_DOTPROD,
                                ATTN_ISA_NEON_BF16};
#define N_ISAS ((int)(sizeof isas / sizeof isas[0]))

enum { ROWS = 3, HEADS = 2, KEYS = 37, SLABS = 4 };

/* One layer's cache of ROWS rows in SLABS slabs (rows reach theirs through slab_of_row, as in
 * the decoder), [slab][keys then values][HEADS][KEYS][dh]; the same values as floats, as
 * floats rounded to bf16, and as bf16. */
typedef struct cache {
    int64_t dh, slab;
    float *exact, *rounded, *q, *out, *probs;
    uint16_t *bf16;
} cache;

static cache make_cache(int64_t dh, uint64_t seed)
{
    cache c = {.dh = dh, .slab = 2 * HEADS * KEYS * dh};
    const size_t n = (size_t)(SLABS * c.slab);
    c.exact = test_alloc(n * sizeof(float));
    c.rounded = test_alloc(n * sizeof(float));
    c.bf16 = test_alloc(n * sizeof(uint16_t));
    c.q = test_alloc((size_t)(ROWS * HEADS * dh) * sizeof(float));
    c.out = test_alloc((size_t)(ROWS * HEADS * dh) * sizeof(float));
    c.probs = test_alloc((size_t)(ROWS * HEADS * (KEYS + 2)) * sizeof(float));
    test_fill_uniform(c.exact, n, -2.0f, 2.0f, seed);
    test_fill_uniform(c.q, (size_t)(ROWS * HEADS * dh), -2.0f, 2.0f, seed + 1);
    for (size_t i = 0; i < n; i++) {
        c.bf16[i] = attn_bf16_from_float(c.exact[i]);
        c.rounded[i] = attn_bf16_to_float(c.bf16[i]);
    }
    return c;
}

static void free_cache(cache *c)
{
    free(c->exact);
    free(c->rounded);
    free(c->bf16);
    free(c->q);
    free(c->out);
    free(c->probs);
}

static const int64_t slab_of_row[ROWS] = {2, 0, 3};
/* A row of every key, one of one key, one of none (its output is zeros). */
static const int32_t counts[ROWS] = {KEYS, 1, 0};

static step_attention problem(cache *c, const void *pool, int bf16, int with_counts)
{
    const int64_t dh = c->dh;
    const kv_cache_view kv = {pool,         bf16,   slab_of_row,
                              c->slab,      0,      KEYS * dh,
                              HEADS * KEYS * dh,    KEYS,
                              with_counts ? counts : NULL};
    return (step_attention){HEADS,     dh,       (float)(1.0 / sqrt((double)dh)),
                            c->q,      HEADS * dh, kv,
                            c->probs,  HEADS * (KEYS + 2), KEYS + 2,
                            KEYS + 2,  c->out,   HEADS * dh};
}

/* out and probs of a plain computation (float, or double) over pool's float values. */
static void textbook(const step_attention *a, const float *pool, int in_double, double *out,
                     double *probs)
{
    const int64_t dh = a->d_head;
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t h = 0; h < HEADS; h++) {
            const int64_t n = attn_step_key_count(&a->kv, r);
            const float *keys = pool + attn_step_keys_at(a, r, h);
            const float *values = keys + a->kv.value_offset;
            const float *q = a->q + r * a->q_stride + h * dh;
            double s[KEYS], max = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                double dot = 0.0;
                float dot_f = 0.0f;
                for (int64_t i = 0; i < dh; i++) {
                    dot += (double)q[i] * (double)keys[j * dh + i];
                    dot_f += q[i] * keys[j * dh + i];
                }
                s[j] = in_double ? dot * (double)a->scale : (double)(dot_f * a->scale);
                max = s[j] > max ? s[j] : max;
            }
            for (int64_t j = 0; j < n; j++) {
                s[j] = in_double ? exp(s[j] - max) : (double)expf((float)(s[j] - max));
                sum += s[j];
            }
            for (int64_t j = 0; j < n; j++)
                s[j] = in_double ? s[j] / sum : (double)((float)s[j] / (float)sum);
            for (int64_t i = 0; i < dh; i++) {
                double acc = 0.0;
                float acc_f = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    acc += s[j] * (double)values[j * dh + i];
                    acc_f += (float)s[j] * values[j * dh + i];
                }
                out[(r * HEADS + h) * dh + i] = in_double ? acc : (double)acc_f;
            }
            for (int64_t j = 0; j < KEYS; j++)
                probs[(r * HEADS + h) * KEYS + j] = j < n ? s[j] : 0.0;
        }
}

static double worst_error(const float *got, const double *want, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double worst_error_doubles(const double *got, const double *want, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs(got[i] - want[i]);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* The output as the kernels lay it out, and the probabilities without their fill. */
static void run(const step_attention *a, float *out, float *probs)
{
    attn_step_attend(a, ROWS, KEYS);
    memcpy(out, a->out, (size_t)(ROWS * HEADS * a->d_head) * sizeof(float));
    for (int64_t rh = 0; rh < ROWS * HEADS; rh++)
        memcpy(probs + rh * KEYS, a->probs + rh * (KEYS + 2), KEYS * sizeof(float));
}

static void test_float_and_bf16_caches(void)
{
    static const int64_t head_widths[] = {64, 20, 5};
    for (int w = 0; w < 3; w++) {
        cache c = make_cache(head_widths[w], 40 + (uint64_t)w);
        const int64_t dh = c.dh, n_out = ROWS * HEADS * dh, n_probs = ROWS * HEADS * KEYS;
        double *exact_out = test_alloc((size_t)n_out * sizeof(double));
        double *exact_probs = test_alloc((size_t)n_probs * sizeof(double));
        double *rounded_out = test_alloc((size_t)n_out * sizeof(double));
        double *rounded_probs = test_alloc((size_t)n_probs * sizeof(double));
        double *naive_out = test_alloc((size_t)n_out * sizeof(double));
        double *naive_probs = test_alloc((size_t)n_probs * sizeof(double));
        float *out = test_alloc((size_t)n_out * sizeof(float));
        float *probs = test_alloc((size_t)n_probs * sizeof(float));
        float *out_bf16 = test_alloc((size_t)n_out * sizeof(float));
        float *probs_bf16 = test_alloc((size_t)n_probs * sizeof(float));
        for (int with_counts = 0; with_counts < 2; with_counts++) {
            const step_attention exact = problem(&c, c.exact, 0, with_counts);
            const step_attention rounded = problem(&c, c.rounded, 0, with_counts);
            const step_attention halves = problem(&c, c.bf16, 1, with_counts);
            textbook(&exact, c.exact, 1, exact_out, exact_probs);
            textbook(&rounded, c.rounded, 1, rounded_out, rounded_probs);
            textbook(&rounded, c.rounded, 0, naive_out, naive_probs);
            /* FlashAttention's rule: twice the error of a naive float computation with the
             * same rounding of the operands, against the unrounded values in double. */
            const double naive_error = worst_error_doubles(naive_out, exact_out, n_out);
            const double naive_probs_error = worst_error_doubles(naive_probs, exact_probs, n_probs);
            for (int k = 0; k < N_ISAS; k++) {
                if (!test_isa_wanted(isas[k]) || attn_set_isa(isas[k]) != ATTN_OK)
                    continue;
                const char *isa = attn_isa_name(isas[k]);
                run(&exact, out, probs);
                CHECK(worst_error(out, exact_out, n_out) < 2e-6 &&
                          worst_error(probs, exact_probs, n_probs) < 2e-6,
                      "%s d_head %lld: float cache against double (%g, %g)", isa, (long long)dh,
                      worst_error(out, exact_out, n_out), worst_error(probs, exact_probs, n_probs));
                run(&rounded, out, probs);
                run(&halves, out_bf16, probs_bf16);
                CHECK(memcmp(out, out_bf16, (size_t)n_out * sizeof(float)) == 0 &&
                          memcmp(probs, probs_bf16, (size_t)n_probs * sizeof(float)) == 0,
                      "%s d_head %lld: a bf16 cache gives the bits of its values as floats", isa,
                      (long long)dh);
                CHECK(worst_error(out_bf16, rounded_out, n_out) < 2e-6,
                      "%s d_head %lld: bf16 cache against double on its values (%g)", isa,
                      (long long)dh, worst_error(out_bf16, rounded_out, n_out));
                CHECK(worst_error(out_bf16, exact_out, n_out) <= 2.0 * naive_error &&
                          worst_error(probs_bf16, exact_probs, n_probs) <= 2.0 * naive_probs_error,
                      "%s d_head %lld: bf16 cache error %g (probabilities %g) within twice a "
                      "naive computation's %g (%g)",
                      isa, (long long)dh, worst_error(out_bf16, exact_out, n_out),
                      worst_error(probs_bf16, exact_probs, n_probs), naive_error,
                      naive_probs_error);
                int empty_row_zero = 1;
                for (int64_t i = 2 * HEADS * dh; with_counts && i < 3 * HEADS * dh; i++)
                    empty_row_zero &= out_bf16[i] == 0.0f;
                CHECK(empty_row_zero, "%s: a row without keys gets zeros", isa);
            }
            attn_set_isa(ATTN_ISA_AUTO);
        }
        free(exact_out);
        free(exact_probs);
        free(rounded_out);
        free(rounded_probs);
        free(naive_out);
        free(naive_probs);
        free(out);
        free(probs);
        free(out_bf16);
        free(probs_bf16);
        free_cache(&c);
    }
}

int main(void)
{
    RUN_TEST(test_float_and_bf16_caches);
    return test_summary();
}
