/* The step decoder's small-row linear layer (src/models/step_linear.h): every instruction
 * set against a double-precision textbook product on odd sizes, a row's result independent
 * of the rows beside it and of the thread count (bit for bit). */
#include "harness.h"
#include "models/step_linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void expected_product(const step_linear_args *a, double *out)
{
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t o = 0; o < a->out; o++) {
            double sum = a->b != NULL ? (double)a->b[o] : 0.0;
            for (int64_t i = 0; i < a->in; i++)
                sum += (double)a->x[r * a->ldx + i] * (double)a->w[o * a->in + i];
            out[r * a->out + o] = sum;
        }
}

typedef struct problem {
    step_linear_args args;
    float *x, *w, *b, *y;
} problem;

/* x has a row stride wider than in (as the decoder's strided query rows). */
static problem make_problem(int64_t rows, int64_t in, int64_t out, int with_bias, uint64_t seed)
{
    problem p;
    const int64_t ldx = in + 3, ldy = out + 2;
    p.x = test_alloc(sizeof(float) * (size_t)(rows * ldx));
    p.w = test_alloc(sizeof(float) * (size_t)(out * in));
    p.b = with_bias ? test_alloc(sizeof(float) * (size_t)out) : NULL;
    p.y = test_alloc(sizeof(float) * (size_t)(rows * ldy));
    memset(p.y, 0, sizeof(float) * (size_t)(rows * ldy));
    test_fill_uniform(p.x, (size_t)(rows * ldx), -1.0f, 1.0f, seed);
    test_fill_uniform(p.w, (size_t)(out * in), -1.0f, 1.0f, seed + 1);
    if (p.b != NULL)
        test_fill_uniform(p.b, (size_t)out, -1.0f, 1.0f, seed + 2);
    p.args = (step_linear_args){rows, in, out, p.x, ldx, p.w, p.b, p.y, ldy};
    return p;
}

static void free_problem(problem *p)
{
    free(p->x);
    free(p->w);
    free(p->b);
    free(p->y);
}

static void test_matches_double_product(void)
{
    static const int64_t rows[] = {1, 3, 4, 5, 8, 9, 13};
    static const int64_t ins[] = {1, 7, 16, 17, 64, 80, 259};
    static const int64_t outs[] = {1, 3, 17, 129};
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!attn_isa_supported((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        int all_close = 1;
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
            for (size_t i = 0; i < sizeof ins / sizeof *ins; i++)
                for (size_t o = 0; o < sizeof outs / sizeof *outs; o++) {
                    problem p = make_problem(rows[r], ins[i], outs[o], (int)(o % 2), 100 + i);
                    double *expected =
                        test_alloc(sizeof(double) * (size_t)(rows[r] * outs[o]));
                    expected_product(&p.args, expected);
                    attn_step_linear(&p.args);
                    /* Each product sums `in` terms of size <= 1: float rounding grows with
                     * sqrt(in) at worst like in. */
                    const double tolerance = 1e-6 * (double)ins[i] + 1e-6;
                    for (int64_t k = 0; k < rows[r]; k++)
                        for (int64_t c = 0; c < outs[o]; c++) {
                            const double got = (double)p.y[k * p.args.ldy + c];
                            const double want = expected[k * outs[o] + c];
                            if (!(fabs(got - want) <= tolerance)) {
                                if (all_close)
                                    CHECK(0, "%s rows %lld in %lld out %lld: y[%lld, %lld] = %g, "
                                             "expected %g",
                                          attn_isa_name((attn_isa)isa), (long long)rows[r],
                                          (long long)ins[i], (long long)outs[o], (long long)k,
                                          (long long)c, got, want);
                                all_close = 0;
                            }
                        }
                    free(expected);
                    free_problem(&p);
                }
        CHECK(all_close, "%s: every size matches the double product",
              attn_isa_name((attn_isa)isa));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Row 6 of a 7-row product equals the same row alone, and 1 and 2 threads agree. */
static void test_rows_and_threads_independent(void)
{
    const int saved = attn_get_num_threads();
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!attn_isa_supported((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        problem many = make_problem(7, 83, 300, 1, 7);
        problem one = make_problem(1, 83, 300, 1, 7);
        memcpy(one.x, many.x + 6 * many.args.ldx, sizeof(float) * 83);
        memcpy(one.w, many.w, sizeof(float) * 83 * 300);
        memcpy(one.b, many.b, sizeof(float) * 300);
        CHECK_OK(attn_set_num_threads(2));
        attn_step_linear(&many.args);
        attn_step_linear(&one.args);
        CHECK(memcmp(one.y, many.y + 6 * many.args.ldy, sizeof(float) * 300) == 0,
              "%s: a row alone gives the same bits as in a group", attn_isa_name((attn_isa)isa));
        float *two_threads = test_alloc(sizeof(float) * (size_t)(7 * many.args.ldy));
        memcpy(two_threads, many.y, sizeof(float) * (size_t)(7 * many.args.ldy));
        CHECK_OK(attn_set_num_threads(1));
        attn_step_linear(&many.args);
        CHECK(memcmp(two_threads, many.y, sizeof(float) * (size_t)(7 * many.args.ldy)) == 0,
              "%s: 1 and 2 threads give the same bits", attn_isa_name((attn_isa)isa));
        free(two_threads);
        free_problem(&many);
        free_problem(&one);
    }
    CHECK_OK(attn_set_num_threads(saved));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

int main(void)
{
    RUN_TEST(test_matches_double_product);
    RUN_TEST(test_rows_and_threads_independent);
    return test_summary();
}
