/* The step decoder's small-row linear layer with AVX2 and FMA (step_linear.h). */
#include "models/step_linear.h"

#include <immintrin.h>

static inline float reduce_add(__m256 v)
{
    const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}

/* Each row keeps two accumulators (even and odd chunks of 8 inputs), summed and reduced the
 * same way for every row count; the last in % 8 inputs are added one by one. */
static inline __attribute__((always_inline)) void
rows_avx2(const step_linear_args *a, int64_t r0, const int n, int64_t begin, int64_t end)
{
    const int64_t in = a->in, chunks = in / 8;
    const float *x[4];
    for (int r = 0; r < 4; r++)
        x[r] = a->x + (r0 + (r < n ? r : 0)) * a->ldx;
    for (int64_t o = begin; o < end; o++) {
        const float *w = a->w + o * in;
        __m256 even[4], odd[4];
        for (int r = 0; r < n; r++)
            even[r] = odd[r] = _mm256_setzero_ps();
        int64_t c = 0;
        for (; c + 2 <= chunks; c += 2) {
            const __m256 w0 = _mm256_loadu_ps(w + c * 8), w1 = _mm256_loadu_ps(w + c * 8 + 8);
            for (int r = 0; r < n; r++) {
                even[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + c * 8), even[r]);
                odd[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + c * 8 + 8), odd[r]);
            }
        }
        if (c < chunks) {
            const __m256 w0 = _mm256_loadu_ps(w + c * 8);
            for (int r = 0; r < n; r++)
                even[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + c * 8), even[r]);
        }
        const float bias = a->b != NULL ? a->b[o] : 0.0f;
        for (int r = 0; r < n; r++) {
            float sum = reduce_add(_mm256_add_ps(even[r], odd[r]));
            for (int64_t i = chunks * 8; i < in; i++)
                sum += w[i] * x[r][i];
            a->y[(r0 + r) * a->ldy + o] = sum + bias;
        }
    }
}

void attn_step_linear_avx2(const step_linear_args *a, int64_t begin, int64_t end)
{
    int64_t r = 0;
    for (; r + 4 <= a->rows; r += 4)
        rows_avx2(a, r, 4, begin, end);
    switch (a->rows - r) {
    case 3: rows_avx2(a, r, 3, begin, end); break;
    case 2: rows_avx2(a, r, 2, begin, end); break;
    case 1: rows_avx2(a, r, 1, begin, end); break;
    default: break;
    }
}
