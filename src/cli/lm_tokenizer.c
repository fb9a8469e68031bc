/* A language model's tokenizer: learned, or read from a model or a tokenizer file. */
#include "cli/lm_tokenizer.h"

#include "cli/library_error.h"

#include <stdio.h>
#include <stdlib.h>

int lm_tokenizer_learn(const char *command, const char *spec, const char *const *lines, int64_t n,
                       attn_tokenizer **out)
{
    *out = NULL;
    attn_tokenizer_config config;
    if (attn_tokenizer_config_parse(spec, &config) != ATTN_OK) {
        fprintf(stderr,
                "attn %s: %s: expected char, word, bpe:N (N > 0 merges), spm:N or spm-bpe:N (N "
                ">= 8 pieces)\n",
                command, spec);
        return 1;
    }
    /* A prompt or held-out text may hold characters the training text lacks: spelled in
     * bytes, nothing a language model reads is <unk> (a word vocabulary cannot). */
    config.byte_fallback = config.kind != ATTN_TOKENIZER_WORD;
    if (attn_tokenizer_train(&config, lines, n, out) != ATTN_OK)
        return cli_library_error(command);
    return 0;
}

int lm_tokenizer_of_model(const char *command, const char *flag, const char *path,
                          attn_tokenizer **out)
{
    *out = NULL;
    attn_tensor_file *file = NULL;
    if (attn_tensor_file_open(path, &file) != ATTN_OK)
        return cli_library_error_in(command, "%s %s", flag, path);
    const char *config_json = NULL, *tokenizer_json = NULL;
    attn_model_config config;
    int code = 0;
    if (attn_tensor_file_metadata(file, ATTN_MODEL_CONFIG_KEY, &config_json) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s %s has no model config: not a model file attn wrote\n",
                command, flag, path);
        code = 1;
    } else if (attn_model_config_from_json(config_json, &config) != ATTN_OK) {
        code = cli_library_error_in(command, "%s %s: its config", flag, path);
    } else if (config.arch != ATTN_ARCH_TRANSFORMER_LM) {
        fprintf(stderr,
                "attn %s: %s %s holds an encoder-decoder or classifier, not a language model "
                "(arch transformer_lm)\n",
                command, flag, path);
        code = 1;
    } else if (attn_tensor_file_metadata(file, ATTN_TGT_TOKENIZER_KEY, &tokenizer_json) !=
               ATTN_OK) {
        fprintf(stderr,
                "attn %s: %s %s has no tokenizer (a model converted from llm.c reads token "
                "files made by llm.c's own tokenizer)\n",
                command, flag, path);
        code = 1;
    } else if (attn_tokenizer_from_json(tokenizer_json, out) != ATTN_OK) {
        code = cli_library_error_in(command, "%s %s: its tokenizer", flag, path);
    }
    attn_clear_error();
    attn_tensor_file_close(file);
    return code;
}

int lm_tokenizer_load_spm(const char *command, const char *flag, const char *path,
                          attn_tokenizer **out)
{
    if (attn_tokenizer_load_spm(path, out) != ATTN_OK)
        return cli_library_error_in(command, "%s", flag);
    return 0;
}

int lm_tokenizer_load(const char *command, const char *flag, const char *path, attn_tokenizer **out)
{
    if (attn_tokenizer_load(path, out) != ATTN_OK)
        return cli_library_error_in(command, "%s", flag);
    return 0;
}
