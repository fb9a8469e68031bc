/* Byte-pair encoding: learning merges from training text (Sennrich et al. 2016, as in
 * subword-nmt) and applying them to words.
 *
 * Learning keeps the distinct words of the text with their frequencies, each as a sequence
 * of symbol ids, and the count of every adjacent symbol pair (summed over words, weighted by
 * frequency). Each merge only revisits the words that contain the merged pair, found through
 * a per-pair list of words, and updates the counts of the pairs in those words; a max-heap
 * with lazy deletion (entries whose count is out of date are skipped) finds the next pair.
 * So a merge costs time in proportion to the words it changes, not to the whole text. */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

/* Pairs seen once are not merged: a merge should be shared by at least two occurrences. */
#define MIN_PAIR_COUNT 2

/* ---- pair keys ------------------------------------------------------------------------- */

static uint64_t pair_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static size_t key_slot(uint64_t key, size_t slot_count)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    return (size_t)h & (slot_count - 1);
}

/* ---- the learned model ------------------------------------------------------------------ */

static int32_t find_rank(const bpe_model *model, int32_t left, int32_t right)
{
    if (model->rank_slots == 0)
        return -1;
    uint64_t key = pair_key(left, right);
    size_t slot = key_slot(key, model->rank_slots);
    while (model->rank_values[slot] != 0) {
        if (model->rank_keys[slot] == key)
            return model->rank_values[slot] - 1;
        slot = (slot + 1) & (model->rank_slots - 1);
    }
    return -1;
}

static attn_status grow_ranks(bpe_model *model)
{
    size_t slot_count = model->rank_slots == 0 ? 64 : model->rank_slots * 2;
    uint64_t *keys = calloc(slot_count, sizeof *keys);
    int32_t *values = calloc(slot_count, sizeof *values);
    if (keys == NULL || values == NULL) {
        free(keys);
        free(values);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu BPE merge slots",
                         slot_count);
    }
    for (size_t i = 0; i < model->rank_slots; i++) {
        if (model->rank_values[i] == 0)
            continue;
        size_t slot = key_slot(model->rank_keys[i], slot_count);
        while (values[slot] != 0)
            slot = (slot + 1) & (slot_count - 1);
        keys[slot] = model->rank_keys[i];
        values[slot] = model->rank_values[i];
    }
    free(model->rank_keys);
    free(model->rank_values);
    model->rank_keys = keys;
    model->rank_values = values;
    model->rank_slots = slot_count;
    return ATTN_OK;
}

/* Appends merge (left, right) -> result. A pair merged twice keeps its first rank, as
 * subword-nmt does (learning can meet a pair again when a later merge rebuilds a symbol). */
static attn_status record_merge(bpe_model *model, int32_t left, int32_t right, int32_t result)
{
    if (model->num_merges >= INT32_MAX - 1)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "too many BPE merges");
    int64_t needed = model->num_merges + 1;
    int64_t c1 = model->merge_capacity, c2 = c1, c3 = c1;
    ATTN_TRY(grow_array((void **)&model->merge_left, &c1, needed, sizeof(int32_t)));
    ATTN_TRY(grow_array((void **)&model->merge_right, &c2, needed, sizeof(int32_t)));
    ATTN_TRY(grow_array((void **)&model->merge_result, &c3, needed, sizeof(int32_t)));
    model->merge_capacity = c1;
    if (find_rank(model, left, right) < 0) {
        if ((size_t)(model->num_merges + 1) * 2 > model->rank_slots)
            ATTN_TRY(grow_ranks(model));
        uint64_t key = pair_key(left, right);
        size_t slot = key_slot(key, model->rank_slots);
        while (model->rank_values[slot] != 0)
            slot = (slot + 1) & (model->rank_slots - 1);
        model->rank_keys[slot] = key;
        model->rank_values[slot] = (int32_t)model->num_merges + 1;
    }
    model->merge_left[model->num_merges] = left;
    model->merge_right[model->num_merges] = right;
    model->merge_result[model->num_merges] = result;
    model->num_merges++;
    return ATTN_OK;
}

/* Interns the concatenation of two strings. */
static attn_status intern_concat(strtab *symbols, const char *a, size_t a_size, const char *b,
                                 size_t b_size, int32_t *id)
{
    char small[256];
    char *joined = small;
    if (a_size + b_size > sizeof small) {
        joined = malloc(a_size + b_size);
        if (joined == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory joining BPE symbols");
    }
    memcpy(joined, a, a_size);
    memcpy(joined + a_size, b, b_size);
    attn_status status = strtab_intern(symbols, joined, a_size + b_size, id, NULL);
    if (joined != small)
        free(joined);
    return status;
}

attn_status bpe_add_merge(bpe_model *model, const char *left, size_t left_size, const char *right,
                          size_t right_size)
{
    int32_t left_id, right_id, result_id;
    ATTN_TRY(strtab_intern(&model->symbols, left, left_size, &left_id, NULL));
    ATTN_TRY(strtab_intern(&model->symbols, right, right_size, &right_id, NULL));
    ATTN_TRY(intern_concat(&model->symbols, left, left_size, right, right_size, &result_id));
    return record_merge(model, left_id, right_id, result_id);
}

attn_status bpe_link_vocab(bpe_model *model, const attn_vocab *vocab)
{
    /* Every vocabulary token is a symbol (a character, or a merge's result), so that
     * characters no merge uses still encode to their ids. */
    for (int32_t id = ATTN_NUM_SPECIAL_IDS; id < vocab->tokens.count; id++) {
        int32_t symbol;
        ATTN_TRY(strtab_intern(&model->symbols, strtab_string(&vocab->tokens, id),
                               strtab_length(&vocab->tokens, id), &symbol, NULL));
    }
    free(model->symbol_to_vocab);
    model->symbol_to_vocab = malloc(((size_t)model->symbols.count + 1) * sizeof(int32_t));
    if (model->symbol_to_vocab == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for the BPE symbol map");
    for (int32_t s = 0; s < model->symbols.count; s++) {
        int32_t id =
            vocab_find(vocab, strtab_string(&model->symbols, s), strtab_length(&model->symbols, s));
        model->symbol_to_vocab[s] = id < ATTN_NUM_SPECIAL_IDS ? ATTN_UNK_ID : id;
    }
    return ATTN_OK;
}

void bpe_model_free(bpe_model *model)
{
    strtab_free(&model->symbols);
    free(model->merge_left);
    free(model->merge_right);
    free(model->merge_result);
    free(model->rank_keys);
    free(model->rank_values);
    free(model->symbol_to_vocab);
    memset(model, 0, sizeof *model);
}

/* Symbol id of one character of a word (the last one carrying the end-of-word mark), or -1
 * for a character learning never saw. */
static int32_t character_symbol(const strtab *symbols, const char *bytes, size_t size, int last)
{
    if (!last)
        return strtab_find(symbols, bytes, size);
    char marked[4 + END_OF_WORD_SIZE];
    memcpy(marked, bytes, size);
    memcpy(marked + size, END_OF_WORD, END_OF_WORD_SIZE);
    return strtab_find(symbols, marked, size + END_OF_WORD_SIZE);
}

/* Pushes the UTF-8 bytes of text as byte tokens, then "</w>" when it ended its word. */
static attn_status push_bytes(const byte_fallback *fallback, const char *text, size_t size,
                              int ends_word, id_buffer *out)
{
    for (size_t i = 0; i < size; i++)
        ATTN_TRY(id_buffer_push(out, fallback->byte_ids[(unsigned char)text[i]]));
    return ends_word ? id_buffer_push(out, fallback->word_end_id) : ATTN_OK;
}

attn_status bpe_encode_word(const bpe_model *model, const byte_fallback *fallback, const char *word,
                            size_t size, id_buffer *out)
{
    const int64_t base = out->size;
    size_t offset = 0;
    int unknown = 0;
    while (offset < size) {
        size_t length = utf8_sequence_length((const unsigned char *)word + offset, size - offset);
        if (length == 0)
            return attn_fail(ATTN_ERR_INTERNAL, "bpe_encode_word: invalid UTF-8 reached BPE");
        int32_t symbol =
            character_symbol(&model->symbols, word + offset, length, offset + length == size);
        /* An unknown character keeps where it is in the word (as -(offset + 1)): merges never
         * touch it, and byte fallback spells it from there. */
        if (symbol < 0) {
            symbol = -(int32_t)offset - 1;
            unknown = 1;
        }
        ATTN_TRY(id_buffer_push(out, symbol));
        offset += length;
    }
    int32_t *symbols = out->data + base;
    int64_t count = out->size - base;
    /* Apply the earliest-learned merge present, to all its occurrences, until none applies. */
    for (;;) {
        int32_t best = -1;
        for (int64_t i = 0; i + 1 < count; i++) {
            if (symbols[i] < 0 || symbols[i + 1] < 0)
                continue;
            int32_t rank = find_rank(model, symbols[i], symbols[i + 1]);
            if (rank >= 0 && (best < 0 || rank < best))
                best = rank;
        }
        if (best < 0)
            break;
        int32_t left = model->merge_left[best], right = model->merge_right[best];
        int64_t kept = 0;
        for (int64_t i = 0; i < count; i++) {
            if (i + 1 < count && symbols[i] == left && symbols[i + 1] == right) {
                symbols[kept++] = model->merge_result[best];
                i++;
            } else {
                symbols[kept++] = symbols[i];
            }
        }
        count = kept;
    }
    out->size = base + count;
    int cut = 0; /* a symbol the vocabulary left out (min_count, max_vocab) */
    for (int64_t i = 0; i < count && !cut; i++)
        cut = symbols[i] >= 0 && model->symbol_to_vocab[symbols[i]] == ATTN_UNK_ID;
    if (fallback == NULL || !fallback->enabled || (!unknown && !cut)) {
        for (int64_t i = 0; i < count; i++)
            symbols[i] = symbols[i] < 0 ? ATTN_UNK_ID : model->symbol_to_vocab[symbols[i]];
        return ATTN_OK;
    }
    /* Spelled in bytes, a symbol takes several ids: rebuild the word's ids from a copy. */
    int32_t *merged = malloc((size_t)count * sizeof *merged + 1);
    if (merged == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "bpe_encode_word: out of memory");
    memcpy(merged, symbols, (size_t)count * sizeof *merged);
    out->size = base;
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < count && status == ATTN_OK; i++) {
        const int32_t symbol = merged[i];
        if (symbol < 0) {
            const size_t at = (size_t)(-(symbol + 1));
            const size_t length = utf8_sequence_length((const unsigned char *)word + at, size - at);
            status = push_bytes(fallback, word + at, length, at + length == size, out);
        } else if (model->symbol_to_vocab[symbol] == ATTN_UNK_ID) {
            const char *text = strtab_string(&model->symbols, symbol);
            const size_t length = attn_token_text_length(text);
            status = push_bytes(fallback, text, length, length != strlen(text), out);
        } else {
            status = id_buffer_push(out, model->symbol_to_vocab[symbol]);
        }
    }
    free(merged);
    return status;
}

/* ---- learning --------------------------------------------------------------------------- */

typedef struct pair_record {
    int32_t left, right;
    int64_t count;
    int64_t count_before; /* the count when the current merge first touched it */
    int64_t touched_step; /* the merge that last touched it, -1 for none */
    int32_t words;        /* first node of the list of words that may hold it, -1 for none */
} pair_record;

/* Lists of words per pair share one pool. A word may be listed for a pair it no longer holds
 * (merging is checked when the list is walked) or listed twice (walking skips words the
 * current merge has already seen). */
typedef struct word_node {
    int32_t word;
    int32_t next;
} word_node;

typedef struct heap_entry {
    int64_t count;
    int32_t pair;
} heap_entry;

typedef struct learner {
    bpe_model *model;
    int64_t *symbol_count; /* per symbol: occurrences when it was made */
    int64_t symbol_count_capacity;

    int32_t word_count;
    int64_t *word_freq;
    int64_t *word_start; /* into symbol_pool */
    int32_t *word_length;
    int64_t *word_seen_step;
    int32_t *symbol_pool;

    pair_record *pairs;
    int64_t pair_count, pair_capacity;
    uint64_t *pair_keys;
    int32_t *pair_slots; /* pair index + 1, 0 for empty */
    size_t pair_slot_count;

    word_node *nodes;
    int64_t node_count, node_capacity;
    heap_entry *heap;
    int64_t heap_size, heap_capacity;
    int32_t *touched;
    int64_t touched_count, touched_capacity;
    int64_t step;
} learner;

static void learner_free(learner *l)
{
    free(l->symbol_count);
    free(l->word_freq);
    free(l->word_start);
    free(l->word_length);
    free(l->word_seen_step);
    free(l->symbol_pool);
    free(l->pairs);
    free(l->pair_keys);
    free(l->pair_slots);
    free(l->nodes);
    free(l->heap);
    free(l->touched);
}

static attn_status add_symbol_count(learner *l, int32_t symbol, int64_t count)
{
    if (symbol >= l->symbol_count_capacity) {
        int64_t old = l->symbol_count_capacity;
        ATTN_TRY(grow_array((void **)&l->symbol_count, &l->symbol_count_capacity,
                            (int64_t)symbol + 1, sizeof *l->symbol_count));
        memset(l->symbol_count + old, 0,
               (size_t)(l->symbol_count_capacity - old) * sizeof *l->symbol_count);
    }
    l->symbol_count[symbol] += count;
    return ATTN_OK;
}

static attn_status grow_pair_slots(learner *l)
{
    size_t slot_count = l->pair_slot_count == 0 ? 1024 : l->pair_slot_count * 2;
    uint64_t *keys = calloc(slot_count, sizeof *keys);
    int32_t *slots = calloc(slot_count, sizeof *slots);
    if (keys == NULL || slots == NULL) {
        free(keys);
        free(slots);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu BPE pair slots",
                         slot_count);
    }
    for (int64_t p = 0; p < l->pair_count; p++) {
        uint64_t key = pair_key(l->pairs[p].left, l->pairs[p].right);
        size_t slot = key_slot(key, slot_count);
        while (slots[slot] != 0)
            slot = (slot + 1) & (slot_count - 1);
        keys[slot] = key;
        slots[slot] = (int32_t)p + 1;
    }
    free(l->pair_keys);
    free(l->pair_slots);
    l->pair_keys = keys;
    l->pair_slots = slots;
    l->pair_slot_count = slot_count;
    return ATTN_OK;
}

/* Index of pair (left, right), created with count 0 if new. */
static attn_status find_or_add_pair(learner *l, int32_t left, int32_t right, int32_t *index)
{
    if ((size_t)(l->pair_count + 1) * 2 > l->pair_slot_count)
        ATTN_TRY(grow_pair_slots(l));
    uint64_t key = pair_key(left, right);
    size_t slot = key_slot(key, l->pair_slot_count);
    while (l->pair_slots[slot] != 0) {
        if (l->pair_keys[slot] == key) {
            *index = l->pair_slots[slot] - 1;
            return ATTN_OK;
        }
        slot = (slot + 1) & (l->pair_slot_count - 1);
    }
    if (l->pair_count >= INT32_MAX - 1)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "too many distinct BPE pairs");
    ATTN_TRY(
        grow_array((void **)&l->pairs, &l->pair_capacity, l->pair_count + 1, sizeof *l->pairs));
    int32_t p = (int32_t)l->pair_count++;
    l->pairs[p] = (pair_record){left, right, 0, 0, -1, -1};
    l->pair_keys[slot] = key;
    l->pair_slots[slot] = p + 1;
    *index = p;
    return ATTN_OK;
}

/* Adds word to the pair's list unless it heads the list already. */
static attn_status list_word(learner *l, int32_t pair, int32_t word)
{
    int32_t head = l->pairs[pair].words;
    if (head >= 0 && l->nodes[head].word == word)
        return ATTN_OK;
    if (l->node_count >= INT32_MAX - 1)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "BPE learning: too many word-list entries");
    ATTN_TRY(
        grow_array((void **)&l->nodes, &l->node_capacity, l->node_count + 1, sizeof *l->nodes));
    int32_t node = (int32_t)l->node_count++;
    l->nodes[node] = (word_node){word, head};
    l->pairs[pair].words = node;
    return ATTN_OK;
}

/* Changes a pair's count by delta, remembering its count before the current merge. */
static attn_status change_pair(learner *l, int32_t left, int32_t right, int64_t delta,
                               int32_t *index)
{
    int32_t p;
    ATTN_TRY(find_or_add_pair(l, left, right, &p));
    pair_record *record = &l->pairs[p];
    if (record->touched_step != l->step) {
        record->touched_step = l->step;
        record->count_before = record->count;
        ATTN_TRY(grow_array((void **)&l->touched, &l->touched_capacity, l->touched_count + 1,
                            sizeof *l->touched));
        l->touched[l->touched_count++] = p;
    }
    l->pairs[p].count += delta;
    if (index != NULL)
        *index = p;
    return ATTN_OK;
}

/* Heap order: higher count first; equal counts, the bytewise smaller (left, right) first. */
static int heap_before(const learner *l, heap_entry a, heap_entry b)
{
    if (a.count != b.count)
        return a.count > b.count;
    const strtab *symbols = &l->model->symbols;
    const pair_record *pa = &l->pairs[a.pair], *pb = &l->pairs[b.pair];
    if (pa->left != pb->left)
        return strcmp(strtab_string(symbols, pa->left), strtab_string(symbols, pb->left)) < 0;
    if (pa->right != pb->right)
        return strcmp(strtab_string(symbols, pa->right), strtab_string(symbols, pb->right)) < 0;
    return 0;
}

static void sift_down(learner *l, int64_t i)
{
    heap_entry *heap = l->heap;
    for (;;) {
        int64_t best = i, left = 2 * i + 1, right = left + 1;
        if (left < l->heap_size && heap_before(l, heap[left], heap[best]))
            best = left;
        if (right < l->heap_size && heap_before(l, heap[right], heap[best]))
            best = right;
        if (best == i)
            return;
        heap_entry t = heap[i];
        heap[i] = heap[best];
        heap[best] = t;
        i = best;
    }
}

static attn_status heap_push(learner *l, int32_t pair)
{
    ATTN_TRY(grow_array((void **)&l->heap, &l->heap_capacity, l->heap_size + 1, sizeof *l->heap));
    int64_t i = l->heap_size++;
    l->heap[i] = (heap_entry){l->pairs[pair].count, pair};
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!heap_before(l, l->heap[i], l->heap[parent]))
            break;
        heap_entry t = l->heap[i];
        l->heap[i] = l->heap[parent];
        l->heap[parent] = t;
        i = parent;
    }
    return ATTN_OK;
}

static void heap_pop(learner *l)
{
    l->heap[0] = l->heap[--l->heap_size];
    sift_down(l, 0);
}

/* The pair to merge next, or -1: entries whose count changed since they were pushed are
 * stale (a newer entry carries the current count) and are dropped. */
static int32_t best_pair(learner *l)
{
    while (l->heap_size > 0) {
        heap_entry top = l->heap[0];
        if (top.count == l->pairs[top.pair].count && top.count >= MIN_PAIR_COUNT)
            return top.pair;
        heap_pop(l);
    }
    return -1;
}

/* Counts the whitespace-separated words of the lines. */
static attn_status count_words(const char *const *lines, int64_t n_lines, strtab *words,
                               int64_t **counts, int64_t *capacity)
{
    for (int64_t i = 0; i < n_lines; i++) {
        const char *text = lines[i];
        size_t pos = 0;
        for (;;) {
            while (text[pos] != '\0' && is_ascii_space(text[pos]))
                pos++;
            if (text[pos] == '\0')
                break;
            size_t start = pos;
            while (text[pos] != '\0' && !is_ascii_space(text[pos]))
                pos++;
            int32_t id;
            int added;
            ATTN_TRY(strtab_intern(words, text + start, pos - start, &id, &added));
            if (added) {
                ATTN_TRY(grow_array((void **)counts, capacity, (int64_t)id + 1, sizeof **counts));
                (*counts)[id] = 0;
            }
            (*counts)[id]++;
        }
    }
    return ATTN_OK;
}

/* Splits every distinct word into character symbols and counts the initial pairs. */
static attn_status load_words(learner *l, const strtab *words, const int64_t *counts)
{
    int32_t n = words->count;
    l->word_count = n;
    size_t count_bytes = ((size_t)n + 1) * sizeof(int64_t);
    l->word_freq = malloc(count_bytes);
    l->word_start = malloc(count_bytes);
    l->word_seen_step = malloc(count_bytes);
    l->word_length = malloc(((size_t)n + 1) * sizeof(int32_t));
    /* A word has at most as many characters as bytes. */
    l->symbol_pool = malloc((words->pool_size + 1) * sizeof(int32_t));
    if (l->word_freq == NULL || l->word_start == NULL || l->word_seen_step == NULL ||
        l->word_length == NULL || l->symbol_pool == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %d BPE training words", n);

    strtab *symbols = &l->model->symbols;
    int64_t pool_used = 0;
    for (int32_t w = 0; w < n; w++) {
        const char *word = strtab_string(words, w);
        size_t size = strtab_length(words, w);
        l->word_freq[w] = counts[w];
        l->word_start[w] = pool_used;
        l->word_seen_step[w] = -1;
        int32_t length = 0;
        size_t offset = 0;
        while (offset < size) {
            size_t char_size =
                utf8_sequence_length((const unsigned char *)word + offset, size - offset);
            if (char_size == 0)
                return attn_fail(ATTN_ERR_INTERNAL, "BPE learning met invalid UTF-8");
            int32_t symbol;
            if (offset + char_size == size)
                ATTN_TRY(intern_concat(symbols, word + offset, char_size, END_OF_WORD,
                                       END_OF_WORD_SIZE, &symbol));
            else
                ATTN_TRY(strtab_intern(symbols, word + offset, char_size, &symbol, NULL));
            ATTN_TRY(add_symbol_count(l, symbol, counts[w]));
            l->symbol_pool[pool_used + length++] = symbol;
            offset += char_size;
        }
        l->word_length[w] = length;
        pool_used += length;
        const int32_t *s = l->symbol_pool + l->word_start[w];
        for (int32_t i = 0; i + 1 < length; i++) {
            int32_t p;
            ATTN_TRY(find_or_add_pair(l, s[i], s[i + 1], &p));
            l->pairs[p].count += counts[w];
            ATTN_TRY(list_word(l, p, w));
        }
    }
    for (int32_t p = 0; p < l->pair_count; p++)
        if (l->pairs[p].count >= MIN_PAIR_COUNT)
            ATTN_TRY(heap_push(l, p));
    return ATTN_OK;
}

/* Replaces (left, right) by merged in one word, moving the word's pair counts along. */
static attn_status merge_in_word(learner *l, int32_t w, int32_t left, int32_t right, int32_t merged)
{
    int32_t *s = l->symbol_pool + l->word_start[w];
    int32_t length = l->word_length[w];
    int64_t freq = l->word_freq[w];
    int found = 0;
    for (int32_t i = 0; i + 1 < length && !found; i++)
        found = s[i] == left && s[i + 1] == right;
    if (!found)
        return ATTN_OK;
    /* Words are short: dropping all their pairs and adding the new ones back is simpler than
     * patching neighbours, and pairs whose count comes back unchanged are not re-queued. */
    for (int32_t i = 0; i + 1 < length; i++)
        ATTN_TRY(change_pair(l, s[i], s[i + 1], -freq, NULL));
    int32_t kept = 0;
    for (int32_t i = 0; i < length; i++) {
        if (i + 1 < length && s[i] == left && s[i + 1] == right) {
            s[kept++] = merged;
            i++;
        } else {
            s[kept++] = s[i];
        }
    }
    l->word_length[w] = kept;
    for (int32_t i = 0; i + 1 < kept; i++) {
        int32_t p;
        ATTN_TRY(change_pair(l, s[i], s[i + 1], freq, &p));
        if (s[i] == merged || s[i + 1] == merged)
            ATTN_TRY(list_word(l, p, w));
    }
    return ATTN_OK;
}

static attn_status merge_step(learner *l, int32_t pair)
{
    int32_t left = l->pairs[pair].left, right = l->pairs[pair].right;
    int64_t count = l->pairs[pair].count;
    strtab *symbols = &l->model->symbols;
    int32_t merged;
    ATTN_TRY(intern_concat(symbols, strtab_string(symbols, left), strtab_length(symbols, left),
                           strtab_string(symbols, right), strtab_length(symbols, right), &merged));
    ATTN_TRY(add_symbol_count(l, merged, count));
    ATTN_TRY(record_merge(l->model, left, right, merged));

    l->touched_count = 0;
    for (int32_t node = l->pairs[pair].words; node >= 0; node = l->nodes[node].next) {
        int32_t w = l->nodes[node].word;
        if (l->word_seen_step[w] == l->step)
            continue;
        l->word_seen_step[w] = l->step;
        ATTN_TRY(merge_in_word(l, w, left, right, merged));
    }
    for (int64_t i = 0; i < l->touched_count; i++) {
        int32_t p = l->touched[i];
        if (l->pairs[p].count != l->pairs[p].count_before && l->pairs[p].count >= MIN_PAIR_COUNT)
            ATTN_TRY(heap_push(l, p));
    }
    return ATTN_OK;
}

static attn_status learn(learner *l, const char *const *lines, int64_t n_lines, int64_t max_merges)
{
    strtab words = {0};
    int64_t *counts = NULL, counts_capacity = 0;
    attn_status status = count_words(lines, n_lines, &words, &counts, &counts_capacity);
    if (status == ATTN_OK)
        status = load_words(l, &words, counts);
    strtab_free(&words);
    free(counts);
    ATTN_TRY(status);
    for (l->step = 0; l->step < max_merges; l->step++) {
        int32_t pair = best_pair(l);
        if (pair < 0)
            break;
        heap_pop(l);
        ATTN_TRY(merge_step(l, pair));
    }
    return ATTN_OK;
}

attn_status bpe_learn(const char *const *lines, int64_t n_lines, int64_t max_merges,
                      int64_t min_count, int64_t max_vocab, bpe_model *model, attn_vocab **vocab)
{
    memset(model, 0, sizeof *model);
    *vocab = NULL;
    learner l = {0};
    l.model = model;
    attn_status status = learn(&l, lines, n_lines, max_merges);
    /* Every symbol got its count slot when it was made. */
    if (status == ATTN_OK)
        status = vocab_from_counts(&model->symbols, l.symbol_count, min_count, max_vocab, vocab);
    if (status == ATTN_OK)
        status = bpe_link_vocab(model, *vocab);
    learner_free(&l);
    if (status != ATTN_OK) {
        attn_vocab_destroy(*vocab);
        *vocab = NULL;
        bpe_model_free(model);
    }
    return status;
}
