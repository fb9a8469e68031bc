/* attn optimizers and what steers them, on flat parameter buffers: Adam and AdamW, learning-rate
 * schedules, gradient clipping by global norm and gradient scaling.
 *
 * A model keeps its parameters in one contiguous float buffer, and their gradients and the
 * two Adam moments in three more buffers of the same layout, so one call updates them all.
 * The update functions run the instruction set chosen by attn_set_isa() and split the
 * buffer between threads; each element's result does not depend on the thread count.
 */
#ifndef ATTN_OPTIM_H
#define ATTN_OPTIM_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Adam and AdamW ------------------------------------------------------------------- */

typedef enum attn_adam_variant {
    ATTN_ADAM = 0, /* torch.optim.Adam: weight decay adds weight_decay * p to the gradient */
    ATTN_ADAMW = 1 /* torch.optim.AdamW: decoupled decay, p *= 1 - lr * weight_decay first */
} attn_adam_variant;

/* count parameters starting at offset in the flat buffer. */
typedef struct attn_param_range {
    int64_t offset;
    int64_t count;
} attn_param_range;

/* Hyperparameters as torch.optim.Adam / AdamW (PyTorch 1.13, amsgrad=False) take them, in
 * double so that the per-step scalars (1 - beta1, lr / (1 - beta1^t), ...) are formed exactly
 * as PyTorch forms them before rounding to float. */
typedef struct attn_adam_options {
    attn_adam_variant variant;
    double lr;           /* >= 0; a schedule sets it before each step */
    double beta1;        /* in [0, 1) */
    double beta2;        /* in [0, 1) */
    double eps;          /* > 0, added to sqrt(v_hat) (outside the square root) */
    double weight_decay; /* >= 0 */
    /* Parameters exempt from weight decay (typically biases and layer-norm gains), as ranges
     * sorted by offset, disjoint, within [0, n); NULL with count 0 when every parameter is
     * decayed. An exempt parameter is updated as in a PyTorch parameter group with
     * weight_decay = 0. */
    const attn_param_range *no_decay;
    int64_t no_decay_count;
} attn_adam_options;

/* PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0 for Adam and
 * 1e-2 for AdamW, no exempt ranges. */
ATTN_API attn_adam_options attn_adam_default_options(attn_adam_variant variant);

/* One update of n parameters in place, with the moments m and v (zero them before the first
 * step). *step counts the updates made so far (0 before the first; keep it in checkpoints):
 * it is incremented first and the new value sets the bias corrections, as in PyTorch. Per
 * element, with t = *step after the increment:
 *   AdamW:  p *= 1 - lr * wd                 Adam:  g += wd * p
 *   m = beta1 m + (1 - beta1) g
 *   v = beta2 v + (1 - beta2) g^2
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The AVX2 and AVX-512 versions round every operation as PyTorch 1.13's AVX2/AVX-512 CPU
 * kernels do (fused multiply-adds where PyTorch fuses), so they reproduce its updates to the
 * bit; the portable version emulates the fused steps in double. params, grads, m and v must
 * not overlap. n = 0 only advances *step. */
ATTN_API attn_status attn_adam_step(const attn_adam_options *options, int64_t *step, int64_t n,
                                    float *params, const float *grads, float *m, float *v);

/* ---- exponential smoothing of the weights ------------------------------------------------ */

/* One step of Marian's exponential smoothing (--exponential-smoothing): after an update that
 * made the weights `values`, the smoothed copy moves towards them,
 *   d = max(rate, 1 - (t + 1) / (t + 10)),   smoothed = (1 - d) smoothed + d values,
 * with t = updates_before, the updates applied before this one (Adam's step count before its
 * increment), so the first updates move the average fast (d = 0.9 at t = 0) and later ones by
 * rate. Element-wise in float, (1 - d) and d rounded to float once: each element's result
 * depends on nothing else, so not on the thread count or the instruction set. rate in
 * [0, 1); smoothed and values must not overlap. */
ATTN_API attn_status attn_ema_update(int64_t n, float *smoothed, const float *values, double rate,
                                     int64_t updates_before);

/* ---- gradients ------------------------------------------------------------------------ */

/* sqrt(sum g^2) over the whole buffer, summed in double in an order that depends only on n
 * (not on the thread count or the instruction set), so every run gives the same bits. */
ATTN_API attn_status attn_grad_norm(int64_t n, const float *grads, double *norm);

/* torch.nn.utils.clip_grad_norm_(params, max_norm) on the flat buffer: with the global norm
 * above, grads *= max_norm / (norm + 1e-6) when that factor is below 1. Writes the norm
 * before clipping to *norm (may be NULL). A non-finite norm (an overflowed or NaN
 * gradient) leaves the gradients as they are, so the caller can see it and skip the step.
 * max_norm must be positive and finite. */
ATTN_API attn_status attn_clip_grad_norm(int64_t n, float *grads, double max_norm, double *norm);

/* grads *= factor; for gradient accumulation over k batches, factor = 1 / k. */
ATTN_API attn_status attn_scale_grads(int64_t n, float *grads, float factor);

/* ---- learning-rate schedules ---------------------------------------------------------- */

typedef enum attn_lr_kind {
    /* lr */
    ATTN_LR_CONSTANT = 0,
    /* "Noam" (Attention Is All You Need):
     * factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) */
    ATTN_LR_NOAM = 1,
    /* the same shape by its peak: lr * min(step / warmup_steps, sqrt(warmup_steps / step)),
     * which reaches lr at step = warmup_steps */
    ATTN_LR_INVERSE_SQRT = 2,
    /* By steps (total_steps > 0): linear warm-up from 0 to lr over warmup_steps, then half a
     * cosine down to min_lr at total_steps, and min_lr after that.
     * Over a time budget (total_steps 0, total_seconds > 0), for a run that stops by the clock
     * and cannot know its last step ("Budgeted training", Li et al. 2020): the cosine follows
     * the share of the budget used, and the warm-up stays counted in steps,
     *   lr(step, seconds) = w(step) * (min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2)
     *   w(step) = min(1, step / warmup_steps)   (1 when warmup_steps is 0)
     *   p = min(1, seconds / total_seconds)
     * so min_lr once the budget is spent. With warmup_share > 0 the warm-up also ends once that
     * share of the budget is spent, whichever comes first (how many updates the budget holds is
     * unknown in advance, so a share of the time stands for a share of the updates):
     *   w(step, seconds) = min(1, max(step / warmup_steps, seconds / (warmup_share *
     *   total_seconds))) */
    ATTN_LR_COSINE = 3
} attn_lr_kind;

/* Fill the fields the kind uses; the others are ignored. */
typedef struct attn_lr_schedule {
    attn_lr_kind kind;
    double lr;            /* CONSTANT: the rate; INVERSE_SQRT, COSINE: the peak (>= 0) */
    double factor;        /* NOAM (>= 0) */
    int64_t d_model;      /* NOAM (>= 1) */
    int64_t warmup_steps; /* NOAM, INVERSE_SQRT (>= 1); COSINE (>= 0) */
    int64_t total_steps;  /* COSINE: > warmup_steps, or 0 to anneal over total_seconds */
    double min_lr;        /* COSINE (in [0, lr]) */
    double total_seconds; /* COSINE with total_steps 0: the time budget (finite, > 0); else 0 */
    double warmup_share;  /* COSINE with total_seconds: in [0, 1), 0 for a warm-up by steps only */
} attn_lr_schedule;

/* The rate for update number `step` (>= 0), a pure function of the step. Pass the number of
 * the update about to be made, counting from 1 (the Adam step counter plus one): step 0
 * gives 0 in every schedule with a warm-up. Fails for a cosine annealed over total_seconds,
 * whose rate depends on the time as well: use attn_lr_at_time. */
ATTN_API attn_status attn_lr_at(const attn_lr_schedule *schedule, int64_t step, double *lr);

/* The rate for update number `step` after `seconds` of training (finite, >= 0): the formula
 * above for a cosine annealed over total_seconds, attn_lr_at(step) for every other schedule
 * (seconds are then ignored). A trainer passes the training time of all its runs so far, so
 * that a resumed run continues the schedule where it stopped. */
ATTN_API attn_status attn_lr_at_time(const attn_lr_schedule *schedule, int64_t step, double seconds,
                                     double *lr);

/* What a training run asks of its schedule, in the terms of its settings rather than the
 * schedule's fields; attn_lr_schedule_plan derives the schedule. */
typedef struct attn_lr_plan {
    attn_lr_kind kind;
    double lr;          /* the peak rate (the rate of CONSTANT); kept in NOAM's schedule too */
    double noam_factor; /* NOAM */
    int64_t d_model;    /* NOAM: the model's width (an rnn's hidden size) */
    /* The warm-up's updates; with warmup_share > 0, its cap. */
    int64_t warmup_steps;
    /* COSINE: in [0, 1). > 0 sizes the warm-up to the run: this share of the planned updates
     * (rounded up), at most warmup_steps; under the clock, this share of the time limit or
     * warmup_steps updates, the first reached. 0: exactly warmup_steps. */
    double warmup_share;
    double min_lr; /* COSINE */
    /* Where a cosine ends, the first that is set: at update max_steps (> 0); after epochs
     * (> 0) of ceil(batches_per_epoch / accumulate) updates each; else by the clock, over
     * time_limit seconds. The other kinds ignore them. */
    int64_t max_steps;
    int64_t epochs;
    int64_t batches_per_epoch; /* >= 0 */
    int64_t accumulate;        /* batches per update, >= 1 */
    double time_limit;
} attn_lr_plan;

/* The schedule the plan asks for, checked as attn_lr_at checks it (ATTN_ERR_INVALID_ARGUMENT
 * naming the field). A cosine by steps sizes its warm-up by warmup_share when it is > 0; one whose
 * warm-up is not shorter than its steps keeps a tenth of them as warm-up; a caller that tells its
 * user compares schedule->warmup_steps with the plan's. A cosine with no last step (max_steps and
 * epochs 0, or no batches) is annealed over time_limit, which must then be > 0:
 * schedule->total_seconds says so. */
ATTN_API attn_status attn_lr_schedule_plan(const attn_lr_plan *plan, attn_lr_schedule *schedule);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_OPTIM_H */
