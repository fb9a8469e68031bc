/* Shared by the picture tests: small files, and reading back what was drawn. */
#ifndef ATTN_VIZ_TEST_UTIL_H
#define ATTN_VIZ_TEST_UTIL_H

#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* Entries of a folder other than . and .. */
static inline int folder_entries(const char *path)
{
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    int n = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL)
        n += strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
    closedir(dir);
    return n;
}

/* Decodes PNG bytes to 8-bit RGB with libpng; NULL if they are not a PNG. */
static inline unsigned char *decode_png(const unsigned char *bytes, size_t size, int *width,
                                        int *height)
{
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, bytes, size))
        return NULL;
    image.format = PNG_FORMAT_RGB;
    unsigned char *pixels = test_alloc(PNG_IMAGE_SIZE(image));
    if (!png_image_finish_read(&image, NULL, pixels, 0, NULL)) {
        free(pixels);
        png_image_free(&image);
        return NULL;
    }
    *width = (int)image.width;
    *height = (int)image.height;
    return pixels;
}

/* Counts the non-overlapping occurrences of needle in text. */
static inline int count_occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + strlen(needle), needle))
        n++;
    return n;
}

/* The number value of attribute `name` inside the element that starts at tag; -1e300 if absent. */
static inline double attribute_number(const char *tag, const char *name)
{
    const char *end = strchr(tag, '>');
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *at = strstr(tag, key);
    if (at == NULL || (end != NULL && at > end))
        return -1e300;
    return strtod(at + strlen(key), NULL);
}

#endif
