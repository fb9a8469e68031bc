/* sentencepiece.h's calls in a build without libsentencepiece (ATTN_SENTENCEPIECE off or the
 * library not found): loading and training say so; nothing else is reached, since no
 * processor can exist. */
#include "data/sentencepiece.h"

#include <stdio.h>

static spm_result missing(char *error, size_t error_size)
{
    if (error_size > 0)
        snprintf(error, error_size,
                 "built without SentencePiece; install libsentencepiece-dev and rebuild");
    return SPM_ERR_MISSING;
}

int spm_available(void)
{
    return 0;
}

spm_result spm_processor_load(const void *bytes, size_t size, spm_processor **out, char *error,
                              size_t error_size)
{
    (void)bytes;
    (void)size;
    *out = NULL;
    return missing(error, error_size);
}

void spm_processor_free(spm_processor *processor)
{
    (void)processor;
}

int32_t spm_piece_count(const spm_processor *processor)
{
    (void)processor;
    return 0;
}

const char *spm_piece(const spm_processor *processor, int32_t id)
{
    (void)processor;
    (void)id;
    return "";
}

spm_piece_kind spm_piece_kind_of(const spm_processor *processor, int32_t id)
{
    (void)processor;
    (void)id;
    return SPM_PIECE_UNUSED;
}

void spm_special_ids(const spm_processor *processor, int32_t *unk, int32_t *bos, int32_t *eos,
                     int32_t *pad)
{
    (void)processor;
    *unk = *bos = *eos = *pad = -1;
}

spm_result spm_encode(const spm_processor *processor, const char *text, size_t size, int32_t **ids,
                      int64_t *count, char *error, size_t error_size)
{
    (void)processor;
    (void)text;
    (void)size;
    *ids = NULL;
    *count = 0;
    return missing(error, error_size);
}

spm_result spm_sample_encode(const spm_processor *processor, const char *text, size_t size,
                             float alpha, int nbest, uint64_t seed, int32_t **ids, int64_t *count,
                             char *error, size_t error_size)
{
    (void)processor;
    (void)text;
    (void)size;
    (void)alpha;
    (void)nbest;
    (void)seed;
    *ids = NULL;
    *count = 0;
    return missing(error, error_size);
}

int spm_can_sample(const spm_processor *processor)
{
    (void)processor;
    return 0;
}

spm_result spm_decode(const spm_processor *processor, const int32_t *ids, int64_t count,
                      char **text, char *error, size_t error_size)
{
    (void)processor;
    (void)ids;
    (void)count;
    *text = NULL;
    return missing(error, error_size);
}

spm_result spm_train(const char *const *lines, int64_t n, const spm_train_options *options,
                     char **model, size_t *size, char *error, size_t error_size)
{
    (void)lines;
    (void)n;
    (void)options;
    *model = NULL;
    *size = 0;
    return missing(error, error_size);
}
