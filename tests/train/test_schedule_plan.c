/* attn_lr_schedule_plan: a run's settings (epochs, max steps, a time limit, warm-up) turned
 * into the schedule the trainer follows. */
#include "harness.h"

#include <math.h>
#include <string.h>

static attn_lr_plan cosine_plan(void)
{
    attn_lr_plan p;
    memset(&p, 0, sizeof p);
    p.kind = ATTN_LR_COSINE;
    p.lr = 1e-3;
    p.min_lr = 1e-5;
    p.warmup_steps = 10;
    p.batches_per_epoch = 25;
    p.accumulate = 2;
    return p;
}

static void test_cosine_ends_at_max_steps_then_epochs(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.max_steps = 100;
    p.epochs = 3;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.kind == ATTN_LR_COSINE && s.total_steps == 100 && s.total_seconds == 0.0,
          "max_steps first: total_steps %lld", (long long)s.total_steps);
    CHECK(s.lr == 1e-3 && s.min_lr == 1e-5 && s.warmup_steps == 10, "rates and warm-up kept");
    p.max_steps = 0;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    /* 25 batches in updates of 2: 13 updates per epoch (the last one short). */
    CHECK(s.total_steps == 39, "3 epochs of 13 updates: total_steps %lld",
          (long long)s.total_steps);
}

static void test_cosine_shortens_a_long_warmup(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.max_steps = 10;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.total_steps == 10 && s.warmup_steps == 1, "warm-up %lld of %lld steps",
          (long long)s.warmup_steps, (long long)s.total_steps);
    p.max_steps = 5;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.warmup_steps == 0, "warm-up %lld of 5 steps", (long long)s.warmup_steps);
}

static void test_cosine_over_the_time_limit(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.time_limit = 3600.0;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.total_steps == 0 && s.total_seconds == 3600.0 && s.warmup_steps == 10,
          "annealed over %g s", s.total_seconds);
    double lr = 0.0;
    CHECK_OK(attn_lr_at_time(&s, 20, 3600.0, &lr));
    CHECK(lr == 1e-5, "rate %g at the end of the budget", lr);
    p.time_limit = 0.0;
    CHECK_FAILS(attn_lr_schedule_plan(&p, &s), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_other_kinds(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.kind = ATTN_LR_NOAM;
    p.noam_factor = 2.0;
    p.d_model = 64;
    p.max_steps = 7; /* only a cosine ends */
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.kind == ATTN_LR_NOAM && s.factor == 2.0 && s.d_model == 64 && s.lr == 1e-3 &&
              s.total_steps == 0 && s.min_lr == 0.0,
          "noam: factor %g, d_model %lld", s.factor, (long long)s.d_model);
    p.kind = ATTN_LR_INVERSE_SQRT;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.kind == ATTN_LR_INVERSE_SQRT && s.lr == 1e-3 && s.warmup_steps == 10 &&
              s.factor == 0.0 && s.d_model == 0,
          "inverse-sqrt keeps only its fields");
    p.kind = ATTN_LR_CONSTANT;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.kind == ATTN_LR_CONSTANT && s.lr == 1e-3, "constant");
}

/* The default warm-up: a share of the planned updates, capped, wherever the cosine ends. */
static void test_warmup_share_and_cap(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.warmup_share = 0.05;
    p.warmup_steps = 1000; /* the cap */
    p.max_steps = 300;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.total_steps == 300 && s.warmup_steps == 15 && s.warmup_share == 0.0,
          "5%% of 300 updates: warm-up %lld", (long long)s.warmup_steps);
    p.max_steps = 0;
    p.epochs = 3; /* 39 updates: 5% rounded up is 2 */
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.total_steps == 39 && s.warmup_steps == 2, "5%% of 39 updates: warm-up %lld",
          (long long)s.warmup_steps);
    p.epochs = 0;
    p.max_steps = 100000;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.warmup_steps == 1000, "capped at 1000: warm-up %lld", (long long)s.warmup_steps);
    /* Under the clock: the cap in updates and the share of the time, the first reached. */
    p.max_steps = 0;
    p.time_limit = 200.0;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.total_steps == 0 && s.total_seconds == 200.0 && s.warmup_steps == 1000 &&
              s.warmup_share == 0.05,
          "by the clock: warm-up %lld updates or %g of the time", (long long)s.warmup_steps,
          s.warmup_share);
    double lr = -1.0;
    CHECK_OK(attn_lr_at_time(&s, 5, 5.0, &lr)); /* half of the 10 s share of the time */
    CHECK(fabs(lr - 0.5 * (1e-5 + (1e-3 - 1e-5) * 0.5 *
                                      (1.0 + cos(3.14159265358979323846 * 5.0 / 200.0)))) < 1e-15,
          "half way through the warm-up by time: %g", lr);
    CHECK_OK(attn_lr_at_time(&s, 500, 1.0, &lr)); /* half of the 1000 updates, 1 s in */
    CHECK(lr > 0.49e-3 && lr < 0.5e-3, "half way through the warm-up by updates: %g", lr);
    CHECK_OK(attn_lr_at_time(&s, 20, 20.0, &lr));
    CHECK(lr > 0.9e-3, "past the share of the time, the cosine: %g", lr);
    CHECK_OK(attn_lr_at_time(&s, 20, 200.0, &lr));
    CHECK(lr == 1e-5, "annealed when the time is up: %g", lr);
    /* Without a share, the warm-up is what was asked, as before. */
    p.warmup_share = 0.0;
    p.time_limit = 0.0;
    p.max_steps = 300;
    CHECK_OK(attn_lr_schedule_plan(&p, &s));
    CHECK(s.warmup_steps == 30,
          "an explicit warm-up longer than the run keeps a "
          "tenth: %lld",
          (long long)s.warmup_steps);
    p.warmup_share = 1.0;
    CHECK_FAILS(attn_lr_schedule_plan(&p, &s), ATTN_ERR_INVALID_ARGUMENT);
    /* A share on a cosine by steps is a mistake the schedule names. */
    attn_lr_schedule by_steps = {ATTN_LR_COSINE, 1e-3, 0.0, 0, 10, 100, 0.0, 0.0, 0.05};
    CHECK_FAILS(attn_lr_at(&by_steps, 5, &lr), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_bad_plans(void)
{
    attn_lr_plan p = cosine_plan();
    attn_lr_schedule s;
    p.max_steps = 100;
    p.accumulate = 0;
    CHECK_FAILS(attn_lr_schedule_plan(&p, &s), ATTN_ERR_INVALID_ARGUMENT);
    p.accumulate = 1;
    p.min_lr = 1.0; /* above lr */
    CHECK_FAILS(attn_lr_schedule_plan(&p, &s), ATTN_ERR_INVALID_ARGUMENT);
    p = cosine_plan();
    p.kind = ATTN_LR_NOAM;
    p.d_model = 0;
    CHECK_FAILS(attn_lr_schedule_plan(&p, &s), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lr_schedule_plan(NULL, &s), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lr_schedule_plan(&p, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_cosine_ends_at_max_steps_then_epochs);
    RUN_TEST(test_cosine_shortens_a_long_warmup);
    RUN_TEST(test_cosine_over_the_time_limit);
    RUN_TEST(test_other_kinds);
    RUN_TEST(test_warmup_share_and_cap);
    RUN_TEST(test_bad_plans);
    return test_summary();
}
