/* Replays a harness's seed corpus without libFuzzer, so the plain test suite (and its ASan and
 * valgrind runs) checks every committed input: `fuzz_x CORPUS_FOLDER` feeds each file of the
 * folder to LLVMFuzzerTestOneInput in name order. Fails when the folder holds no input. */
/* mkdtemp and strdup are POSIX. */
#define _POSIX_C_SOURCE 200809L

#include "harness_support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The whole file in a malloc'ed buffer; NULL (after a message) if it cannot be read. */
static uint8_t *read_input(const char *path, size_t size)
{
    FILE *file = fopen(path, "rb");
    uint8_t *data = file != NULL ? malloc(size > 0 ? size : 1) : NULL;
    int ok = data != NULL && fread(data, 1, size, file) == size;
    if (file != NULL)
        fclose(file);
    if (!ok) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(data);
        return NULL;
    }
    return data;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_FOLDER\n", argv[0]);
        return 2;
    }
    DIR *folder = opendir(argv[1]);
    if (folder == NULL) {
        perror(argv[1]);
        return 1;
    }
    char **names = NULL;
    size_t count = 0, capacity = 0;
    int failed = 0;
    for (struct dirent *entry; (entry = readdir(folder)) != NULL;) {
        if (entry->d_name[0] == '.')
            continue;
        if (count == capacity) {
            capacity = capacity > 0 ? 2 * capacity : 64;
            char **grown = realloc(names, capacity * sizeof *names);
            if (grown == NULL) {
                failed = 1;
                break;
            }
            names = grown;
        }
        names[count] = strdup(entry->d_name);
        if (names[count] == NULL) {
            failed = 1;
            break;
        }
        count++;
    }
    closedir(folder);
    if (count > 0)
        qsort(names, count, sizeof *names, compare_names);
    size_t replayed = 0;
    for (size_t i = 0; i < count && !failed; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
        struct stat info;
        if (stat(path, &info) != 0 || !S_ISREG(info.st_mode))
            continue;
        size_t size = (size_t)info.st_size;
        uint8_t *data = read_input(path, size);
        if (data == NULL) {
            failed = 1;
            break;
        }
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        replayed++;
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    if (failed)
        return 1;
    if (replayed == 0) {
        fprintf(stderr, "%s: no inputs\n", argv[1]);
        return 1;
    }
    printf("%zu inputs replayed from %s\n", replayed, argv[1]);
    return 0;
}
