/* The step decoder's small-row linear layer with AVX-512 (step_linear.h). */
#include "models/step_linear.h"

#include <immintrin.h>

/* Up to eight rows per pass over W (16 accumulators and two W registers of the 32), so a
 * beam of up to eight hypotheses reads the weights once per step. Each row keeps two
 * accumulators (even and odd chunks of 16 inputs, so two FMA chains overlap), summed and
 * reduced the same way for every row count. */
static inline __attribute__((always_inline)) void
rows_avx512(const step_linear_args *a, int64_t r0, const int n, int64_t begin, int64_t end)
{
    const int64_t in = a->in, chunks = in / 16, tail = in % 16;
    const __mmask16 tail_mask = (__mmask16)((1u << tail) - 1u);
    const float *x[8];
    for (int r = 0; r < 8; r++)
        x[r] = a->x + (r0 + (r < n ? r : 0)) * a->ldx;
    for (int64_t o = begin; o < end; o++) {
        const float *w = a->w + o * in;
        __m512 even[8], odd[8];
        for (int r = 0; r < n; r++)
            even[r] = odd[r] = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c + 2 <= chunks; c += 2) {
            const __m512 w0 = _mm512_loadu_ps(w + c * 16), w1 = _mm512_loadu_ps(w + c * 16 + 16);
            for (int r = 0; r < n; r++) {
                even[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[r] + c * 16), even[r]);
                odd[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[r] + c * 16 + 16), odd[r]);
            }
        }
        if (c < chunks) {
            const __m512 w0 = _mm512_loadu_ps(w + c * 16);
            for (int r = 0; r < n; r++)
                even[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[r] + c * 16), even[r]);
        }
        if (tail) {
            const __m512 wt = _mm512_maskz_loadu_ps(tail_mask, w + chunks * 16);
            for (int r = 0; r < n; r++)
                odd[r] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(tail_mask, x[r] + chunks * 16),
                                         odd[r]);
        }
        const float bias = a->b != NULL ? a->b[o] : 0.0f;
        for (int r = 0; r < n; r++)
            a->y[(r0 + r) * a->ldy + o] =
                _mm512_reduce_add_ps(_mm512_add_ps(even[r], odd[r])) + bias;
    }
}

void attn_step_linear_avx512(const step_linear_args *a, int64_t begin, int64_t end)
{
    int64_t r = 0;
    for (; r + 8 <= a->rows; r += 8)
        rows_avx512(a, r, 8, begin, end);
    switch (a->rows - r) {
    case 7: rows_avx512(a, r, 7, begin, end); break;
    case 6: rows_avx512(a, r, 6, begin, end); break;
    case 5: rows_avx512(a, r, 5, begin, end); break;
    case 4: rows_avx512(a, r, 4, begin, end); break;
    case 3: rows_avx512(a, r, 3, begin, end); break;
    case 2: rows_avx512(a, r, 2, begin, end); break;
    case 1: rows_avx512(a, r, 1, begin, end); break;
    default: break;
    }
}
