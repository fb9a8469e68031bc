/* Sinusoidal positional encoding ("Attention Is All You Need"), computed in double and
 * rounded once. It is filled once per model, not per step, so this one scalar version
 * serves every instruction set. */
#include "core/internal.h"
#include "attn/attn_attention.h"

#include <math.h>

attn_status attn_positional_encoding(int64_t length, int64_t d_model, attn_pe_layout layout,
                                     float *out)
{
    ATTN_CHECK_ARG(length >= 0, "attn_positional_encoding: length must be >= 0, got %lld",
                   (long long)length);
    ATTN_CHECK_ARG(d_model >= 1, "attn_positional_encoding: d_model must be >= 1, got %lld",
                   (long long)d_model);
    ATTN_CHECK_ARG(length == 0 || d_model <= INT64_MAX / length,
                   "attn_positional_encoding: length %lld times d_model %lld overflows",
                   (long long)length, (long long)d_model);
    ATTN_CHECK_ARG(layout == ATTN_PE_INTERLEAVED || layout == ATTN_PE_CONCATENATED,
                   "attn_positional_encoding: unknown layout %d", (int)layout);
    if (length == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(out);

    int64_t pairs = d_model / 2;
    double log_base = log(10000.0);
    for (int64_t pos = 0; pos < length; pos++) {
        float *row = out + pos * d_model;
        /* i == pairs only for an odd d_model: the trailing sine. */
        for (int64_t i = 0; i <= pairs && 2 * i < d_model; i++) {
            double angle = (double)pos * exp(-(double)(2 * i) / (double)d_model * log_base);
            float sine = (float)sin(angle);
            if (i == pairs) {
                row[d_model - 1] = sine;
                continue;
            }
            float cosine = (float)cos(angle);
            if (layout == ATTN_PE_INTERLEAVED) {
                row[2 * i] = sine;
                row[2 * i + 1] = cosine;
            } else {
                row[i] = sine;
                row[pairs + i] = cosine;
            }
        }
    }
    return ATTN_OK;
}
