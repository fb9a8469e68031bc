/* Helpers shared by the model tests (tests/models/, and tests/train/test_loop.c): a fresh model,
 * and one batch's logits and parameter gradients at one instruction set. */
#ifndef ATTN_TEST_MODELS_TESTING_H
#define ATTN_TEST_MODELS_TESTING_H

#include "attn/attn.h"
#include "harness.h"

#include <string.h>

/* new_model's `uniform` for the architecture's own initialisation (attn_model_init). */
#define MODEL_OWN_INIT 0.0f

/* A model of config c (NULL after a failed CHECK). uniform MODEL_OWN_INIT: attn_model_init with
 * seed; uniform > 0: every value U(-uniform, uniform) drawn from seed, so that biases and norms
 * are not the identity and no attention map is uniform by accident. */
static inline attn_model *new_model(const attn_model_config *c, uint64_t seed, float uniform)
{
    attn_model *m = NULL;
    CHECK_OK(attn_model_create(c, &m));
    if (m == NULL)
        return NULL;
    if (uniform > 0.0f) {
        attn_params *store = attn_model_params(m);
        test_fill_uniform(attn_params_buffer(store, ATTN_PARAM_VALUES),
                          attn_params_buffer_floats(store), -uniform, uniform, seed);
    } else {
        CHECK_OK(attn_model_init(m, seed));
    }
    return m;
}

/* The logits of batch, then every parameter's gradient of its loss, computed at instruction
 * set isa (then back to ATTN_ISA_AUTO), in one test_alloc'ed array of *count floats. */
static inline float *logits_and_grads(attn_model *m, const attn_model_batch *batch, attn_isa isa,
                                      size_t *count)
{
    CHECK_OK(attn_set_isa(isa));
    attn_params *store = attn_model_params(m);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    attn_var *logits = NULL, *loss = NULL;
    CHECK_OK(attn_model_forward_logits(m, g, batch, &logits));
    size_t n_logits = logits ? (size_t)attn_tensor_numel(&logits->value) : 0;
    size_t n_grads = attn_params_buffer_floats(store);
    float *out = test_alloc((n_logits + n_grads) * sizeof(float));
    if (logits != NULL)
        memcpy(out, logits->value.data, n_logits * sizeof(float));
    attn_graph_reset(g);
    attn_params_zero_grad(store);
    CHECK_OK(attn_model_forward_loss(m, g, batch, &loss));
    CHECK_OK(attn_graph_backward(g, loss));
    memcpy(out + n_logits, attn_params_buffer(store, ATTN_PARAM_GRADS), n_grads * sizeof(float));
    attn_graph_destroy(g);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    *count = n_logits + n_grads;
    return out;
}

/* A model's loss on a fixed batch, as the finite-difference gradient checks (ad_problem's
 * build) want it: leaves unused, the parameters being the model's own. The dropout seed is
 * fixed so that every evaluation of a training-mode loss drops the same units. */
typedef struct model_ctx {
    attn_model *model;
    attn_model_batch batch;
} model_ctx;

static inline attn_var *build_loss(attn_graph *g, attn_var **leaves, void *raw)
{
    (void)leaves;
    model_ctx *c = raw;
    attn_graph_set_dropout_seed(g, 7, 0);
    attn_var *loss;
    return attn_model_forward_loss(c->model, g, &c->batch, &loss) == ATTN_OK ? loss : NULL;
}

#endif /* ATTN_TEST_MODELS_TESTING_H */
