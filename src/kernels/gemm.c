/* GEMM entry points: argument checks and dispatch. The scalar reference is the textbook
 * triple loop in double; the optimized instruction sets share one blocked, packed driver
 * (gemm_blocked.c) around their own micro-kernels (gemm_portable.c, gemm_avx2.c,
 * gemm_avx512.c). A build with ATTN_BLAS=ON routes the optimized float path to cblas_sgemm.
 * In bf16 the reference rounds the operands and sums in double; the driver rounds while
 * packing, for vdpbf16ps where the CPU has it (gemm_avx512bf16.c), else for the float
 * kernel of the instruction set, which then computes the same products in float. */
#include "kernels/gemm_internal.h"

#include "kernels/bf16.h"

#include <limits.h>
#include <stdlib.h>

#ifdef ATTN_HAVE_CBLAS
#include <cblas.h>
#endif

/* The operand as the product sees it: itself, or rounded to bf16. */
static double operand(attn_precision precision, float x)
{
    return precision == ATTN_PRECISION_BF16 ? (double)attn_bf16_round(x) : (double)x;
}

static void gemm_reference(attn_precision precision, attn_transpose ta, attn_transpose tb,
                           int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                           int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0;
            for (int64_t p = 0; p < k; p++) {
                double x =
                    operand(precision, ta == ATTN_NO_TRANS ? a[i * lda + p] : a[p * lda + i]);
                double y =
                    operand(precision, tb == ATTN_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p]);
                sum += x * y;
            }
            double prior = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
            c[i * ldc + j] = (float)(alpha * sum + prior);
        }
}

/* k = 0: the product is empty, C = alpha * 0 + beta * C as the reference computes it. */
static void scale_c(int64_t m, int64_t n, float alpha, float beta, float *c, int64_t ldc)
{
    const float empty_product = alpha * 0.0f;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            c[i * ldc + j] = beta == 0.0f ? empty_product : empty_product + beta * c[i * ldc + j];
}

static const gemm_kernel_info *kernel_for(attn_isa isa)
{
    switch (isa) {
#if defined(ATTN_HAVE_X86_KERNELS)
    case ATTN_ISA_AVX512:
        return &attn_gemm_avx512_kernel;
    case ATTN_ISA_AVX2:
        return &attn_gemm_avx2_kernel;
#elif defined(ATTN_HAVE_NEON_KERNELS)
    case ATTN_ISA_NEON:
    case ATTN_ISA_NEON_DOTPROD:
    case ATTN_ISA_NEON_BF16:
        return &attn_gemm_neon_kernel;
#endif
    default:
        return &attn_gemm_portable_kernel;
    }
}

/* The built-in kernel for the optimized instruction set and precision: vdpbf16ps (x86) or
 * BFDOT (neon-bf16) for bf16 where the CPU has it, else the instruction set's float kernel
 * (which emulates bf16). */
static const gemm_kernel_info *kernel_for_precision(attn_isa isa, attn_precision precision)
{
#if defined(ATTN_HAVE_X86_KERNELS)
    if (precision == ATTN_PRECISION_BF16 && isa == ATTN_ISA_AVX512 &&
        attn_precision_native(precision))
        return &attn_gemm_avx512bf16_kernel;
#elif defined(ATTN_HAVE_NEON_KERNELS)
    if (precision == ATTN_PRECISION_BF16 && isa == ATTN_ISA_NEON_BF16)
        return &attn_gemm_neonbf16_kernel;
#else
    (void)precision;
#endif
    return kernel_for(isa);
}

#ifdef ATTN_HAVE_CBLAS
static int fits_int(int64_t v)
{
    return v <= INT_MAX;
}

static int cblas_can_take(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
    return fits_int(m) && fits_int(n) && fits_int(k) && fits_int(lda) && fits_int(ldb) &&
           fits_int(ldc);
}
#endif

attn_status attn_gemm(attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc)
{
    return attn_gemm_precision(ATTN_PRECISION_FP32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                               ldc);
}

attn_status attn_gemm_precision(attn_precision precision, attn_transpose ta, attn_transpose tb,
                                int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc)
{
    ATTN_CHECK_ARG(precision == ATTN_PRECISION_FP32 || precision == ATTN_PRECISION_BF16,
                   "attn_gemm: precision must be fp32 or bf16, got %s",
                   attn_precision_name(precision));
    ATTN_CHECK_ARG(ta == ATTN_NO_TRANS || ta == ATTN_TRANS,
                   "attn_gemm: trans_a must be ATTN_NO_TRANS or ATTN_TRANS, got %d", (int)ta);
    ATTN_CHECK_ARG(tb == ATTN_NO_TRANS || tb == ATTN_TRANS,
                   "attn_gemm: trans_b must be ATTN_NO_TRANS or ATTN_TRANS, got %d", (int)tb);
    ATTN_CHECK_ARG(m >= 0 && n >= 0 && k >= 0, "attn_gemm: negative size (m=%lld n=%lld k=%lld)",
                   (long long)m, (long long)n, (long long)k);
    /* Row-major: a row of A holds k values (m if transposed), a row of B n (k), of C n. */
    int64_t a_row = ta == ATTN_NO_TRANS ? k : m;
    int64_t b_row = tb == ATTN_NO_TRANS ? n : k;
    ATTN_CHECK_ARG(lda >= (a_row > 1 ? a_row : 1),
                   "attn_gemm: lda=%lld is smaller than a row of A (%lld)", (long long)lda,
                   (long long)a_row);
    ATTN_CHECK_ARG(ldb >= (b_row > 1 ? b_row : 1),
                   "attn_gemm: ldb=%lld is smaller than a row of B (%lld)", (long long)ldb,
                   (long long)b_row);
    ATTN_CHECK_ARG(ldc >= (n > 1 ? n : 1), "attn_gemm: ldc=%lld is smaller than a row of C (%lld)",
                   (long long)ldc, (long long)n);
    if (m == 0 || n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(c);
    if (k > 0) {
        ATTN_CHECK_NOT_NULL(a);
        ATTN_CHECK_NOT_NULL(b);
    }

    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE) {
        gemm_reference(precision, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return ATTN_OK;
    }
    if (k == 0) {
        scale_c(m, n, alpha, beta, c, ldc);
        return ATTN_OK;
    }
    if (precision == ATTN_PRECISION_BF16)
        return attn_gemm_blocked(kernel_for_precision(isa, precision), precision, ta, tb, m, n, k,
                                 alpha, a, lda, b, ldb, NULL, beta, c, ldc);
#ifdef ATTN_HAVE_CBLAS
    if (cblas_can_take(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, ta == ATTN_TRANS ? CblasTrans : CblasNoTrans,
                    tb == ATTN_TRANS ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return ATTN_OK;
    }
#endif
    return attn_gemm_blocked(kernel_for(isa), precision, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                             NULL, beta, c, ldc);
}

const char *attn_gemm_backend(void)
{
    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE)
        return "built-in reference";
#ifdef ATTN_HAVE_CBLAS
    return "cblas";
#else
    switch (isa) {
    case ATTN_ISA_AVX512:
        return "built-in avx512";
    case ATTN_ISA_AVX2:
        return "built-in avx2";
    case ATTN_ISA_NEON:
        return "built-in neon";
    case ATTN_ISA_NEON_DOTPROD:
        return "built-in neon-dotprod";
    case ATTN_ISA_NEON_BF16:
        return "built-in neon-bf16";
    default:
        return "built-in portable";
    }
#endif
}

/* ---- op(B) packed once for many products ------------------------------------------------ */

struct attn_gemm_packed_b {
    attn_precision precision;
    attn_transpose tb;
    int64_t k, n, ldb;
    const float *b;               /* the source: repacking, and other instruction sets */
    const gemm_kernel_info *info; /* the kernel the panels are for (NULL: none packed) */
    float *panels;
    size_t capacity; /* floats */
};

/* Packs for the active instruction set; the reference (and a cblas build in fp32) packs
 * nothing and reads b at each product. */
static attn_status pack_for_active_isa(attn_gemm_packed_b *p)
{
    attn_isa isa = attn_active_isa();
    p->info = NULL;
#ifdef ATTN_HAVE_CBLAS
    if (p->precision == ATTN_PRECISION_FP32)
        return ATTN_OK;
#endif
    if (isa == ATTN_ISA_REFERENCE || p->k == 0 || p->n == 0)
        return ATTN_OK;
    const gemm_kernel_info *info = kernel_for_precision(isa, p->precision);
    size_t floats = attn_gemm_packed_b_floats(info, p->precision, p->k, p->n);
    if (floats > p->capacity) {
        size_t bytes;
        float *fresh =
            attn_mul_size(floats, sizeof(float), &bytes) ? attn_aligned_alloc(bytes) : NULL;
        if (fresh == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                             "attn_gemm_packed_b: out of memory for %zu packed floats", floats);
        attn_aligned_free(p->panels);
        p->panels = fresh;
        p->capacity = floats;
    }
    attn_gemm_pack_b(info, p->precision, p->tb, p->k, p->n, p->b, p->ldb, p->panels);
    p->info = info;
    return ATTN_OK;
}

attn_status attn_gemm_packed_b_create(attn_precision precision, attn_transpose tb, int64_t k,
                                      int64_t n, const float *b, int64_t ldb,
                                      attn_gemm_packed_b **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(precision == ATTN_PRECISION_FP32 || precision == ATTN_PRECISION_BF16,
                   "attn_gemm_packed_b_create: precision must be fp32 or bf16, got %s",
                   attn_precision_name(precision));
    ATTN_CHECK_ARG(tb == ATTN_NO_TRANS || tb == ATTN_TRANS,
                   "attn_gemm_packed_b_create: trans_b must be ATTN_NO_TRANS or ATTN_TRANS, got %d",
                   (int)tb);
    ATTN_CHECK_ARG(k >= 0 && n >= 0, "attn_gemm_packed_b_create: negative size (k=%lld n=%lld)",
                   (long long)k, (long long)n);
    int64_t b_row = tb == ATTN_NO_TRANS ? n : k;
    ATTN_CHECK_ARG(ldb >= (b_row > 1 ? b_row : 1),
                   "attn_gemm_packed_b_create: ldb=%lld is smaller than a row of B (%lld)",
                   (long long)ldb, (long long)b_row);
    if (k > 0 && n > 0)
        ATTN_CHECK_NOT_NULL(b);
    attn_gemm_packed_b *p = calloc(1, sizeof *p);
    if (p == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_gemm_packed_b_create: out of memory");
    *p = (attn_gemm_packed_b){precision, tb, k, n, ldb, b, NULL, NULL, 0};
    attn_status status = pack_for_active_isa(p);
    if (status != ATTN_OK) {
        attn_gemm_packed_b_destroy(p);
        return status;
    }
    *out = p;
    return ATTN_OK;
}

attn_status attn_gemm_packed_b_refresh(attn_gemm_packed_b *packed)
{
    ATTN_CHECK_NOT_NULL(packed);
    return pack_for_active_isa(packed);
}

void attn_gemm_packed_b_destroy(attn_gemm_packed_b *packed)
{
    if (packed == NULL)
        return;
    attn_aligned_free(packed->panels);
    free(packed);
}

attn_status attn_gemm_with_packed_b(attn_transpose ta, int64_t m, float alpha, const float *a,
                                    int64_t lda, const attn_gemm_packed_b *b, float beta, float *c,
                                    int64_t ldc)
{
    ATTN_CHECK_NOT_NULL(b);
    attn_isa isa = attn_active_isa();
    /* Packed for another instruction set (or none): the plain product of the source, which
     * gives the same bits the panels would where they apply. */
    if (b->info == NULL || isa == ATTN_ISA_REFERENCE ||
        b->info != kernel_for_precision(isa, b->precision) || m == 0)
        return attn_gemm_precision(b->precision, ta, b->tb, m, b->n, b->k, alpha, a, lda, b->b,
                                   b->ldb, beta, c, ldc);
    ATTN_CHECK_ARG(ta == ATTN_NO_TRANS || ta == ATTN_TRANS,
                   "attn_gemm_with_packed_b: trans_a must be ATTN_NO_TRANS or ATTN_TRANS, got %d",
                   (int)ta);
    ATTN_CHECK_ARG(m > 0, "attn_gemm_with_packed_b: negative size (m=%lld)", (long long)m);
    int64_t a_row = ta == ATTN_NO_TRANS ? b->k : m;
    ATTN_CHECK_ARG(lda >= (a_row > 1 ? a_row : 1),
                   "attn_gemm_with_packed_b: lda=%lld is smaller than a row of A (%lld)",
                   (long long)lda, (long long)a_row);
    ATTN_CHECK_ARG(ldc >= (b->n > 1 ? b->n : 1),
                   "attn_gemm_with_packed_b: ldc=%lld is smaller than a row of C (%lld)",
                   (long long)ldc, (long long)b->n);
    ATTN_CHECK_NOT_NULL(a);
    ATTN_CHECK_NOT_NULL(c);
    return attn_gemm_blocked(b->info, b->precision, ta, b->tb, m, b->n, b->k, alpha, a, lda, b->b,
                             b->ldb, b->panels, beta, c, ldc);
}
