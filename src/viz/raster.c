/* Scenes as pixels, and pixels as PNG through libpng.
 *
 * Rectangles, axis-parallel lines and texts land on whole pixels (the layouts put them there),
 * so they come out crisp; slanted lines, polylines and circles are anti-aliased by the distance
 * from each pixel's centre to the shape. */
#include "viz/viz_internal.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

/* Beyond this the picture is not worth a PNG: 8000 x 8000 pixels, 192 MB of RGB. */
static const int64_t max_pixels = INT64_C(64000000);

typedef struct canvas {
    int width, height;
    unsigned char *rgb;
    unsigned char *coverage; /* width * height: anti-aliased shapes, blended once */
} canvas;

static void blend(canvas *c, int x, int y, viz_rgb color, double alpha)
{
    if (x < 0 || y < 0 || x >= c->width || y >= c->height || alpha <= 0.0)
        return;
    unsigned char *p = c->rgb + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    if (alpha >= 1.0) {
        p[0] = color.r;
        p[1] = color.g;
        p[2] = color.b;
        return;
    }
    const unsigned char target[3] = {color.r, color.g, color.b};
    for (int k = 0; k < 3; k++)
        p[k] = (unsigned char)lround(p[k] + alpha * (target[k] - p[k]));
}

/* The pixels whose centres fall in [a, b), and at least one. */
static void pixel_span(double a, double b, int *first, int *end)
{
    *first = (int)floor(a + 0.5);
    *end = (int)floor(b + 0.5);
    if (*end <= *first)
        *end = *first + 1;
}

static void fill_box(canvas *c, double x0, double y0, double x1, double y1, viz_rgb color)
{
    int px0, px1, py0, py1;
    pixel_span(x0, x1, &px0, &px1);
    pixel_span(y0, y1, &py0, &py1);
    px0 = px0 < 0 ? 0 : px0;
    py0 = py0 < 0 ? 0 : py0;
    px1 = px1 > c->width ? c->width : px1;
    py1 = py1 > c->height ? c->height : py1;
    for (int y = py0; y < py1; y++)
        for (int x = px0; x < px1; x++)
            blend(c, x, y, color, 1.0);
}

static double segment_distance(double px, double py, double x0, double y0, double x1, double y1)
{
    double dx = x1 - x0, dy = y1 - y0;
    double length2 = dx * dx + dy * dy;
    double t = length2 > 0.0 ? ((px - x0) * dx + (py - y0) * dy) / length2 : 0.0;
    t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
    return hypot(px - (x0 + t * dx), py - (y0 + t * dy));
}

/* Records a thick segment's coverage, keeping the largest where segments overlap so the joints
 * of a polyline are not drawn twice. Extends the dirty box {x0, y0, x1, y1} (ends excluded). */
static void cover_segment(canvas *c, double x0, double y0, double x1, double y1,
                          double half_width, int box[4])
{
    int left = (int)floor(fmin(x0, x1) - half_width - 1.0);
    int right = (int)ceil(fmax(x0, x1) + half_width + 1.0);
    int top = (int)floor(fmin(y0, y1) - half_width - 1.0);
    int bottom = (int)ceil(fmax(y0, y1) + half_width + 1.0);
    left = left < 0 ? 0 : left;
    top = top < 0 ? 0 : top;
    right = right > c->width ? c->width : right;
    bottom = bottom > c->height ? c->height : bottom;
    for (int y = top; y < bottom; y++)
        for (int x = left; x < right; x++) {
            double d = segment_distance(x + 0.5, y + 0.5, x0, y0, x1, y1);
            double cover = half_width + 0.5 - d;
            if (cover <= 0.0)
                continue;
            unsigned char level = (unsigned char)lround(255.0 * (cover > 1.0 ? 1.0 : cover));
            unsigned char *m = &c->coverage[(size_t)y * (size_t)c->width + (size_t)x];
            if (level > *m)
                *m = level;
        }
    if (left < box[0])
        box[0] = left;
    if (top < box[1])
        box[1] = top;
    if (right > box[2])
        box[2] = right;
    if (bottom > box[3])
        box[3] = bottom;
}

/* Blends the recorded coverage in the dirty box and clears it. */
static void flush_coverage(canvas *c, const int box[4], viz_rgb color)
{
    for (int y = box[1]; y < box[3]; y++)
        for (int x = box[0]; x < box[2]; x++) {
            unsigned char *m = &c->coverage[(size_t)y * (size_t)c->width + (size_t)x];
            if (*m != 0)
                blend(c, x, y, color, *m / 255.0);
            *m = 0;
        }
}

static void draw_segments(canvas *c, const double *xy, size_t n, viz_rgb color, double width)
{
    int box[4] = {c->width, c->height, 0, 0};
    for (size_t i = 0; i + 1 < n; i++)
        cover_segment(c, xy[2 * i], xy[2 * i + 1], xy[2 * i + 2], xy[2 * i + 3], width / 2.0,
                      box);
    if (n == 1)
        cover_segment(c, xy[0], xy[1], xy[0], xy[1], width / 2.0, box);
    flush_coverage(c, box, color);
}

static void draw_line(canvas *c, const viz_item *item)
{
    double half = item->stroke_width / 2.0;
    if (item->x == item->x2 || item->y == item->y2) {
        double x0 = fmin(item->x, item->x2), x1 = fmax(item->x, item->x2);
        double y0 = fmin(item->y, item->y2), y1 = fmax(item->y, item->y2);
        if (item->x == item->x2)
            fill_box(c, x0 - half, y0, x1 + half, y1, item->stroke);
        else
            fill_box(c, x0, y0 - half, x1, y1 + half, item->stroke);
        return;
    }
    const double xy[4] = {item->x, item->y, item->x2, item->y2};
    draw_segments(c, xy, 2, item->stroke, item->stroke_width);
}

static void draw_circle(canvas *c, const viz_item *item)
{
    double r = item->w;
    int left = (int)floor(item->x - r - 1.0), right = (int)ceil(item->x + r + 1.0);
    int top = (int)floor(item->y - r - 1.0), bottom = (int)ceil(item->y + r + 1.0);
    for (int y = top; y < bottom; y++)
        for (int x = left; x < right; x++) {
            double cover = r + 0.5 - hypot(x + 0.5 - item->x, y + 0.5 - item->y);
            blend(c, x, y, item->fill, cover > 1.0 ? 1.0 : cover);
        }
}

static void draw_text(canvas *c, const viz_item *item)
{
    int s = item->scale;
    double width = viz_text_width(item->text, s);
    double shift = item->anchor == VIZ_ANCHOR_MIDDLE ? -width / 2.0
                   : item->anchor == VIZ_ANCHOR_END  ? -width
                                                     : 0.0;
    /* Along the text (u) and across it (v, down from the cell's top), both in pixels. */
    int u0 = (int)floor(shift + 0.5);
    int origin_x = (int)floor(item->x + 0.5), origin_y = (int)floor(item->y + 0.5);
    const char *p = item->text;
    uint32_t cp;
    int cell = 0;
    while ((cp = viz_utf8_next(&p)) != 0) {
        if (viz_codepoint_columns(cp) == 0)
            continue;
        uint8_t rows[VIZ_FONT_HEIGHT];
        viz_glyph_rows(cp, rows);
        for (int r = 0; r < VIZ_FONT_HEIGHT; r++)
            for (int col = 0; col < 5; col++) {
                if (!(rows[r] >> (4 - col) & 1))
                    continue;
                int u = u0 + (cell * VIZ_FONT_ADVANCE + col) * s;
                int v = (r - VIZ_FONT_BASELINE) * s;
                for (int du = 0; du < s; du++)
                    for (int dv = 0; dv < s; dv++) {
                        if (item->vertical)
                            blend(c, origin_x + v + dv, origin_y - (u + du) - 1, item->fill, 1.0);
                        else
                            blend(c, origin_x + u + du, origin_y + v + dv, item->fill, 1.0);
                    }
            }
        cell++;
    }
}

static void draw_colorbar(canvas *c, const viz_item *item)
{
    int px0, px1, py0, py1;
    pixel_span(item->x, item->x + item->w, &px0, &px1);
    pixel_span(item->y, item->y + item->h, &py0, &py1);
    for (int y = py0; y < py1; y++) {
        viz_rgb color = viz_colormap(item->colormap, 1.0 - (y + 0.5 - py0) / (py1 - py0));
        for (int x = px0; x < px1; x++)
            blend(c, x, y, color, 1.0);
    }
}

static void draw_item(canvas *c, const viz_item *item)
{
    switch (item->kind) {
    case VIZ_RECT: {
        if (item->has_fill)
            fill_box(c, item->x, item->y, item->x + item->w, item->y + item->h, item->fill);
        double s = item->stroke_width / 2.0;
        if (s > 0) {
            double x0 = item->x, y0 = item->y, x1 = item->x + item->w, y1 = item->y + item->h;
            fill_box(c, x0 - s, y0 - s, x1 + s, y0 + s, item->stroke);
            fill_box(c, x0 - s, y1 - s, x1 + s, y1 + s, item->stroke);
            fill_box(c, x0 - s, y0 - s, x0 + s, y1 + s, item->stroke);
            fill_box(c, x1 - s, y0 - s, x1 + s, y1 + s, item->stroke);
        }
        break;
    }
    case VIZ_LINE:
        draw_line(c, item);
        break;
    case VIZ_POLYLINE:
        if (item->point_count > 0)
            draw_segments(c, item->points, item->point_count, item->stroke, item->stroke_width);
        break;
    case VIZ_CIRCLE:
        draw_circle(c, item);
        break;
    case VIZ_TEXT:
        draw_text(c, item);
        break;
    case VIZ_COLORBAR:
        draw_colorbar(c, item);
        break;
    }
}

attn_status viz_check_raster_size(const char *fn, int width, int height)
{
    ATTN_CHECK_ARG(width >= 1 && height >= 1 && (int64_t)width * height <= max_pixels,
                   "%s: a %d x %d picture is too large for PNG (at most %lld pixels): use a "
                   "smaller cell size or SVG",
                   fn, width, height, (long long)max_pixels);
    return ATTN_OK;
}

attn_status viz_scene_rasterise(const viz_scene *scene, const char *fn, unsigned char **pixels)
{
    ATTN_TRY(viz_check_raster_size(fn, scene->width, scene->height));
    size_t area = (size_t)scene->width * (size_t)scene->height;
    canvas c = {scene->width, scene->height, malloc(3 * area), calloc(area, 1)};
    if (c.rgb == NULL || c.coverage == NULL) {
        free(c.rgb);
        free(c.coverage);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a %d x %d picture", fn,
                         scene->width, scene->height);
    }
    memset(c.rgb, 255, 3 * area);
    for (size_t i = 0; i < scene->count; i++)
        draw_item(&c, &scene->items[i]);
    free(c.coverage);
    *pixels = c.rgb;
    return ATTN_OK;
}

attn_status viz_scene_png(const viz_scene *scene, const char *fn, unsigned char **bytes,
                          size_t *size)
{
    unsigned char *pixels = NULL;
    ATTN_TRY(viz_scene_rasterise(scene, fn, &pixels));
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = (png_uint_32)scene->width;
    image.height = (png_uint_32)scene->height;
    image.format = PNG_FORMAT_RGB;
    png_alloc_size_t needed = 0;
    attn_status status = ATTN_OK;
    unsigned char *encoded = NULL;
    if (!png_image_write_get_memory_size(image, needed, 0, pixels, 0, NULL)) {
        status = attn_fail(ATTN_ERR_INTERNAL, "%s: libpng: %s", fn, image.message);
    } else if ((encoded = malloc(needed)) == NULL) {
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a %zu byte PNG", fn,
                           (size_t)needed);
    } else if (!png_image_write_to_memory(&image, encoded, &needed, 0, pixels, 0, NULL)) {
        status = attn_fail(ATTN_ERR_INTERNAL, "%s: libpng: %s", fn, image.message);
        free(encoded);
        encoded = NULL;
    }
    png_image_free(&image);
    free(pixels);
    if (status == ATTN_OK) {
        *bytes = encoded;
        *size = (size_t)needed;
    }
    return status;
}
