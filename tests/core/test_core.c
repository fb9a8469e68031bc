/* Runtime core: errors, threads, dispatch, random numbers, tensor views, arena. */
#include "harness.h"
#include "core/internal.h"

#include <math.h>
#include <string.h>

static void test_errors_carry_a_message(void)
{
    attn_clear_error();
    CHECK(attn_last_error()[0] == '\0', "fresh error is empty");
    CHECK_FAILS(attn_set_num_threads(-3), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "-3") != NULL, "message names the bad value: %s",
          attn_last_error());
    CHECK(strcmp(attn_status_name(ATTN_ERR_OUT_OF_MEMORY), "out of memory") == 0, "status name");
    CHECK(strlen(attn_version()) > 0, "version");
}

static void test_threads_are_settable(void)
{
    CHECK_OK(attn_set_num_threads(1));
    CHECK(attn_get_num_threads() == 1, "one thread");
    CHECK_OK(attn_set_num_threads(0));
    CHECK(attn_get_num_threads() >= 1, "default threads");
}

typedef struct {
    int64_t covered[1000];
} cover_ctx;

static void mark_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    cover_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++)
        c->covered[i] += 1 + 0 * thread_index;
}

static void test_parallel_for_covers_each_index_once(void)
{
    static cover_ctx c;
    CHECK_OK(attn_set_num_threads(2));
    attn_parallel_for(1000, 7, mark_range, &c);
    int once = 1;
    for (int i = 0; i < 1000; i++)
        once &= c.covered[i] == 1;
    CHECK(once, "every index visited exactly once");
    CHECK_OK(attn_set_num_threads(0));
}

static void test_isa_selection(void)
{
    CHECK(attn_isa_supported(ATTN_ISA_REFERENCE), "reference always supported");
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    CHECK(attn_get_isa() == ATTN_ISA_REFERENCE, "reference chosen");
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK(attn_get_isa() != ATTN_ISA_AUTO, "auto resolves to a concrete set");
    CHECK_FAILS(attn_set_isa((attn_isa)42), ATTN_ERR_INVALID_ARGUMENT);
}

/* The ARM paths are levels: each needs the one below it, a path the CPU lacks is refused, and
 * auto picks the highest the CPU has (on x86 none of them is supported). */
static void test_arm_levels_nest(void)
{
    const attn_isa levels[] = {ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
    attn_isa highest = ATTN_ISA_AUTO;
    for (int i = 0; i < 3; i++) {
        if (attn_isa_supported(levels[i])) {
            highest = levels[i];
            if (i > 0)
                CHECK(attn_isa_supported(levels[i - 1]), "%s without %s",
                      attn_isa_name(levels[i]), attn_isa_name(levels[i - 1]));
        } else {
            CHECK_FAILS(attn_set_isa(levels[i]), ATTN_ERR_UNSUPPORTED);
        }
    }
    if (highest != ATTN_ISA_AUTO)
        CHECK(attn_best_isa() == highest, "auto is the highest ARM level here, %s, not %s",
              attn_isa_name(highest), attn_isa_name(attn_best_isa()));
    printf("  ARM levels here: neon %d, neon-dotprod %d, neon-bf16 %d\n",
           attn_isa_supported(ATTN_ISA_NEON), attn_isa_supported(ATTN_ISA_NEON_DOTPROD),
           attn_isa_supported(ATTN_ISA_NEON_BF16));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_rng_is_seeded_and_uniform(void)
{
    attn_rng a, b;
    attn_rng_seed(&a, 7);
    attn_rng_seed(&b, 7);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= attn_rng_next_u64(&a) == attn_rng_next_u64(&b);
    CHECK(same, "same seed, same stream");
    attn_rng_seed(&b, 8);
    CHECK(attn_rng_next_u64(&a) != attn_rng_next_u64(&b), "other seed, other stream");

    double sum = 0, sum_sq = 0;
    int in_range = 1;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        float u = attn_rng_uniform(&a);
        in_range &= u >= 0.0f && u < 1.0f;
        sum += u;
    }
    CHECK(in_range, "uniform in [0,1)");
    CHECK_CLOSE(sum / n, 0.5, 0.01, 0);
    sum = 0;
    for (int i = 0; i < n; i++) {
        double z = attn_rng_normal(&a);
        sum += z;
        sum_sq += z * z;
    }
    CHECK_CLOSE(sum / n, 0.0, 0.02, 0);
    CHECK_CLOSE(sum_sq / n, 1.0, 0.02, 0);
    int below_ok = 1;
    for (int i = 0; i < 1000; i++)
        below_ok &= attn_rng_below(&a, 3) < 3;
    CHECK(below_ok, "below(3) < 3");
    CHECK(attn_hash_uniform(1, 5) == attn_hash_uniform(1, 5), "hash is a function");
    CHECK(attn_hash_uniform(1, 5) != attn_hash_uniform(1, 6), "hash varies with index");
}

static void test_tensor_views(void)
{
    float data[24];
    int64_t shape[3] = {2, 3, 4};
    attn_tensor t = attn_tensor_view(data, 3, shape);
    CHECK(t.stride[0] == 12 && t.stride[1] == 4 && t.stride[2] == 1, "row-major strides");
    CHECK(attn_tensor_numel(&t) == 24, "numel");
    CHECK(attn_tensor_is_contiguous(&t), "contiguous");
    t.stride[0] = 13;
    CHECK(!attn_tensor_is_contiguous(&t), "padded view is not contiguous");
}

static void test_arena_reuses_memory(void)
{
    attn_arena *arena = NULL;
    CHECK_OK(attn_arena_create(1 << 20, &arena));
    float *a = attn_arena_floats(arena, 1000);
    float *b = attn_arena_floats(arena, 3 << 20); /* larger than a block: a new block */
    CHECK(a != NULL && b != NULL, "allocations succeed");
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "64-byte aligned");
    b[(3 << 20) - 1] = 1.0f;
    size_t peak = attn_arena_peak(arena);
    attn_arena_reset(arena);
    CHECK(attn_arena_used(arena) == 0, "reset frees everything");
    float *a2 = attn_arena_floats(arena, 1000);
    float *b2 = attn_arena_floats(arena, 3 << 20);
    CHECK(a2 == a && b2 == b, "second step reuses the same blocks");
    CHECK(attn_arena_peak(arena) == peak, "peak unchanged by an identical step");
    CHECK(attn_arena_alloc(arena, SIZE_MAX - 10) == NULL, "impossible request fails");
    CHECK(strlen(attn_last_error()) > 0, "with a message");
    attn_arena_destroy(arena);
    CHECK_FAILS(attn_arena_create(10, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_precision_names_round_trip(void)
{
    const attn_precision all[] = {ATTN_PRECISION_AUTO, ATTN_PRECISION_FP32, ATTN_PRECISION_BF16,
                                  ATTN_PRECISION_INT8};
    for (int i = 0; i < 4; i++) {
        attn_precision parsed = ATTN_PRECISION_INT8 == all[i] ? ATTN_PRECISION_FP32
                                                              : ATTN_PRECISION_INT8;
        CHECK(attn_precision_parse(attn_precision_name(all[i]), &parsed) == ATTN_OK &&
                  parsed == all[i],
              "%s parses back", attn_precision_name(all[i]));
    }
    attn_precision p = ATTN_PRECISION_FP32;
    CHECK(attn_precision_parse("fp16", &p) == ATTN_ERR_INVALID_ARGUMENT, "fp16 is refused");
    CHECK(strstr(attn_last_error(), "fp16") && strstr(attn_last_error(), "bf16"),
          "message names the value and the choices: %s", attn_last_error());
    CHECK(attn_precision_native(ATTN_PRECISION_FP32) == 1, "fp32 is always native");
    attn_isa before = attn_get_isa();
    CHECK(attn_set_isa(ATTN_ISA_PORTABLE) == ATTN_OK, "portable");
    CHECK(attn_precision_native(ATTN_PRECISION_BF16) == 0 &&
              attn_precision_native(ATTN_PRECISION_INT8) == 0,
          "portable code emulates bf16 and int8");
    attn_set_isa(before);
}

/* auto is bf16 exactly where bf16 is native under the instruction set selected now, and never
 * int8; a forced path without bf16 instructions (as ATTN_ISA=avx2 forces) gives fp32. */
static void test_precision_auto_follows_the_selected_isa(void)
{
    const attn_isa before = attn_get_isa();
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!attn_isa_supported((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        const attn_precision chosen = attn_precision_resolve(ATTN_PRECISION_AUTO);
        const attn_precision expected = attn_precision_native(ATTN_PRECISION_BF16)
                                            ? ATTN_PRECISION_BF16
                                            : ATTN_PRECISION_FP32;
        CHECK(chosen == expected, "%s: auto resolves to %s, expected %s",
              attn_isa_name((attn_isa)isa), attn_precision_name(chosen),
              attn_precision_name(expected));
        if (isa != ATTN_ISA_AVX512 && isa != ATTN_ISA_NEON_BF16)
            CHECK(chosen == ATTN_PRECISION_FP32, "%s has no bf16 instructions: auto is fp32",
                  attn_isa_name((attn_isa)isa));
        /* The ARM levels are selectable only where the CPU has their instructions, and each
         * runs its products natively: neon none, neon-dotprod int8, neon-bf16 int8 and bf16. */
        if (isa == ATTN_ISA_NEON || isa == ATTN_ISA_NEON_DOTPROD || isa == ATTN_ISA_NEON_BF16) {
            CHECK(attn_precision_native(ATTN_PRECISION_INT8) == (isa != ATTN_ISA_NEON),
                  "%s: int8 native exactly above neon", attn_isa_name((attn_isa)isa));
            CHECK(chosen == (isa == ATTN_ISA_NEON_BF16 ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32),
                  "%s: auto is bf16 exactly on neon-bf16", attn_isa_name((attn_isa)isa));
        }
        const attn_precision explicit_ones[] = {ATTN_PRECISION_FP32, ATTN_PRECISION_BF16,
                                                ATTN_PRECISION_INT8};
        for (int i = 0; i < 3; i++)
            CHECK(attn_precision_resolve(explicit_ones[i]) == explicit_ones[i],
                  "%s is kept as asked", attn_precision_name(explicit_ones[i]));
    }
    CHECK(attn_precision_native(ATTN_PRECISION_AUTO) == 0, "auto is a request, not a format");
    CHECK(strcmp(attn_precision_instructions(ATTN_PRECISION_FP32), "") == 0 &&
              strlen(attn_precision_instructions(ATTN_PRECISION_BF16)) > 0 &&
              strlen(attn_precision_instructions(ATTN_PRECISION_INT8)) > 0,
          "bf16 and int8 name their instructions");
    attn_set_isa(before);
}

int main(void)
{
    RUN_TEST(test_errors_carry_a_message);
    RUN_TEST(test_threads_are_settable);
    RUN_TEST(test_parallel_for_covers_each_index_once);
    RUN_TEST(test_isa_selection);
    RUN_TEST(test_arm_levels_nest);
    RUN_TEST(test_rng_is_seeded_and_uniform);
    RUN_TEST(test_tensor_views);
    RUN_TEST(test_arena_reuses_memory);
    RUN_TEST(test_precision_names_round_trip);
    RUN_TEST(test_precision_auto_follows_the_selected_isa);
    return test_summary();
}
