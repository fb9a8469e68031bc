/* Learning-rate schedules: pure functions of the step, in double. */
#include "core/internal.h"
#include "attn/attn_train.h"

#include <math.h>

static const double pi = 3.14159265358979323846;

static attn_status check_rate(const char *what, double value)
{
    ATTN_CHECK_ARG(value >= 0.0 && isfinite(value),
                   "attn_lr_at: %s must be finite and >= 0, got %g", what, value);
    return ATTN_OK;
}

static attn_status check_schedule(const attn_lr_schedule *s)
{
    switch (s->kind) {
    case ATTN_LR_CONSTANT:
        return check_rate("lr", s->lr);
    case ATTN_LR_NOAM:
        ATTN_TRY(check_rate("factor", s->factor));
        ATTN_CHECK_ARG(s->d_model >= 1, "attn_lr_at: d_model must be >= 1, got %lld",
                       (long long)s->d_model);
        ATTN_CHECK_ARG(s->warmup_steps >= 1,
                       "attn_lr_at: warmup_steps must be >= 1 for the Noam schedule, got %lld",
                       (long long)s->warmup_steps);
        return ATTN_OK;
    case ATTN_LR_INVERSE_SQRT:
        ATTN_TRY(check_rate("lr", s->lr));
        ATTN_CHECK_ARG(s->warmup_steps >= 1,
                       "attn_lr_at: warmup_steps must be >= 1 for the inverse square root "
                       "schedule, got %lld",
                       (long long)s->warmup_steps);
        return ATTN_OK;
    case ATTN_LR_COSINE:
        ATTN_TRY(check_rate("lr", s->lr));
        ATTN_TRY(check_rate("min_lr", s->min_lr));
        ATTN_CHECK_ARG(s->min_lr <= s->lr, "attn_lr_at: min_lr (%g) must not exceed lr (%g)",
                       s->min_lr, s->lr);
        ATTN_CHECK_ARG(s->warmup_steps >= 0,
                       "attn_lr_at: warmup_steps must be >= 0, got %lld",
                       (long long)s->warmup_steps);
        ATTN_CHECK_ARG(s->total_steps > s->warmup_steps,
                       "attn_lr_at: total_steps (%lld) must exceed warmup_steps (%lld)",
                       (long long)s->total_steps, (long long)s->warmup_steps);
        return ATTN_OK;
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_lr_at: unknown schedule kind %d",
                     (int)s->kind);
}

attn_status attn_lr_at(const attn_lr_schedule *schedule, int64_t step, double *lr)
{
    ATTN_CHECK_NOT_NULL(schedule);
    ATTN_CHECK_NOT_NULL(lr);
    ATTN_CHECK_ARG(step >= 0, "attn_lr_at: step must be >= 0, got %lld", (long long)step);
    ATTN_TRY(check_schedule(schedule));
    const attn_lr_schedule *s = schedule;
    const double t = (double)step, warmup = (double)s->warmup_steps;
    switch (s->kind) {
    case ATTN_LR_CONSTANT:
        *lr = s->lr;
        break;
    case ATTN_LR_NOAM:
        /* At step 0, step^-0.5 is infinite and the minimum is the warm-up's 0. */
        *lr = step == 0 ? 0.0
                        : s->factor / sqrt((double)s->d_model) *
                              fmin(1.0 / sqrt(t), t / (warmup * sqrt(warmup)));
        break;
    case ATTN_LR_INVERSE_SQRT:
        *lr = step == 0 ? 0.0 : s->lr * fmin(t / warmup, sqrt(warmup / t));
        break;
    case ATTN_LR_COSINE:
        if (step < s->warmup_steps) {
            *lr = s->lr * t / warmup;
        } else if (step >= s->total_steps) {
            *lr = s->min_lr;
        } else {
            const double progress = (t - warmup) / ((double)s->total_steps - warmup);
            *lr = s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(pi * progress));
        }
        break;
    }
    return ATTN_OK;
}
