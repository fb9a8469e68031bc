/* The page of attn serve (the files of src/serve/page/), built into the library by
 * cmake/embed_page.cmake: HTML, CSS and JavaScript served from memory, so the page works offline
 * and needs no files beside the program. */
#ifndef ATTN_SERVE_PAGE_H
#define ATTN_SERVE_PAGE_H

#include "core/internal.h"

#include <stddef.h>

typedef struct serve_page_file {
    const char *url; /* "/", "/page.js" */
    const char *content_type;
    const unsigned char *bytes;
    size_t size;
} serve_page_file;

ATTN_INTERNAL extern const serve_page_file serve_page_files[];
ATTN_INTERNAL extern const size_t serve_page_file_count;

#endif
