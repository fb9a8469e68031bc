/* The step decoder's small-row linear layer (step_linear.h) on SIMD vectors, compiled by
 * step_linear_avx2.c, step_linear_avx512.c and step_linear_neon.c. */
#include "kernels/simd.h"
#include "models/step_linear.h"

/* Rows per pass over W: two accumulators per row and two W vectors fill 18 of AVX-512's 32
 * registers at eight rows, 10 of AVX2's 16 at four. NEON has 32 registers too: eight rows. */
#if SIMD_LANES == 4
#define STEP_LINEAR_GROUP 8
#else
#define STEP_LINEAR_GROUP (SIMD_LANES / 2)
#endif

/* Each row keeps two accumulators (even and odd chunks of SIMD_LANES inputs, so two FMA
 * chains overlap), with the last in % SIMD_LANES inputs as a zero-filled partial vector into
 * the odd one, summed and reduced the same way for every row count. */
static inline __attribute__((always_inline)) void
linear_rows(const step_linear_args *a, int64_t r0, const int n, int64_t begin, int64_t end)
{
    const int64_t in = a->in, chunks = in / SIMD_LANES, tail = in % SIMD_LANES;
    const float *x[STEP_LINEAR_GROUP];
    for (int r = 0; r < STEP_LINEAR_GROUP; r++)
        x[r] = a->x + (r0 + (r < n ? r : 0)) * a->ldx;
    for (int64_t o = begin; o < end; o++) {
        const float *w = a->w + o * in;
        vf even[STEP_LINEAR_GROUP], odd[STEP_LINEAR_GROUP];
        for (int r = 0; r < n; r++)
            even[r] = odd[r] = vf_zero();
        int64_t c = 0;
        for (; c + 2 <= chunks; c += 2) {
            const vf w0 = vf_load(w + c * SIMD_LANES), w1 = vf_load(w + (c + 1) * SIMD_LANES);
            for (int r = 0; r < n; r++) {
                even[r] = vf_fmadd(w0, vf_load(x[r] + c * SIMD_LANES), even[r]);
                odd[r] = vf_fmadd(w1, vf_load(x[r] + (c + 1) * SIMD_LANES), odd[r]);
            }
        }
        if (c < chunks) {
            const vf w0 = vf_load(w + c * SIMD_LANES);
            for (int r = 0; r < n; r++)
                even[r] = vf_fmadd(w0, vf_load(x[r] + c * SIMD_LANES), even[r]);
        }
        if (tail) {
            const vf wt = vf_load_part(w + chunks * SIMD_LANES, tail, 0.0f);
            for (int r = 0; r < n; r++)
                odd[r] = vf_fmadd(wt, vf_load_part(x[r] + chunks * SIMD_LANES, tail, 0.0f), odd[r]);
        }
        const float bias = a->b != NULL ? a->b[o] : 0.0f;
        for (int r = 0; r < n; r++)
            a->y[(r0 + r) * a->ldy + o] = vf_sum(vf_add(even[r], odd[r])) + bias;
    }
}

void SIMD_NAME(attn_step_linear)(const step_linear_args *a, int64_t begin, int64_t end)
{
    int64_t r = 0;
    for (; r + STEP_LINEAR_GROUP <= a->rows; r += STEP_LINEAR_GROUP)
        linear_rows(a, r, STEP_LINEAR_GROUP, begin, end);
    /* a constant row count for each remainder, so the loops over rows unroll */
    switch (a->rows - r) {
#if STEP_LINEAR_GROUP > 4
    case 7:
        linear_rows(a, r, 7, begin, end);
        break;
    case 6:
        linear_rows(a, r, 6, begin, end);
        break;
    case 5:
        linear_rows(a, r, 5, begin, end);
        break;
    case 4:
        linear_rows(a, r, 4, begin, end);
        break;
#endif
    case 3:
        linear_rows(a, r, 3, begin, end);
        break;
    case 2:
        linear_rows(a, r, 2, begin, end);
        break;
    case 1:
        linear_rows(a, r, 1, begin, end);
        break;
    default:
        break;
    }
}
