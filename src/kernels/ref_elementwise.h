/* Double-precision textbook versions of the element-wise and row-wise kernels, one row
 * (or one value) at a time. ATTN_ISA_REFERENCE runs them on float data converted to
 * double, and the tests use them directly as the ground truth: their backward is checked
 * against finite differences of their forward, and every optimized version against them.
 * Backward functions accumulate (dx += ...), like the public API. */
#ifndef ATTN_KERNELS_REF_ELEMENTWISE_H
#define ATTN_KERNELS_REF_ELEMENTWISE_H

#include "attn/attn_kernels.h"
#include "core/internal.h"

/* y = exp(x - max) / sum(exp(x - max)); a row of all -inf gives zeros. */
ATTN_INTERNAL void attn_ref_softmax_row(int64_t cols, const double *x, double *y);
/* dx += y * (dy - sum(dy * y)) */
ATTN_INTERNAL void attn_ref_softmax_backward_row(int64_t cols, const double *y, const double *dy,
                                                 double *dx);
/* y = x - max - log(sum(exp(x - max))); a row of all -inf gives all -inf. */
ATTN_INTERNAL void attn_ref_log_softmax_row(int64_t cols, const double *x, double *y);
/* dx += dy - exp(y) * sum(dy) */
ATTN_INTERNAL void attn_ref_log_softmax_backward_row(int64_t cols, const double *y,
                                                     const double *dy, double *dx);

/* One row's loss (1 - smoothing) * (lse - x[target]) + smoothing * (lse - mean(x)), with
 * 0 <= target < vocab; writes the row's log-sum-exp to *lse. */
ATTN_INTERNAL double attn_ref_cross_entropy_row(int64_t vocab, const double *logits, int64_t target,
                                                double smoothing, double *lse);
/* dlogits += scale * (softmax(logits) - (1 - smoothing) * onehot(target) - smoothing / vocab) */
ATTN_INTERNAL void attn_ref_cross_entropy_backward_row(int64_t vocab, const double *logits,
                                                       int64_t target, double smoothing, double lse,
                                                       double scale, double *dlogits);

/* y = (x - mean) / sqrt(var + eps) * gamma + beta with the biased variance; gamma and beta
 * may be NULL. Writes the row's mean and 1/sqrt(var + eps). */
ATTN_INTERNAL void attn_ref_layer_norm_row(int64_t dim, const double *x, const double *gamma,
                                           const double *beta, double eps, double *y, double *mean,
                                           double *rstd);
/* dx, dgamma, dbeta += this row's gradients; gamma, dgamma and dbeta may be NULL. */
ATTN_INTERNAL void attn_ref_layer_norm_backward_row(int64_t dim, const double *x,
                                                    const double *gamma, double mean, double rstd,
                                                    const double *dy, double *dx, double *dgamma,
                                                    double *dbeta);

/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma (gamma may be NULL); writes the row's
 * 1/sqrt(mean(x^2) + eps). */
ATTN_INTERNAL void attn_ref_rms_norm_row(int64_t dim, const double *x, const double *gamma,
                                         double eps, double *y, double *rstd);
/* dx, dgamma += this row's gradients; gamma and dgamma may be NULL. */
ATTN_INTERNAL void attn_ref_rms_norm_backward_row(int64_t dim, const double *x,
                                                  const double *gamma, double rstd,
                                                  const double *dy, double *dx, double *dgamma);

ATTN_INTERNAL double attn_ref_activation(attn_activation act, double x);
ATTN_INTERNAL double attn_ref_activation_derivative(attn_activation act, double x);

/* Scratch for copies arrays of count doubles (malloc'd, at least one double), or NULL
 * with the error set naming function. */
ATTN_INTERNAL double *attn_ref_doubles(size_t count, size_t copies, const char *function);

#endif /* ATTN_KERNELS_REF_ELEMENTWISE_H */
