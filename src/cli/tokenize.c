/* attn tokenize: plain UTF-8 text into an llm.c token file, the stream `attn train --task lm
 * --train` would read from the text (each line's ids, then </s>), so that `--train-tokens`
 * trains on it in constant memory. The tokenizer is learned from the text (and saved beside
 * the tokens for attn train --tokenizer), read from a tokenizer file, or a model's. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/lm_tokenizer.h"
#include "cli/options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tokenize_args {
    cli_strings inputs;
    const char *out, *vocab, *tokenizer, *model, *save_tokenizer, *spm;
} tokenize_args;

#define FIELD(name) offsetof(tokenize_args, name)

static const cli_option tokenize_options[] = {
    {CLI_OPTION("--input", CLI_STRINGS, FIELD(inputs), "FILE",
                "UTF-8 text, one line ending in </s> per line; repeat for several files, read "
                "one after the other ('-': standard input) [standard input]")},
    {CLI_OPTION("--out", CLI_STRING, FIELD(out), "FILE.bin",
                "the token file to write (llm.c's format, for attn train --train-tokens)")},
    {CLI_OPTION("--vocab", CLI_STRING, FIELD(vocab), "char|word|bpe:N|spm:N|spm-bpe:N",
                "learn a new tokenizer from the text, as attn train --task lm --tgt-tokens does "
                "(with the byte fallback, but for word) [char]")},
    {CLI_OPTION("--save-tokenizer", CLI_STRING, FIELD(save_tokenizer), "FILE.json",
                "where to write the tokenizer, for attn train --tokenizer and further attn "
                "tokenize --tokenizer [with --vocab: --out's name with .tokenizer.json for .bin]")},
    {CLI_OPTION("--tokenizer", CLI_STRING, FIELD(tokenizer), "FILE.json",
                "reuse the tokenizer a first attn tokenize saved (validation text must use the "
                "training text's)")},
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "LM.safetensors",
                "reuse a language model's tokenizer (to fine-tune it with attn train --init)")},
    {CLI_OPTION("--spm", CLI_STRING, FIELD(spm), "FILE.model",
                "use a SentencePiece model of your own, unchanged (saved as a tokenizer file "
                "like a learned one; attn train --tgt-spm FILE.model reads the same ids)")},
};
#define N_TOKENIZE_OPTIONS (sizeof tokenize_options / sizeof tokenize_options[0])

static const cli_command tokenize_command = {
    "tokenize",
    "attn tokenize [--input TEXT ...] --out TOKENS.bin [--vocab char|word|bpe:N|spm:N] "
    "[--save-tokenizer T.json]\n"
    "       attn tokenize [--input TEXT ...] --out TOKENS.bin --tokenizer T.json | "
    "--model LM.safetensors | --spm FILE.model",
    "Turns plain UTF-8 text into an llm.c token file (a header of 256 int32: magic 20240520,\n"
    "version 1, the token count; then the tokens as uint16) holding exactly the tokens that\n"
    "attn train --task lm --train reads from the text: each line's tokens, then </s>. Training\n"
    "with --train-tokens on the file maps it instead of holding the text and its tokens in\n"
    "memory, and gives the same batches and losses as training on the text.\n\n"
    "With --vocab (the default) the tokenizer is learned from the text, which is then held in\n"
    "memory once, and saved beside the tokens; give it to 'attn train --tokenizer' so the model\n"
    "keeps it, and to 'attn tokenize --tokenizer' for validation text. With --tokenizer or\n"
    "--model the text is read and written a line at a time, in constant memory. Ids must fit\n"
    "uint16: a vocabulary of more than 65536 ids is refused. The file is written atomically.\n",
    tokenize_options,
    N_TOKENIZE_OPTIONS,
    "example:\n"
    "  attn tokenize --input book.txt --vocab bpe:2000 --out book.bin\n"
    "  attn tokenize --input held-out.txt --tokenizer book.tokenizer.json --out held-out.bin\n"
    "  attn train --task lm --train-tokens book.bin --valid-tokens held-out.bin \\\n"
    "      --tokenizer book.tokenizer.json --out lm.safetensors --time-limit 600\n"};

static int usage_error(const char *format, const char *detail)
{
    return cli_usage_error(&tokenize_command, format, detail);
}

/* "book.bin" -> "book.tokenizer.json"; another name gets the suffix appended. */
static char *default_tokenizer_path(const char *out)
{
    const char suffix[] = ".tokenizer.json";
    size_t stem = strlen(out);
    if (stem > 4 && strcmp(out + stem - 4, ".bin") == 0)
        stem -= 4;
    char *path = malloc(stem + sizeof suffix);
    if (path != NULL) {
        memcpy(path, out, stem);
        memcpy(path + stem, suffix, sizeof suffix);
    }
    return path;
}

static int is_stdin(const char *path)
{
    return path == NULL || strcmp(path, "-") == 0;
}

/* Whether two paths name one existing file (a hard link or another spelling included). */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* ---- the text, a line at a time ----------------------------------------------------------- */

/* The lines of the inputs in order, from the files (a reader open on one at a time) or from
 * memory (the text a tokenizer was learned from), with what the summary reports. */
typedef struct text_source {
    const char *const *paths; /* NULL entries: standard input */
    int n_paths, next_path;
    attn_line_reader *reader;
    const char *const *lines; /* from memory when not NULL */
    int64_t n_lines, next_line;
    int64_t lines_read, characters;
} text_source;

static void count_line(text_source *s, const char *line)
{
    s->lines_read++;
    s->characters++; /* its end */
    for (const unsigned char *c = (const unsigned char *)line; *c != '\0'; c++)
        s->characters += (*c & 0xC0) != 0x80; /* not a UTF-8 continuation byte */
}

static attn_status next_line(void *context, const char **line)
{
    text_source *s = context;
    *line = NULL;
    if (s->lines != NULL) {
        if (s->next_line < s->n_lines)
            *line = s->lines[s->next_line++];
    } else {
        for (;;) {
            if (s->reader == NULL) {
                if (s->next_path == s->n_paths)
                    return ATTN_OK;
                const attn_status status =
                    attn_line_reader_open(s->paths[s->next_path++], &s->reader);
                if (status != ATTN_OK)
                    return status;
            }
            /* An error leaves the reader open: the caller closes it. */
            const attn_status status = attn_line_reader_next(s->reader, line);
            if (status != ATTN_OK)
                return status;
            if (*line != NULL)
                break;
            attn_line_reader_close(s->reader);
            s->reader = NULL;
        }
    }
    if (*line != NULL)
        count_line(s, *line);
    return ATTN_OK;
}

/* Every line of the inputs in memory, for learning a tokenizer: the text in one buffer (each
 * line with its NUL), and pointers to the lines made once it stops moving. */
typedef struct held_text {
    char *bytes;
    size_t size, capacity;
    int64_t *starts;
    int64_t count, starts_capacity;
    const char **lines;
} held_text;

static void held_text_free(held_text *t)
{
    free(t->bytes);
    free(t->starts);
    free((void *)t->lines);
    memset(t, 0, sizeof *t);
}

static int hold_line(held_text *t, const char *line)
{
    const size_t length = strlen(line) + 1;
    if (t->size + length > t->capacity) {
        size_t capacity = t->capacity > 0 ? t->capacity : 1 << 16;
        while (capacity < t->size + length)
            capacity *= 2;
        char *grown = realloc(t->bytes, capacity);
        if (grown == NULL)
            return 0;
        t->bytes = grown;
        t->capacity = capacity;
    }
    if (t->count == t->starts_capacity) {
        const int64_t capacity = t->starts_capacity > 0 ? 2 * t->starts_capacity : 4096;
        int64_t *grown = realloc(t->starts, (size_t)capacity * sizeof *grown);
        if (grown == NULL)
            return 0;
        t->starts = grown;
        t->starts_capacity = capacity;
    }
    memcpy(t->bytes + t->size, line, length);
    t->starts[t->count++] = (int64_t)t->size;
    t->size += length;
    return 1;
}

/* Reads every line of the inputs into t. Returns 0, or 1 after a message. */
static int hold_text(text_source *files, held_text *t)
{
    for (;;) {
        const char *line = NULL;
        if (next_line(files, &line) != ATTN_OK)
            return cli_library_error("tokenize");
        if (line == NULL)
            break;
        if (!hold_line(t, line)) {
            fprintf(stderr,
                    "attn tokenize: out of memory holding the text (%lld lines) to learn "
                    "the tokenizer from: learn it from a part of the text, save it with "
                    "--save-tokenizer and tokenize the whole with --tokenizer\n",
                    (long long)t->count);
            return 1;
        }
    }
    t->lines = malloc((size_t)(t->count > 0 ? t->count : 1) * sizeof *t->lines);
    if (t->lines == NULL) {
        fprintf(stderr, "attn tokenize: out of memory for %lld lines\n", (long long)t->count);
        return 1;
    }
    for (int64_t i = 0; i < t->count; i++)
        t->lines[i] = t->bytes + t->starts[i];
    free(t->starts); /* the pointers replace them while the tokenizer learns */
    t->starts = NULL;
    t->starts_capacity = 0;
    return 0;
}

/* ---- the command -------------------------------------------------------------------------- */

/* What the options allow together; save is where the tokenizer goes (NULL: nowhere). Returns
 * CLI_GO_ON or the usage exit code. */
static int check_args(const tokenize_args *a, const char *save)
{
    if (a->out == NULL)
        return usage_error("%s", "--out TOKENS.bin is required: the token file to write");
    const int sources =
        (a->vocab != NULL) + (a->tokenizer != NULL) + (a->model != NULL) + (a->spm != NULL);
    if (sources > 1)
        return usage_error("%s", "give one of --vocab (learn a tokenizer), --tokenizer, --model "
                                 "or --spm (reuse one)");
    int stdin_inputs = a->inputs.count == 0;
    for (int i = 0; i < a->inputs.count; i++) {
        stdin_inputs += is_stdin(a->inputs.items[i]);
        if (!is_stdin(a->inputs.items[i]) && same_file(a->inputs.items[i], a->out))
            return usage_error("--out %s is an input: the text would be replaced by its tokens",
                               a->out);
        if (save != NULL && !is_stdin(a->inputs.items[i]) && same_file(a->inputs.items[i], save))
            return usage_error("the tokenizer's file %s is an input: give it another with "
                               "--save-tokenizer",
                               save);
    }
    if (stdin_inputs > 1)
        return usage_error("%s", "standard input ('-') can be read once");
    if (save != NULL && same_file(save, a->out))
        return usage_error("--save-tokenizer %s is --out: give the tokenizer its own file", save);
    const char *reused = a->tokenizer != NULL ? a->tokenizer : a->model != NULL ? a->model : a->spm;
    if (reused != NULL && same_file(reused, a->out))
        return usage_error("--out %s is the tokenizer's file: it would be replaced", a->out);
    if (a->vocab != NULL) {
        attn_tokenizer_config config;
        if (attn_tokenizer_config_parse(a->vocab, &config) != ATTN_OK)
            return usage_error("--vocab %s: expected char, word, bpe:N (N > 0 merges), spm:N or "
                               "spm-bpe:N (N >= 8 pieces)",
                               a->vocab);
    }
    return CLI_GO_ON;
}

/* A vocabulary the file's uint16 tokens cannot hold, refused before the text is written;
 * learned names the --vocab spec it came from (NULL for a tokenizer read from a file). */
static int check_vocabulary_fits(const attn_tokenizer *tokenizer, const char *origin,
                                 const char *learned)
{
    const int64_t ids = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    if (ids <= 65536)
        return 0;
    const int subwords = learned != NULL && (strncmp(learned, "bpe:", 4) == 0 ||
                                             strncmp(learned, "spm", 3) == 0);
    fprintf(stderr,
            "attn tokenize: %s has %lld ids, but an llm.c token file holds ids below 65536 "
            "(uint16): %s\n",
            origin, (long long)ids,
            subwords ? "learn a smaller vocabulary (a smaller N in --vocab), or train on the "
                       "text itself (attn train --task lm --train)"
                     : "train on the text itself (attn train --task lm --train), whose ids are "
                       "not limited");
    return 1;
}

int attn_cmd_tokenize(int argc, char **argv)
{
    tokenize_args a;
    memset(&a, 0, sizeof a);
    int given[N_TOKENIZE_OPTIONS] = {0};
    int code = cli_parse(&tokenize_command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    /* A learned tokenizer is saved by default: the tokens mean nothing without it. */
    /* (A SentencePiece model's is saved too: token files name attn's tokenizer JSON.) */
    const int learns = a.tokenizer == NULL && a.model == NULL;
    char *default_save = NULL;
    if (a.save_tokenizer == NULL && learns && a.out != NULL &&
        (default_save = default_tokenizer_path(a.out)) == NULL) {
        fprintf(stderr, "attn tokenize: out of memory\n");
        return 1;
    }
    const char *save = a.save_tokenizer != NULL ? a.save_tokenizer : default_save;
    code = check_args(&a, save);
    if (code != CLI_GO_ON) {
        free(default_save);
        return code;
    }

    const char *paths[CLI_MAX_REPEATS];
    const int n_paths = a.inputs.count > 0 ? a.inputs.count : 1;
    for (int i = 0; i < n_paths; i++)
        paths[i] = a.inputs.count > 0 && !is_stdin(a.inputs.items[i]) ? a.inputs.items[i] : NULL;
    int reads_terminal = 0;
    for (int i = 0; i < n_paths; i++)
        reads_terminal |= paths[i] == NULL && isatty(STDIN_FILENO);
    if (reads_terminal)
        fprintf(stderr, "attn tokenize: reading the text from the terminal (end it with Ctrl-D; "
                        "--input FILE reads a file)\n");

    attn_tokenizer *tokenizer = NULL;
    held_text held = {0};
    text_source source = {.paths = paths, .n_paths = n_paths};
    const int learned = a.tokenizer == NULL && a.model == NULL && a.spm == NULL;
    if (a.tokenizer != NULL)
        code = lm_tokenizer_load("tokenize", "--tokenizer", a.tokenizer, &tokenizer);
    else if (a.model != NULL)
        code = lm_tokenizer_of_model("tokenize", "--model", a.model, &tokenizer);
    else if (a.spm != NULL)
        code = lm_tokenizer_load_spm("tokenize", "--spm", a.spm, &tokenizer);
    else {
        /* Learning needs the whole text; it is then tokenized from memory, not read twice. */
        code = hold_text(&source, &held);
        if (code == 0)
            code = lm_tokenizer_learn("tokenize", a.vocab != NULL ? a.vocab : "char", held.lines,
                                      held.count, &tokenizer);
        attn_line_reader_close(source.reader);
        source = (text_source){.lines = held.lines, .n_lines = held.count};
    }
    if (code == 0)
        code = check_vocabulary_fits(tokenizer, a.tokenizer != NULL ? a.tokenizer
                                                : a.model != NULL   ? a.model
                                                : a.spm != NULL     ? a.spm
                                                                    : "the learned tokenizer",
                                     learned ? (a.vocab != NULL ? a.vocab : "char") : NULL);

    /* The tokenizer first, so that one that cannot be written leaves no token file behind. */
    if (code == 0 && save != NULL && attn_tokenizer_save(tokenizer, save) != ATTN_OK)
        code = cli_library_error_in("tokenize", "--save-tokenizer %s", save);

    int64_t tokens = 0;
    if (code == 0 &&
        attn_token_file_write_text(tokenizer, next_line, &source, a.out, &tokens) != ATTN_OK)
        code = cli_library_error_in("tokenize", "--out %s", a.out);
    attn_line_reader_close(source.reader);
    held_text_free(&held);
    if (code == 0) {
        fprintf(stderr, "attn tokenize: %lld lines, %lld tokens (%.2f characters a token) -> %s\n",
                (long long)source.lines_read, (long long)tokens,
                tokens > 0 ? (double)source.characters / (double)tokens : 0.0, a.out);
        if (save != NULL)
            fprintf(stderr,
                    "attn tokenize: the tokenizer (%s, %lld ids) -> %s: give it to attn train "
                    "--tokenizer, and to attn tokenize --tokenizer for validation text\n",
                    attn_tokenizer_kind_name(attn_tokenizer_get_kind(tokenizer)),
                    (long long)attn_vocab_size(attn_tokenizer_vocab(tokenizer)), save);
    }
    free(default_save);
    attn_tokenizer_destroy(tokenizer);
    return code;
}
