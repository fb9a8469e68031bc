/* mkdtemp and strdup are POSIX. */
#define _POSIX_C_SOURCE 200809L

#include "harness_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_TEMP_FILES = 8 };

static char temp_folder[4096];
static char temp_paths[MAX_TEMP_FILES][4352];
static int temp_count;

static void remove_temp_files(void)
{
    for (int i = 0; i < temp_count; i++)
        remove(temp_paths[i]);
    if (temp_folder[0] != '\0')
        rmdir(temp_folder);
}

static int make_temp_folder(void)
{
    if (temp_folder[0] != '\0')
        return 1;
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    int written = snprintf(temp_folder, sizeof temp_folder, "%s/attn-fuzz-XXXXXX", base);
    if (written < 0 || (size_t)written >= sizeof temp_folder || mkdtemp(temp_folder) == NULL) {
        temp_folder[0] = '\0';
        return 0;
    }
    atexit(remove_temp_files);
    return 1;
}

/* The slot of `name`, claiming a new one the first time a name is used. */
static const char *temp_path(const char *name)
{
    char path[sizeof temp_paths[0]];
    snprintf(path, sizeof path, "%s/%s", temp_folder, name);
    for (int i = 0; i < temp_count; i++)
        if (strcmp(temp_paths[i], path) == 0)
            return temp_paths[i];
    if (temp_count == MAX_TEMP_FILES)
        return NULL;
    memcpy(temp_paths[temp_count], path, sizeof path);
    return temp_paths[temp_count++];
}

const char *fuzz_temp_path(const char *name)
{
    return make_temp_folder() ? temp_path(name) : NULL;
}

const char *fuzz_temp_file(const char *name, const uint8_t *data, size_t size)
{
    const char *path = fuzz_temp_path(name);
    if (path == NULL)
        return NULL;
    FILE *file = fopen(path, "wb");
    if (file == NULL)
        return NULL;
    int ok = size == 0 || fwrite(data, 1, size, file) == size;
    ok = fclose(file) == 0 && ok;
    return ok ? path : NULL;
}

char *fuzz_string(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return NULL;
    if (size > 0)
        memcpy(text, data, size);
    text[size] = '\0';
    return text;
}

char *fuzz_single_spaced(const char *text)
{
    size_t length = strlen(text);
    char *words = malloc(length + 1);
    if (words == NULL)
        return NULL;
    size_t out = 0;
    for (size_t i = 0; i < length; i++) {
        if (strchr(" \t\n\v\f\r", text[i]) == NULL)
            words[out++] = text[i];
        else if (out > 0 && words[out - 1] != ' ')
            words[out++] = ' ';
    }
    if (out > 0 && words[out - 1] == ' ')
        out--;
    words[out] = '\0';
    return words;
}

void fuzz_check_failed(const char *what, const char *file, int line)
{
    fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n", file, line, what);
    abort();
}
