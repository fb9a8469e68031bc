/* Helpers shared by the metrics' sources; not part of the public API. */
#ifndef ATTN_METRICS_INTERNAL_H
#define ATTN_METRICS_INTERNAL_H

#include "data/data_internal.h"
#include "attn/attn_metrics.h"

#include <stddef.h>
#include <stdint.h>

/* ---- text as sacreBLEU (Python) sees it ------------------------------------------------- */

/* Decodes the code point at text[0] (valid UTF-8, size > 0 bytes left) into *code and returns
 * its length in bytes. */
ATTN_INTERNAL size_t utf8_decode(const char *text, size_t size, uint32_t *code);

/* Nonzero for a code point Python's str.split() splits on (see attn_metrics.h). */
ATTN_INTERNAL int is_python_space(uint32_t code);

/* Length of text (size bytes of valid UTF-8) without its trailing whitespace (str.rstrip()). */
ATTN_INTERNAL size_t rstrip_length(const char *text, size_t size);

/* Nonzero if the NUL-terminated string is NULL or only whitespace: an absent reference. */
ATTN_INTERNAL int reference_absent(const char *text);

/* Checks that segment `index` (0-based) of what (e.g. "hypothesis") is not NULL and is valid
 * UTF-8; the message names fn and the 1-based segment. */
ATTN_INTERNAL attn_status check_segment(const char *fn, const char *what, int64_t index,
                                        const char *text);

/* The common argument checks of the corpus metrics. */
ATTN_INTERNAL attn_status check_corpus_args(const char *fn, const char *const *hypotheses,
                                            int64_t n, const char *const *const *references,
                                            int64_t n_refs);

/* A sequence of symbol ids (tokens interned in a string table, or code points). */
typedef struct symbol_seq {
    uint32_t *data;
    int64_t size, capacity;
} symbol_seq;

ATTN_INTERNAL attn_status symbol_seq_push(symbol_seq *seq, uint32_t symbol);
ATTN_INTERNAL void symbol_seq_free(symbol_seq *seq);

/* Appends the ids of the whitespace-separated tokens of text (size bytes, valid UTF-8),
 * interning them in tokens, to out. */
ATTN_INTERNAL attn_status split_tokens(const char *text, size_t size, strtab *tokens,
                                       symbol_seq *out);

/* The whitespace-separated tokens of text (size bytes, valid UTF-8) joined by single spaces,
 * into out (replacing its contents). */
ATTN_INTERNAL attn_status join_tokens(const char *text, size_t size, byte_buffer *out);

/* The 13a tokenization of text (size bytes, valid UTF-8), tokens joined by single spaces,
 * into out (replacing its contents). */
ATTN_INTERNAL attn_status tokenize_13a(const char *text, size_t size, byte_buffer *out);

/* ---- n-gram ids ------------------------------------------------------------------------- */

/* Gives every distinct n-gram among a few sequences a small dense id, one order at a time:
 * an n-gram is its (n-1)-gram prefix's id followed by one symbol, so each order's ids come
 * from the previous order's ids in place (ngram_ids_next_order). Ids restart at 0 each order,
 * which keeps count arrays the size of one segment. */
typedef struct ngram_ids {
    uint64_t *keys;   /* prefix id << 32 | symbol */
    int32_t *values;  /* id + 1, 0 for an empty slot */
    size_t slot_count;
    int32_t count;    /* ids handed out this order */
} ngram_ids;

/* Prepares for an order with at most `expected` distinct n-grams. */
ATTN_INTERNAL attn_status ngram_ids_begin_order(ngram_ids *map, int64_t expected);
/* Replaces gram[i] (the id of the (order-1)-gram at i, or NGRAM_ROOT for order 1) by the id
 * of the order-gram at i, for i < length - order + 1; symbols[i + order - 1] extends it. */
#define NGRAM_ROOT UINT32_MAX
ATTN_INTERNAL attn_status ngram_ids_next_order(ngram_ids *map, const uint32_t *symbols,
                                               int64_t length, int order, uint32_t *gram);
ATTN_INTERNAL void ngram_ids_free(ngram_ids *map);

/* ---- edit distance ---------------------------------------------------------------------- */

/* Levenshtein distance (unit costs) between two id sequences; row is scratch of at least
 * b_len + 1 entries. */
ATTN_INTERNAL int64_t edit_distance(const uint32_t *a, int64_t a_len, const uint32_t *b,
                                    int64_t b_len, int64_t *row);

#endif /* ATTN_METRICS_INTERNAL_H */
