/* GEMM entry point: argument checks and dispatch. The scalar reference is the textbook
 * triple loop in double; optimized versions are added per instruction set. */
#include "core/internal.h"
#include "attn/attn_kernels.h"

static void gemm_reference(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n,
                           int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta == ATTN_NO_TRANS ? a[i * lda + p] : a[p * lda + i];
                double y = tb == ATTN_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p];
                sum += x * y;
            }
            double prior = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
            c[i * ldc + j] = (float)(alpha * sum + prior);
        }
}

attn_status attn_gemm(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc)
{
    ATTN_CHECK_ARG(m >= 0 && n >= 0 && k >= 0, "attn_gemm: negative size (m=%lld n=%lld k=%lld)",
                   (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(c);
    if (k > 0) {
        ATTN_CHECK_NOT_NULL(a);
        ATTN_CHECK_NOT_NULL(b);
    }
    gemm_reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return ATTN_OK;
}

const char *attn_gemm_backend(void) { return "built-in reference"; }
