/* Issue 3 §1: no allocation inside a training step once the first steps have been seen.
 *
 * The library's calls to the allocator are wrapped at link time (tests/CMakeLists.txt links
 * this program with --wrap=malloc and friends), so every malloc, calloc, realloc,
 * aligned_alloc and posix_memalign the library makes is counted here, under plain builds,
 * sanitizers and valgrind alike. A step is what the trainer does per update: reset, forward
 * with dropout and label smoothing, backward, clipping, one Adam step. */
#include "harness.h"
#include "attn/attn.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long allocations;

void *__real_malloc(size_t bytes);
void *__real_calloc(size_t count, size_t bytes);
void *__real_realloc(void *p, size_t bytes);
void *__real_aligned_alloc(size_t alignment, size_t bytes);
int __real_posix_memalign(void **p, size_t alignment, size_t bytes);
void *__wrap_malloc(size_t bytes);
void *__wrap_calloc(size_t count, size_t bytes);
void *__wrap_realloc(void *p, size_t bytes);
void *__wrap_aligned_alloc(size_t alignment, size_t bytes);
int __wrap_posix_memalign(void **p, size_t alignment, size_t bytes);

void *__wrap_malloc(size_t bytes)
{
    atomic_fetch_add(&allocations, 1);
    return __real_malloc(bytes);
}

void *__wrap_calloc(size_t count, size_t bytes)
{
    atomic_fetch_add(&allocations, 1);
    return __real_calloc(count, bytes);
}

void *__wrap_realloc(void *p, size_t bytes)
{
    atomic_fetch_add(&allocations, 1);
    return __real_realloc(p, bytes);
}

void *__wrap_aligned_alloc(size_t alignment, size_t bytes)
{
    atomic_fetch_add(&allocations, 1);
    return __real_aligned_alloc(alignment, bytes);
}

int __wrap_posix_memalign(void **p, size_t alignment, size_t bytes)
{
    atomic_fetch_add(&allocations, 1);
    return __real_posix_memalign(p, alignment, bytes);
}

enum { BATCH = 6, SRC_LEN = 9, TGT_LEN = 8, VOCAB = 37 };

typedef struct step_setup {
    attn_model *model;
    attn_graph *graph;
    int32_t src[BATCH * SRC_LEN], tgt[BATCH * TGT_LEN];
    int32_t src_lengths[BATCH], tgt_lengths[BATCH];
    attn_model_batch batch;
    int64_t adam_step;
} step_setup;

static attn_status train_step(step_setup *s, uint64_t step, double *loss)
{
    attn_params *params = attn_model_params(s->model);
    const int64_t n = (int64_t)attn_params_buffer_floats(params);
    attn_graph_reset(s->graph);
    attn_graph_set_training(s->graph, 1);
    attn_graph_set_recording(s->graph, 1);
    attn_graph_set_dropout_seed(s->graph, 7, step);
    attn_params_zero_grad(params);
    attn_var *loss_var;
    attn_status status = attn_model_forward_loss(s->model, s->graph, &s->batch, &loss_var);
    if (status == ATTN_OK)
        status = attn_graph_backward(s->graph, loss_var);
    if (status != ATTN_OK)
        return status;
    *loss = (double)loss_var->value.data[0];
    double norm;
    status = attn_clip_grad_norm(n, attn_params_buffer(params, ATTN_PARAM_GRADS), 1.0, &norm);
    if (status != ATTN_OK)
        return status;
    attn_adam_options adam = attn_adam_default_options(ATTN_ADAM);
    adam.lr = 1e-3;
    return attn_adam_step(&adam, &s->adam_step, n, attn_params_buffer(params, ATTN_PARAM_VALUES),
                          attn_params_buffer(params, ATTN_PARAM_GRADS),
                          attn_params_buffer(params, ATTN_PARAM_ADAM_M),
                          attn_params_buffer(params, ATTN_PARAM_ADAM_V));
}

/* Sentences of several lengths, so padding masks and ignored rows are exercised. */
static void fill_batch(step_setup *s)
{
    attn_rng rng;
    attn_rng_seed(&rng, 3);
    for (int i = 0; i < BATCH * SRC_LEN; i++)
        s->src[i] = 4 + (int32_t)attn_rng_below(&rng, VOCAB - 4);
    for (int i = 0; i < BATCH * TGT_LEN; i++)
        s->tgt[i] = i % TGT_LEN == 0 ? 1 : 4 + (int32_t)attn_rng_below(&rng, VOCAB - 4);
    for (int b = 0; b < BATCH; b++) {
        s->src_lengths[b] = SRC_LEN - b % 3;
        s->tgt_lengths[b] = TGT_LEN - b % 4;
    }
    s->batch = (attn_model_batch){BATCH, SRC_LEN, s->src, s->src_lengths,
                                  TGT_LEN, s->tgt,   s->tgt_lengths, NULL, NULL, 0, 0.0, NULL};
}

static void check_steps_allocate_nothing(attn_model_config config, const char *what)
{
    static step_setup s;
    s.model = NULL;
    s.graph = NULL;
    s.adam_step = 0;
    fill_batch(&s);
    CHECK_OK(attn_model_create(&config, &s.model));
    CHECK_OK(attn_model_init(s.model, 5));
    CHECK_OK(attn_graph_create(attn_model_params(s.model), &s.graph));
    double loss = 0.0;
    for (uint64_t step = 0; step < 2; step++)
        CHECK_OK(train_step(&s, step, &loss));
    long before = atomic_load(&allocations);
    for (uint64_t step = 2; step < 5; step++)
        CHECK_OK(train_step(&s, step, &loss));
    long made = atomic_load(&allocations) - before;
    CHECK(made == 0, "%s, %s, %d threads: %ld allocations in 3 steps after the first two", what,
          attn_isa_name(attn_get_isa()), attn_get_num_threads(), made);
    CHECK(loss > 0.0 && loss < 10.0, "%s: the steps trained (loss %g)", what, loss);
    attn_graph_destroy(s.graph);
    attn_model_destroy(s.model);
}

static void test_the_wrapper_counts_library_allocations(void)
{
    long before = atomic_load(&allocations);
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(NULL, &graph));
    CHECK(atomic_load(&allocations) > before, "creating a graph allocates, and is counted");
    attn_graph_destroy(graph);
}

static void test_transformer_steps_allocate_nothing(void)
{
    attn_model_config config = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    config.d_model = 32;
    config.num_heads = 4;
    config.encoder_layers = config.decoder_layers = 2;
    config.ffn_dim = 48;
    config.src_vocab = config.tgt_vocab = VOCAB;
    config.max_len = 16;
    const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512,
                             ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
    for (int threads = 1; threads <= 2; threads++) {
        CHECK_OK(attn_set_num_threads(threads));
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            if (!attn_isa_supported(isas[i]))
                continue;
            CHECK_OK(attn_set_isa(isas[i]));
            check_steps_allocate_nothing(config, "post-norm transformer");
        }
    }
    config.norm_first = 1;
    config.tie_output = 0;
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    check_steps_allocate_nothing(config, "pre-norm transformer, untied output");
    CHECK_OK(attn_set_num_threads(0));
}

int main(void)
{
    RUN_TEST(test_the_wrapper_counts_library_allocations);
    RUN_TEST(test_transformer_steps_allocate_nothing);
    return test_summary();
}
