/* Attention as a soft database lookup.
 *
 * A dictionary maps keys to values exactly: ask for "apple", get 10. Attention instead
 * compares a query with every key, turns the similarities into weights that sum to one
 * (softmax), and returns the weighted mix of the values. Ask for "fruit" and the answer
 * mixes apple (10) and banana (5), and all but ignores chair (2).
 *
 * Each word is described by two made-up features: how much it is a fruit, and how much
 * it is furniture. The query "fruit" is: very much a fruit, and certainly not furniture.
 */
#include <attn/attn.h>

#include <math.h>
#include <stdio.h>

int main(void)
{
    const char *words[3] = {"apple", "banana", "chair"};
    /*                         fruit  furniture */
    float keys[3 * 2] = {1.00f, 0.00f,  /* apple */
                         0.80f, 0.00f,  /* banana: a fruit, but a little less typical */
                         0.00f, 1.00f}; /* chair */
    float values[3] = {10.0f, 5.0f, 2.0f};
    float query[2] = {2.87f, -5.62f}; /* "fruit": a fruit, and not furniture */

    /* One batch, one head, one query, three keys; features d = 2, one value each. */
    int64_t q_shape[4] = {1, 1, 1, 2}, k_shape[4] = {1, 1, 3, 2}, v_shape[4] = {1, 1, 3, 1};
    int64_t out_shape[4] = {1, 1, 1, 1};
    float answer = 0.0f, weights[3];
    attn_tensor q = attn_tensor_view(query, 4, q_shape);
    attn_tensor k = attn_tensor_view(keys, 4, k_shape);
    attn_tensor v = attn_tensor_view(values, 4, v_shape);
    attn_tensor out = attn_tensor_view(&answer, 4, out_shape);

    /* softmax(q k^T / sqrt(2)) v, and ask for the weights too. */
    attn_sdpa_options options = attn_sdpa_default_options();
    if (attn_sdpa_forward(&q, &k, &v, &options, &out, NULL, weights) != ATTN_OK) {
        fprintf(stderr, "kv_lookup: %s\n", attn_last_error());
        return 1;
    }

    printf("query \"fruit\" against the keys:\n");
    for (int j = 0; j < 3; j++)
        printf("  %-7s value %4.1f  weight %.3f\n", words[j], (double)values[j], (double)weights[j]);
    printf("answer: %.3f  (a dictionary lookup could only return 10, 5 or 2)\n", (double)answer);

    /* The program checks its own claim, so the test suite can run it. */
    int ok = fabsf(weights[0] - 0.6f) < 0.02f && fabsf(weights[1] - 0.4f) < 0.02f &&
             weights[2] < 0.01f && fabsf(answer - 8.0f) < 0.1f;
    if (!ok) {
        fprintf(stderr, "kv_lookup: expected weights about 0.6 / 0.4 / 0.0 and an answer about 8\n");
        return 1;
    }
    return 0;
}
