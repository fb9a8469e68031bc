/* Parallel corpora: sentence pairs from a TSV file, two aligned files or memory; their ids. */
#include "data/data_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct attn_corpus {
    int64_t count;
    char **source; /* [count] into the storage below */
    char **target;
    int64_t *line; /* [count] 1-based line of each pair in its file(s) */
    /* Where pairs came from, for messages: a TSV names one file, aligned files two, pairs
     * from memory none (NULL). */
    char *source_name, *target_name;
    attn_lines source_lines, target_lines;
    char *strings; /* attn_corpus_from_strings' copy */

    int encoded;
    /* Labelled lines (attn_corpus_read_labelled, attn_corpus_encode_labelled): the target
     * strings are labels, and each pair's target ids are its one class id. */
    int labelled;
    /* Plain text (attn_corpus_read_text, attn_corpus_encode_text): each target is the empty
     * string at its line's end and has no ids; vocab is the encoding tokenizer's size. */
    int text;
    int64_t vocab;
    int32_t *source_ids, *target_ids;
    int64_t *source_start, *target_start; /* [count + 1] offsets into the id arrays */
};

/* "file:line" (or "pair N") of pair i, for messages. */
static const char *pair_place(const attn_corpus *corpus, int64_t i, int target, char *buf,
                              size_t size)
{
    const char *name = target ? corpus->target_name : corpus->source_name;
    if (name == NULL)
        snprintf(buf, size, "pair %lld", (long long)(i + 1));
    else
        snprintf(buf, size, "%s:%lld", name, (long long)corpus->line[i]);
    return buf;
}

static attn_status new_corpus(const char *fn, int64_t count, attn_corpus **out)
{
    *out = NULL;
    attn_corpus *corpus = calloc(1, sizeof *corpus);
    size_t pointers, lines;
    if (corpus == NULL || !attn_mul_size((size_t)count, sizeof(char *), &pointers) ||
        !attn_mul_size((size_t)count, sizeof(int64_t), &lines)) {
        free(corpus);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                         (long long)count);
    }
    corpus->count = count;
    corpus->source = malloc(pointers + 1);
    corpus->target = malloc(pointers + 1);
    corpus->line = malloc(lines + 1);
    if (corpus->source == NULL || corpus->target == NULL || corpus->line == NULL) {
        attn_corpus_destroy(corpus);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                         (long long)count);
    }
    *out = corpus;
    return ATTN_OK;
}

static char *copy_string(const char *s)
{
    size_t size = strlen(s) + 1;
    char *copy = malloc(size);
    if (copy != NULL)
        memcpy(copy, s, size);
    return copy;
}

static attn_status check_no_empty_line(const char *fn, const char *path, const attn_lines *lines);

static attn_status set_names(const char *fn, attn_corpus *corpus, const char *source,
                             const char *target)
{
    corpus->source_name = copy_string(source);
    corpus->target_name = copy_string(target);
    if (corpus->source_name == NULL || corpus->target_name == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    return ATTN_OK;
}

/* label<TAB>text: the text (which may hold more TABs) becomes the source, the label the
 * target. */
static attn_status split_labelled(const char *fn, const char *path, attn_corpus *corpus)
{
    const attn_lines *lines = &corpus->source_lines;
    for (int64_t i = 0; i < lines->count; i++) {
        char *line = lines->line[i];
        char *tab = strchr(line, '\t');
        if (tab == NULL)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s:%lld: expected label<TAB>text, found no TAB (each line is a "
                             "label, a TAB, then the text to classify)",
                             fn, path, (long long)(i + 1));
        if (tab == line)
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty label before the TAB", fn, path,
                             (long long)(i + 1));
        if (tab[1] == '\0')
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty text after the label", fn, path,
                             (long long)(i + 1));
        *tab = '\0';
        corpus->source[i] = tab + 1;
        corpus->target[i] = line;
        corpus->line[i] = i + 1;
    }
    corpus->labelled = 1;
    return ATTN_OK;
}

static attn_status split_tsv(const char *fn, const char *path, attn_corpus *corpus)
{
    const attn_lines *lines = &corpus->source_lines;
    for (int64_t i = 0; i < lines->count; i++) {
        char *text = lines->line[i];
        char *tab = strchr(text, '\t');
        int64_t tabs = 0;
        for (char *c = tab; c != NULL; c = strchr(c + 1, '\t'))
            tabs++;
        if (tabs != 1)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s:%lld: expected source<TAB>target, found %lld TABs", fn, path,
                             (long long)(i + 1), (long long)tabs);
        if (tab == text || tab[1] == '\0')
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty %s", fn, path, (long long)(i + 1),
                             tab == text ? "source" : "target");
        *tab = '\0';
        corpus->source[i] = text;
        corpus->target[i] = tab + 1;
        corpus->line[i] = i + 1;
    }
    return ATTN_OK;
}

static attn_status read_tsv(const char *fn, const char *path, int labelled, attn_corpus **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    attn_lines lines;
    ATTN_TRY(lines_read_for(fn, path, &lines));
    attn_corpus *corpus;
    attn_status status = new_corpus(fn, lines.count, &corpus);
    if (status != ATTN_OK) {
        attn_lines_free(&lines);
        return status;
    }
    corpus->source_lines = lines;
    status = set_names(fn, corpus, path, path);
    if (status == ATTN_OK)
        status = labelled ? split_labelled(fn, path, corpus) : split_tsv(fn, path, corpus);
    if (status != ATTN_OK) {
        attn_corpus_destroy(corpus);
        return status;
    }
    *out = corpus;
    return ATTN_OK;
}

attn_status attn_corpus_read_tsv(const char *path, attn_corpus **out)
{
    return read_tsv("attn_corpus_read_tsv", path, 0, out);
}

attn_status attn_corpus_read_labelled(const char *path, attn_corpus **out)
{
    return read_tsv("attn_corpus_read_labelled", path, 1, out);
}

int attn_corpus_is_labelled(const attn_corpus *corpus)
{
    return corpus != NULL && corpus->labelled;
}

attn_status attn_corpus_read_text(const char *path, attn_corpus **out)
{
    static const char fn[] = "attn_corpus_read_text";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    attn_lines lines;
    ATTN_TRY(lines_read_for(fn, path, &lines));
    attn_corpus *corpus = NULL;
    attn_status status = check_no_empty_line(fn, path, &lines);
    if (status == ATTN_OK)
        status = new_corpus(fn, lines.count, &corpus);
    if (status != ATTN_OK) {
        attn_lines_free(&lines);
        return status;
    }
    corpus->source_lines = lines;
    for (int64_t i = 0; i < lines.count; i++) {
        corpus->source[i] = lines.line[i];
        corpus->target[i] = lines.line[i] + strlen(lines.line[i]);
        corpus->line[i] = i + 1;
    }
    corpus->text = 1;
    status = set_names(fn, corpus, path, path);
    if (status != ATTN_OK) {
        attn_corpus_destroy(corpus);
        return status;
    }
    *out = corpus;
    return ATTN_OK;
}

int attn_corpus_is_text(const attn_corpus *corpus)
{
    return corpus != NULL && corpus->text;
}

int64_t corpus_text_vocab(const attn_corpus *corpus)
{
    return corpus->vocab;
}

static attn_status check_no_empty_line(const char *fn, const char *path, const attn_lines *lines)
{
    for (int64_t i = 0; i < lines->count; i++)
        if (lines->line[i][0] == '\0')
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty line", fn, path,
                             (long long)(i + 1));
    return ATTN_OK;
}

attn_status attn_corpus_read_files(const char *source_path, const char *target_path,
                                   attn_corpus **out)
{
    static const char fn[] = "attn_corpus_read_files";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(source_path);
    ATTN_CHECK_NOT_NULL(target_path);
    attn_lines source, target;
    ATTN_TRY(lines_read_for(fn, source_path, &source));
    attn_status status = lines_read_for(fn, target_path, &target);
    if (status != ATTN_OK) {
        attn_lines_free(&source);
        return status;
    }
    if (source.count != target.count)
        status = attn_fail(
            ATTN_ERR_FORMAT, "%s: the files are not aligned: '%s' has %lld lines but '%s' has %lld",
            fn, source_path, (long long)source.count, target_path, (long long)target.count);
    if (status == ATTN_OK)
        status = check_no_empty_line(fn, source_path, &source);
    if (status == ATTN_OK)
        status = check_no_empty_line(fn, target_path, &target);
    attn_corpus *corpus = NULL;
    if (status == ATTN_OK)
        status = new_corpus(fn, source.count, &corpus);
    if (status != ATTN_OK) {
        attn_lines_free(&source);
        attn_lines_free(&target);
        return status;
    }
    corpus->source_lines = source;
    corpus->target_lines = target;
    for (int64_t i = 0; i < source.count; i++) {
        corpus->source[i] = source.line[i];
        corpus->target[i] = target.line[i];
        corpus->line[i] = i + 1;
    }
    status = set_names(fn, corpus, source_path, target_path);
    if (status != ATTN_OK) {
        attn_corpus_destroy(corpus);
        return status;
    }
    *out = corpus;
    return ATTN_OK;
}

static attn_status check_string(const char *fn, const char *side, int64_t i, const char *text)
{
    ATTN_CHECK_ARG(text != NULL, "%s: %s[%lld] is NULL", fn, side, (long long)i);
    size_t size = strlen(text);
    if (size == 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: pair %lld: empty %s", fn, (long long)(i + 1), side);
    size_t bad = utf8_first_invalid(text, size);
    if (bad != size)
        return attn_fail(ATTN_ERR_FORMAT, "%s: pair %lld: %s is not valid UTF-8 (byte %zu)", fn,
                         (long long)(i + 1), side, bad + 1);
    return ATTN_OK;
}

attn_status attn_corpus_from_strings(const char *const *sources, const char *const *targets,
                                     int64_t n, attn_corpus **out)
{
    static const char fn[] = "attn_corpus_from_strings";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(n > 0, "%s: need at least one pair, got n = %lld", fn, (long long)n);
    ATTN_CHECK_NOT_NULL(sources);
    ATTN_CHECK_NOT_NULL(targets);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        ATTN_TRY(check_string(fn, "source", i, sources[i]));
        ATTN_TRY(check_string(fn, "target", i, targets[i]));
        size_t size = strlen(sources[i]) + strlen(targets[i]) + 2;
        ATTN_CHECK_ARG(total <= SIZE_MAX - size, "%s: the strings are too large", fn);
        total += size;
    }
    attn_corpus *corpus;
    ATTN_TRY(new_corpus(fn, n, &corpus));
    corpus->strings = malloc(total);
    if (corpus->strings == NULL) {
        attn_corpus_destroy(corpus);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, total);
    }
    char *next = corpus->strings;
    for (int64_t i = 0; i < n; i++) {
        size_t source_size = strlen(sources[i]) + 1, target_size = strlen(targets[i]) + 1;
        corpus->source[i] = memcpy(next, sources[i], source_size);
        next += source_size;
        corpus->target[i] = memcpy(next, targets[i], target_size);
        next += target_size;
        corpus->line[i] = i + 1;
    }
    *out = corpus;
    return ATTN_OK;
}

static void free_ids(attn_corpus *corpus)
{
    free(corpus->source_ids);
    free(corpus->target_ids);
    free(corpus->source_start);
    free(corpus->target_start);
    corpus->source_ids = corpus->target_ids = NULL;
    corpus->source_start = corpus->target_start = NULL;
    corpus->encoded = 0;
}

void attn_corpus_destroy(attn_corpus *corpus)
{
    if (corpus == NULL)
        return;
    free_ids(corpus);
    free(corpus->source);
    free(corpus->target);
    free(corpus->line);
    free(corpus->source_name);
    free(corpus->target_name);
    attn_lines_free(&corpus->source_lines);
    attn_lines_free(&corpus->target_lines);
    free(corpus->strings);
    free(corpus);
}

int64_t attn_corpus_size(const attn_corpus *corpus)
{
    return corpus == NULL ? 0 : corpus->count;
}

const char *const *attn_corpus_sources(const attn_corpus *corpus)
{
    return corpus == NULL ? NULL : (const char *const *)corpus->source;
}

const char *const *attn_corpus_targets(const attn_corpus *corpus)
{
    return corpus == NULL ? NULL : (const char *const *)corpus->target;
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct side_ids {
    id_buffer ids;
    int64_t *start;
    encode_cache cache;
} side_ids;

static void side_ids_free(side_ids *side)
{
    id_buffer_free(&side->ids);
    free(side->start);
    encode_cache_free(&side->cache);
}

static attn_status encode_side(const char *fn, attn_corpus *corpus, const attn_tokenizer *tokenizer,
                               int target, side_ids *side)
{
    char *const *texts = target ? corpus->target : corpus->source;
    side->start = malloc(((size_t)corpus->count + 1) * sizeof *side->start);
    if (side->start == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; i < corpus->count; i++) {
        side->start[i] = side->ids.size;
        if (target)
            ATTN_TRY(id_buffer_push(&side->ids, ATTN_BOS_ID));
        ATTN_TRY(tokenizer_encode_append(tokenizer, texts[i], strlen(texts[i]), &side->cache,
                                         &side->ids));
        int64_t tokens = side->ids.size - side->start[i] - (target ? 1 : 0);
        if (tokens == 0) {
            char place[512];
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s: the %s has no tokens", fn,
                             pair_place(corpus, i, target, place, sizeof place),
                             target ? "target" : "source");
        }
        if (target)
            ATTN_TRY(id_buffer_push(&side->ids, ATTN_EOS_ID));
        if (side->ids.size - side->start[i] > INT32_MAX) {
            char place[512];
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s: the %s has more than 2^31 tokens", fn,
                             pair_place(corpus, i, target, place, sizeof place),
                             target ? "target" : "source");
        }
    }
    side->start[corpus->count] = side->ids.size;
    return ATTN_OK;
}

/* Each pair's label as its class id, one id per pair. */
static attn_status encode_labels(const char *fn, attn_corpus *corpus, const attn_labels *labels,
                                 side_ids *side)
{
    side->start = malloc(((size_t)corpus->count + 1) * sizeof *side->start);
    if (side->start == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; i < corpus->count; i++) {
        side->start[i] = i;
        const int64_t class_id = attn_labels_find(labels, corpus->target[i]);
        if (class_id < 0) {
            char place[512];
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s: label \"%s\" is not one of the %lld labels of the training "
                             "data: a model cannot learn a class it never saw (add examples of it "
                             "to the training file, or leave the line out)",
                             fn, pair_place(corpus, i, 1, place, sizeof place), corpus->target[i],
                             (long long)attn_labels_count(labels));
        }
        ATTN_TRY(id_buffer_push(&side->ids, (int32_t)class_id));
    }
    side->start[corpus->count] = corpus->count;
    return ATTN_OK;
}

/* A text corpus's targets: none, every one of length 0. */
static attn_status encode_no_targets(const char *fn, const attn_corpus *corpus, side_ids *side)
{
    side->start = calloc((size_t)corpus->count + 1, sizeof *side->start);
    if (side->start == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    return ATTN_OK;
}

static attn_status encode(const char *fn, attn_corpus *corpus, const attn_tokenizer *source,
                          const attn_tokenizer *target, const attn_labels *labels)
{
    side_ids source_side = {0}, target_side = {0};
    attn_status status = encode_side(fn, corpus, source, 0, &source_side);
    if (status == ATTN_OK)
        status = corpus->text      ? encode_no_targets(fn, corpus, &target_side)
                 : labels != NULL ? encode_labels(fn, corpus, labels, &target_side)
                                  : encode_side(fn, corpus, target, 1, &target_side);
    if (status != ATTN_OK) {
        side_ids_free(&source_side);
        side_ids_free(&target_side);
        return status;
    }
    free_ids(corpus);
    corpus->source_ids = source_side.ids.data;
    corpus->target_ids = target_side.ids.data;
    corpus->source_start = source_side.start;
    corpus->target_start = target_side.start;
    corpus->encoded = 1;
    encode_cache_free(&source_side.cache);
    encode_cache_free(&target_side.cache);
    return ATTN_OK;
}

attn_status attn_corpus_encode(attn_corpus *corpus, const attn_tokenizer *source,
                               const attn_tokenizer *target)
{
    static const char fn[] = "attn_corpus_encode";
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_NOT_NULL(source);
    ATTN_CHECK_NOT_NULL(target);
    ATTN_CHECK_ARG(!corpus->labelled,
                   "%s: the corpus holds labelled lines: encode it with "
                   "attn_corpus_encode_labelled",
                   fn);
    ATTN_CHECK_ARG(!corpus->text, "%s: the corpus holds plain text: encode it with "
                                  "attn_corpus_encode_text",
                   fn);
    return encode(fn, corpus, source, target, NULL);
}

attn_status attn_corpus_encode_labelled(attn_corpus *corpus, const attn_tokenizer *source,
                                        const attn_labels *labels)
{
    static const char fn[] = "attn_corpus_encode_labelled";
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_NOT_NULL(source);
    ATTN_CHECK_NOT_NULL(labels);
    ATTN_CHECK_ARG(corpus->labelled,
                   "%s: the corpus holds pairs, not labelled lines (attn_corpus_read_labelled)",
                   fn);
    return encode(fn, corpus, source, NULL, labels);
}

attn_status attn_corpus_encode_text(attn_corpus *corpus, const attn_tokenizer *tokenizer)
{
    static const char fn[] = "attn_corpus_encode_text";
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_ARG(corpus->text, "%s: the corpus holds pairs or labelled lines, not plain text "
                                 "(attn_corpus_read_text)",
                   fn);
    ATTN_TRY(encode(fn, corpus, tokenizer, NULL, NULL));
    corpus->vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    return ATTN_OK;
}

attn_status attn_corpus_drop_longer(attn_corpus *corpus, int64_t max_source, int64_t max_target,
                                    int64_t *dropped)
{
    static const char fn[] = "attn_corpus_drop_longer";
    if (dropped != NULL)
        *dropped = 0;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_ARG(corpus->encoded, "%s: the corpus is not encoded yet (attn_corpus_encode)", fn);
    ATTN_CHECK_ARG(max_source >= 1 && max_target >= 1,
                   "%s: the limits must be >= 1, got %lld and %lld", fn, (long long)max_source,
                   (long long)max_target);
    /* Compacts in place: pair i moves to kept <= i, so nothing is overwritten before it is read. */
    int64_t kept = 0, source_end = 0, target_end = 0;
    for (int64_t i = 0; i < corpus->count; i++) {
        const int64_t source_begin = corpus->source_start[i];
        const int64_t source_len = corpus->source_start[i + 1] - source_begin;
        const int64_t target_begin = corpus->target_start[i];
        const int64_t target_len = corpus->target_start[i + 1] - target_begin;
        /* A label is one id; a target sentence has <s> and </s> besides its tokens. */
        if (source_len > max_source ||
            (!corpus->labelled && !corpus->text && target_len - 2 > max_target))
            continue;
        memmove(corpus->source_ids + source_end, corpus->source_ids + source_begin,
                (size_t)source_len * sizeof *corpus->source_ids);
        memmove(corpus->target_ids + target_end, corpus->target_ids + target_begin,
                (size_t)target_len * sizeof *corpus->target_ids);
        corpus->source[kept] = corpus->source[i];
        corpus->target[kept] = corpus->target[i];
        corpus->line[kept] = corpus->line[i];
        corpus->source_start[kept] = source_end;
        corpus->target_start[kept] = target_end;
        source_end += source_len;
        target_end += target_len;
        kept++;
    }
    corpus->source_start[kept] = source_end;
    corpus->target_start[kept] = target_end;
    if (dropped != NULL)
        *dropped = corpus->count - kept;
    corpus->count = kept;
    return ATTN_OK;
}

static attn_status pair_ids(const char *fn, const attn_corpus *corpus, int64_t i, int target,
                            const int32_t **ids, int64_t *length)
{
    ATTN_CHECK_NOT_NULL(ids);
    ATTN_CHECK_NOT_NULL(length);
    *ids = NULL;
    *length = 0;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_ARG(corpus->encoded, "%s: the corpus is not encoded yet (attn_corpus_encode)", fn);
    ATTN_CHECK_ARG(i >= 0 && i < corpus->count, "%s: pair %lld out of range (corpus of %lld)", fn,
                   (long long)i, (long long)corpus->count);
    const int64_t *start = target ? corpus->target_start : corpus->source_start;
    *ids = (target ? corpus->target_ids : corpus->source_ids) + start[i];
    *length = start[i + 1] - start[i];
    return ATTN_OK;
}

attn_status attn_corpus_source_ids(const attn_corpus *corpus, int64_t i, const int32_t **ids,
                                   int64_t *length)
{
    return pair_ids("attn_corpus_source_ids", corpus, i, 0, ids, length);
}

attn_status attn_corpus_target_ids(const attn_corpus *corpus, int64_t i, const int32_t **ids,
                                   int64_t *length)
{
    return pair_ids("attn_corpus_target_ids", corpus, i, 1, ids, length);
}

attn_status attn_corpus_hold_out(attn_corpus *corpus, int64_t count, uint64_t seed,
                                 attn_corpus **held_out)
{
    static const char fn[] = "attn_corpus_hold_out";
    ATTN_CHECK_NOT_NULL(held_out);
    *held_out = NULL;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_ARG(!corpus->encoded,
                   "%s: hold pairs out before attn_corpus_encode, so that the tokenizers are "
                   "learned without them",
                   fn);
    ATTN_CHECK_ARG(count >= 1 && count < corpus->count,
                   "%s: count must be in [1, %lld) (the corpus has %lld pairs), got %lld", fn,
                   (long long)corpus->count, (long long)corpus->count, (long long)count);
    /* The first `count` places of a seeded Fisher-Yates shuffle, kept in file order. */
    size_t bytes;
    ATTN_CHECK_ARG(attn_mul_size((size_t)corpus->count, sizeof(int64_t), &bytes),
                   "%s: too many pairs", fn);
    int64_t *order = malloc(bytes);
    unsigned char *chosen = calloc((size_t)corpus->count, 1);
    if (order == NULL || chosen == NULL) {
        free(order);
        free(chosen);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld pairs", fn,
                         (long long)corpus->count);
    }
    for (int64_t i = 0; i < corpus->count; i++)
        order[i] = i;
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    for (int64_t i = 0; i < count; i++) {
        const int64_t j = i + (int64_t)attn_rng_below(&rng, (uint64_t)(corpus->count - i));
        const int64_t swap = order[i];
        order[i] = order[j];
        order[j] = swap;
        chosen[order[i]] = 1;
    }
    free(order);

    attn_corpus *held = NULL;
    attn_status status = new_corpus(fn, count, &held);
    size_t total = 0;
    for (int64_t i = 0; status == ATTN_OK && i < corpus->count; i++)
        if (chosen[i])
            total += strlen(corpus->source[i]) + strlen(corpus->target[i]) + 2;
    if (status == ATTN_OK && (held->strings = malloc(total)) == NULL)
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, total);
    if (status == ATTN_OK && corpus->source_name != NULL)
        status = set_names(fn, held, corpus->source_name, corpus->target_name);
    if (status != ATTN_OK) {
        free(chosen);
        attn_corpus_destroy(held);
        return status;
    }
    /* The held-out pairs are copied; the kept ones are compacted in place, still pointing into
     * the corpus's own storage. */
    char *next = held->strings;
    int64_t kept = 0, out = 0;
    for (int64_t i = 0; i < corpus->count; i++) {
        if (!chosen[i]) {
            corpus->source[kept] = corpus->source[i];
            corpus->target[kept] = corpus->target[i];
            corpus->line[kept] = corpus->line[i];
            kept++;
            continue;
        }
        const size_t source_size = strlen(corpus->source[i]) + 1;
        const size_t target_size = strlen(corpus->target[i]) + 1;
        held->source[out] = memcpy(next, corpus->source[i], source_size);
        next += source_size;
        held->target[out] = memcpy(next, corpus->target[i], target_size);
        next += target_size;
        held->line[out] = corpus->line[i];
        out++;
    }
    corpus->count = kept;
    held->labelled = corpus->labelled;
    held->text = corpus->text;
    free(chosen);
    *held_out = held;
    return ATTN_OK;
}
