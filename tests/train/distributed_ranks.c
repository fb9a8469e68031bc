/* Data-parallel training over MPI, run by CTest as `mpirun -np 2` (tests/CMakeLists.txt; not a
 * test_*.c, because alone it has no second rank to talk to):
 *  - two ranks give the same weights and Adam moments, to the bit, as one process with
 *    accumulate 2 over the same batches, after 50 updates of a Transformer and of an RNN with
 *    Bahdanau attention (dropout and label smoothing on, one thread per rank);
 *  - a rank with no batch in an update (accumulate 1 over two ranks) adds zeros: the run equals
 *    one process with accumulate 1;
 *  - only rank 0 writes files;
 *  - ranks whose parameters disagree stop at the next checksum with a clear error. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PAIRS = 800, UPDATES = 50 };

typedef struct task {
    attn_corpus *corpus;
    attn_tokenizer *src_tok, *tgt_tok;
} task;

/* Reversal of 3-8 letters: a corpus, its character tokenizers, encoded. */
static void make_task(task *t)
{
    static char sources[PAIRS][9], targets[PAIRS][9];
    const char *source_ptr[PAIRS], *target_ptr[PAIRS];
    attn_rng rng;
    attn_rng_seed(&rng, 11);
    for (int i = 0; i < PAIRS; i++) {
        int len = 3 + (int)attn_rng_below(&rng, 6);
        for (int j = 0; j < len; j++)
            sources[i][j] = (char)('a' + attn_rng_below(&rng, 10));
        for (int j = 0; j < len; j++)
            targets[i][j] = sources[i][len - 1 - j];
        sources[i][len] = targets[i][len] = '\0';
        source_ptr[i] = sources[i];
        target_ptr[i] = targets[i];
    }
    CHECK_OK(attn_corpus_from_strings(source_ptr, target_ptr, PAIRS, &t->corpus));
    attn_tokenizer_config chars;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_tokenizer_train(&chars, source_ptr, PAIRS, &t->src_tok));
    CHECK_OK(attn_tokenizer_train(&chars, target_ptr, PAIRS, &t->tgt_tok));
    CHECK_OK(attn_corpus_encode(t->corpus, t->src_tok, t->tgt_tok));
}

static void free_task(task *t)
{
    attn_corpus_destroy(t->corpus);
    attn_tokenizer_destroy(t->src_tok);
    attn_tokenizer_destroy(t->tgt_tok);
}

static attn_model_config small_config(attn_model_arch arch, const task *t)
{
    attn_model_config c = attn_model_config_default(arch);
    if (arch == ATTN_ARCH_TRANSFORMER) {
        c.d_model = 32;
        c.num_heads = 2;
        c.ffn_dim = 64;
        c.encoder_layers = c.decoder_layers = 2;
    } else {
        c.hidden = 32;
        c.embedding_dim = 16;
        c.attention_dim = 16;
    }
    c.dropout = 0.1;
    c.label_smoothing = 0.1;
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(t->src_tok));
    c.tgt_vocab = attn_vocab_size(attn_tokenizer_vocab(t->tgt_tok));
    c.max_len = 10;
    return c;
}

typedef struct trained {
    float *values, *adam_m, *adam_v;
    size_t floats;
    double last_loss;
} trained;

static void free_trained(trained *r)
{
    free(r->values);
    free(r->adam_m);
    free(r->adam_v);
}

static float *copy_buffer(attn_params *store, attn_param_buffer which)
{
    size_t bytes = attn_params_buffer_floats(store) * sizeof(float);
    float *copy = test_alloc(bytes);
    memcpy(copy, attn_params_buffer(store, which), bytes);
    return copy;
}

/* UPDATES updates of a fresh model (seed 3), AdamW with weight decay, clipping, a warm-up. */
static attn_status train(attn_model_arch arch, const task *t, int distributed, int64_t accumulate,
                         trained *out)
{
    attn_model_config config = small_config(arch, t);
    attn_model *model = NULL;
    attn_trainer *trainer = NULL;
    attn_trainable trainable;
    attn_status status = attn_model_create(&config, &model);
    if (status == ATTN_OK)
        status = attn_model_init(model, 3);
    if (status == ATTN_OK)
        status = attn_trainable_from_model(model, &trainable);
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 192;
    o.accumulate = accumulate;
    o.adam = attn_adam_default_options(ATTN_ADAMW);
    o.schedule.warmup_steps = 10;
    o.max_epochs = 0;
    o.max_steps = UPDATES;
    o.distributed = distributed;
    o.check_every = 10;
    if (status == ATTN_OK)
        status = attn_trainer_create(&trainable, t->corpus, NULL, &o, &trainer);
    if (status == ATTN_OK)
        status = attn_trainer_run(trainer);
    if (status == ATTN_OK) {
        attn_params *store = attn_model_params(model);
        out->floats = attn_params_buffer_floats(store);
        out->values = copy_buffer(store, ATTN_PARAM_VALUES);
        out->adam_m = copy_buffer(store, ATTN_PARAM_ADAM_M);
        out->adam_v = copy_buffer(store, ATTN_PARAM_ADAM_V);
        attn_trainer_status s;
        attn_trainer_get_status(trainer, &s);
        out->last_loss = s.last_loss;
    }
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    return status;
}

static int same_bits(const trained *a, const trained *b)
{
    const size_t bytes = a->floats * sizeof(float);
    return a->floats == b->floats && memcmp(a->values, b->values, bytes) == 0 &&
           memcmp(a->adam_m, b->adam_m, bytes) == 0 && memcmp(a->adam_v, b->adam_v, bytes) == 0 &&
           memcmp(&a->last_loss, &b->last_loss, sizeof a->last_loss) == 0;
}

/* Every rank trains its share; rank 0 then trains alone with accumulate `ranks * per_rank` and
 * compares (the other ranks wait for it at the next trainer's creation). */
static void check_equals_one_process(attn_model_arch arch, const char *name, int rank, int ranks,
                                     int64_t accumulate)
{
    task t;
    make_task(&t);
    trained shared, alone;
    memset(&shared, 0, sizeof shared);
    memset(&alone, 0, sizeof alone);
    CHECK_OK(train(arch, &t, 1, accumulate, &shared));
    if (rank == 0) {
        CHECK_OK(train(arch, &t, 0, accumulate, &alone));
        CHECK(shared.values != NULL && alone.values != NULL && same_bits(&shared, &alone),
              "%s: %d ranks with accumulate %lld give the weights, moments and loss (%.17g) of "
              "one process (%.17g), to the bit, after %d updates",
              name, ranks, (long long)accumulate, shared.last_loss, alone.last_loss, UPDATES);
    }
    free_trained(&shared);
    free_trained(&alone);
    free_task(&t);
}

static void test_two_ranks_equal_one_process_accumulating_two(void)
{
    int rank, ranks;
    CHECK_OK(attn_distributed_start(&rank, &ranks));
    check_equals_one_process(ATTN_ARCH_TRANSFORMER, "Transformer", rank, ranks, 2);
    check_equals_one_process(ATTN_ARCH_RNN, "RNN + Bahdanau attention", rank, ranks, 2);
}

static void test_a_rank_without_a_batch_adds_zeros(void)
{
    int rank, ranks;
    CHECK_OK(attn_distributed_start(&rank, &ranks));
    check_equals_one_process(ATTN_ARCH_TRANSFORMER, "Transformer", rank, ranks, 1);
}

/* Rank 1 is given a path of its own: it must not write it. */
static void test_only_rank_0_writes_files(void)
{
    int rank, ranks;
    CHECK_OK(attn_distributed_start(&rank, &ranks));
    task t;
    make_task(&t);
    char model_path[64], checkpoint_path[64];
    snprintf(model_path, sizeof model_path, "distributed_ranks_%d.safetensors", rank);
    snprintf(checkpoint_path, sizeof checkpoint_path, "distributed_ranks_%d.last.safetensors",
             rank);
    unlink(model_path);
    unlink(checkpoint_path);
    attn_model_config config = small_config(ATTN_ARCH_TRANSFORMER, &t);
    attn_model *model = NULL;
    attn_trainable trainable;
    attn_trainer *trainer = NULL;
    CHECK_OK(attn_model_create(&config, &model));
    CHECK_OK(attn_model_init(model, 3));
    CHECK_OK(attn_trainable_from_model(model, &trainable));
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 192;
    o.accumulate = 2;
    o.max_epochs = 0;
    o.max_steps = 4;
    o.checkpoint_every = 2;
    o.distributed = 1;
    o.best_path = model_path;
    o.checkpoint_path = checkpoint_path;
    CHECK_OK(attn_trainer_create(&trainable, t.corpus, NULL, &o, &trainer));
    CHECK_OK(attn_trainer_run(trainer));
    CHECK((access(model_path, F_OK) == 0) == (rank == 0) &&
              (access(checkpoint_path, F_OK) == 0) == (rank == 0),
          "rank %d %s the model and checkpoint", rank, rank == 0 ? "writes" : "does not write");
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(trainer, &status));
    CHECK(status.rank == rank && status.ranks == ranks, "the status names the rank (%d of %d)",
          status.rank, status.ranks);
    unlink(model_path);
    unlink(checkpoint_path);
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    free_task(&t);
}

typedef struct perturbation {
    attn_params *store;
    int rank;
} perturbation;

/* A fault on rank 1 after update 2: one weight changes there only. */
static int perturb_rank_1(const attn_train_event *event, void *user)
{
    const perturbation *p = user;
    if (p->rank == 1 && event->kind == ATTN_TRAIN_EVENT_STEP && event->step == 2)
        attn_params_buffer(p->store, ATTN_PARAM_VALUES)[0] += 1e-3f;
    return 0;
}

static void test_ranks_that_disagree_stop_at_the_checksum(void)
{
    int rank, ranks;
    CHECK_OK(attn_distributed_start(&rank, &ranks));
    task t;
    make_task(&t);
    attn_model_config config = small_config(ATTN_ARCH_TRANSFORMER, &t);
    attn_model *model = NULL;
    attn_trainable trainable;
    attn_trainer *trainer = NULL;
    CHECK_OK(attn_model_create(&config, &model));
    CHECK_OK(attn_model_init(model, 3));
    CHECK_OK(attn_trainable_from_model(model, &trainable));
    perturbation p = {attn_model_params(model), rank};
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 192;
    o.accumulate = 2;
    o.max_epochs = 0;
    o.max_steps = 20;
    o.check_every = 4;
    o.distributed = 1;
    o.callback = perturb_rank_1;
    o.callback_user = &p;
    CHECK_OK(attn_trainer_create(&trainable, t.corpus, NULL, &o, &trainer));
    CHECK_FAILS(attn_trainer_run(trainer), ATTN_ERR_INTERNAL);
    CHECK(strstr(attn_last_error(), "after update 4 the parameters of rank 1 differ from rank 0") !=
              NULL,
          "rank %d says which rank disagrees and when: %s", rank, attn_last_error());
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(trainer, &status));
    CHECK(status.step == 4, "the run stopped at the checksum of update 4 (step %lld)",
          (long long)status.step);
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    free_task(&t);
}

int main(void)
{
    attn_set_num_threads(1);
    int rank = 0, ranks = 1;
    CHECK_OK(attn_distributed_start(&rank, &ranks));
    if (ranks != 2) {
        printf("distributed_ranks: run me as mpirun -np 2 (got %d rank%s)\n", ranks,
               ranks == 1 ? "" : "s");
        attn_distributed_finish();
        return 1;
    }
    RUN_TEST(test_two_ranks_equal_one_process_accumulating_two);
    RUN_TEST(test_a_rank_without_a_batch_adds_zeros);
    RUN_TEST(test_only_rank_0_writes_files);
    RUN_TEST(test_ranks_that_disagree_stop_at_the_checksum);
    const int code = test_summary();
    attn_distributed_finish();
    return code;
}
