/* Scenes as SVG, written directly: one element per item, labels as <text>. */
#include "viz/viz_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text in an element or an attribute. Control characters are not allowed in XML 1.0 at all, so
 * they become U+FFFD rather than an invalid document. */
static void put_escaped(viz_buffer *out, const char *text)
{
    for (const char *p = text; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '&': viz_buffer_puts(out, "&amp;"); break;
        case '<': viz_buffer_puts(out, "&lt;"); break;
        case '>': viz_buffer_puts(out, "&gt;"); break;
        case '"': viz_buffer_puts(out, "&quot;"); break;
        case '\'': viz_buffer_puts(out, "&apos;"); break;
        default:
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                viz_buffer_puts(out, "\xEF\xBF\xBD");
            else
                viz_buffer_append(out, p, 1);
        }
    }
}

/* A coordinate with at most two decimals and no trailing zeros. */
static void put_number(viz_buffer *out, double value)
{
    char text[64];
    snprintf(text, sizeof text, "%.2f", value);
    char *end = text + strlen(text);
    while (end > text && end[-1] == '0')
        *--end = '\0';
    if (end > text && end[-1] == '.')
        *--end = '\0';
    if (strcmp(text, "-0") == 0)
        strcpy(text, "0");
    viz_buffer_puts(out, text);
}

static void put_attribute(viz_buffer *out, const char *name, double value)
{
    viz_buffer_printf(out, " %s=\"", name);
    put_number(out, value);
    viz_buffer_puts(out, "\"");
}

static void put_color(viz_buffer *out, const char *name, viz_rgb c)
{
    viz_buffer_printf(out, " %s=\"#%02x%02x%02x\"", name, c.r, c.g, c.b);
}

/* Closes the element, with the tooltip as its <title> child when it has one. */
static void close_element(viz_buffer *out, const viz_item *item, const char *tag)
{
    if (item->svg_attributes != NULL)
        viz_buffer_printf(out, " %s", item->svg_attributes);
    if (item->tooltip == NULL) {
        viz_buffer_puts(out, "/>\n");
        return;
    }
    viz_buffer_puts(out, "><title>");
    put_escaped(out, item->tooltip);
    viz_buffer_printf(out, "</title></%s>\n", tag);
}

static void put_stroke(viz_buffer *out, const viz_item *item)
{
    if (item->stroke_width > 0) {
        put_color(out, "stroke", item->stroke);
        put_attribute(out, "stroke-width", item->stroke_width);
    }
}

static void put_item(viz_buffer *out, const viz_item *item, size_t index)
{
    static const char *anchors[] = {"start", "middle", "end"};
    switch (item->kind) {
    case VIZ_RECT:
        viz_buffer_puts(out, "<rect");
        put_attribute(out, "x", item->x);
        put_attribute(out, "y", item->y);
        put_attribute(out, "width", item->w);
        put_attribute(out, "height", item->h);
        if (item->has_fill)
            put_color(out, "fill", item->fill);
        else
            viz_buffer_puts(out, " fill=\"none\"");
        put_stroke(out, item);
        viz_buffer_puts(out, " shape-rendering=\"crispEdges\"");
        close_element(out, item, "rect");
        break;
    case VIZ_LINE:
        viz_buffer_puts(out, "<line");
        put_attribute(out, "x1", item->x);
        put_attribute(out, "y1", item->y);
        put_attribute(out, "x2", item->x2);
        put_attribute(out, "y2", item->y2);
        put_stroke(out, item);
        close_element(out, item, "line");
        break;
    case VIZ_POLYLINE:
        viz_buffer_puts(out, "<polyline points=\"");
        for (size_t i = 0; i < item->point_count; i++) {
            if (i > 0)
                viz_buffer_puts(out, " ");
            put_number(out, item->points[2 * i]);
            viz_buffer_puts(out, ",");
            put_number(out, item->points[2 * i + 1]);
        }
        viz_buffer_puts(out, "\" fill=\"none\" stroke-linejoin=\"round\" stroke-linecap=\"round\"");
        put_stroke(out, item);
        close_element(out, item, "polyline");
        break;
    case VIZ_CIRCLE:
        viz_buffer_puts(out, "<circle");
        put_attribute(out, "cx", item->x);
        put_attribute(out, "cy", item->y);
        put_attribute(out, "r", item->w);
        put_color(out, "fill", item->fill);
        close_element(out, item, "circle");
        break;
    case VIZ_TEXT:
        viz_buffer_puts(out, "<text");
        put_attribute(out, "x", item->x);
        put_attribute(out, "y", item->y);
        /* Monospace glyphs advance 0.6 em: this size gives the bitmap font's 6 px per scale. */
        put_attribute(out, "font-size", 10.0 * item->scale);
        viz_buffer_printf(out, " text-anchor=\"%s\"", anchors[item->anchor]);
        put_color(out, "fill", item->fill);
        if (item->vertical) {
            viz_buffer_puts(out, " transform=\"rotate(-90 ");
            put_number(out, item->x);
            viz_buffer_puts(out, " ");
            put_number(out, item->y);
            viz_buffer_puts(out, ")\"");
        }
        if (item->svg_attributes != NULL)
            viz_buffer_printf(out, " %s", item->svg_attributes);
        viz_buffer_puts(out, ">");
        put_escaped(out, item->text);
        if (item->tooltip != NULL) {
            viz_buffer_puts(out, "<title>");
            put_escaped(out, item->tooltip);
            viz_buffer_puts(out, "</title>");
        }
        viz_buffer_puts(out, "</text>\n");
        break;
    case VIZ_COLORBAR: {
        /* sRGB interpolation between 17 stops of the L*-linear map: within a shade step. */
        enum { STOPS = 17 };
        viz_buffer_printf(out,
                          "<defs><linearGradient id=\"colorbar%zu\" x1=\"0\" y1=\"1\" x2=\"0\" "
                          "y2=\"0\">",
                          index);
        for (int s = 0; s < STOPS; s++) {
            double t = (double)s / (STOPS - 1);
            viz_rgb c = viz_colormap(item->colormap, t);
            viz_buffer_puts(out, "<stop offset=\"");
            put_number(out, t);
            viz_buffer_printf(out, "\" stop-color=\"#%02x%02x%02x\"/>", c.r, c.g, c.b);
        }
        viz_buffer_puts(out, "</linearGradient></defs>\n<rect");
        put_attribute(out, "x", item->x);
        put_attribute(out, "y", item->y);
        put_attribute(out, "width", item->w);
        put_attribute(out, "height", item->h);
        viz_buffer_printf(out, " fill=\"url(#colorbar%zu)\"", index);
        close_element(out, item, "rect");
        break;
    }
    }
}

attn_status viz_scene_svg(const viz_scene *scene, const char *fn, unsigned char **bytes,
                          size_t *size)
{
    viz_buffer out = {0};
    viz_buffer_printf(&out,
                      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" "
                      "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\">\n",
                      scene->width, scene->height, scene->width, scene->height);
    for (size_t i = 0; i < scene->count; i++)
        put_item(&out, &scene->items[i], i);
    viz_buffer_puts(&out, "</svg>\n");
    if (out.failed) {
        viz_buffer_free(&out);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory writing the SVG", fn);
    }
    *bytes = (unsigned char *)out.data;
    *size = out.size;
    return ATTN_OK;
}
