/* Multi-head attention with two heads.
 *
 * One attention layer can only compute one weighting per word. Multi-head attention runs
 * several in parallel, each on its own slice of the projected features, so each head can
 * look for something different; their outputs are concatenated and mixed by an output
 * projection. The weights use PyTorch's layout (in_proj_weight = [W_q; W_k; W_v]), so a
 * torch.nn.MultiheadAttention's state_dict can be used as it is.
 *
 * Here E = 4 features and 2 heads of 2 features each. The projections are chosen by hand:
 * head 0 sees features 0-1 (what a word is), head 1 sees features 2-3 (where it stands).
 */
#include <attn/attn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { WORDS = 3, E = 4, HEADS = 2 };

int main(void)
{
    const char *sentence[WORDS] = {"the", "cat", "sat"};
    /*                    noun  verb | first  last */
    float x[WORDS * E] = {0.0f, 0.0f, 3.0f, 0.0f,  /* the */
                          3.0f, 0.0f, 0.0f, 0.0f,  /* cat */
                          0.0f, 3.0f, 0.0f, 3.0f}; /* sat */
    float in_proj_weight[3 * E * E] = {
        /* W_q: in head 0 a verb asks for a noun and a noun for a verb (the features
         * swapped); head 1's query ignores the word: it comes from the bias alone */
        0, 1, 0, 0,  1, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 0,
        /* W_k: the identity, keys are the features themselves */
        1, 0, 0, 0,  0, 1, 0, 0,  0, 0, 1, 0,  0, 0, 0, 1,
        /* W_v: the identity */
        1, 0, 0, 0,  0, 1, 0, 0,  0, 0, 1, 0,  0, 0, 0, 1};
    /* b_q, b_k, b_v: head 1 of every word asks "are you the first word?" */
    float in_proj_bias[3 * E] = {0, 0, 3, 0,  0, 0, 0, 0,  0, 0, 0, 0};
    float out_proj_weight[E * E] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};

    attn_mha_dims dims = {.batch = 1, .len_q = WORDS, .len_k = WORDS, .embed_dim = E,
                          .num_heads = HEADS};
    attn_mha_params params = {.in_proj_weight = in_proj_weight,
                             .in_proj_bias = in_proj_bias, .out_proj_weight = out_proj_weight};
    attn_mha_buffer_sizes sizes;
    if (attn_mha_sizes(&dims, &sizes) != ATTN_OK) {
        fprintf(stderr, "multi_head: %s\n", attn_last_error());
        return 1;
    }
    float *saved = calloc(sizes.saved_floats, sizeof(float));
    float out[WORDS * E], per_head[HEADS * WORDS * WORDS];
    if (saved == NULL) {
        fprintf(stderr, "multi_head: out of memory\n");
        return 1;
    }
    /* Self-attention: query, key and value are the same sentence. */
    attn_status status = attn_mha_forward(&dims, &params, x, x, x, NULL, out, per_head,
                                          /*average_attn_weights=*/0, saved, NULL);
    free(saved);
    if (status != ATTN_OK) {
        fprintf(stderr, "multi_head: %s\n", attn_last_error());
        return 1;
    }

    int rows_sum_to_one = 1;
    for (int h = 0; h < HEADS; h++) {
        printf("head %d (row: the word that looks, column: the word looked at)\n", h);
        printf("%6s", "");
        for (int j = 0; j < WORDS; j++)
            printf(" %6s", sentence[j]);
        printf("\n");
        for (int i = 0; i < WORDS; i++) {
            float sum = 0.0f;
            printf("%6s", sentence[i]);
            for (int j = 0; j < WORDS; j++) {
                float w = per_head[(h * WORDS + i) * WORDS + j];
                sum += w;
                printf(" %6.3f", (double)w);
            }
            rows_sum_to_one &= fabsf(sum - 1.0f) < 1e-5f;
            printf("\n");
        }
        printf("\n");
    }
    printf("output (heads concatenated, then the output projection)\n");
    for (int i = 0; i < WORDS; i++) {
        printf("%6s", sentence[i]);
        for (int c = 0; c < E; c++)
            printf(" %6.3f", (double)out[i * E + c]);
        printf("\n");
    }
    /* In head 0 "sat" (a verb) looks for a noun and finds "cat"; in head 1 every word looks
     * for the first word and finds "the". */
    float sat_to_cat = per_head[(0 * WORDS + 2) * WORDS + 1];
    float cat_to_the = per_head[(1 * WORDS + 1) * WORDS + 0];
    printf("\nhead 0: sat -> cat %.3f;  head 1: cat -> the %.3f\n", (double)sat_to_cat,
           (double)cat_to_the);
    if (!rows_sum_to_one || sat_to_cat < 0.9f || cat_to_the < 0.9f) {
        fprintf(stderr, "multi_head: the heads did not attend as described\n");
        return 1;
    }
    return 0;
}
