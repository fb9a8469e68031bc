/* Additive and Luong attention with bf16 operands: the projections' products round their
 * operands to bfloat16 and sum in float, so a bf16 step equals (to float rounding) a float step
 * whose query and projection weights were rounded beforehand, and differs from the unrounded
 * float step by bf16-sized amounts. Every instruction set the CPU has. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, LK = 7, DS = 24, DK = 20, DA = 16 };

static float round_bf16(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
    float y;
    memcpy(&y, &bits, sizeof y);
    return y;
}

static void fill(attn_rng *rng, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = attn_rng_normal(rng);
}

static void rounded_copy(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = round_bf16(x[i]);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst;
}

typedef struct step_data {
    float query[B * DS], query_rounded[B * DS];
    float keys[B * LK * DA], values[B * LK * DK], annotations[B * LK * DK];
    float w[DA * (DS + DK)], w_rounded[DA * (DS + DK)];
    float bias[DA], v[DA];
} step_data;

static void check_additive(const step_data *d, const char *isa)
{
    attn_additive_dims dims = {B, LK, DS, DA, DK, DA, ATTN_PRECISION_FP32};
    float *saved = test_alloc(attn_additive_saved_floats(&dims) * sizeof(float));
    float ctx_fp32[B * DK], ctx_rounded[B * DK], ctx_bf16[B * DK], weights[B * LK];
    attn_additive_params plain = {d->w, d->bias, d->v}, rounded = {d->w_rounded, d->bias, d->v};
    CHECK_OK(attn_additive_forward(&dims, &plain, d->query, d->keys, d->values, NULL, ctx_fp32,
                                   weights, saved));
    CHECK_OK(attn_additive_forward(&dims, &rounded, d->query_rounded, d->keys, d->values, NULL,
                                   ctx_rounded, weights, saved));
    dims.precision = ATTN_PRECISION_BF16;
    CHECK_OK(attn_additive_forward(&dims, &plain, d->query, d->keys, d->values, NULL, ctx_bf16,
                                   weights, saved));
    const double to_rounded = max_abs_diff(ctx_bf16, ctx_rounded, B * DK);
    const double to_fp32 = max_abs_diff(ctx_bf16, ctx_fp32, B * DK);
    CHECK(to_rounded < 1e-5, "%s additive: bf16 equals float on rounded operands (%.3g)", isa,
          to_rounded);
    CHECK(to_fp32 > 1e-6 && to_fp32 < 0.05,
          "%s additive: bf16 differs from float by a bf16-sized "
          "amount (%.3g)",
          isa, to_fp32);
    dims.precision = ATTN_PRECISION_INT8;
    CHECK(attn_additive_forward(&dims, &plain, d->query, d->keys, d->values, NULL, ctx_bf16,
                                weights, saved) == ATTN_ERR_INVALID_ARGUMENT &&
              strstr(attn_last_error(), "precision"),
          "%s additive: int8 refused: %s", isa, attn_last_error());
    free(saved);
}

static void check_luong(const step_data *d, attn_luong_score score, const char *isa)
{
    attn_luong_config config = attn_luong_default_config(score, ATTN_LUONG_GLOBAL);
    config.batch = B;
    config.src_len = LK;
    config.query_dim = DS;
    config.key_dim = DK;
    config.value_dim = DK;
    config.attn_dim = score == ATTN_LUONG_CONCAT ? DA : 0;
    const char *name = score == ATTN_LUONG_CONCAT ? "concat" : "general";
    float *saved = test_alloc((attn_luong_saved_floats(&config) + 1) * sizeof(float));
    float keys_fp32[B * LK * DA], keys_rounded[B * LK * DA], keys_bf16[B * LK * DA];
    const float *keys[3] = {d->annotations, d->annotations, d->annotations};
    float annotations_rounded[B * LK * DK];
    rounded_copy(d->annotations, annotations_rounded, B * LK * DK);
    if (score == ATTN_LUONG_CONCAT) {
        /* the keys' projection is a product too: w's key columns times the annotations */
        CHECK_OK(attn_luong_project_keys(&config, d->annotations, d->w, keys_fp32));
        CHECK_OK(attn_luong_project_keys(&config, annotations_rounded, d->w_rounded, keys_rounded));
        config.precision = ATTN_PRECISION_BF16;
        CHECK_OK(attn_luong_project_keys(&config, d->annotations, d->w, keys_bf16));
        config.precision = ATTN_PRECISION_FP32;
        CHECK(max_abs_diff(keys_bf16, keys_rounded, B * LK * DA) < 1e-5,
              "%s concat keys: bf16 equals float on rounded operands", isa);
        keys[0] = keys_fp32;
        keys[1] = keys_rounded;
        keys[2] = keys_bf16;
    }
    float ctx_fp32[B * DK], ctx_rounded[B * DK], ctx_bf16[B * DK], weights[B * LK];
    attn_luong_params plain = {d->w, d->v, NULL, NULL}, rounded = {d->w_rounded, d->v, NULL, NULL};
    CHECK_OK(attn_luong_forward(&config, &plain, 0, d->query, keys[0], d->values, NULL, ctx_fp32,
                                weights, saved));
    CHECK_OK(attn_luong_forward(&config, &rounded, 0, d->query_rounded, keys[1], d->values, NULL,
                                ctx_rounded, weights, saved));
    config.precision = ATTN_PRECISION_BF16;
    CHECK_OK(attn_luong_forward(&config, &plain, 0, d->query, keys[2], d->values, NULL, ctx_bf16,
                                weights, saved));
    const double to_rounded = max_abs_diff(ctx_bf16, ctx_rounded, B * DK);
    const double to_fp32 = max_abs_diff(ctx_bf16, ctx_fp32, B * DK);
    CHECK(to_rounded < 1e-5, "%s luong %s: bf16 equals float on rounded operands (%.3g)", isa, name,
          to_rounded);
    CHECK(to_fp32 > 1e-6 && to_fp32 < 0.05,
          "%s luong %s: bf16 differs from float by a bf16-sized amount (%.3g)", isa, name, to_fp32);
    free(saved);
}

static void test_bf16_projections_round_their_operands(void)
{
    static step_data d;
    attn_rng rng;
    attn_rng_seed(&rng, 21);
    fill(&rng, d.query, B * DS);
    fill(&rng, d.keys, B * LK * DA);
    fill(&rng, d.values, B * LK * DK);
    fill(&rng, d.annotations, B * LK * DK);
    fill(&rng, d.w, DA * (DS + DK));
    fill(&rng, d.bias, DA);
    fill(&rng, d.v, DA);
    /* scaled so that the scores neither saturate the softmax nor vanish */
    for (size_t i = 0; i < DA * (DS + DK); i++)
        d.w[i] *= 0.15f;
    rounded_copy(d.query, d.query_rounded, B * DS);
    rounded_copy(d.w, d.w_rounded, DA * (DS + DK));
    const attn_isa before = attn_get_isa();
    for (int isa = ATTN_ISA_PORTABLE; isa <= ATTN_ISA_AVX512; isa++) {
        if (!test_isa_wanted((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        const char *name = attn_isa_name((attn_isa)isa);
        check_additive(&d, name);
        check_luong(&d, ATTN_LUONG_GENERAL, name);
        check_luong(&d, ATTN_LUONG_CONCAT, name);
    }
    attn_set_isa(before);
}

int main(void)
{
    RUN_TEST(test_bf16_projections_round_their_operands);
    return test_summary();
}
