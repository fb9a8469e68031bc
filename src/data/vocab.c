/* Vocabularies: the specials, then tokens by count (descending) and bytes; a hash table for
 * string -> id, the string pool for id -> string; JSON for checkpoints. */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const special_tokens[ATTN_NUM_SPECIAL_IDS] = {"<pad>", "<s>", "</s>",
                                                                  "<unk>"};

static int is_special_spelling(const char *bytes, size_t size)
{
    for (int i = 0; i < ATTN_NUM_SPECIAL_IDS; i++)
        if (strlen(special_tokens[i]) == size && memcmp(special_tokens[i], bytes, size) == 0)
            return 1;
    return 0;
}

typedef struct ranked_token {
    const char *bytes;
    size_t size;
    int64_t count;
    int32_t id;
} ranked_token;

static int bytes_compare(const char *a, size_t a_size, const char *b, size_t b_size)
{
    size_t common = a_size < b_size ? a_size : b_size;
    int c = memcmp(a, b, common);
    if (c != 0)
        return c;
    return (a_size > b_size) - (a_size < b_size);
}

/* Count descending, then bytes ascending: a total order, so the vocabulary does not depend
 * on the order tokens were seen or hashed. */
static int compare_ranked(const void *pa, const void *pb)
{
    const ranked_token *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return bytes_compare(a->bytes, a->size, b->bytes, b->size);
}

attn_status new_vocab_with_specials(attn_vocab **out)
{
    *out = NULL;
    attn_vocab *vocab = calloc(1, sizeof *vocab);
    if (vocab == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for a vocabulary");
    for (int i = 0; i < ATTN_NUM_SPECIAL_IDS; i++) {
        int32_t id;
        attn_status status =
            strtab_intern(&vocab->tokens, special_tokens[i], strlen(special_tokens[i]), &id, NULL);
        if (status != ATTN_OK) {
            attn_vocab_destroy(vocab);
            return status;
        }
    }
    *out = vocab;
    return ATTN_OK;
}

attn_status vocab_from_counts(const strtab *tokens, const int64_t *counts, int64_t min_count,
                              int64_t max_size, attn_vocab **out)
{
    *out = NULL;
    ranked_token *ranked = malloc(((size_t)tokens->count + 1) * sizeof *ranked);
    if (ranked == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory ranking %d tokens",
                         (int)tokens->count);
    int64_t kept = 0;
    for (int32_t id = 0; id < tokens->count; id++) {
        const char *bytes = strtab_string(tokens, id);
        size_t size = strtab_length(tokens, id);
        if (size == 0 || counts[id] < min_count || counts[id] <= 0 ||
            is_special_spelling(bytes, size))
            continue;
        ranked[kept++] = (ranked_token){bytes, size, counts[id], id};
    }
    qsort(ranked, (size_t)kept, sizeof *ranked, compare_ranked);
    if (max_size > 0 && kept > max_size - ATTN_NUM_SPECIAL_IDS)
        kept = max_size - ATTN_NUM_SPECIAL_IDS;

    attn_vocab *vocab = NULL;
    attn_status status = new_vocab_with_specials(&vocab);
    for (int64_t i = 0; status == ATTN_OK && i < kept; i++) {
        int32_t id;
        status = strtab_intern(&vocab->tokens, ranked[i].bytes, ranked[i].size, &id, NULL);
    }
    free(ranked);
    if (status != ATTN_OK) {
        attn_vocab_destroy(vocab);
        return status;
    }
    *out = vocab;
    return ATTN_OK;
}

attn_status attn_vocab_build(const char *const *tokens, const int64_t *counts, int64_t n,
                             int64_t min_count, int64_t max_size, attn_vocab **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(n >= 0, "attn_vocab_build: n must not be negative, got %lld", (long long)n);
    ATTN_CHECK_ARG(n < INT32_MAX - ATTN_NUM_SPECIAL_IDS,
                   "attn_vocab_build: n = %lld tokens do not fit int32 ids", (long long)n);
    ATTN_CHECK_ARG(max_size == 0 || max_size >= ATTN_NUM_SPECIAL_IDS,
                   "attn_vocab_build: max_size must be 0 (no limit) or at least %d, got %lld",
                   ATTN_NUM_SPECIAL_IDS, (long long)max_size);
    if (n > 0) {
        ATTN_CHECK_NOT_NULL(tokens);
        ATTN_CHECK_NOT_NULL(counts);
    }
    strtab table = {0};
    int64_t *table_counts = malloc(((size_t)n + 1) * sizeof *table_counts);
    if (table_counts == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_vocab_build: out of memory");
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++) {
        if (tokens[i] == NULL) {
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_vocab_build: tokens[%lld] is NULL",
                               (long long)i);
            break;
        }
        size_t size = strlen(tokens[i]);
        if (size == 0 || !attn_utf8_valid(tokens[i], size)) {
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                               "attn_vocab_build: tokens[%lld] is %s", (long long)i,
                               size == 0 ? "empty" : "not valid UTF-8");
            break;
        }
        if (counts[i] < 0) {
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                               "attn_vocab_build: counts[%lld] = %lld is negative", (long long)i,
                               (long long)counts[i]);
            break;
        }
        int32_t id;
        int added;
        status = strtab_intern(&table, tokens[i], size, &id, &added);
        if (status == ATTN_OK && !added)
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                               "attn_vocab_build: token '%s' appears twice (tokens[%lld])",
                               tokens[i], (long long)i);
        if (status == ATTN_OK)
            table_counts[id] = counts[i];
    }
    if (status == ATTN_OK)
        status = vocab_from_counts(&table, table_counts, min_count, max_size, out);
    strtab_free(&table);
    free(table_counts);
    return status;
}

void attn_vocab_destroy(attn_vocab *vocab)
{
    if (vocab == NULL)
        return;
    strtab_free(&vocab->tokens);
    free(vocab);
}

int64_t attn_vocab_size(const attn_vocab *vocab)
{
    return vocab == NULL ? 0 : vocab->tokens.count;
}

int32_t vocab_find(const attn_vocab *vocab, const char *bytes, size_t size)
{
    return strtab_find(&vocab->tokens, bytes, size);
}

int32_t attn_vocab_id(const attn_vocab *vocab, const char *token)
{
    if (vocab == NULL || token == NULL)
        return -1;
    return vocab_find(vocab, token, strlen(token));
}

const char *attn_vocab_token(const attn_vocab *vocab, int32_t id)
{
    if (vocab == NULL || id < 0 || id >= vocab->tokens.count)
        return NULL;
    return strtab_string(&vocab->tokens, id);
}

/* ---- JSON ------------------------------------------------------------------------------- */

attn_status vocab_to_cjson(const attn_vocab *vocab, cJSON **out)
{
    *out = NULL;
    cJSON *object = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(object, "tokens");
    if (object == NULL || list == NULL) {
        cJSON_Delete(object);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory writing a vocabulary as JSON");
    }
    for (int32_t id = 0; id < vocab->tokens.count; id++) {
        cJSON *token = cJSON_CreateString(strtab_string(&vocab->tokens, id));
        if (token == NULL || !cJSON_AddItemToArray(list, token)) {
            cJSON_Delete(token);
            cJSON_Delete(object);
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory writing a vocabulary as JSON");
        }
    }
    *out = object;
    return ATTN_OK;
}

attn_status vocab_from_cjson(const char *fn, const cJSON *json, attn_vocab **out)
{
    *out = NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "tokens");
    if (!cJSON_IsArray(list))
        return attn_fail(ATTN_ERR_FORMAT, "%s: vocabulary: expected an object with a \"tokens\" "
                         "array", fn);
    int count = cJSON_GetArraySize(list);
    if (count < ATTN_NUM_SPECIAL_IDS)
        return attn_fail(ATTN_ERR_FORMAT, "%s: vocabulary: %d tokens, fewer than the %d specials",
                         fn, count, ATTN_NUM_SPECIAL_IDS);
    attn_vocab *vocab = calloc(1, sizeof *vocab);
    if (vocab == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a vocabulary", fn);
    attn_status status = ATTN_OK;
    int index = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        const char *token = cJSON_GetStringValue(item);
        size_t size = token == NULL ? 0 : strlen(token);
        if (token == NULL || size == 0 || !attn_utf8_valid(token, size)) {
            status = attn_fail(ATTN_ERR_FORMAT, "%s: vocabulary: token %d is %s", fn, index,
                               token == NULL ? "not a string"
                               : size == 0   ? "empty"
                                             : "not valid UTF-8");
            break;
        }
        if (index < ATTN_NUM_SPECIAL_IDS && strcmp(token, special_tokens[index]) != 0) {
            status = attn_fail(ATTN_ERR_FORMAT, "%s: vocabulary: id %d must be \"%s\", found \"%s\"",
                               fn, index, special_tokens[index], token);
            break;
        }
        int32_t id;
        int added;
        status = strtab_intern(&vocab->tokens, token, size, &id, &added);
        if (status != ATTN_OK)
            break;
        if (!added) {
            status = attn_fail(ATTN_ERR_FORMAT, "%s: vocabulary: token \"%s\" appears twice", fn,
                               token);
            break;
        }
        index++;
    }
    if (status != ATTN_OK) {
        attn_vocab_destroy(vocab);
        return status;
    }
    *out = vocab;
    return ATTN_OK;
}

attn_status attn_vocab_to_json(const attn_vocab *vocab, char **json)
{
    ATTN_CHECK_NOT_NULL(json);
    *json = NULL;
    ATTN_CHECK_NOT_NULL(vocab);
    cJSON *object = NULL;
    ATTN_TRY(vocab_to_cjson(vocab, &object));
    *json = cJSON_PrintUnformatted(object);
    cJSON_Delete(object);
    if (*json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_vocab_to_json: out of memory");
    return ATTN_OK;
}

attn_status json_parse(const char *fn, const char *json, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(json, &end, 1);
    if (*out == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: not valid JSON (at byte %lld)", fn,
                         (long long)(end != NULL && end >= json ? end - json : 0));
    return ATTN_OK;
}

attn_status attn_vocab_from_json(const char *json, attn_vocab **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(json);
    cJSON *parsed;
    ATTN_TRY(json_parse("attn_vocab_from_json", json, &parsed));
    attn_status status = vocab_from_cjson("attn_vocab_from_json", parsed, out);
    cJSON_Delete(parsed);
    return status;
}
