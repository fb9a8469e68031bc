/* attn_argmax: over a language model's 50257 logits a step's greedy choice is a real cost, so
 * the scan is written for the compiler to vectorise. A block of sixteen is looked into only
 * when one of them beats the best so far, which the compiler tests with vector compares; the
 * plain loop, which reloads x[best] and branches on every element, took 7 ms of a 43 ms
 * batch-32 GPT-2 step. */
#include "attn/attn_kernels.h"

enum { ARGMAX_BLOCK = 16 };

int64_t attn_argmax(int64_t n, const float *x)
{
    if (n < 1 || x == NULL)
        return -1;
    int64_t best = 0, i = 1;
    float best_value = x[0];
    for (; i + ARGMAX_BLOCK <= n; i += ARGMAX_BLOCK) {
        int beats = 0;
        for (int l = 0; l < ARGMAX_BLOCK; l++)
            beats |= x[i + l] > best_value;
        if (!beats)
            continue;
        for (int l = 0; l < ARGMAX_BLOCK; l++)
            if (x[i + l] > best_value) {
                best_value = x[i + l];
                best = i + l;
            }
    }
    for (; i < n; i++)
        if (x[i] > best_value) {
            best_value = x[i];
            best = i;
        }
    return best;
}
