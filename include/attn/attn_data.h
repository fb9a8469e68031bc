/* attn data layer: UTF-8 text files, vocabularies, tokenizers (characters, whitespace words,
 * byte-pair encoding), parallel corpora and length-bucketed batches.
 *
 * Conventions:
 *  - All text is UTF-8. Text that is not valid UTF-8 (or contains a NUL byte) is rejected with
 *    ATTN_ERR_FORMAT; for files the message names the file and the 1-based line number.
 *  - Token ids are int32. Ids 0..3 are always <pad>, <s>, </s>, <unk> (ATTN_PAD_ID ...).
 *  - Arrays and strings a function returns through an `out` pointer to a pointer are allocated
 *    with malloc; release them with free(). Objects have their own _destroy function.
 *  - Pointers that accessors return (strings, id arrays, batches) point into the object and
 *    stay valid until it is destroyed (batches: until the next attn_batcher_next).
 */
#ifndef ATTN_DATA_H
#define ATTN_DATA_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- special tokens ------------------------------------------------------------------- */

enum {
    ATTN_PAD_ID = 0, /* "<pad>": fills batches past each sentence's end */
    ATTN_BOS_ID = 1, /* "<s>":   starts every target sentence */
    ATTN_EOS_ID = 2, /* "</s>":  ends every target sentence */
    ATTN_UNK_ID = 3, /* "<unk>": any token the vocabulary does not have */
    ATTN_NUM_SPECIAL_IDS = 4
};

/* ---- lines of UTF-8 text --------------------------------------------------------------- */

/* The lines of a text, each without its "\n" and without a trailing "\r". A UTF-8 byte-order
 * mark at the start is dropped. Empty lines are kept (a final "\n" does not start one). */
typedef struct attn_lines {
    int64_t count;
    char **line;   /* line[i] is NUL-terminated, i < count */
    char *storage; /* owns the text; internal */
} attn_lines;

/* Reads a file. ATTN_ERR_IO if it cannot be read; ATTN_ERR_FORMAT (message "file:line: ...")
 * for a line that is not valid UTF-8, and ("file: no sentences") for a file without lines. */
ATTN_API attn_status attn_lines_read(const char *path, attn_lines *out);
/* The same for text already in memory (size bytes, need not be NUL-terminated); `name`
 * stands for the file name in messages. */
ATTN_API attn_status attn_lines_parse(const char *name, const char *text, size_t size,
                                      attn_lines *out);
/* Frees the lines and zeroes the struct; NULL or an already-freed struct is fine. */
ATTN_API void attn_lines_free(attn_lines *lines);

/* A text read one line at a time, by attn_lines_read's rules and messages, in the memory of its
 * longest line: for text too large to hold whole. */
typedef struct attn_line_reader attn_line_reader;
/* Opens the file at path, or reads standard input ("stdin" in messages) when path is NULL. */
ATTN_API attn_status attn_line_reader_open(const char *path, attn_line_reader **out);
/* Sets *line to the next line (NUL-terminated, valid until the next call) or to NULL after the
 * last. ATTN_ERR_FORMAT ("file:line: ...") for a line that is not valid UTF-8, and ("file: no
 * sentences") at the end of a file without lines. */
ATTN_API attn_status attn_line_reader_next(attn_line_reader *reader, const char **line);
/* Lines handed out so far. */
ATTN_API int64_t attn_line_reader_lines(const attn_line_reader *reader);
/* Closes the file (not stdin); NULL is fine. */
ATTN_API void attn_line_reader_close(attn_line_reader *reader);

/* Nonzero if the size bytes at text are valid UTF-8 (no overlong forms, surrogates or code
 * points above U+10FFFF). NUL bytes are rejected too, since the library's strings end there. */
ATTN_API int attn_utf8_valid(const char *text, size_t size);

/* ---- vocabularies ---------------------------------------------------------------------- */

/* A fixed list of distinct, non-empty UTF-8 token strings: ids 0..3 the specials, then the
 * tokens ordered by count (most frequent first), ties by bytewise order of the strings. */
typedef struct attn_vocab attn_vocab;

/* Builds a vocabulary from n distinct tokens and their counts (in any order). Tokens seen
 * fewer than min_count times are left out (min_count <= 1 keeps all); max_size > 0 keeps at
 * most max_size ids in all, the 4 specials included (0: no limit). Tokens spelled like a
 * special ("<unk>", ...) are left out: they already have their ids. */
ATTN_API attn_status attn_vocab_build(const char *const *tokens, const int64_t *counts, int64_t n,
                                      int64_t min_count, int64_t max_size, attn_vocab **out);
ATTN_API void attn_vocab_destroy(attn_vocab *vocab);
/* Number of ids, specials included (so at least 4). 0 for NULL. */
ATTN_API int64_t attn_vocab_size(const attn_vocab *vocab);
/* Id of a token (NUL-terminated), or -1 if the vocabulary lacks it (or an argument is NULL). */
ATTN_API int32_t attn_vocab_id(const attn_vocab *vocab, const char *token);
/* Token string of an id, or NULL if the id is out of range. */
ATTN_API const char *attn_vocab_token(const attn_vocab *vocab, int32_t id);
/* JSON: {"tokens": ["<pad>", "<s>", "</s>", "<unk>", ...]}, the list in id order. The string
 * is malloc'ed. from_json checks the specials, duplicates, empty and non-UTF-8 tokens. */
ATTN_API attn_status attn_vocab_to_json(const attn_vocab *vocab, char **json);
ATTN_API attn_status attn_vocab_from_json(const char *json, attn_vocab **out);

/* ---- tokenizers ------------------------------------------------------------------------- */

typedef enum attn_tokenizer_kind {
    /* One token per Unicode code point, spaces included, so decode restores the text
     * exactly (when no character was unknown). For G2P sources: "hello" -> h e l l o. */
    ATTN_TOKENIZER_CHAR = 0,
    /* Tokens separated by ASCII whitespace (space, \t, \n, \v, \f, \r); decode joins them
     * with single spaces. For G2P targets: "HH AH L OW". */
    ATTN_TOKENIZER_WORD = 1,
    /* attn's own byte-pair encoding of earlier versions (Sennrich et al. 2016, as in
     * subword-nmt), read from the model files it made and no longer learned: "bpe:N" now
     * learns SentencePiece's BPE (ATTN_TOKENIZER_SPM), which scored 5.8 BLEU more on the
     * Bible (docs/results.md), and attn_tokenizer_train refuses this kind
     * (ATTN_ERR_UNSUPPORTED). Text is split into words on ASCII whitespace; each word starts
     * as its code points, the last one marked as ending the word by a "</w>" suffix ("low" ->
     * l o w</w>), and the model's merges apply to it in the order they were learned. Decode
     * joins the symbols of a word and separates words with single spaces. A word that itself
     * contains the text "</w>" is not restored exactly. */
    ATTN_TOKENIZER_BPE = 2,
    /* SentencePiece (libsentencepiece; needs a build with it, else ATTN_ERR_UNSUPPORTED): a
     * user's .model file read by attn_tokenizer_from_spm_model, or a unigram or BPE model
     * learned from the text (spm_vocab_size pieces, or a BPE of bpe_merges merges) with NFKC
     * normalisation, all characters of a small alphabet (coverage 1.0; 0.9995 above 1000 characters) and byte fallback when
     * the vocabulary has at least 1024 pieces (or byte_fallback asks). Encoding and decoding
     * are libsentencepiece's own, so ids and text equal spm_encode's and spm_decode's.
     * Ids: attn id = model id + offset. The offset is 0 when the model's <pad>, <s>, </s>,
     * <unk> ids are attn's 0..3, as in every model attn learns (spm_train --pad_id=0 --bos_id=1
     * --eos_id=2 --unk_id=3 makes one): ids then equal spm_encode --output_format=id. Any other
     * layout (spm_train's default: <unk> 0, <s> 1, </s> 2, no <pad>) gets offset 4: attn's
     * specials come first and every model id moves up by 4; the model's <unk> reads as attn's
     * <unk>, and its own special pieces appear in the vocabulary as "<model PIECE>", never
     * produced from text. The model's bytes are kept, and travel in the tokenizer's JSON. */
    ATTN_TOKENIZER_SPM = 3
} attn_tokenizer_kind;

typedef struct attn_tokenizer_config {
    attn_tokenizer_kind kind;
    /* spm with spm_bpe: the merges to make, in [1, 2^31), on top of the specials, the
     * alphabet (a space counting as SentencePiece's U+2581) and the 256 bytes when byte
     * fallback is on; spm_vocab_size is then 0, and becomes the pieces that makes (exactly N
     * merges when SentencePiece's normalisation leaves the alphabet as it is and the text has
     * pairs enough). 0: spm_vocab_size gives the size. (The bpe kind's JSON records it too.) */
    int64_t bpe_merges;
    int64_t min_count; /* char and word vocabularies: tokens seen fewer times become <unk>
                          (<= 1 keeps all) */
    int64_t max_vocab; /* char and word vocabularies: at most this many ids, specials included,
                          in [4, 2^31) (0: no limit) */
    /* Nothing is <unk>. char: the vocabulary also holds the 256 byte tokens "<0x00>" ...
     * "<0xFF>", and a character the vocabulary lacks is encoded as its UTF-8 bytes; decoding
     * puts the bytes back (a sequence that is not UTF-8, which a sampling model may produce,
     * reads as U+FFFD, as does a line break spelled in bytes, which no line of text holds).
     * spm: SentencePiece learns the byte pieces and does the same. Language models use it. 0
     * (attn_tokenizer_config_parse's) keeps <unk>, except in SentencePiece models of 1024
     * pieces or more, which always hold the bytes. */
    int byte_fallback;
    /* spm: the pieces to learn, specials included, in [8, 2^31) (fewer may come out of a small
     * text), and 1 for SentencePiece's BPE, 0 for its unigram model. min_count and max_vocab do
     * not apply. */
    int64_t spm_vocab_size;
    int spm_bpe;
} attn_tokenizer_config;

/* Parses "char", "word", "bpe:N" (SentencePiece's BPE, N merges), "spm:N" (its unigram model,
 * N pieces) or "spm-bpe:N" (its BPE, N pieces, as spm_train's vocab_size counts them) into a
 * config with min_count 1, max_vocab 0. */
ATTN_API attn_status attn_tokenizer_config_parse(const char *spec, attn_tokenizer_config *out);

typedef struct attn_tokenizer attn_tokenizer;

/* Learns a tokenizer (its vocabulary, or SentencePiece's model) from n lines of training text. */
ATTN_API attn_status attn_tokenizer_train(const attn_tokenizer_config *config,
                                          const char *const *lines, int64_t n,
                                          attn_tokenizer **out);
/* A SentencePiece tokenizer of a serialized model (the bytes of a .model file, copied), used
 * unchanged (see ATTN_TOKENIZER_SPM). Bytes that are not a model, or a model whose pieces
 * would repeat one of attn's token names, are ATTN_ERR_FORMAT; a build without
 * libsentencepiece gives ATTN_ERR_UNSUPPORTED. */
ATTN_API attn_status attn_tokenizer_from_spm_model(const void *bytes, size_t size,
                                                   attn_tokenizer **out);
/* The same from a .model file; messages name it. */
ATTN_API attn_status attn_tokenizer_load_spm(const char *path, attn_tokenizer **out);
/* 1 when this build has libsentencepiece (spm tokenizers work), else 0. */
ATTN_API int attn_tokenizer_spm_available(void);
ATTN_API void attn_tokenizer_destroy(attn_tokenizer *tokenizer);
ATTN_API attn_tokenizer_kind attn_tokenizer_get_kind(const attn_tokenizer *tokenizer);
/* "char", "word", "bpe" or "spm", as the tokenizer JSON spells them ("unknown" for
 * any other value). */
ATTN_API const char *attn_tokenizer_kind_name(attn_tokenizer_kind kind);
/* The bpe kind's vocabulary marks the last piece of each word with this suffix ("low</w>"). */
#define ATTN_BPE_END_OF_WORD "</w>"
/* The length of a token's text without the end-of-word suffix: what a reader should see of it
 * (pictures, word-level alignments). Equals strlen(token) for tokens that do not end a BPE word. */
ATTN_API size_t attn_token_text_length(const char *token);
ATTN_API const attn_vocab *attn_tokenizer_vocab(const attn_tokenizer *tokenizer);
/* The bpe kind (attn's earlier BPE): its number of merges; 0 for other kinds. */
ATTN_API int64_t attn_tokenizer_num_merges(const attn_tokenizer *tokenizer);
/* Merge i (0-based, in learning order) as its left and right symbol strings; the result is
 * their concatenation. Pointers into the tokenizer. */
ATTN_API attn_status attn_tokenizer_merge(const attn_tokenizer *tokenizer, int64_t i,
                                          const char **left, const char **right);

/* Text (NUL-terminated UTF-8) to ids, tokens the vocabulary lacks becoming ATTN_UNK_ID. No
 * <s> or </s> is added. *ids is malloc'ed (never NULL on success, even for 0 ids). Text that
 * spells a special token ("<s>" as a word) encodes to <unk>: specials never come from text. */
ATTN_API attn_status attn_tokenizer_encode(const attn_tokenizer *tokenizer, const char *text,
                                           int32_t **ids, int64_t *n_ids);
/* Subword regularisation: one segmentation of text sampled instead of the best, as
 * libsentencepiece's SampleEncode draws it. A unigram model samples from every segmentation
 * (nbest -1, forward-filtering and backward-sampling over the lattice) or from the nbest best
 * (2..ATTN_SPM_MAX_NBEST), each weighted by its probability to the power alpha, the inverse
 * temperature (Kudo 2018; a small alpha spreads the draws, 1 follows the model). A BPE model
 * drops each merge with probability alpha (BPE-dropout, Provilkov et al. 2020) and ignores
 * nbest. The draw is a function of (text, alpha, nbest, seed) alone: the same seed gives the
 * same ids on any thread, whatever was sampled before. Every sampled segmentation decodes to
 * the text attn_tokenizer_encode's ids decode to. ATTN_ERR_INVALID_ARGUMENT for a tokenizer
 * that is not SentencePiece, alpha outside (0, 1] or another nbest; ATTN_ERR_FORMAT for a
 * SentencePiece model that cannot sample (its word and char models). */
#define ATTN_SPM_MAX_NBEST 512
ATTN_API attn_status attn_tokenizer_encode_sampled(const attn_tokenizer *tokenizer,
                                                   const char *text, double alpha, int64_t nbest,
                                                   uint64_t seed, int32_t **ids, int64_t *n_ids);
/* 1 when attn_tokenizer_encode_sampled works with this tokenizer (a SentencePiece unigram or
 * BPE model), else 0. */
ATTN_API int attn_tokenizer_can_sample(const attn_tokenizer *tokenizer);
/* Ids to text (malloc'ed, NUL-terminated), dropping the special ids (<unk> included). Fails
 * on an id outside the vocabulary. */
ATTN_API attn_status attn_tokenizer_decode(const attn_tokenizer *tokenizer, const int32_t *ids,
                                           int64_t n_ids, char **text);
/* JSON (malloc'ed): {"format": "attn-tokenizer", "version": 1, "kind": "char"|"word"|"bpe",
 * "min_count": .., "max_vocab": .., "bpe_merges": .. (asked), "merges": [["l", "o"], ...]
 * (bpe), "vocab": {"tokens": [...]}}. A string, so that it fits a safetensors metadata value.
 * An spm tokenizer has no "vocab" (the model holds it) but "spm_model": the .model file's
 * bytes in base64, and what was asked when it was learned, "spm_vocab_size" and "spm_type"
 * ("unigram" or "bpe"; 0 and "" for a user's model). */
ATTN_API attn_status attn_tokenizer_to_json(const attn_tokenizer *tokenizer, char **json);
ATTN_API attn_status attn_tokenizer_from_json(const char *json, attn_tokenizer **out);
/* A tokenizer's JSON as a file of its own (written atomically), and read back: for token files
 * made without a model (attn tokenize), whose model is trained later. Load's messages name the
 * file, and call one that is not a tokenizer's JSON so. */
ATTN_API attn_status attn_tokenizer_save(const attn_tokenizer *tokenizer, const char *path);
ATTN_API attn_status attn_tokenizer_load(const char *path, attn_tokenizer **out);
/* A hash of the tokenizer's JSON: equal for a tokenizer and its copy saved and loaded, and
 * (but for a collision) different for any other. */
ATTN_API attn_status attn_tokenizer_fingerprint(const attn_tokenizer *tokenizer,
                                                uint64_t *fingerprint);

/* ---- parallel corpora ------------------------------------------------------------------- */

/* Sentence pairs: the raw strings, where each came from, and (after attn_corpus_encode) their
 * ids. Id convention, for training:
 *   source: the source tokens only, no specials (what attn_tokenizer_encode gives, so that
 *           translating raw text feeds the encoder exactly what training did);
 *   target: <s> t1 .. tn </s>. The decoder reads target[0 .. len-2] and learns to predict
 *           target[1 .. len-1]. */
typedef struct attn_corpus attn_corpus;

/* A TSV file, one "source<TAB>target" pair per line. A line with no TAB or with more than
 * one, or with an empty source or target, is an ATTN_ERR_FORMAT naming file:line. */
ATTN_API attn_status attn_corpus_read_tsv(const char *path, attn_corpus **out);
/* Two files with one sentence per line, line i of one translating line i of the other.
 * Different line counts fail naming both files and both counts; an empty line fails naming
 * file:line. */
ATTN_API attn_status attn_corpus_read_files(const char *source_path, const char *target_path,
                                            attn_corpus **out);
/* n pairs from memory (copied), e.g. for generated tasks; pair i is reported as "pair i+1". */
ATTN_API attn_status attn_corpus_from_strings(const char *const *sources,
                                              const char *const *targets, int64_t n,
                                              attn_corpus **out);
ATTN_API void attn_corpus_destroy(attn_corpus *corpus);
ATTN_API int64_t attn_corpus_size(const attn_corpus *corpus);
/* All source (target) strings in pair order, e.g. to train a tokenizer on. */
ATTN_API const char *const *attn_corpus_sources(const attn_corpus *corpus);
ATTN_API const char *const *attn_corpus_targets(const attn_corpus *corpus);
/* Encodes every pair (replacing earlier ids). A pair whose source encodes to no tokens fails
 * with ATTN_ERR_FORMAT naming its file:line. */
ATTN_API attn_status attn_corpus_encode(attn_corpus *corpus, const attn_tokenizer *source,
                                        const attn_tokenizer *target);
/* Ids of pair i, following the convention above; fails before attn_corpus_encode. */
ATTN_API attn_status attn_corpus_source_ids(const attn_corpus *corpus, int64_t i,
                                            const int32_t **ids, int64_t *length);
ATTN_API attn_status attn_corpus_target_ids(const attn_corpus *corpus, int64_t i,
                                            const int32_t **ids, int64_t *length);
/* Removes the pairs whose source has more than max_source tokens or whose target has more than
 * max_target tokens (<s> and </s> not counted), keeping the others in order; *dropped (may be
 * NULL) gets how many went. One over-long line would otherwise set the model's max_len and the
 * size of every batch it lands in (a 1 MB line made one update take minutes and a gigabyte).
 * Needs an encoded corpus; limits >= 1. */
ATTN_API attn_status attn_corpus_drop_longer(attn_corpus *corpus, int64_t max_source,
                                             int64_t max_target, int64_t *dropped);
/* Moves `count` pairs (1 <= count < size) into a new corpus *held_out, for validation when
 * none is given: the pairs are the first count places of a shuffle drawn from seed, so the
 * same corpus and seed hold out the same pairs (a resumed run validates on what the first
 * run did). Both corpora keep file order and each pair's file:line for messages. Before
 * attn_corpus_encode, so that tokenizers learned afterwards never see the held-out pairs. */
ATTN_API attn_status attn_corpus_hold_out(attn_corpus *corpus, int64_t count, uint64_t seed,
                                          attn_corpus **held_out);

/* ---- labelled lines (text classification) ------------------------------------------------ */

/* A classifier's data is a corpus too: the text of each line is a pair's source (encoded as
 * sources are) and its label the pair's target string, encoded as its class id, one id per
 * pair (attn_corpus_target_ids gives that one id). Batches of a labelled corpus carry the
 * classes in attn_batch.labels. */

/* A file of "label<TAB>text" lines. The label is everything before the first TAB, the text
 * everything after it (TABs included). ATTN_ERR_FORMAT naming file:line for a line without a
 * TAB, an empty label or an empty text. */
ATTN_API attn_status attn_corpus_read_labelled(const char *path, attn_corpus **out);
/* Nonzero for a corpus read by attn_corpus_read_labelled (or held out of one). */
ATTN_API int attn_corpus_is_labelled(const attn_corpus *corpus);

/* A classifier's classes: distinct non-empty UTF-8 names, class i the i-th. */
typedef struct attn_labels attn_labels;

/* The distinct labels of a labelled corpus, in bytewise order (so the same labels give the
 * same classes whatever order the lines are in). */
ATTN_API attn_status attn_labels_from_corpus(const attn_corpus *corpus, attn_labels **out);
/* n >= 1 distinct names, in the order given (copied). */
ATTN_API attn_status attn_labels_from_names(const char *const *names, int64_t n, attn_labels **out);
ATTN_API void attn_labels_destroy(attn_labels *labels);
/* The number of classes (0 for NULL). */
ATTN_API int64_t attn_labels_count(const attn_labels *labels);
/* The name of class i, or NULL out of range. */
ATTN_API const char *attn_labels_name(const attn_labels *labels, int64_t i);
/* The class of a name, or -1 when there is none of that name. */
ATTN_API int64_t attn_labels_find(const attn_labels *labels, const char *name);
/* JSON (malloc'ed): {"format": "attn-labels", "version": 1, "labels": ["neg", "pos"]}, kept in
 * a model file's metadata as a tokenizer is. from_json checks duplicates, empty and non-UTF-8
 * names. */
ATTN_API attn_status attn_labels_to_json(const attn_labels *labels, char **json);
ATTN_API attn_status attn_labels_from_json(const char *json, attn_labels **out);

/* Encodes a labelled corpus (replacing earlier ids): each text through the tokenizer, each
 * label as its class. A label not among labels (one seen only in a validation file) is
 * ATTN_ERR_FORMAT naming file:line and the label; a text of no tokens likewise. */
ATTN_API attn_status attn_corpus_encode_labelled(attn_corpus *corpus, const attn_tokenizer *source,
                                                 const attn_labels *labels);

/* ---- plain text for a masked language model (BERT's pretraining) --------------------------- */

/* A masked language model (Devlin et al. 2019) learns from text alone: each line is one text,
 * read as a pair's source (encoded as sources are, as a classifier reads its texts) with no
 * target. Batches of such a corpus are masked (attn_batch.mlm_targets): the model sees each
 * line with some tokens corrupted and learns to give back the originals there. */

/* A file of one text per line. ATTN_ERR_FORMAT naming file:line for an empty line. */
ATTN_API attn_status attn_corpus_read_text(const char *path, attn_corpus **out);
/* Nonzero for a corpus read by attn_corpus_read_text (or held out of one). */
ATTN_API int attn_corpus_is_text(const attn_corpus *corpus);
/* Encodes a text corpus (replacing earlier ids) through the tokenizer, whose vocabulary the
 * masking's random tokens are drawn from. A line of no tokens is ATTN_ERR_FORMAT naming it. */
ATTN_API attn_status attn_corpus_encode_text(attn_corpus *corpus, const attn_tokenizer *tokenizer);

/* The [MASK] token: </s>, a special a text never holds (texts are encoded without <s> and
 * </s>), so its embedding row is free and a vocabulary needs no new entry; the classifier's
 * classification token is <s> (ATTN_MODEL_CLS_ID), so the two never share a row. */
#define ATTN_MLM_MASK_ID ATTN_EOS_ID
/* The first id that is not a special: only tokens from here on are chosen (<pad>, <s>, </s>
 * and <unk> never are: an <unk> says nothing to predict), and random tokens come from here. */
#define ATTN_MLM_FIRST_TOKEN 4
/* BERT's rule: each token is chosen with probability 0.15; a chosen token becomes [MASK] with
 * probability 0.8, a random token with 0.1 and stays itself with 0.1. */
#define ATTN_MLM_CHOSEN_SHARE 0.15
#define ATTN_MLM_MASKED_SHARE 0.8
#define ATTN_MLM_RANDOM_SHARE 0.1

/* BERT's masking of one text: ids [length] -> input [length] (what the model reads) and
 * targets [length] (the original id at each chosen position, -1 elsewhere); returns how many
 * were chosen. Each position's draws are a hash of (seed, epoch, sequence, position), so the
 * masks depend on nothing else (not the batch, not the threads), a text is masked anew each
 * epoch (dynamic masking, as RoBERTa), and a resumed run masks as the first did. Random
 * tokens are uniform in [ATTN_MLM_FIRST_TOKEN, vocab) (kept as they are when that is empty).
 * ids and input may be the same array. */
ATTN_API int64_t attn_mlm_mask(uint64_t seed, int64_t epoch, int64_t sequence, const int32_t *ids,
                               int64_t length, int64_t vocab, int32_t *input, int32_t *targets);

/* ---- a language model's text: one stream of tokens -------------------------------------- */

/* The token ids a language model learns from, in order. Plain text becomes a stream line by
 * line: each line's ids (attn_tokenizer_encode) and then ATTN_EOS_ID, so </s> marks the end of
 * a line and a model learns where lines end (an empty line is </s> alone). llm.c's token files
 * are mapped, not read: a file of billions of tokens costs address space, not memory. */
typedef struct attn_token_stream attn_token_stream;

/* A copy of count ids (each >= 0). */
ATTN_API attn_status attn_token_stream_from_ids(const int32_t *ids, int64_t count,
                                                attn_token_stream **out);
/* n lines of text through the tokenizer, each followed by ATTN_EOS_ID. */
ATTN_API attn_status attn_token_stream_from_text(const attn_tokenizer *tokenizer,
                                                 const char *const *lines, int64_t n,
                                                 attn_token_stream **out);
/* llm.c's token file (a header of 256 int32: magic 20240520, version 1, the token count; then
 * the tokens as little-endian uint16), mapped read-only. attn_token_file_write_text also
 * records its tokenizer's fingerprint in words 3..5 of the header, which llm.c leaves zero and
 * never reads: ATTN_TOKEN_FILE_TOKENIZER_TAG, then the fingerprint's low and high 32 bits. ATTN_ERR_FORMAT, naming the file, for
 * another magic or version or a size the count does not explain. The file must not be
 * truncated while the stream is in use (a mapping cannot survive that). */
ATTN_API attn_status attn_token_stream_map_llmc(const char *path, attn_token_stream **out);
/* Writes the stream as an llm.c token file, atomically; ids must fit uint16. */
ATTN_API attn_status attn_token_stream_write_llmc(const attn_token_stream *stream,
                                                  const char *path);
/* Where attn_token_file_write_text reads its text: sets *line to the next line (NUL-terminated,
 * valid until the next call) or to NULL after the last. Any status but ATTN_OK (after
 * attn_fail) stops the writing with that status and message. */
typedef attn_status (*attn_line_source)(void *context, const char **line);
/* Writes an llm.c token file of the lines next_line gives, atomically: the stream that
 * attn_token_stream_from_text makes of them (each line's ids, then ATTN_EOS_ID), tokenized and
 * written a line at a time, so neither the text nor its ids are held whole. *tokens (may be
 * NULL) gets the count. ATTN_ERR_INVALID_ARGUMENT for a tokenizer of more than 65536 ids (the
 * file's tokens are uint16) or a text of more than INT32_MAX tokens (its count is int32); on
 * any failure the file at path is left as it was. */
ATTN_API attn_status attn_token_file_write_text(const attn_tokenizer *tokenizer,
                                                attn_line_source next_line, void *context,
                                                const char *path, int64_t *tokens);
ATTN_API void attn_token_stream_destroy(attn_token_stream *stream);
ATTN_API int64_t attn_token_stream_size(const attn_token_stream *stream);
/* Tokens [start, start + count) into out. */
ATTN_API attn_status attn_token_stream_read(const attn_token_stream *stream, int64_t start,
                                            int64_t count, int32_t *out);
/* 1 with *fingerprint set when the stream is a token file that names the tokenizer that made
 * it (attn_token_file_write_text's), else 0 (llm.c's own files, text, ids). */
ATTN_API int attn_token_stream_tokenizer(const attn_token_stream *stream, uint64_t *fingerprint);
#define ATTN_TOKEN_FILE_TOKENIZER_TAG 0x6e747461u /* "attn" as little-endian bytes */
/* The largest id (-1 for an empty stream): it must be below the model's vocabulary. */
ATTN_API int32_t attn_token_stream_max_id(const attn_token_stream *stream);
/* A hash of the count and every token, for a checkpoint to recognise its data. */
ATTN_API uint64_t attn_token_stream_fingerprint(const attn_token_stream *stream);

/* ---- length-bucketed batches ------------------------------------------------------------ */

typedef struct attn_batcher_config {
    /* Most padded tokens per batch: size * (source_len + target_len) <= batch_tokens. A pair
     * too long to fit with any other forms a batch of its own (which may exceed the limit). */
    int64_t batch_tokens;
    uint64_t seed;
    /* Nonzero: each epoch orders pairs of equal lengths at random and visits its batches in a
     * random order, both drawn from (seed, epoch). Zero: every epoch is the same, batches in
     * order of increasing length (for validation and translation). */
    int shuffle;
} attn_batcher_config;

/* One batch, row-major int32 arrays padded with ATTN_PAD_ID. Owned by the batcher. */
typedef struct attn_batch {
    int64_t size;            /* sentences */
    int64_t source_len;      /* columns of source: the longest source in the batch */
    int64_t target_len;      /* columns of target: the longest target (with <s>, </s>) */
    int32_t *source;         /* [size, source_len] */
    int32_t *target;         /* [size, target_len], each row <s> ... </s> then padding */
    int32_t *source_lengths; /* [size] */
    int32_t *target_lengths; /* [size], counting <s> and </s> */
    int64_t *pairs;          /* [size] the corpus index of each row */
    /* [size] each row's class, for a labelled corpus (the target column, which holds the
     * class ids); NULL for pairs and windows. */
    const int32_t *labels;
    /* [size, source_len] for a text corpus (attn_corpus_read_text): the original id at each
     * position attn_mlm_mask chose, -1 elsewhere (padding included), while source holds the
     * masked ids the model reads; the masks are drawn from (config seed, epoch, line). NULL
     * for pairs, labelled lines and windows. */
    const int32_t *mlm_targets;
    int64_t epoch, index; /* this batch is batch `index` (0-based) of epoch `epoch` */
} attn_batch;

/* Iterates over an encoded corpus, epoch after epoch. Sentences are sorted by (source length,
 * target length) and cut greedily into batches within batch_tokens. The position (epoch,
 * batch index) is all the state: saving it and seeking back to it resumes exactly. The
 * corpus must outlive the batcher and must not be re-encoded while it is in use. */
typedef struct attn_batcher attn_batcher;

ATTN_API attn_status attn_batcher_create(const attn_corpus *corpus,
                                         const attn_batcher_config *config, attn_batcher **out);
ATTN_API void attn_batcher_destroy(attn_batcher *batcher);
/* The batch at the current position; then the position moves to the next batch, or to batch
 * 0 of the next epoch after the last. *batch stays valid until the next call. */
ATTN_API attn_status attn_batcher_next(attn_batcher *batcher, const attn_batch **batch);
/* Where the next call to attn_batcher_next will read. */
ATTN_API void attn_batcher_position(const attn_batcher *batcher, int64_t *epoch,
                                    int64_t *batch_index);
/* Moves to batch batch_index of epoch epoch (both >= 0, batch_index below that epoch's count). */
ATTN_API attn_status attn_batcher_seek(attn_batcher *batcher, int64_t epoch, int64_t batch_index);
/* Windows of a token stream for a language model: window w is tokens [w * context,
 * w * context + context + 1), so consecutive windows share one token and every token after
 * the first is predicted once an epoch. A batch is `sequences` windows: the rows' target is
 * the window (target_len context + 1), the source is empty (source_len 0) and pairs[] holds
 * window indices. Not shuffled, batch k holds windows [k * sequences, (k + 1) * sequences):
 * the file order of llm.c's loader, wrapping to the start after the last whole batch.
 * Shuffled, each epoch visits the windows in an order drawn from (seed, epoch). An epoch has
 * floor(windows / sequences) batches; the windows left over wait for another epoch's order.
 * ATTN_ERR_INVALID_ARGUMENT when the stream is too short for one batch (the message gives
 * both sizes). The stream must outlive the batcher. */
typedef struct attn_window_config {
    int64_t sequences; /* windows per batch, >= 1 */
    int64_t context;   /* tokens the model reads per window, >= 1 */
    uint64_t seed;
    int shuffle;
} attn_window_config;

ATTN_API attn_status attn_batcher_create_windows(const attn_token_stream *stream,
                                                 const attn_window_config *config,
                                                 attn_batcher **out);
/* Subword regularisation, for training: from now on each epoch reads every pair's text anew,
 * and each side whose tokenizer is given (an spm one that attn_tokenizer_can_sample; NULL keeps
 * that side's ids as encoded) gets a segmentation sampled by attn_tokenizer_encode_sampled
 * (alpha in (0, 1], nbest -1 or 2..ATTN_SPM_MAX_NBEST) with a seed drawn from (config seed,
 * epoch, pair, side), so an epoch's ids depend on nothing else and a batcher seeking back to
 * an epoch (a resumed run) samples what it did. A sample longer than that side's longest
 * encoded sentence in the corpus is replaced by the encoded one, so no batch is longer than
 * the model's max_len allows. The sampling runs on the calling thread when an epoch is planned
 * (here for the current one, whose plan is made again; the position stays). Labelled lines and
 * texts have no target to sample (refused). The tokenizers must outlive the batcher. */
ATTN_API attn_status attn_batcher_sample_subwords(attn_batcher *batcher,
                                                  const attn_tokenizer *source,
                                                  const attn_tokenizer *target, double alpha,
                                                  int64_t nbest);
/* Number of batches in the current position's epoch (it can differ slightly between epochs
 * when shuffling, since the cuts follow the drawn order). */
ATTN_API int64_t attn_batcher_num_batches(const attn_batcher *batcher);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DATA_H */
