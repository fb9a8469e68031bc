/* Building scenes: the list of shapes that both the SVG and the PNG writer draw. */
#define _POSIX_C_SOURCE 200809L
#include "viz/viz_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static viz_item *add_item(viz_scene *scene, viz_item_kind kind)
{
    if (scene->failed)
        return NULL;
    if (scene->count == scene->capacity) {
        size_t capacity = scene->capacity > 0 ? 2 * scene->capacity : 64;
        viz_item *items = realloc(scene->items, capacity * sizeof *items);
        if (items == NULL) {
            scene->failed = 1;
            return NULL;
        }
        scene->items = items;
        scene->capacity = capacity;
    }
    viz_item *item = &scene->items[scene->count++];
    memset(item, 0, sizeof *item);
    item->kind = kind;
    return item;
}

viz_item *viz_scene_rect(viz_scene *scene, double x, double y, double w, double h, viz_rgb fill)
{
    viz_item *item = add_item(scene, VIZ_RECT);
    if (item != NULL) {
        item->x = x;
        item->y = y;
        item->w = w;
        item->h = h;
        item->has_fill = 1;
        item->fill = fill;
    }
    return item;
}

viz_item *viz_scene_line(viz_scene *scene, double x, double y, double x2, double y2,
                         viz_rgb stroke, double width)
{
    viz_item *item = add_item(scene, VIZ_LINE);
    if (item != NULL) {
        item->x = x;
        item->y = y;
        item->x2 = x2;
        item->y2 = y2;
        item->stroke = stroke;
        item->stroke_width = width;
    }
    return item;
}

viz_item *viz_scene_polyline(viz_scene *scene, const double *xy, size_t n, viz_rgb stroke,
                             double width)
{
    double *points = malloc((n > 0 ? n : 1) * 2 * sizeof *points);
    if (points == NULL) {
        scene->failed = 1;
        return NULL;
    }
    viz_item *item = add_item(scene, VIZ_POLYLINE);
    if (item == NULL) {
        free(points);
        return NULL;
    }
    memcpy(points, xy, n * 2 * sizeof *points);
    item->points = points;
    item->point_count = n;
    item->stroke = stroke;
    item->stroke_width = width;
    return item;
}

viz_item *viz_scene_circle(viz_scene *scene, double x, double y, double radius, viz_rgb fill)
{
    viz_item *item = add_item(scene, VIZ_CIRCLE);
    if (item != NULL) {
        item->x = x;
        item->y = y;
        item->w = radius;
        item->has_fill = 1;
        item->fill = fill;
    }
    return item;
}

viz_item *viz_scene_text(viz_scene *scene, double x, double y, const char *text, int scale,
                         viz_anchor anchor, int vertical, viz_rgb color)
{
    char *copy = strdup(text);
    if (copy == NULL) {
        scene->failed = 1;
        return NULL;
    }
    viz_item *item = add_item(scene, VIZ_TEXT);
    if (item == NULL) {
        free(copy);
        return NULL;
    }
    item->x = x;
    item->y = y;
    item->text = copy;
    item->scale = scale;
    item->anchor = anchor;
    item->vertical = vertical;
    item->has_fill = 1;
    item->fill = color;
    return item;
}

viz_item *viz_scene_colorbar(viz_scene *scene, double x, double y, double w, double h,
                             attn_viz_colormap map)
{
    viz_item *item = add_item(scene, VIZ_COLORBAR);
    if (item != NULL) {
        item->x = x;
        item->y = y;
        item->w = w;
        item->h = h;
        item->colormap = map;
    }
    return item;
}

static char *format_string(viz_scene *scene, const char *fmt, va_list args)
{
    va_list copy;
    va_copy(copy, args);
    int needed = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *text = needed >= 0 ? malloc((size_t)needed + 1) : NULL;
    if (text == NULL) {
        scene->failed = 1;
        return NULL;
    }
    vsnprintf(text, (size_t)needed + 1, fmt, args);
    return text;
}

void viz_item_attributes(viz_scene *scene, viz_item *item, const char *fmt, ...)
{
    if (item == NULL)
        return;
    va_list args;
    va_start(args, fmt);
    free(item->svg_attributes);
    item->svg_attributes = format_string(scene, fmt, args);
    va_end(args);
}

void viz_item_tooltip(viz_scene *scene, viz_item *item, const char *fmt, ...)
{
    if (item == NULL)
        return;
    va_list args;
    va_start(args, fmt);
    free(item->tooltip);
    item->tooltip = format_string(scene, fmt, args);
    va_end(args);
}

attn_status viz_scene_status(const viz_scene *scene, const char *fn)
{
    if (scene->failed)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory while laying out the picture",
                         fn);
    return ATTN_OK;
}

void viz_scene_free(viz_scene *scene)
{
    for (size_t i = 0; i < scene->count; i++) {
        free(scene->items[i].points);
        free(scene->items[i].text);
        free(scene->items[i].svg_attributes);
        free(scene->items[i].tooltip);
    }
    free(scene->items);
    memset(scene, 0, sizeof *scene);
}
