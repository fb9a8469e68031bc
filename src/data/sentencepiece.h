/* The data layer's window on libsentencepiece, whose API is C++ only: src/data/sentencepiece.cc
 * implements these functions with an extern "C" interface, so the rest of attn stays C11. No
 * C++ exception crosses it: every call catches all, and failures come back as a code with a
 * message in the caller's buffer (the C side turns it into attn_fail). Built without the
 * library (ATTN_SENTENCEPIECE off, or not found), sentencepiece_missing.c answers every call
 * with SPM_ERR_MISSING. Not part of the public API. */
#ifndef ATTN_DATA_SENTENCEPIECE_H
#define ATTN_DATA_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spm_result {
    SPM_OK = 0,
    SPM_ERR_FORMAT = 1,  /* bytes that are not a SentencePiece model, text it refuses */
    SPM_ERR_INVALID = 2, /* training options or text it cannot learn from */
    SPM_ERR_MEMORY = 3,
    SPM_ERR_MISSING = 4 /* attn was built without libsentencepiece */
} spm_result;

/* How a piece is used, from the model's own table. */
typedef enum spm_piece_kind {
    SPM_PIECE_NORMAL = 0, /* text (user-defined pieces included) */
    SPM_PIECE_UNKNOWN = 1,
    SPM_PIECE_CONTROL = 2, /* <s>, </s>, <pad>: never produced from text */
    SPM_PIECE_BYTE = 3,    /* <0x00> .. <0xFF> of byte fallback */
    SPM_PIECE_UNUSED = 4
} spm_piece_kind;

typedef struct spm_processor spm_processor;

/* 1 in a build with libsentencepiece, 0 without. */
int spm_available(void);

/* Parses a serialized model (the bytes of a .model file). */
spm_result spm_processor_load(const void *bytes, size_t size, spm_processor **out, char *error,
                              size_t error_size);
void spm_processor_free(spm_processor *processor);
int32_t spm_piece_count(const spm_processor *processor);
/* The piece's text (NUL-terminated, owned by the processor). */
const char *spm_piece(const spm_processor *processor, int32_t id);
spm_piece_kind spm_piece_kind_of(const spm_processor *processor, int32_t id);
/* The model's special ids, -1 for one it does not have. */
void spm_special_ids(const spm_processor *processor, int32_t *unk, int32_t *bos, int32_t *eos,
                     int32_t *pad);
/* The model's ids of text (size bytes), as spm_encode --output_format=id gives them; *ids is
 * malloc'ed (never NULL on success). */
spm_result spm_encode(const spm_processor *processor, const char *text, size_t size, int32_t **ids,
                      int64_t *count, char *error, size_t error_size);
/* One segmentation of text sampled rather than the best (subword regularisation): for a unigram
 * model from the lattice (nbest -1) or from the nbest best segmentations, alpha the inverse
 * temperature (Kudo 2018); for a BPE model each merge is dropped with probability alpha and
 * nbest is ignored (BPE-dropout, Provilkov et al. 2020). The draws come from libsentencepiece's
 * generator of the calling thread, seeded with `seed` first, so the same seed gives the same
 * segmentation whatever ran before on any thread. *ids as spm_encode's. */
spm_result spm_sample_encode(const spm_processor *processor, const char *text, size_t size,
                             float alpha, int nbest, uint64_t seed, int32_t **ids, int64_t *count,
                             char *error, size_t error_size);
/* 1 when the model can sample segmentations (unigram and BPE models; SentencePiece's word and
 * char models cannot), else 0. */
int spm_can_sample(const spm_processor *processor);
/* The text of ids (each in [0, spm_piece_count)), as spm_decode gives it; malloc'ed. */
spm_result spm_decode(const spm_processor *processor, const int32_t *ids, int64_t count,
                      char **text, char *error, size_t error_size);

typedef struct spm_train_options {
    int bpe;            /* 0: unigram, 1: BPE */
    int64_t vocab_size; /* pieces wanted, specials included (a soft limit) */
    double character_coverage;
    int byte_fallback;
    /* Where the special pieces go: attn's layout is pad 0, <s> 1, </s> 2, <unk> 3. */
    int32_t pad_id, bos_id, eos_id, unk_id;
} spm_train_options;

/* Learns a model from n lines in memory, quietly and deterministically; *model (malloc'ed,
 * *size bytes) is its serialized form, as spm_train writes to a .model file. */
spm_result spm_train(const char *const *lines, int64_t n, const spm_train_options *options,
                     char **model, size_t *size, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DATA_SENTENCEPIECE_H */
