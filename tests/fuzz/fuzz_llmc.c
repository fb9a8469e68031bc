/* llm.c GPT-2 checkpoints: the input, written to a temporary file, is read with
 * attn_model_from_llmc; a checkpoint it accepts is written again with attn_model_save_llmc
 * (its padded rows given back) and must come out as the same bytes, but for the header's
 * reserved ints 8..255, which llm.c leaves zero and attn writes as zeros. A file is accepted
 * only when its length matches its header, so no input makes the loader allocate more than
 * the input's size. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEADER_BYTES = 1024, SIZE_BYTES = 32 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_temp_file("checkpoint.bin", data, size);
    if (path == NULL)
        return 0;
    attn_model *model = NULL;
    int64_t padded_vocab = 0;
    float *padded = NULL;
    if (attn_model_from_llmc(path, &model, &padded_vocab, &padded) != ATTN_OK) {
        FUZZ_CHECK(model == NULL && padded == NULL);
        return 0;
    }
    FUZZ_CHECK(size >= HEADER_BYTES);
    const char *again = fuzz_temp_path("again.bin");
    if (again != NULL && attn_model_save_llmc(model, again, padded_vocab, padded) == ATTN_OK) {
        FILE *f = fopen(again, "rb");
        unsigned char *written = malloc(size + 1);
        size_t length = 0;
        if (f != NULL && written != NULL)
            length = fread(written, 1, size + 1, f);
        if (f != NULL && written != NULL) {
            FUZZ_CHECK(length == size);
            FUZZ_CHECK(memcmp(written, data, SIZE_BYTES) == 0);
            FUZZ_CHECK(memcmp(written + HEADER_BYTES, data + HEADER_BYTES, size - HEADER_BYTES) ==
                       0);
        }
        free(written);
        if (f != NULL)
            fclose(f);
    }
    free(padded);
    attn_model_destroy(model);
    return 0;
}
