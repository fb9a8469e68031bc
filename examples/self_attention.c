/* Self-attention over a two-word sentence, step by step.
 *
 * Every word looks at every word of the same sentence (itself included): its query is
 * compared with each word's key, the scores become weights through a softmax, and the
 * word's new representation is the weighted mix of the values. Q, K and V are three
 * linear projections of the same word embeddings.
 *
 * The program does it twice: once by hand in plain loops, once with the library, and
 * checks that they agree.
 */
#include <attn/attn.h>

#include <math.h>
#include <stdio.h>

enum { WORDS = 2, D_MODEL = 4, D_HEAD = 3 };

int main(void)
{
    const char *sentence[WORDS] = {"thinking", "machines"};
    float x[WORDS * D_MODEL] = {1.0f, 0.0f, 1.0f, 0.0f,  /* thinking */
                                0.0f, 2.0f, 0.0f, 2.0f}; /* machines */
    /* Projection matrices [D_MODEL, D_HEAD]; in a model they are learned. */
    float w_q[D_MODEL * D_HEAD] = {1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1};
    float w_k[D_MODEL * D_HEAD] = {0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 0};
    float w_v[D_MODEL * D_HEAD] = {0, 2, 0, 0, 3, 0, 1, 0, 3, 1, 1, 0};
    float q[WORDS * D_HEAD], k[WORDS * D_HEAD], v[WORDS * D_HEAD];

    /* Q = X W_q, K = X W_k, V = X W_v */
    float *projections[3] = {q, k, v};
    const float *weights_of[3] = {w_q, w_k, w_v};
    for (int p = 0; p < 3; p++)
        if (attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, WORDS, D_HEAD, D_MODEL, 1.0f, x, D_MODEL,
                      weights_of[p], D_HEAD, 0.0f, projections[p], D_HEAD) != ATTN_OK) {
            fprintf(stderr, "self_attention: %s\n", attn_last_error());
            return 1;
        }

    /* By hand: scores[i][j] = q_i . k_j / sqrt(d), softmax over j, out_i = sum_j w_ij v_j. */
    float by_hand_weights[WORDS][WORDS], by_hand_out[WORDS][D_HEAD];
    for (int i = 0; i < WORDS; i++) {
        float scores[WORDS], max_score = -INFINITY, sum = 0.0f;
        for (int j = 0; j < WORDS; j++) {
            float dot = 0.0f;
            for (int c = 0; c < D_HEAD; c++)
                dot += q[i * D_HEAD + c] * k[j * D_HEAD + c];
            scores[j] = dot / sqrtf((float)D_HEAD);
            max_score = fmaxf(max_score, scores[j]);
        }
        for (int j = 0; j < WORDS; j++)
            sum += by_hand_weights[i][j] = expf(scores[j] - max_score);
        for (int c = 0; c < D_HEAD; c++)
            by_hand_out[i][c] = 0.0f;
        for (int j = 0; j < WORDS; j++) {
            by_hand_weights[i][j] /= sum;
            for (int c = 0; c < D_HEAD; c++)
                by_hand_out[i][c] += by_hand_weights[i][j] * v[j * D_HEAD + c];
        }
    }

    /* With the library: one batch, one head. */
    int64_t shape[4] = {1, 1, WORDS, D_HEAD};
    float out[WORDS * D_HEAD], weights[WORDS * WORDS];
    attn_tensor qt = attn_tensor_view(q, 4, shape), kt = attn_tensor_view(k, 4, shape);
    attn_tensor vt = attn_tensor_view(v, 4, shape), ot = attn_tensor_view(out, 4, shape);
    attn_sdpa_options options = attn_sdpa_default_options();
    if (attn_sdpa_forward(&qt, &kt, &vt, &options, &ot, NULL, weights) != ATTN_OK) {
        fprintf(stderr, "self_attention: %s\n", attn_last_error());
        return 1;
    }

    printf("attention weights (row: the word that looks, column: the word looked at)\n");
    printf("%10s %10s %10s\n", "", sentence[0], sentence[1]);
    for (int i = 0; i < WORDS; i++)
        printf("%10s %10.4f %10.4f\n", sentence[i], (double)weights[i * WORDS],
               (double)weights[i * WORDS + 1]);
    printf("\nnew representations (weighted mixes of the values)\n");
    float worst = 0.0f;
    for (int i = 0; i < WORDS; i++) {
        printf("%10s", sentence[i]);
        for (int c = 0; c < D_HEAD; c++) {
            printf(" %8.4f", (double)out[i * D_HEAD + c]);
            worst = fmaxf(worst, fabsf(out[i * D_HEAD + c] - by_hand_out[i][c]));
        }
        for (int j = 0; j < WORDS; j++)
            worst = fmaxf(worst, fabsf(weights[i * WORDS + j] - by_hand_weights[i][j]));
        printf("\n");
    }
    printf("\nlargest difference from the loops written by hand: %.2g\n", (double)worst);
    if (!(worst < 1e-5f)) {
        fprintf(stderr, "self_attention: the library disagrees with the hand computation\n");
        return 1;
    }
    return 0;
}
