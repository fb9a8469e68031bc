/* Batches epoch after epoch: length-bucketed pairs of an encoded corpus, or windows of a
 * token stream (a language model's text).
 *
 * An epoch's plan is a pure function of (corpus lengths, config, epoch): pairs sorted by
 * (source length, target length, a random key drawn from (seed, epoch) or the pair index
 * when not shuffling), cut greedily into batches within the token budget, and the batches
 * visited in a permuted order drawn from the same generator. So a position (epoch, batch
 * index) is enough to resume exactly. With subword regularisation the lengths are the epoch's
 * sampled segmentations', themselves a function of (seed, epoch, pair), so that still holds. */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct sort_item {
    int32_t source_len, target_len;
    uint64_t tie;
    int64_t pair;
} sort_item;

struct attn_batcher {
    attn_batcher_config config;
    const attn_corpus *corpus;
    /* Windows of a token stream instead of a corpus (corpus NULL): the epoch's order of the
     * windows, NULL when not shuffled (file order). */
    const attn_token_stream *stream;
    attn_window_config windows;
    int64_t window_count;
    int64_t *window_order;
    int64_t count;
    int32_t *source_len, *target_len; /* [count] */

    /* The plan of epoch `epoch`. */
    sort_item *items;     /* [count] in batch order of rows */
    int64_t *batch_start; /* [num_batches + 1] into items */
    int64_t *batch_order; /* [num_batches] the order batches are visited in */
    int64_t num_batches;
    int64_t epoch, index; /* the position */

    /* Subword regularisation (spm_alpha > 0, attn_batcher_sample_subwords): the tokenizers
     * that sample each side (NULL: the corpus's ids), and the segmentations sampled for epoch
     * sampled_epoch (-1: none yet, or a sampling that failed), side 0 the sources and 1 the
     * targets; pair i's ids start at sampled[side].data + sampled_start[side][i], or are the
     * corpus's own where that is -1. longest[side] is the corpus's longest sentence there. */
    const attn_tokenizer *sampler[2];
    double spm_alpha;
    int64_t spm_nbest;
    id_buffer sampled[2];
    int64_t *sampled_start[2];
    int32_t longest[2];
    int64_t sampled_epoch;
    /* The epoch sampled before it, in the same form with its lengths (kept_epoch -1: none):
     * the trainer's look-ahead over an update's batches crosses an epoch's end and seeks
     * back, which would otherwise sample both epochs again. */
    id_buffer kept_sampled[2];
    int64_t *kept_start[2];
    int32_t *kept_length[2];
    int64_t kept_epoch;

    attn_batch batch;
    int64_t source_capacity, target_capacity, rows_capacity, mlm_capacity;
    int32_t *mlm_targets; /* a text corpus's batch.mlm_targets */
};

static attn_status reserve_batch(attn_batcher *b, int64_t rows, int64_t source_cells,
                                 int64_t target_cells);

static int compare_items(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    if (a->source_len != b->source_len)
        return a->source_len < b->source_len ? -1 : 1;
    if (a->target_len != b->target_len)
        return a->target_len < b->target_len ? -1 : 1;
    if (a->tie != b->tie)
        return a->tie < b->tie ? -1 : 1;
    return (a->pair > b->pair) - (a->pair < b->pair);
}

/* Seeds differ per epoch; attn_rng_seed runs the mix through splitmix64. */
static void seed_epoch(attn_rng *rng, uint64_t seed, int64_t epoch)
{
    attn_rng_seed(rng, seed ^ ((uint64_t)epoch + 1) * 0xd1342543de82ef95ULL);
}

/* Sampled segmentations get seeds of their own, apart from the batch order's and the masks'. */
#define SAMPLING_STREAM 0x73706d616c706861ULL /* "spmalpha" */

/* Pair i's ids on one side (0 source, 1 target): the epoch's sample or the corpus's. */
static void pair_ids(const attn_batcher *b, int side, int64_t pair, const int32_t **ids,
                     int64_t *length)
{
    const int64_t start = b->sampled_start[side] != NULL ? b->sampled_start[side][pair] : -1;
    if (start >= 0) {
        *ids = b->sampled[side].data + start;
        *length = side == 0 ? b->source_len[pair] : b->target_len[pair];
        return;
    }
    if (side == 0)
        attn_corpus_source_ids(b->corpus, pair, ids, length);
    else
        attn_corpus_target_ids(b->corpus, pair, ids, length);
}

/* Exchanges the current epoch's samples and lengths with the kept ones. */
static void swap_samples(attn_batcher *b)
{
    for (int side = 0; side < 2; side++) {
        const id_buffer ids = b->sampled[side];
        b->sampled[side] = b->kept_sampled[side];
        b->kept_sampled[side] = ids;
        int64_t *const start = b->sampled_start[side];
        b->sampled_start[side] = b->kept_start[side];
        b->kept_start[side] = start;
    }
    int32_t *const source = b->source_len, *const target = b->target_len;
    b->source_len = b->kept_length[0];
    b->target_len = b->kept_length[1];
    b->kept_length[0] = source;
    b->kept_length[1] = target;
    const int64_t epoch = b->sampled_epoch;
    b->sampled_epoch = b->kept_epoch;
    b->kept_epoch = epoch;
}

/* Samples every pair's segmentation of epoch `epoch` on each side that has a tokenizer, and
 * sets the lengths the plan sorts by. Runs on the calling thread in pair order, each sentence
 * seeded alone, so the threads of the program change nothing. */
static attn_status sample_epoch(attn_batcher *b, int64_t epoch)
{
    if (b->spm_alpha <= 0.0 || b->sampled_epoch == epoch)
        return ATTN_OK;
    if (b->kept_epoch == epoch || b->sampled_epoch >= 0) {
        /* Back to the kept epoch, or keep this one and sample into the other buffers. */
        swap_samples(b);
        if (b->sampled_epoch == epoch)
            return ATTN_OK;
    }
    b->sampled_epoch = -1;
    const attn_tokenizer *const *tokenizers = b->sampler;
    const char *const *const texts[2] = {attn_corpus_sources(b->corpus),
                                         attn_corpus_targets(b->corpus)};
    int32_t *const lengths[2] = {b->source_len, b->target_len};
    const uint64_t epoch_seed = attn_index_hash(b->config.seed ^ SAMPLING_STREAM, (uint64_t)epoch);
    for (int side = 0; side < 2; side++) {
        if (tokenizers[side] == NULL)
            continue;
        id_buffer *out = &b->sampled[side];
        out->size = 0;
        for (int64_t i = 0; i < b->count; i++) {
            const uint64_t seed =
                attn_index_hash(attn_index_hash(epoch_seed, (uint64_t)i), (uint64_t)side);
            const int64_t start = out->size;
            if (side == 1)
                ATTN_TRY(id_buffer_push(out, ATTN_BOS_ID));
            ATTN_TRY(tokenizer_sample_append(tokenizers[side], texts[side][i],
                                             strlen(texts[side][i]), b->spm_alpha, b->spm_nbest,
                                             seed, out));
            if (side == 1)
                ATTN_TRY(id_buffer_push(out, ATTN_EOS_ID));
            const int64_t length = out->size - start;
            /* Sampling splits words finer than the best segmentation; past the longest
             * sentence the model was sized for, the best one is read instead. */
            if (length > b->longest[side] || length <= 2 * side) {
                out->size = start;
                b->sampled_start[side][i] = -1;
                const int32_t *ids;
                int64_t kept;
                pair_ids(b, side, i, &ids, &kept);
                lengths[side][i] = (int32_t)kept;
            } else {
                b->sampled_start[side][i] = start;
                lengths[side][i] = (int32_t)length;
            }
        }
    }
    b->sampled_epoch = epoch;
    return ATTN_OK;
}

/* Builds the plan of an epoch; allocation-free (buffers are sized for the corpus) but for the
 * sampled segmentations of subword regularisation. */
static attn_status plan_epoch(attn_batcher *b, int64_t epoch)
{
    attn_rng rng;
    seed_epoch(&rng, b->config.seed, epoch);
    if (b->stream != NULL) {
        if (b->window_order != NULL) {
            for (int64_t i = 0; i < b->window_count; i++)
                b->window_order[i] = i;
            for (int64_t i = b->window_count - 1; i > 0; i--) {
                int64_t j = (int64_t)attn_rng_below(&rng, (uint64_t)i + 1);
                int64_t t = b->window_order[i];
                b->window_order[i] = b->window_order[j];
                b->window_order[j] = t;
            }
        }
        b->epoch = epoch;
        b->index = 0;
        return ATTN_OK;
    }
    ATTN_TRY(sample_epoch(b, epoch));
    for (int64_t i = 0; i < b->count; i++)
        b->items[i] = (sort_item){b->source_len[i], b->target_len[i],
                                  b->config.shuffle ? attn_rng_next_u64(&rng) : 0, i};
    qsort(b->items, (size_t)b->count, sizeof *b->items, compare_items);

    /* Greedy cut: a batch grows while size * (longest source + longest target) stays within
     * the budget; a pair that fits with nothing else is a batch alone. */
    int64_t batches = 0, size = 0, longest_source = 0, longest_target = 0;
    for (int64_t i = 0; i < b->count; i++) {
        int64_t source =
            b->items[i].source_len > longest_source ? b->items[i].source_len : longest_source;
        int64_t target =
            b->items[i].target_len > longest_target ? b->items[i].target_len : longest_target;
        if (size > 0 && source + target > b->config.batch_tokens / (size + 1)) {
            b->batch_start[batches++] = i - size;
            size = 0;
            source = b->items[i].source_len;
            target = b->items[i].target_len;
        }
        size++;
        longest_source = source;
        longest_target = target;
    }
    b->batch_start[batches++] = b->count - size;
    b->batch_start[batches] = b->count;
    b->num_batches = batches;

    for (int64_t i = 0; i < batches; i++)
        b->batch_order[i] = i;
    if (b->config.shuffle)
        for (int64_t i = batches - 1; i > 0; i--) {
            int64_t j = (int64_t)attn_rng_below(&rng, (uint64_t)i + 1);
            int64_t t = b->batch_order[i];
            b->batch_order[i] = b->batch_order[j];
            b->batch_order[j] = t;
        }
    b->epoch = epoch;
    b->index = 0;
    return ATTN_OK;
}

attn_status attn_batcher_create(const attn_corpus *corpus, const attn_batcher_config *config,
                                attn_batcher **out)
{
    static const char fn[] = "attn_batcher_create";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_NOT_NULL(config);
    ATTN_CHECK_ARG(config->batch_tokens > 0, "%s: batch_tokens must be positive, got %lld", fn,
                   (long long)config->batch_tokens);
    int64_t count = attn_corpus_size(corpus);
    ATTN_CHECK_ARG(count > 0, "%s: the corpus has no pairs", fn);
    const int32_t *ids;
    int64_t length;
    if (attn_corpus_source_ids(corpus, 0, &ids, &length) != ATTN_OK)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: the corpus must be encoded first "
                         "(attn_corpus_encode)",
                         fn);

    attn_batcher *b = calloc(1, sizeof *b);
    if (b == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    b->config = *config;
    b->corpus = corpus;
    b->sampled_epoch = -1;
    b->kept_epoch = -1;
    b->count = count;
    size_t n = (size_t)count + 1;
    b->source_len = malloc(n * sizeof *b->source_len);
    b->target_len = malloc(n * sizeof *b->target_len);
    b->items = malloc(n * sizeof *b->items);
    b->batch_start = malloc((n + 1) * sizeof *b->batch_start);
    b->batch_order = malloc(n * sizeof *b->batch_order);
    if (b->source_len == NULL || b->target_len == NULL || b->items == NULL ||
        b->batch_start == NULL || b->batch_order == NULL) {
        attn_batcher_destroy(b);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                         (long long)count);
    }
    /* Lengths fit int32: attn_corpus_encode refuses longer sentences. */
    for (int64_t i = 0; i < count; i++) {
        attn_corpus_source_ids(corpus, i, &ids, &length);
        b->source_len[i] = (int32_t)length;
        attn_corpus_target_ids(corpus, i, &ids, &length);
        b->target_len[i] = (int32_t)length;
        for (int side = 0; side < 2; side++) {
            const int32_t len = side == 0 ? b->source_len[i] : b->target_len[i];
            b->longest[side] = len > b->longest[side] ? len : b->longest[side];
        }
    }
    (void)plan_epoch(b, 0); /* nothing is sampled yet: it cannot fail */
    *out = b;
    return ATTN_OK;
}

attn_status attn_batcher_create_windows(const attn_token_stream *stream,
                                        const attn_window_config *config, attn_batcher **out)
{
    static const char fn[] = "attn_batcher_create_windows";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(stream);
    ATTN_CHECK_NOT_NULL(config);
    ATTN_CHECK_ARG(config->sequences >= 1 && config->context >= 1 && config->context < INT32_MAX,
                   "%s: sequences (%lld) and context (%lld) must be positive", fn,
                   (long long)config->sequences, (long long)config->context);
    const int64_t tokens = attn_token_stream_size(stream);
    const int64_t windows = tokens > 0 ? (tokens - 1) / config->context : 0;
    ATTN_CHECK_ARG(windows / config->sequences >= 1 &&
                       config->sequences <= INT64_MAX / (config->context + 1),
                   "%s: the text has %lld tokens, too few for one batch of %lld windows of %lld "
                   "tokens (%lld tokens are needed): give more text, or a smaller context or "
                   "batch",
                   fn, (long long)tokens, (long long)config->sequences, (long long)config->context,
                   config->sequences <= INT64_MAX / (config->context + 1)
                       ? (long long)(config->sequences * config->context + 1)
                       : (long long)INT64_MAX);
    attn_batcher *b = calloc(1, sizeof *b);
    if (b == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    b->config = (attn_batcher_config){config->sequences * (config->context + 1), config->seed,
                                      config->shuffle};
    b->stream = stream;
    b->windows = *config;
    b->window_count = windows;
    b->num_batches = windows / config->sequences;
    attn_status status = ATTN_OK;
    if (config->shuffle &&
        (b->window_order = malloc((size_t)windows * sizeof *b->window_order)) == NULL)
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld windows", fn,
                           (long long)windows);
    if (status == ATTN_OK)
        status = reserve_batch(b, config->sequences, 0, config->sequences * (config->context + 1));
    if (status != ATTN_OK) {
        attn_batcher_destroy(b);
        return status;
    }
    (void)plan_epoch(b, 0); /* windows sample nothing: it cannot fail */
    *out = b;
    return ATTN_OK;
}

void attn_batcher_destroy(attn_batcher *batcher)
{
    if (batcher == NULL)
        return;
    free(batcher->window_order);
    free(batcher->source_len);
    free(batcher->target_len);
    free(batcher->items);
    free(batcher->batch_start);
    free(batcher->batch_order);
    free(batcher->batch.source);
    free(batcher->batch.target);
    free(batcher->batch.source_lengths);
    free(batcher->batch.target_lengths);
    free(batcher->batch.pairs);
    free(batcher->mlm_targets);
    for (int side = 0; side < 2; side++) {
        id_buffer_free(&batcher->sampled[side]);
        free(batcher->sampled_start[side]);
        id_buffer_free(&batcher->kept_sampled[side]);
        free(batcher->kept_start[side]);
        free(batcher->kept_length[side]);
    }
    free(batcher);
}

static attn_status reserve_batch(attn_batcher *b, int64_t rows, int64_t source_cells,
                                 int64_t target_cells)
{
    attn_batch *batch = &b->batch;
    ATTN_TRY(grow_array((void **)&batch->source, &b->source_capacity, source_cells,
                        sizeof *batch->source));
    ATTN_TRY(grow_array((void **)&batch->target, &b->target_capacity, target_cells,
                        sizeof *batch->target));
    if (rows > b->rows_capacity) {
        int64_t c1 = b->rows_capacity, c2 = c1, c3 = c1;
        ATTN_TRY(
            grow_array((void **)&batch->source_lengths, &c1, rows, sizeof *batch->source_lengths));
        ATTN_TRY(
            grow_array((void **)&batch->target_lengths, &c2, rows, sizeof *batch->target_lengths));
        ATTN_TRY(grow_array((void **)&batch->pairs, &c3, rows, sizeof *batch->pairs));
        b->rows_capacity = c1;
    }
    return ATTN_OK;
}

static void fill_rows(int32_t *cells, int64_t width, const int32_t *ids, int64_t length)
{
    /* A text corpus (masked language model) has no target row at all: cells is NULL then. */
    if (length > 0)
        memcpy(cells, ids, (size_t)length * sizeof *cells);
    for (int64_t j = length; j < width; j++)
        cells[j] = ATTN_PAD_ID;
}

/* Moves the position to the next batch, or to batch 0 of the next epoch after the last. */
static attn_status advance(attn_batcher *b)
{
    if (b->index + 1 < b->num_batches) {
        b->index++;
        return ATTN_OK;
    }
    return plan_epoch(b, b->epoch + 1);
}

static attn_status next_windows(attn_batcher *b, const attn_batch **batch)
{
    const int64_t rows = b->windows.sequences, context = b->windows.context;
    attn_batch *out = &b->batch;
    out->size = rows;
    out->source_len = 0;
    out->target_len = context + 1;
    out->epoch = b->epoch;
    out->index = b->index;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t slot = b->index * rows + r;
        const int64_t window = b->window_order != NULL ? b->window_order[slot] : slot;
        ATTN_TRY(attn_token_stream_read(b->stream, window * context, context + 1,
                                        out->target + r * (context + 1)));
        out->source_lengths[r] = 0;
        out->target_lengths[r] = (int32_t)(context + 1);
        out->pairs[r] = window;
    }
    ATTN_TRY(advance(b));
    *batch = out;
    return ATTN_OK;
}

attn_status attn_batcher_next(attn_batcher *batcher, const attn_batch **batch)
{
    ATTN_CHECK_NOT_NULL(batch);
    *batch = NULL;
    ATTN_CHECK_NOT_NULL(batcher);
    attn_batcher *b = batcher;
    ATTN_CHECK_ARG(b->epoch < INT64_MAX, "attn_batcher_next: no epoch after %lld",
                   (long long)b->epoch);
    if (b->stream != NULL)
        return next_windows(b, batch);
    if (b->spm_alpha > 0.0 && b->sampled_epoch != b->epoch) {
        /* An earlier sampling failed part way: the epoch's plan is made again, the same. */
        const int64_t index = b->index;
        ATTN_TRY(plan_epoch(b, b->epoch));
        b->index = index < b->num_batches ? index : 0;
    }
    int64_t chosen = b->batch_order[b->index];
    int64_t first = b->batch_start[chosen], rows = b->batch_start[chosen + 1] - first;
    int64_t source_len = 0, target_len = 0;
    for (int64_t r = 0; r < rows; r++) {
        const sort_item *item = &b->items[first + r];
        source_len = item->source_len > source_len ? item->source_len : source_len;
        target_len = item->target_len > target_len ? item->target_len : target_len;
    }
    size_t source_cells, target_cells;
    if (!attn_mul_size((size_t)rows, (size_t)source_len, &source_cells) ||
        !attn_mul_size((size_t)rows, (size_t)target_len, &target_cells) ||
        source_cells > INT64_MAX || target_cells > INT64_MAX)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_batcher_next: batch too large");
    ATTN_TRY(reserve_batch(b, rows, (int64_t)source_cells, (int64_t)target_cells));
    const int masked = attn_corpus_is_text(b->corpus);
    if (masked)
        ATTN_TRY(grow_array((void **)&b->mlm_targets, &b->mlm_capacity, (int64_t)source_cells,
                            sizeof *b->mlm_targets));

    attn_batch *out = &b->batch;
    out->size = rows;
    out->source_len = source_len;
    out->target_len = target_len;
    out->labels = attn_corpus_is_labelled(b->corpus) ? out->target : NULL;
    out->mlm_targets = masked ? b->mlm_targets : NULL;
    out->epoch = b->epoch;
    out->index = b->index;
    for (int64_t r = 0; r < rows; r++) {
        int64_t pair = b->items[first + r].pair;
        const int32_t *ids;
        int64_t length;
        pair_ids(b, 0, pair, &ids, &length);
        fill_rows(out->source + r * source_len, source_len, ids, length);
        if (masked) {
            int32_t *row = out->source + r * source_len, *targets = b->mlm_targets + r * source_len;
            attn_mlm_mask(b->config.seed, b->epoch, pair, row, length, corpus_text_vocab(b->corpus),
                          row, targets);
            for (int64_t j = length; j < source_len; j++)
                targets[j] = -1;
        }
        out->source_lengths[r] = (int32_t)length;
        pair_ids(b, 1, pair, &ids, &length);
        fill_rows(out->target + r * target_len, target_len, ids, length);
        out->target_lengths[r] = (int32_t)length;
        out->pairs[r] = pair;
    }
    ATTN_TRY(advance(b));
    *batch = out;
    return ATTN_OK;
}

void attn_batcher_position(const attn_batcher *batcher, int64_t *epoch, int64_t *batch_index)
{
    if (epoch != NULL)
        *epoch = batcher == NULL ? 0 : batcher->epoch;
    if (batch_index != NULL)
        *batch_index = batcher == NULL ? 0 : batcher->index;
}

attn_status attn_batcher_seek(attn_batcher *batcher, int64_t epoch, int64_t batch_index)
{
    ATTN_CHECK_NOT_NULL(batcher);
    ATTN_CHECK_ARG(epoch >= 0 && batch_index >= 0,
                   "attn_batcher_seek: epoch (%lld) and batch_index (%lld) must not be negative",
                   (long long)epoch, (long long)batch_index);
    int64_t old_epoch = batcher->epoch, old_index = batcher->index;
    if (epoch != old_epoch)
        ATTN_TRY(plan_epoch(batcher, epoch));
    if (batch_index >= batcher->num_batches) {
        int64_t batches = batcher->num_batches;
        if (epoch != old_epoch)
            ATTN_TRY(plan_epoch(batcher, old_epoch));
        batcher->index = old_index;
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_batcher_seek: epoch %lld has %lld batches, no batch %lld",
                         (long long)epoch, (long long)batches, (long long)batch_index);
    }
    batcher->index = batch_index;
    return ATTN_OK;
}

attn_status attn_batcher_sample_subwords(attn_batcher *batcher, const attn_tokenizer *source,
                                         const attn_tokenizer *target, double alpha, int64_t nbest)
{
    static const char fn[] = "attn_batcher_sample_subwords";
    ATTN_CHECK_NOT_NULL(batcher);
    attn_batcher *b = batcher;
    ATTN_CHECK_ARG(b->stream == NULL,
                   "%s: a token stream's windows are cut from one tokenization: nothing to "
                   "sample",
                   fn);
    ATTN_CHECK_ARG(b->spm_alpha == 0.0, "%s: the batcher samples already", fn);
    ATTN_CHECK_ARG(alpha > 0.0 && alpha <= 1.0, "%s: alpha must be in (0, 1], got %g", fn, alpha);
    ATTN_CHECK_ARG(nbest == -1 || (nbest >= 2 && nbest <= ATTN_SPM_MAX_NBEST),
                   "%s: nbest must be -1 (every segmentation) or in [2, %d], got %lld", fn,
                   ATTN_SPM_MAX_NBEST, (long long)nbest);
    ATTN_CHECK_ARG(source != NULL || target != NULL,
                   "%s: give the source or the target tokenizer (or both) to sample with", fn);
    ATTN_CHECK_ARG(target == NULL ||
                       !(attn_corpus_is_labelled(b->corpus) || attn_corpus_is_text(b->corpus)),
                   "%s: a corpus of %s has no target text to sample (target must be NULL)", fn,
                   attn_corpus_is_labelled(b->corpus) ? "labelled lines" : "texts");
    const attn_tokenizer *const samplers[2] = {source, target};
    for (int side = 0; side < 2; side++)
        if (samplers[side] != NULL && !attn_tokenizer_can_sample(samplers[side]))
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "%s: the %s tokenizer (%s) cannot sample segmentations: subword "
                             "regularisation needs a SentencePiece unigram or BPE model",
                             fn, side == 0 ? "source" : "target",
                             attn_tokenizer_kind_name(attn_tokenizer_get_kind(samplers[side])));
    const size_t n = (size_t)b->count;
    for (int side = 0; side < 2; side++) {
        if (b->kept_length[side] == NULL) {
            /* The corpus's lengths: a side that does not sample keeps them in both slots. */
            if ((b->kept_length[side] = malloc((n + 1) * sizeof *b->kept_length[side])) == NULL)
                return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                                 (long long)b->count);
            memcpy(b->kept_length[side], side == 0 ? b->source_len : b->target_len,
                   n * sizeof *b->kept_length[side]);
        }
        if (samplers[side] == NULL)
            continue;
        if (b->sampled_start[side] == NULL)
            b->sampled_start[side] = malloc(n * sizeof *b->sampled_start[side]);
        if (b->kept_start[side] == NULL)
            b->kept_start[side] = malloc(n * sizeof *b->kept_start[side]);
        if (b->sampled_start[side] == NULL || b->kept_start[side] == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                             (long long)b->count);
    }
    for (int side = 0; side < 2; side++)
        b->sampler[side] = samplers[side];
    b->spm_alpha = alpha;
    b->spm_nbest = nbest;
    b->sampled_epoch = -1;
    b->kept_epoch = -1;
    /* The current epoch's plan, now of sampled lengths; next() makes it again should this
     * sampling fail part way. */
    const int64_t index = b->index;
    ATTN_TRY(plan_epoch(b, b->epoch));
    b->index = index < b->num_batches ? index : 0;
    return ATTN_OK;
}

int64_t attn_batcher_num_batches(const attn_batcher *batcher)
{
    return batcher == NULL ? 0 : batcher->num_batches;
}
