/* Textbook formulas in double precision; see ref_elementwise.h. Written for clarity, not
 * speed: they are the ground truth the optimized kernels are tested against. */
#include "kernels/ref_elementwise.h"

#include <math.h>
#include <stdlib.h>

static double row_max(int64_t n, const double *x)
{
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (x[j] > m)
            m = x[j];
    return m;
}

void attn_ref_softmax_row(int64_t cols, const double *x, double *y)
{
    double m = row_max(cols, x);
    if (m == -INFINITY) { /* fully masked row: zeros, not 0/0 */
        for (int64_t j = 0; j < cols; j++)
            y[j] = 0.0;
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < cols; j++)
        sum += exp(x[j] - m);
    for (int64_t j = 0; j < cols; j++)
        y[j] = exp(x[j] - m) / sum;
}

void attn_ref_softmax_backward_row(int64_t cols, const double *y, const double *dy, double *dx)
{
    double dot = 0.0;
    for (int64_t j = 0; j < cols; j++)
        dot += dy[j] * y[j];
    for (int64_t j = 0; j < cols; j++)
        dx[j] += y[j] * (dy[j] - dot);
}

void attn_ref_log_softmax_row(int64_t cols, const double *x, double *y)
{
    double m = row_max(cols, x);
    if (m == -INFINITY) { /* log of the all-zero softmax of a fully masked row */
        for (int64_t j = 0; j < cols; j++)
            y[j] = -INFINITY;
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < cols; j++)
        sum += exp(x[j] - m);
    double log_sum = log(sum);
    for (int64_t j = 0; j < cols; j++)
        y[j] = x[j] - m - log_sum;
}

void attn_ref_log_softmax_backward_row(int64_t cols, const double *y, const double *dy, double *dx)
{
    double sum = 0.0;
    for (int64_t j = 0; j < cols; j++)
        sum += dy[j];
    for (int64_t j = 0; j < cols; j++)
        dx[j] += dy[j] - exp(y[j]) * sum;
}

double attn_ref_cross_entropy_row(int64_t vocab, const double *logits, int64_t target,
                                  double smoothing, double *lse)
{
    double m = row_max(vocab, logits);
    double sum = 0.0, sum_logits = 0.0;
    for (int64_t c = 0; c < vocab; c++) {
        sum += exp(logits[c] - m);
        sum_logits += logits[c];
    }
    *lse = m + log(sum);
    double nll = *lse - logits[target]; /* -log p[target] */
    if (smoothing == 0.0) /* as PyTorch: no smoothing term, so masked (-inf) logits are fine */
        return nll;
    double mean_nll = *lse - sum_logits / (double)vocab; /* mean over c of -log p[c] */
    return (1.0 - smoothing) * nll + smoothing * mean_nll;
}

void attn_ref_cross_entropy_backward_row(int64_t vocab, const double *logits, int64_t target,
                                         double smoothing, double lse, double scale,
                                         double *dlogits)
{
    for (int64_t c = 0; c < vocab; c++) {
        double p = exp(logits[c] - lse);
        double onehot = c == target ? 1.0 : 0.0;
        dlogits[c] += scale * (p - (1.0 - smoothing) * onehot - smoothing / (double)vocab);
    }
}

void attn_ref_layer_norm_row(int64_t dim, const double *x, const double *gamma, const double *beta,
                             double eps, double *y, double *mean, double *rstd)
{
    double sum = 0.0;
    for (int64_t j = 0; j < dim; j++)
        sum += x[j];
    double mu = sum / (double)dim;
    double sq = 0.0;
    for (int64_t j = 0; j < dim; j++)
        sq += (x[j] - mu) * (x[j] - mu);
    double r = 1.0 / sqrt(sq / (double)dim + eps);
    for (int64_t j = 0; j < dim; j++)
        y[j] = (x[j] - mu) * r * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0);
    *mean = mu;
    *rstd = r;
}

void attn_ref_layer_norm_backward_row(int64_t dim, const double *x, const double *gamma,
                                      double mean, double rstd, const double *dy, double *dx,
                                      double *dgamma, double *dbeta)
{
    /* With xhat = (x - mean) rstd and g = dy * gamma:
     * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t j = 0; j < dim; j++) {
        double xhat = (x[j] - mean) * rstd;
        double g = dy[j] * (gamma ? gamma[j] : 1.0);
        sum_g += g;
        sum_g_xhat += g * xhat;
    }
    double mean_g = sum_g / (double)dim, mean_g_xhat = sum_g_xhat / (double)dim;
    for (int64_t j = 0; j < dim; j++) {
        double xhat = (x[j] - mean) * rstd;
        double g = dy[j] * (gamma ? gamma[j] : 1.0);
        dx[j] += rstd * (g - mean_g - xhat * mean_g_xhat);
        if (dgamma)
            dgamma[j] += dy[j] * xhat;
        if (dbeta)
            dbeta[j] += dy[j];
    }
}

#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794
#define GELU_TANH_CUBIC 0.044715

void attn_ref_rms_norm_row(int64_t dim, const double *x, const double *gamma, double eps, double *y,
                           double *rstd)
{
    double squares = 0.0;
    for (int64_t j = 0; j < dim; j++)
        squares += x[j] * x[j];
    double r = 1.0 / sqrt(squares / (double)dim + eps);
    for (int64_t j = 0; j < dim; j++)
        y[j] = x[j] * r * (gamma ? gamma[j] : 1.0);
    *rstd = r;
}

void attn_ref_rms_norm_backward_row(int64_t dim, const double *x, const double *gamma, double rstd,
                                    const double *dy, double *dx, double *dgamma)
{
    /* With xhat = x rstd and g = dy * gamma: dx = rstd * (g - xhat * mean(g * xhat)). */
    double sum_g_xhat = 0.0;
    for (int64_t j = 0; j < dim; j++)
        sum_g_xhat += dy[j] * (gamma ? gamma[j] : 1.0) * (x[j] * rstd);
    double mean_g_xhat = sum_g_xhat / (double)dim;
    for (int64_t j = 0; j < dim; j++) {
        double xhat = x[j] * rstd;
        double g = dy[j] * (gamma ? gamma[j] : 1.0);
        dx[j] += rstd * (g - xhat * mean_g_xhat);
        if (dgamma)
            dgamma[j] += dy[j] * xhat;
    }
}

/* The formulas are the textbook ones rewritten without cancellation, so that even in
 * double they stay accurate in the tails the float kernels are tested on:
 * 1 + erf(-t) = erfc(t), 0.5 (1 + tanh z) = 1 / (1 + exp(-2z)), 1 - tanh^2 x = 1 / cosh^2 x,
 * s (1 - s) = e / (1 + e)^2 with e = exp(-|x|). */

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double sigmoid_derivative(double x)
{
    double e = exp(-fabs(x));
    return e / ((1.0 + e) * (1.0 + e));
}

static double gelu_cdf(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
} /* Phi(x) */

double attn_ref_activation(attn_activation act, double x)
{
    switch (act) {
    case ATTN_ACT_RELU:
        return x < 0.0 ? 0.0 : x; /* NaN passes through, as in PyTorch */
    case ATTN_ACT_GELU:
        return x * gelu_cdf(x);
    case ATTN_ACT_GELU_TANH: /* 0.5 x (1 + tanh z) */
        return x * sigmoid(2.0 * SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x));
    case ATTN_ACT_TANH:
        return tanh(x);
    case ATTN_ACT_SIGMOID:
        return sigmoid(x);
    case ATTN_ACT_SILU:
        return x * sigmoid(x);
    }
    return NAN;
}

double attn_ref_activation_derivative(attn_activation act, double x)
{
    switch (act) {
    case ATTN_ACT_RELU:
        return x > 0.0 ? 1.0 : 0.0;
    case ATTN_ACT_GELU:
        return gelu_cdf(x) + x * exp(-0.5 * x * x) * INV_SQRT_2PI;
    case ATTN_ACT_GELU_TANH: {
        /* d/dx x sigmoid(u), u = 2z */
        double u = 2.0 * SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
        double du = 2.0 * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_CUBIC * x * x);
        return sigmoid(u) + x * sigmoid_derivative(u) * du;
    }
    case ATTN_ACT_TANH: {
        double c = cosh(x);
        return 1.0 / (c * c);
    }
    case ATTN_ACT_SIGMOID:
        return sigmoid_derivative(x);
    case ATTN_ACT_SILU: /* d/dx x sigmoid(x) */
        return sigmoid(x) + x * sigmoid_derivative(x);
    }
    return NAN;
}

double *attn_ref_doubles(size_t count, size_t copies, const char *function)
{
    size_t total, bytes;
    if (!attn_mul_size(count, copies, &total) ||
        !attn_mul_size(total ? total : 1, sizeof(double), &bytes))
        return NULL;
    double *p = malloc(bytes);
    if (p == NULL)
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scratch", function,
                  bytes);
    return p;
}
