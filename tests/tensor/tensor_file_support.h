/* File helpers shared by the tensor-file tests: raw file bytes, crafted safetensors files. */
#ifndef ATTN_TEST_TENSOR_FILE_SUPPORT_H
#define ATTN_TEST_TENSOR_FILE_SUPPORT_H

#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

/* The file's bytes (malloc'd, caller frees) and size, or NULL if it cannot be read. */
static inline unsigned char *read_bytes(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t capacity = 4096, used = 0;
    unsigned char *bytes = test_alloc(capacity);
    size_t n;
    while ((n = fread(bytes + used, 1, capacity - used, f)) > 0) {
        used += n;
        if (used == capacity) {
            unsigned char *bigger = test_alloc(capacity * 2);
            memcpy(bigger, bytes, used);
            free(bytes);
            bytes = bigger;
            capacity *= 2;
        }
    }
    fclose(f);
    *size = used;
    return bytes;
}

static inline int path_exists(const char *path)
{
    struct stat info;
    return stat(path, &info) == 0;
}

/* Entries of folder whose names start with prefix. */
static inline int count_entries(const char *folder, const char *prefix)
{
    DIR *dir = opendir(folder);
    if (dir == NULL)
        return -1;
    int count = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        count += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(dir);
    return count;
}

/* Writes a safetensors file by hand: the 8-byte length of header_json, the text itself
 * (unpadded, so tests control every byte), then data_size bytes counting 0, 1, 2, ... */
static inline void write_crafted(const char *path, const char *header_json, size_t data_size)
{
    size_t header_length = strlen(header_json);
    unsigned char *bytes = test_alloc(8 + header_length + data_size + 1);
    for (int b = 0; b < 8; b++)
        bytes[b] = (unsigned char)((uint64_t)header_length >> (8 * b));
    memcpy(bytes + 8, header_json, header_length);
    for (size_t i = 0; i < data_size; i++)
        bytes[8 + header_length + i] = (unsigned char)i;
    write_bytes(path, bytes, 8 + header_length + data_size);
    free(bytes);
}

#endif
