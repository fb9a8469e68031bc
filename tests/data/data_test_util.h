/* Shared by the data-layer tests: finding the project's real corpora and writing small files. */
#ifndef ATTN_DATA_TEST_UTIL_H
#define ATTN_DATA_TEST_UTIL_H

#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "attn/attn_data.h"

/* The shared data folder ("shared/data" beside the repository, found by walking up from this
 * source file), or NULL when it is not there. */
static inline const char *shared_data_dir(void)
{
    static char found[4200];
    static int searched;
    if (searched)
        return found[0] != '\0' ? found : NULL;
    searched = 1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (slash == NULL)
            return NULL;
        *slash = '\0';
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/shared/data/README.md", dir[0] ? dir : "");
        FILE *f = fopen(probe, "rb");
        if (f != NULL) {
            fclose(f);
            snprintf(found, sizeof found, "%s/shared/data", dir);
            return found;
        }
    }
}

/* Path of a file under the shared data folder (a static buffer per slot), or NULL. */
static inline const char *shared_data_file(int slot, const char *relative)
{
    static char paths[4][4400];
    const char *dir = shared_data_dir();
    if (dir == NULL)
        return NULL;
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, relative);
    return paths[slot];
}

static inline void skipped(const char *what)
{
    printf("skipped %s: shared/data not found beside the repository\n", what);
}

/* The message of the last failure contains every one of the given strings. */
static inline int message_has(const char *a, const char *b)
{
    const char *message = attn_last_error();
    return strstr(message, a) != NULL && (b == NULL || strstr(message, b) != NULL);
}

/* Words of text joined by single spaces (the form word and BPE decoding restore). */
static inline char *normalise_spaces(const char *text)
{
    char *out = test_alloc(strlen(text) + 1);
    size_t n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\v' || *p == '\f' || *p == '\r')
            p++;
        if (*p == '\0')
            break;
        if (n > 0)
            out[n++] = ' ';
        while (*p != '\0' && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\v' ||
                               *p == '\f' || *p == '\r'))
            out[n++] = *p++;
    }
    out[n] = '\0';
    return out;
}

#endif /* ATTN_DATA_TEST_UTIL_H */
