/* attn_model_step_ensemble (attn_models.h): a step decoder over several members' step
 * decoders, behind the same table (step_decoder.h), so that the search drives an ensemble
 * exactly as it drives one model.
 *
 * The combination is the mean of the members' log-probabilities, renormalised (a product of
 * experts, as Marian and OpenNMT-py average log-probabilities; fairseq instead averages the
 * probabilities). The step returns the mean of the members' raw logits: a member's
 * log-softmax is its logits minus a constant per row, so the mean of the log-softmaxes is
 * the mean of the logits minus a constant per row, and the search's own log-softmax of the
 * returned row is the renormalised mean. That costs no log-softmax per member, and one
 * member, or copies of one, give that member's logits bit for bit (x / 1 and (x + x) / 2
 * are exact). The mean is accumulated in double in member order: deterministic.
 *
 * Alignments come from the first member: its cross maps keep their layout (layers x heads),
 * so choosing a layer or head keeps its meaning, and members of different architectures
 * (a Transformer with an rnn) have maps that do not average meaningfully. */
#include "models/step_decoder.h"

#include <stdlib.h>
#include <string.h>

typedef struct ensemble_decoder {
    attn_step_decoder base;
    int64_t count;
    attn_step_decoder **members; /* owned */
    float *member_logits;        /* [max_rows, vocab]: one member's step at a time */
    double *sum;                 /* [max_rows, vocab] */
} ensemble_decoder;

static attn_status ensemble_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                                 float *cross)
{
    ensemble_decoder *e = (ensemble_decoder *)decoder;
    const int64_t n = e->base.size * e->base.vocab;
    for (int64_t m = 0; m < e->count; m++) {
        ATTN_TRY(attn_model_step(e->members[m], ids, e->member_logits, m == 0 ? cross : NULL));
        for (int64_t i = 0; i < n; i++)
            e->sum[i] = (m == 0 ? 0.0 : e->sum[i]) + (double)e->member_logits[i];
    }
    for (int64_t i = 0; i < n; i++)
        logits[i] = (float)(e->sum[i] / (double)e->count);
    return ATTN_OK;
}

static attn_status ensemble_select(attn_step_decoder *decoder, const int64_t *rows,
                                   int64_t new_size)
{
    ensemble_decoder *e = (ensemble_decoder *)decoder;
    for (int64_t m = 0; m < e->count; m++)
        ATTN_TRY(attn_model_step_select(e->members[m], rows, new_size));
    return ATTN_OK;
}

static void ensemble_destroy(attn_step_decoder *decoder)
{
    ensemble_decoder *e = (ensemble_decoder *)decoder;
    for (int64_t m = 0; m < e->count; m++)
        attn_model_step_destroy(e->members[m]);
    free(e->members);
    free(e->member_logits);
    free(e->sum);
    free(e);
}

static const attn_step_decoder_ops ENSEMBLE_OPS = {ensemble_step, ensemble_select,
                                                   ensemble_destroy, NULL};

attn_status attn_model_step_ensemble(attn_step_decoder *const *members, int64_t count,
                                     attn_step_decoder **out)
{
    static const char fn[] = "attn_model_step_ensemble";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(members);
    ATTN_CHECK_ARG(count >= 1, "%s: count %lld, expected at least one member", fn,
                   (long long)count);
    for (int64_t m = 0; m < count; m++)
        ATTN_CHECK_ARG(members[m] != NULL, "%s: members[%lld] is NULL", fn, (long long)m);
    const attn_step_decoder *first = members[0];
    for (int64_t m = 1; m < count; m++) {
        const attn_step_decoder *d = members[m];
        ATTN_CHECK_ARG(d->vocab == first->vocab,
                       "%s: member %lld has a target vocabulary of %lld, member 0 of %lld", fn,
                       (long long)m, (long long)d->vocab, (long long)first->vocab);
        ATTN_CHECK_ARG(d->size == first->size && d->max_rows == first->max_rows,
                       "%s: member %lld has %lld rows (max %lld), member 0 %lld (max %lld)", fn,
                       (long long)m, (long long)d->size, (long long)d->max_rows,
                       (long long)first->size, (long long)first->max_rows);
        ATTN_CHECK_ARG(d->steps == first->steps && d->max_steps == first->max_steps,
                       "%s: member %lld has taken %lld of %lld steps, member 0 %lld of %lld", fn,
                       (long long)m, (long long)d->steps, (long long)d->max_steps,
                       (long long)first->steps, (long long)first->max_steps);
        ATTN_CHECK_ARG(d->src_len == first->src_len,
                       "%s: member %lld reads a source of %lld positions, member 0 of %lld", fn,
                       (long long)m, (long long)d->src_len, (long long)first->src_len);
    }
    for (int64_t m = 0; m < count; m++)
        for (int64_t k = 0; k < m; k++)
            ATTN_CHECK_ARG(members[m] != members[k], "%s: members %lld and %lld are one decoder",
                           fn, (long long)k, (long long)m);
    size_t floats;
    if (!attn_mul_size((size_t)(first->max_rows > 0 ? first->max_rows : 1), (size_t)first->vocab,
                       &floats))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: %lld rows of %lld logits are too many", fn,
                         (long long)first->max_rows, (long long)first->vocab);
    ensemble_decoder *e = calloc(1, sizeof *e);
    if (e != NULL) {
        e->members = malloc((size_t)count * sizeof *e->members);
        e->member_logits = malloc(floats * sizeof *e->member_logits);
        e->sum = malloc(floats * sizeof *e->sum);
    }
    if (e == NULL || e->members == NULL || e->member_logits == NULL || e->sum == NULL) {
        if (e != NULL) {
            free(e->members);
            free(e->member_logits);
            free(e->sum);
        }
        free(e);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    memcpy(e->members, members, (size_t)count * sizeof *members);
    e->count = count;
    e->base = *first;
    e->base.ops = &ENSEMBLE_OPS;
    *out = &e->base;
    return ATTN_OK;
}
