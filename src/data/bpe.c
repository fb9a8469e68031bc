/* attn's own byte-pair encoding of earlier versions (Sennrich et al. 2016, as in subword-nmt),
 * kept to read the model files it made: applying their merges to words. SentencePiece's BPE
 * (tokenizer_spm.c) replaced its learner: on the Bible it scored 5.8 BLEU more, because it never
 * merges letters with the punctuation untokenized text attaches to them (docs/results.md). */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- the merges ------------------------------------------------------------------------ */

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

/* Appends merge (left, right) -> result. A pair listed twice keeps its first rank, as
 * subword-nmt does (its learning could meet a pair again when a later merge rebuilt a symbol). */
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
