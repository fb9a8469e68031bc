/* Learning-rate schedules: functions of the step (and, for a cosine annealed over a time
 * budget, of the training time), in double. */
#include "core/internal.h"
#include "attn/attn_optim.h"

#include <math.h>
#include <string.h>

static const double pi = 3.14159265358979323846;

/* fn names the public function the caller called, so messages point at it. */
static attn_status check_rate(const char *fn, const char *what, double value)
{
    ATTN_CHECK_ARG(value >= 0.0 && isfinite(value), "%s: %s must be finite and >= 0, got %g", fn,
                   what, value);
    return ATTN_OK;
}

/* A cosine ends either at a step or when a time budget is spent, never both: with both, a
 * resumed or slower run would not know which one to follow. */
static attn_status check_cosine_end(const char *fn, const attn_lr_schedule *s)
{
    const int by_time = s->total_seconds != 0.0; /* NaN counts as given, and is refused */
    ATTN_CHECK_ARG(!(by_time && s->total_steps != 0),
                   "%s: a cosine schedule ends at total_steps (%lld) or after total_seconds "
                   "(%g), not both; set the other to 0",
                   fn, (long long)s->total_steps, s->total_seconds);
    if (by_time) {
        ATTN_CHECK_ARG(s->total_seconds > 0.0 && isfinite(s->total_seconds),
                       "%s: total_seconds must be finite and > 0, got %g", fn, s->total_seconds);
        return ATTN_OK;
    }
    ATTN_CHECK_ARG(s->total_steps != 0,
                   "%s: a cosine schedule needs total_steps (> warmup_steps) or total_seconds "
                   "(> 0) to know where it ends; both are 0",
                   fn);
    ATTN_CHECK_ARG(s->total_steps > s->warmup_steps,
                   "%s: total_steps (%lld) must exceed warmup_steps (%lld)", fn,
                   (long long)s->total_steps, (long long)s->warmup_steps);
    return ATTN_OK;
}

static attn_status check_schedule(const char *fn, const attn_lr_schedule *s)
{
    switch (s->kind) {
    case ATTN_LR_CONSTANT:
        return check_rate(fn, "lr", s->lr);
    case ATTN_LR_NOAM:
        ATTN_TRY(check_rate(fn, "factor", s->factor));
        ATTN_CHECK_ARG(s->d_model >= 1, "%s: d_model must be >= 1, got %lld", fn,
                       (long long)s->d_model);
        ATTN_CHECK_ARG(s->warmup_steps >= 1,
                       "%s: warmup_steps must be >= 1 for the Noam schedule, got %lld", fn,
                       (long long)s->warmup_steps);
        return ATTN_OK;
    case ATTN_LR_INVERSE_SQRT:
        ATTN_TRY(check_rate(fn, "lr", s->lr));
        ATTN_CHECK_ARG(s->warmup_steps >= 1,
                       "%s: warmup_steps must be >= 1 for the inverse square root "
                       "schedule, got %lld",
                       fn, (long long)s->warmup_steps);
        return ATTN_OK;
    case ATTN_LR_COSINE:
        ATTN_TRY(check_rate(fn, "lr", s->lr));
        ATTN_TRY(check_rate(fn, "min_lr", s->min_lr));
        ATTN_CHECK_ARG(s->min_lr <= s->lr, "%s: min_lr (%g) must not exceed lr (%g)", fn, s->min_lr,
                       s->lr);
        ATTN_CHECK_ARG(s->warmup_steps >= 0, "%s: warmup_steps must be >= 0, got %lld", fn,
                       (long long)s->warmup_steps);
        ATTN_CHECK_ARG(s->warmup_share >= 0.0 && s->warmup_share < 1.0,
                       "%s: warmup_share must be in [0, 1), got %g", fn, s->warmup_share);
        ATTN_CHECK_ARG(s->warmup_share == 0.0 || s->total_seconds != 0.0,
                       "%s: warmup_share (%g) applies to a cosine over total_seconds only; a "
                       "cosine by steps has its warm-up in warmup_steps",
                       fn, s->warmup_share);
        return check_cosine_end(fn, s);
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown schedule kind %d", fn, (int)s->kind);
}

/* Only after check_schedule: total_seconds is then > 0 exactly when total_steps is 0. */
static int anneals_over_time(const attn_lr_schedule *s)
{
    return s->kind == ATTN_LR_COSINE && s->total_steps == 0;
}

/* A checked schedule that depends on the step alone. */
static double rate_by_step(const attn_lr_schedule *s, int64_t step)
{
    const double t = (double)step, warmup = (double)s->warmup_steps;
    switch (s->kind) {
    case ATTN_LR_CONSTANT:
        return s->lr;
    case ATTN_LR_NOAM:
        /* At step 0, step^-0.5 is infinite and the minimum is the warm-up's 0. */
        return step == 0 ? 0.0
                         : s->factor / sqrt((double)s->d_model) *
                               fmin(1.0 / sqrt(t), t / (warmup * sqrt(warmup)));
    case ATTN_LR_INVERSE_SQRT:
        return step == 0 ? 0.0 : s->lr * fmin(t / warmup, sqrt(warmup / t));
    case ATTN_LR_COSINE:
        break;
    }
    if (step < s->warmup_steps)
        return s->lr * t / warmup;
    if (step >= s->total_steps)
        return s->min_lr;
    const double progress = (t - warmup) / ((double)s->total_steps - warmup);
    return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(pi * progress));
}

/* A checked cosine over total_seconds. */
static double rate_by_time(const attn_lr_schedule *s, int64_t step, double seconds)
{
    double warm = s->warmup_steps == 0 ? 1.0 : (double)step / (double)s->warmup_steps;
    if (s->warmup_share > 0.0)
        warm = fmax(warm, seconds / (s->warmup_share * s->total_seconds));
    warm = fmin(1.0, warm);
    /* Capped so that the rate stays at min_lr once the budget is spent (cos(pi) is -1 in
     * double, so the cap lands on min_lr exactly). */
    const double progress = fmin(1.0, seconds / s->total_seconds);
    return warm * (s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(pi * progress)));
}

attn_status attn_lr_at(const attn_lr_schedule *schedule, int64_t step, double *lr)
{
    static const char fn[] = "attn_lr_at";
    ATTN_CHECK_NOT_NULL(schedule);
    ATTN_CHECK_NOT_NULL(lr);
    ATTN_CHECK_ARG(step >= 0, "%s: step must be >= 0, got %lld", fn, (long long)step);
    ATTN_TRY(check_schedule(fn, schedule));
    ATTN_CHECK_ARG(!anneals_over_time(schedule),
                   "%s: this cosine schedule is annealed over total_seconds (%g s), so its "
                   "rate is not a function of the step alone; use attn_lr_at_time",
                   fn, schedule->total_seconds);
    *lr = rate_by_step(schedule, step);
    return ATTN_OK;
}

attn_status attn_lr_at_time(const attn_lr_schedule *schedule, int64_t step, double seconds,
                            double *lr)
{
    static const char fn[] = "attn_lr_at_time";
    ATTN_CHECK_NOT_NULL(schedule);
    ATTN_CHECK_NOT_NULL(lr);
    ATTN_CHECK_ARG(step >= 0, "%s: step must be >= 0, got %lld", fn, (long long)step);
    ATTN_CHECK_ARG(seconds >= 0.0 && isfinite(seconds),
                   "%s: seconds must be finite and >= 0, got %g", fn, seconds);
    ATTN_TRY(check_schedule(fn, schedule));
    *lr = anneals_over_time(schedule) ? rate_by_time(schedule, step, seconds)
                                      : rate_by_step(schedule, step);
    return ATTN_OK;
}

attn_status attn_lr_schedule_plan(const attn_lr_plan *plan, attn_lr_schedule *schedule)
{
    static const char fn[] = "attn_lr_schedule_plan";
    ATTN_CHECK_NOT_NULL(plan);
    ATTN_CHECK_NOT_NULL(schedule);
    ATTN_CHECK_ARG(plan->accumulate >= 1, "%s: accumulate must be >= 1, got %lld", fn,
                   (long long)plan->accumulate);
    ATTN_CHECK_ARG(plan->warmup_share >= 0.0 && plan->warmup_share < 1.0,
                   "%s: warmup_share must be in [0, 1), got %g", fn, plan->warmup_share);
    ATTN_CHECK_ARG(plan->batches_per_epoch >= 0, "%s: batches_per_epoch must be >= 0, got %lld", fn,
                   (long long)plan->batches_per_epoch);
    attn_lr_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = plan->kind;
    s.lr = plan->lr;
    s.warmup_steps = plan->warmup_steps;
    if (plan->kind == ATTN_LR_NOAM) {
        s.factor = plan->noam_factor;
        s.d_model = plan->d_model;
    } else if (plan->kind == ATTN_LR_COSINE) {
        s.min_lr = plan->min_lr;
        const int64_t per_epoch =
            (plan->batches_per_epoch + plan->accumulate - 1) / plan->accumulate;
        s.total_steps = plan->max_steps > 0 ? plan->max_steps : plan->epochs * per_epoch;
        if (s.total_steps <= 0) {
            /* No last step to aim at: anneal over the time limit, so a run for "an hour on
             * this machine" ends at min_lr however many steps the machine makes. */
            s.total_steps = 0;
            s.total_seconds = plan->time_limit;
            s.warmup_share = plan->warmup_share;
        } else if (plan->warmup_share > 0.0) {
            /* A share of the planned updates, so a short run still reaches its peak rate
             * early enough to spend most of its updates near it. */
            const int64_t share = (int64_t)ceil(plan->warmup_share * (double)s.total_steps);
            s.warmup_steps = share < plan->warmup_steps ? share : plan->warmup_steps;
        }
        if (s.total_steps > 0 && s.total_steps <= s.warmup_steps)
            s.warmup_steps = s.total_steps / 10;
    }
    ATTN_TRY(check_schedule(fn, &s));
    *schedule = s;
    return ATTN_OK;
}
