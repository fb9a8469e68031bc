/* Heat maps as terminal text: shade blocks, 256-colour backgrounds or plain ASCII. */
#include "viz/viz_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const shades[] = {" ", "\xE2\x96\x91", "\xE2\x96\x92", "\xE2\x96\x93",
                                     "\xE2\x96\x88"};
static const char ascii_ramp[] = " .:-=+*#%@";

/* The xterm 256-colour index nearest to a colour: from the 6x6x6 cube or the grey ramp. */
static int xterm_index(viz_rgb c)
{
    static const int levels[6] = {0, 95, 135, 175, 215, 255};
    const int channel[3] = {c.r, c.g, c.b};
    int cube[3], best_distance = 0;
    for (int k = 0; k < 3; k++) {
        int nearest = 0;
        for (int i = 1; i < 6; i++)
            if (abs(levels[i] - channel[k]) < abs(levels[nearest] - channel[k]))
                nearest = i;
        cube[k] = nearest;
        best_distance += (levels[nearest] - channel[k]) * (levels[nearest] - channel[k]);
    }
    int index = 16 + 36 * cube[0] + 6 * cube[1] + cube[2];
    int mean = (c.r + c.g + c.b) / 3;
    int grey = (mean - 8 + 5) / 10;
    grey = grey < 0 ? 0 : grey > 23 ? 23 : grey;
    int level = 8 + 10 * grey, grey_distance = 0;
    for (int k = 0; k < 3; k++)
        grey_distance += (level - channel[k]) * (level - channel[k]);
    return grey_distance < best_distance ? 232 + grey : index;
}

static int64_t text_columns(const char *text)
{
    int64_t columns = 0;
    uint32_t cp;
    while ((cp = viz_utf8_next(&text)) != 0)
        columns += viz_codepoint_columns(cp);
    return columns;
}

/* Appends one code point in the style's alphabet: ASCII keeps base letters, '?' for the rest. */
static void put_codepoint(viz_buffer *out, const char *start, const char *end, uint32_t cp,
                          int ascii)
{
    if (!ascii) {
        viz_buffer_append(out, start, (size_t)(end - start));
        return;
    }
    char c = viz_ascii_fallback(cp);
    if (viz_codepoint_columns(cp) == 0 && c == 0)
        return;
    char replacement = c != 0 ? c : '?';
    viz_buffer_append(out, &replacement, 1);
}

/* Columns a code point takes in the output (ASCII replaces each by one character). */
static int output_columns(uint32_t cp, int ascii)
{
    if (ascii)
        return viz_codepoint_columns(cp) == 0 && viz_ascii_fallback(cp) == 0 ? 0 : 1;
    return viz_codepoint_columns(cp);
}

/* Writes the label in at most `width` columns, cut with an ellipsis when longer, and padded
 * with spaces to exactly `width` when pad is set. */
static void put_fitted(viz_buffer *out, const char *label, int64_t width, int ascii, int pad)
{
    int64_t total = 0;
    const char *p = label;
    uint32_t cp;
    while ((cp = viz_utf8_next(&p)) != 0)
        total += output_columns(cp, ascii);
    int64_t room = total <= width ? width : width - 1;
    int64_t used = 0;
    p = label;
    for (;;) {
        const char *start = p;
        cp = viz_utf8_next(&p);
        if (cp == 0)
            break;
        int columns = output_columns(cp, ascii);
        if (used + columns > room)
            break;
        put_codepoint(out, start, p, cp, ascii);
        used += columns;
    }
    if (total > width && width > 0) {
        viz_buffer_puts(out, ascii ? "~" : "\xE2\x80\xA6");
        used++;
    }
    for (; pad && used < width; used++)
        viz_buffer_puts(out, " ");
}

static void put_cell(viz_buffer *out, attn_viz_text_style style, attn_viz_colormap map,
                     double t, int64_t width)
{
    t = !(t > 0.0) ? 0.0 : t > 1.0 ? 1.0 : t;
    if (style == ATTN_VIZ_TEXT_COLOR256) {
        viz_buffer_printf(out, "\x1b[48;5;%dm", xterm_index(viz_colormap(map, t)));
        for (int64_t i = 0; i < width; i++)
            viz_buffer_puts(out, " ");
        viz_buffer_puts(out, "\x1b[0m");
        return;
    }
    for (int64_t i = 0; i < width; i++) {
        if (style == ATTN_VIZ_TEXT_ASCII) {
            int level = (int)(t * 10.0);
            viz_buffer_append(out, &ascii_ramp[level > 9 ? 9 : level], 1);
        } else {
            int level = (int)(t * 5.0);
            viz_buffer_puts(out, shades[level > 4 ? 4 : level]);
        }
    }
}

/* Source labels too long for their cells, written downwards one character per line (at most
 * VERTICAL_LINES lines, the last an ellipsis when a label is longer). */
static void put_vertical_labels(viz_buffer *out, const attn_viz_matrix *m, int64_t label_width,
                                int64_t cell, int ascii)
{
    enum { VERTICAL_LINES = 8 };
    char number[24];
    int64_t lines = 1;
    for (int64_t j = 0; j < m->cols; j++) {
        int64_t n = 0;
        const char *p = viz_label(m, 1, j, number);
        uint32_t cp;
        while ((cp = viz_utf8_next(&p)) != 0)
            n += output_columns(cp, ascii) > 0;
        lines = n > lines ? n : lines;
    }
    lines = lines < VERTICAL_LINES ? lines : VERTICAL_LINES;
    for (int64_t line = 0; line < lines; line++) {
        for (int64_t i = 0; i < label_width + 1; i++)
            viz_buffer_puts(out, " ");
        for (int64_t j = 0; j < m->cols; j++) {
            /* The line-th visible character of the label, if any. */
            const char *p = viz_label(m, 1, j, number), *start = p;
            uint32_t cp = 0;
            int64_t seen = -1, remaining = 0;
            while ((start = p, cp = viz_utf8_next(&p)) != 0) {
                if (output_columns(cp, ascii) == 0)
                    continue;
                if (++seen == line)
                    break;
            }
            if (cp != 0) {
                const char *after = p;
                uint32_t next;
                while ((next = viz_utf8_next(&after)) != 0)
                    remaining += output_columns(next, ascii) > 0;
            }
            int64_t used = 0;
            if (cp != 0 && line == lines - 1 && remaining > 0) {
                viz_buffer_puts(out, ascii ? "~" : "\xE2\x80\xA6");
                used = 1;
            } else if (cp != 0 && output_columns(cp, ascii) <= cell) {
                put_codepoint(out, start, p, cp, ascii);
                used = output_columns(cp, ascii);
            }
            for (; used < cell; used++)
                viz_buffer_puts(out, " ");
        }
        viz_buffer_puts(out, "\n");
    }
}

static void put_matrix(viz_buffer *out, const attn_viz_matrix *m,
                       const attn_viz_heatmap_options *options, const attn_viz_text_options *text)
{
    int ascii = text->style == ATTN_VIZ_TEXT_ASCII;
    char number[24];
    int64_t label_width = 1;
    for (int64_t i = 0; i < m->rows; i++) {
        int64_t w = text_columns(viz_label(m, 0, i, number));
        label_width = w > label_width ? w : label_width;
    }
    label_width = label_width < text->label_width ? label_width : text->label_width;
    int64_t widest = 1;
    for (int64_t j = 0; j < m->cols; j++) {
        int64_t w = text_columns(viz_label(m, 1, j, number));
        widest = w > widest ? w : widest;
    }
    /* Two columns make a roughly square cell; a space parts labels of wider cells. Labels that
     * do not fit their cells go downwards over square cells instead. */
    int64_t room = text->width - label_width - 1;
    int64_t cell = widest <= 1 ? 2 : (widest + 1 < 9 ? widest + 1 : 9);
    if (cell * m->cols > room)
        cell = room / m->cols > 1 ? room / m->cols : 1;
    int64_t label_room = cell >= 3 ? cell - 1 : cell;
    if (widest > label_room) {
        cell = 2 * m->cols <= room ? 2 : 1;
        label_room = 0;
    }

    if (m->title != NULL) {
        put_fitted(out, m->title, text->width, ascii, 0);
        viz_buffer_puts(out, "\n");
    }
    if (widest <= label_room) {
        for (int64_t i = 0; i < label_width + 1; i++)
            viz_buffer_puts(out, " ");
        for (int64_t j = 0; j < m->cols; j++) {
            put_fitted(out, viz_label(m, 1, j, number), label_room, ascii, 1);
            for (int64_t pad = label_room; pad < cell; pad++)
                viz_buffer_puts(out, " ");
        }
        viz_buffer_puts(out, "\n");
    } else {
        put_vertical_labels(out, m, label_width, cell, ascii);
    }
    double span = (double)options->vmax - (double)options->vmin;
    for (int64_t i = 0; i < m->rows; i++) {
        put_fitted(out, viz_label(m, 0, i, number), label_width, ascii, 1);
        viz_buffer_puts(out, " ");
        for (int64_t j = 0; j < m->cols; j++)
            put_cell(out, text->style, options->colormap,
                     ((double)m->weights[i * m->cols + j] - options->vmin) / span, cell);
        viz_buffer_puts(out, "\n");
    }
}

attn_status attn_viz_heatmap_text(const attn_viz_matrix *matrices, int64_t count,
                                  const attn_viz_heatmap_options *options,
                                  const attn_viz_text_options *text, char **out)
{
    static const char *fn = "attn_viz_heatmap_text";
    ATTN_CHECK_NOT_NULL(out);
    ATTN_TRY(viz_check_heatmap(fn, matrices, count, options));
    attn_viz_heatmap_options heatmap = attn_viz_heatmap_default_options();
    if (options != NULL)
        heatmap = *options;
    attn_viz_text_options chosen = {ATTN_VIZ_TEXT_SHADES, 0, 0};
    if (text != NULL)
        chosen = *text;
    ATTN_CHECK_ARG(chosen.style == ATTN_VIZ_TEXT_SHADES || chosen.style == ATTN_VIZ_TEXT_COLOR256 ||
                       chosen.style == ATTN_VIZ_TEXT_ASCII,
                   "%s: unknown text style %d", fn, (int)chosen.style);
    ATTN_CHECK_ARG(chosen.width == 0 || (chosen.width >= 20 && chosen.width <= 10000),
                   "%s: width is %d, expected 0 (80) or 20..10000 columns", fn, chosen.width);
    ATTN_CHECK_ARG(chosen.label_width >= 0 && chosen.label_width <= 1000,
                   "%s: label_width is %d, expected 0 (12) or 1..1000", fn, chosen.label_width);
    chosen.width = chosen.width > 0 ? chosen.width : 80;
    chosen.label_width = chosen.label_width > 0 ? chosen.label_width : 12;
    if (chosen.label_width > chosen.width / 2)
        chosen.label_width = chosen.width / 2;

    viz_buffer buf = {0};
    if (heatmap.title != NULL) {
        put_fitted(&buf, heatmap.title, chosen.width, chosen.style == ATTN_VIZ_TEXT_ASCII, 0);
        viz_buffer_puts(&buf, "\n");
    }
    for (int64_t k = 0; k < count; k++) {
        if (k > 0)
            viz_buffer_puts(&buf, "\n");
        put_matrix(&buf, &matrices[k], &heatmap, &chosen);
    }
    viz_buffer_printf(&buf, "\nscale: %g ", (double)heatmap.vmin);
    for (int level = 0; level < 10; level++)
        put_cell(&buf, chosen.style, heatmap.colormap, (level + 0.5) / 10.0, 1);
    viz_buffer_printf(&buf, " %g\n", (double)heatmap.vmax);
    if (buf.failed || buf.data == NULL) {
        viz_buffer_free(&buf);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    *out = buf.data;
    return ATTN_OK;
}
