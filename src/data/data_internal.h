/* Helpers shared by the data layer's sources; not part of the public API. */
#ifndef ATTN_DATA_INTERNAL_H
#define ATTN_DATA_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_data.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length in bytes of the valid UTF-8 sequence starting at text[0] (size bytes available), or
 * 0 if it is not one (or is a NUL byte). */
ATTN_INTERNAL size_t utf8_sequence_length(const unsigned char *text, size_t size);
/* Byte offset of the first invalid sequence in text, or size if all of it is valid. */
ATTN_INTERNAL size_t utf8_first_invalid(const char *text, size_t size);

static inline int is_ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* A whole file in a malloc'ed buffer of *size bytes and a NUL after them; messages name fn. */
ATTN_INTERNAL attn_status read_whole_file(const char *fn, const char *path, char **data,
                                          size_t *size);

/* attn_lines_read with messages that name the calling function fn. */
ATTN_INTERNAL attn_status lines_read_for(const char *fn, const char *path, attn_lines *out);

/* ---- growable arrays -------------------------------------------------------------------- */

typedef struct id_buffer {
    int32_t *data;
    int64_t size, capacity;
} id_buffer;

ATTN_INTERNAL attn_status id_buffer_reserve(id_buffer *buf, int64_t capacity);
ATTN_INTERNAL attn_status id_buffer_push(id_buffer *buf, int32_t id);
ATTN_INTERNAL void id_buffer_free(id_buffer *buf);

typedef struct byte_buffer {
    char *data;
    size_t size, capacity;
} byte_buffer;

/* Appends size bytes and keeps the contents NUL-terminated. */
ATTN_INTERNAL attn_status byte_buffer_append(byte_buffer *buf, const char *bytes, size_t size);
ATTN_INTERNAL void byte_buffer_free(byte_buffer *buf);

/* Grows *array (elements of element_size bytes) to hold at least `needed` elements, doubling
 * *capacity. */
/* The vocabulary size of the tokenizer a text corpus was encoded with (attn_corpus_encode_text):
 * the masking's random tokens are drawn below it. */
ATTN_INTERNAL int64_t corpus_text_vocab(const attn_corpus *corpus);

ATTN_INTERNAL attn_status grow_array(void **array, int64_t *capacity, int64_t needed,
                                     size_t element_size);

/* ---- string table ----------------------------------------------------------------------- */

/* Interns byte strings: each distinct string gets the next id (0, 1, ...). Strings are kept
 * NUL-terminated in one pool, so a pointer from strtab_string is valid until the next insert. */
typedef struct strtab {
    char *pool;
    size_t pool_size, pool_capacity;
    size_t *offset;   /* [count] start of each string in pool */
    uint32_t *length; /* [count] */
    uint64_t *hash;   /* [count] */
    int32_t count, capacity;
    int32_t *slots;    /* open addressing: id + 1, or 0 for empty */
    size_t slot_count; /* a power of two, at least twice count */
} strtab;

/* Id of the string, or -1. */
ATTN_INTERNAL int32_t strtab_find(const strtab *table, const char *bytes, size_t size);
/* Id of the string, inserting it if new (*added says which, if not NULL). */
ATTN_INTERNAL attn_status strtab_intern(strtab *table, const char *bytes, size_t size, int32_t *id,
                                        int *added);
static inline const char *strtab_string(const strtab *table, int32_t id)
{
    return table->pool + table->offset[id];
}
static inline size_t strtab_length(const strtab *table, int32_t id)
{
    return table->length[id];
}
ATTN_INTERNAL void strtab_free(strtab *table);

/* ---- vocabulary, tokenizers ------------------------------------------------------------- */

/* The strtab's ids are the vocabulary's ids. */
struct attn_vocab {
    strtab tokens;
};

/* A vocabulary of the four specials alone, to which a tokenizer adds its tokens. */
ATTN_INTERNAL attn_status new_vocab_with_specials(attn_vocab **out);
/* Looks a token up by bytes (not NUL-terminated): its id, or -1. */
ATTN_INTERNAL int32_t vocab_find(const attn_vocab *vocab, const char *bytes, size_t size);
/* Builds a vocabulary from a strtab of distinct tokens and their counts. */
ATTN_INTERNAL attn_status vocab_from_counts(const strtab *tokens, const int64_t *counts,
                                            int64_t min_count, int64_t max_size, attn_vocab **out);
ATTN_INTERNAL attn_status vocab_to_cjson(const attn_vocab *vocab, cJSON **out);
/* fn names the public function in messages. */
ATTN_INTERNAL attn_status vocab_from_cjson(const char *fn, const cJSON *json, attn_vocab **out);
/* Parses NUL-terminated JSON (nothing may follow it); ATTN_ERR_FORMAT names fn and the byte. */
ATTN_INTERNAL attn_status json_parse(const char *fn, const char *json, cJSON **out);

/* Byte fallback (attn_tokenizer_config.byte_fallback): the ids of the 256 byte tokens
 * "<0x00>" ... "<0xFF>" that spell, as UTF-8 bytes, whatever the vocabulary lacks, and of the
 * "</w>" token that ends a BPE word spelled so (-1: none). */
typedef struct byte_fallback {
    int enabled;
    int32_t byte_ids[256];
    int32_t word_end_id;
} byte_fallback;

/* The merges of attn's own BPE of earlier versions, as its model files list them (bpe.c). */
typedef struct bpe_model {
    strtab symbols;      /* every symbol: characters seen, merge results */
    int32_t *merge_left; /* [num_merges] symbol ids */
    int32_t *merge_right;
    int32_t *merge_result;
    int64_t num_merges, merge_capacity;
    /* (left, right) -> merge rank: open addressing on key left * 2^32 + right. */
    uint64_t *rank_keys;
    int32_t *rank_values; /* rank + 1, 0 for an empty slot */
    size_t rank_slots;
    int32_t *symbol_to_vocab; /* [symbols.count] vocabulary id of each symbol */
} bpe_model;

/* Adds merge (left, right) (strings) as the next rank. */
ATTN_INTERNAL attn_status bpe_add_merge(bpe_model *model, const char *left, size_t left_size,
                                        const char *right, size_t right_size);
/* Fills symbol_to_vocab once merges and the vocabulary are known. */
ATTN_INTERNAL attn_status bpe_link_vocab(bpe_model *model, const attn_vocab *vocab);
/* Appends the ids of one word (size bytes, no whitespace, valid UTF-8) to out. */
ATTN_INTERNAL attn_status bpe_encode_word(const bpe_model *model, const byte_fallback *fallback,
                                          const char *word, size_t size, id_buffer *out);
ATTN_INTERNAL void bpe_model_free(bpe_model *model);

/* Remembers the ids of words already encoded, for encoding a whole corpus: BPE words repeat,
 * and applying merges costs far more than a lookup. */
typedef struct encode_cache {
    strtab words;
    int64_t *start; /* [words.count] into ids */
    int32_t *count;
    int64_t capacity;
    id_buffer ids;
} encode_cache;

/* Appends the ids of text (size bytes, valid UTF-8) to out; cache may be NULL. */
ATTN_INTERNAL attn_status tokenizer_encode_append(const attn_tokenizer *tokenizer, const char *text,
                                                  size_t size, encode_cache *cache, id_buffer *out);
ATTN_INTERNAL void encode_cache_free(encode_cache *cache);

/* A SentencePiece model (tokenizer_spm.c, over sentencepiece.h): the processor, the bytes of
 * its .model file (kept for the tokenizer's JSON, so they travel inside attn's model file), and
 * how its ids sit among attn's: attn id = model id + offset. The offset is 0 when the model's
 * <pad>, <s>, </s>, <unk> already have attn's ids 0..3 (as every model attn learns does), else
 * ATTN_NUM_SPECIAL_IDS, so that attn's four specials come first. */
typedef struct spm_processor spm_processor;
/* Whether text[0, size) is the start of a UTF-8 character whose other bytes have not come. */
ATTN_INTERNAL int utf8_unfinished_character(const unsigned char *text, size_t size);

typedef struct spm_tokenizer {
    spm_processor *processor;
    char *model;
    size_t model_size;
    int32_t offset;
    int32_t unk_id; /* the model's own <unk> id, or -1 */
} spm_tokenizer;

/* From the bytes of a .model file (copied); fn and name (the file, or "the model") in messages.
 * *vocab gets attn's specials and then the model's pieces. */
ATTN_INTERNAL attn_status spm_tokenizer_from_model(const char *fn, const char *name,
                                                   const void *bytes, size_t size,
                                                   spm_tokenizer *out, attn_vocab **vocab);
/* Learns a model (config->spm_vocab_size pieces, unigram or BPE, or a BPE of config->bpe_merges
 * merges) from n lines of valid UTF-8; sets config->spm_vocab_size to the pieces asked of
 * SentencePiece. */
ATTN_INTERNAL attn_status spm_tokenizer_learn(const char *fn, attn_tokenizer_config *config,
                                              const char *const *lines, int64_t n,
                                              spm_tokenizer *out, attn_vocab **vocab);
ATTN_INTERNAL attn_status spm_tokenizer_encode_append(const spm_tokenizer *spm, const char *text,
                                                      size_t size, id_buffer *out);
/* One sampled segmentation of text appended (spm_sample_encode: alpha, nbest, seed). */
ATTN_INTERNAL attn_status spm_tokenizer_sample_append(const spm_tokenizer *spm, const char *text,
                                                      size_t size, double alpha, int64_t nbest,
                                                      uint64_t seed, id_buffer *out);
ATTN_INTERNAL int spm_tokenizer_can_sample(const spm_tokenizer *spm);
/* The same for a tokenizer that attn_tokenizer_can_sample, text already valid UTF-8. */
ATTN_INTERNAL attn_status tokenizer_sample_append(const attn_tokenizer *tokenizer, const char *text,
                                                  size_t size, double alpha, int64_t nbest,
                                                  uint64_t seed, id_buffer *out);
/* Ids (already checked against the vocabulary) to text, as spm_decode gives it once attn's
 * specials and the model's control and unknown pieces are left out. */
ATTN_INTERNAL attn_status spm_tokenizer_decode(const spm_tokenizer *spm, const int32_t *ids,
                                               int64_t n_ids, char **text);
/* The model's bytes as base64 (malloc'ed), and back, for the tokenizer's JSON. */
ATTN_INTERNAL attn_status spm_model_to_base64(const spm_tokenizer *spm, char **text);
ATTN_INTERNAL attn_status spm_tokenizer_from_base64(const char *fn, const char *text,
                                                    spm_tokenizer *out, attn_vocab **vocab);
ATTN_INTERNAL void spm_tokenizer_free(spm_tokenizer *spm);

#define END_OF_WORD ATTN_BPE_END_OF_WORD
#define END_OF_WORD_SIZE (sizeof ATTN_BPE_END_OF_WORD - 1)

#endif /* ATTN_DATA_INTERNAL_H */
