/* Helpers shared by the picture sources; not part of the public API.
 *
 * Every picture is first laid out as a scene: a list of rectangles, lines, polylines, circles,
 * texts and colour bars in pixel coordinates. The SVG writer prints the scene and the PNG writer
 * rasterises the very same scene, so the two formats show one picture. Texts are measured with
 * the built-in bitmap font (a 6 x 13 pixel cell per character at scale 1); the SVG uses a
 * monospace font of the same advance, so layouts fit in both. */
#ifndef ATTN_VIZ_INTERNAL_H
#define ATTN_VIZ_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_viz.h"

#include <stddef.h>
#include <stdint.h>

/* ---- growable byte buffer ------------------------------------------------------------- */

/* Appends never fail loudly: the first allocation failure sets `failed`, later appends do
 * nothing, and the writer checks once at the end. data stays NUL-terminated. */
typedef struct viz_buffer {
    char *data;
    size_t size, capacity;
    int failed;
} viz_buffer;

ATTN_INTERNAL void viz_buffer_append(viz_buffer *buf, const char *bytes, size_t size);
ATTN_INTERNAL void viz_buffer_puts(viz_buffer *buf, const char *text);
ATTN_INTERNAL void viz_buffer_printf(viz_buffer *buf, const char *fmt, ...) ATTN_PRINTF(2, 3);
ATTN_INTERNAL void viz_buffer_free(viz_buffer *buf);

/* ---- UTF-8 (the text is known to be valid) --------------------------------------------- */

/* The code point at *text, advancing *text past it; 0 at the end of the string. */
ATTN_INTERNAL uint32_t viz_utf8_next(const char **text);
/* Terminal columns a code point takes: 0 for combining marks, 2 for East Asian wide and
 * full-width characters, else 1. */
ATTN_INTERNAL int viz_codepoint_columns(uint32_t cp);
/* Checks that labels[0..count) are non-NULL valid UTF-8 (labels may be NULL as a whole). */
ATTN_INTERNAL attn_status viz_check_labels(const char *fn, const char *what,
                                           const char *const *labels, int64_t count);

/* ---- colours ----------------------------------------------------------------------------- */

typedef struct viz_rgb {
    unsigned char r, g, b;
} viz_rgb;

ATTN_INTERNAL viz_rgb viz_colormap(attn_viz_colormap map, double t);
static inline viz_rgb viz_color(unsigned hex)
{
    viz_rgb c = {(unsigned char)(hex >> 16), (unsigned char)(hex >> 8), (unsigned char)hex};
    return c;
}

/* ---- the bitmap font --------------------------------------------------------------------- */

enum {
    VIZ_FONT_ADVANCE = 6,   /* pixels from one character to the next */
    VIZ_FONT_HEIGHT = 13,   /* pixels from one line to the next */
    VIZ_FONT_BASELINE = 10, /* rows from the top of the cell down to the baseline */
    VIZ_FONT_CAP_HEIGHT = 7
};

/* The glyph for a code point: VIZ_FONT_HEIGHT rows, bit 4 the leftmost of 5 columns. Rows 0-1
 * hold accents over capitals, rows 3-9 the body, rows 10-11 descenders. */
ATTN_INTERNAL void viz_glyph_rows(uint32_t cp, uint8_t rows[VIZ_FONT_HEIGHT]);
/* The ASCII letter a code point is drawn as (its base letter, or a stand-in such as '-' for a
 * dash), or 0 when it has none. */
ATTN_INTERNAL char viz_ascii_fallback(uint32_t cp);
/* Characters (glyph cells) in a UTF-8 string: combining marks take none. */
ATTN_INTERNAL int64_t viz_text_cells(const char *text);

/* ---- scenes ------------------------------------------------------------------------------ */

typedef enum viz_item_kind {
    VIZ_RECT,     /* x, y, w, h; fill and/or stroke */
    VIZ_LINE,     /* (x, y) to (x2, y2); stroke */
    VIZ_POLYLINE, /* points; stroke */
    VIZ_CIRCLE,   /* centre (x, y), radius w; fill */
    VIZ_TEXT,     /* baseline origin (x, y); text, scale, anchor, vertical; fill */
    VIZ_COLORBAR  /* x, y, w, h: the colour map from 1 at the top to 0 at the bottom */
} viz_item_kind;

typedef enum viz_anchor {
    VIZ_ANCHOR_START,
    VIZ_ANCHOR_MIDDLE,
    VIZ_ANCHOR_END
} viz_anchor;

typedef struct viz_item {
    viz_item_kind kind;
    double x, y, w, h, x2, y2;
    int has_fill;
    viz_rgb fill;
    double stroke_width; /* 0: no stroke */
    viz_rgb stroke;
    double *points; /* polyline: x0, y0, x1, y1, ... */
    size_t point_count;
    char *text;
    int scale;    /* text: the font scale (1, 2, ...) */
    viz_anchor anchor;
    int vertical; /* text: rotated to read upwards */
    attn_viz_colormap colormap;
    char *svg_attributes; /* extra attributes for the SVG element (class, data-*), or NULL */
    char *tooltip;        /* SVG <title>, or NULL */
} viz_item;

typedef struct viz_scene {
    int width, height;
    viz_item *items;
    size_t count, capacity;
    int failed; /* an allocation failed: the scene is incomplete */
} viz_scene;

/* Each adder returns the new item, or NULL after an allocation failure (which also sets
 * scene->failed, so callers may go on and check once with viz_scene_status). */
ATTN_INTERNAL viz_item *viz_scene_rect(viz_scene *scene, double x, double y, double w, double h,
                                       viz_rgb fill);
ATTN_INTERNAL viz_item *viz_scene_line(viz_scene *scene, double x, double y, double x2,
                                       double y2, viz_rgb stroke, double width);
/* Copies n points (2n doubles). */
ATTN_INTERNAL viz_item *viz_scene_polyline(viz_scene *scene, const double *xy, size_t n,
                                           viz_rgb stroke, double width);
ATTN_INTERNAL viz_item *viz_scene_circle(viz_scene *scene, double x, double y, double radius,
                                         viz_rgb fill);
ATTN_INTERNAL viz_item *viz_scene_text(viz_scene *scene, double x, double y, const char *text,
                                       int scale, viz_anchor anchor, int vertical,
                                       viz_rgb color);
ATTN_INTERNAL viz_item *viz_scene_colorbar(viz_scene *scene, double x, double y, double w,
                                           double h, attn_viz_colormap map);
/* Printf into the item's SVG attributes or tooltip; item NULL does nothing. */
ATTN_INTERNAL void viz_item_attributes(viz_scene *scene, viz_item *item, const char *fmt, ...)
    ATTN_PRINTF(3, 4);
ATTN_INTERNAL void viz_item_tooltip(viz_scene *scene, viz_item *item, const char *fmt, ...)
    ATTN_PRINTF(3, 4);
/* ATTN_ERR_OUT_OF_MEMORY (with a message naming fn) if anything failed while building. */
ATTN_INTERNAL attn_status viz_scene_status(const viz_scene *scene, const char *fn);
ATTN_INTERNAL void viz_scene_free(viz_scene *scene);

/* Width in pixels of a text drawn at a scale. */
static inline double viz_text_width(const char *text, int scale)
{
    return (double)(viz_text_cells(text) * VIZ_FONT_ADVANCE * scale);
}

/* ---- heat maps --------------------------------------------------------------------------- */

/* Checks matrices and options for any heat-map function named fn. */
ATTN_INTERNAL attn_status viz_check_heatmap(const char *fn, const attn_viz_matrix *matrices,
                                            int64_t count,
                                            const attn_viz_heatmap_options *options);
/* The label of row (axis 0) or column (axis 1) i: the given string or its number, written into
 * number[] when the matrix has no labels for that axis. */
ATTN_INTERNAL const char *viz_label(const attn_viz_matrix *m, int axis, int64_t i,
                                    char number[24]);

/* ---- output ------------------------------------------------------------------------------ */

ATTN_INTERNAL attn_status viz_scene_svg(const viz_scene *scene, const char *fn,
                                        unsigned char **bytes, size_t *size);
/* Fails when a picture of this size is too large to rasterise. */
ATTN_INTERNAL attn_status viz_check_raster_size(const char *fn, int width, int height);
/* The scene's pixels: width * height * 3 bytes of sRGB, row-major. */
ATTN_INTERNAL attn_status viz_scene_rasterise(const viz_scene *scene, const char *fn,
                                              unsigned char **pixels);
ATTN_INTERNAL attn_status viz_scene_png(const viz_scene *scene, const char *fn,
                                        unsigned char **bytes, size_t *size);
ATTN_INTERNAL attn_status viz_scene_encode(const viz_scene *scene, attn_viz_format format,
                                           const char *fn, unsigned char **bytes, size_t *size);
/* Encodes the scene in the format path asks for and writes it there. */
ATTN_INTERNAL attn_status viz_scene_write(const viz_scene *scene, const char *fn,
                                          const char *path);
/* Reads a whole file, NUL-terminated; ATTN_ERR_IO naming fn and path on failure. */
ATTN_INTERNAL attn_status viz_read_file(const char *fn, const char *path, char **text,
                                        size_t *size);

#endif /* ATTN_VIZ_INTERNAL_H */
