/* Heat maps of attention matrices, alone or as a grid of panels, laid out as a scene. */
#include "viz/viz_internal.h"

#include "attn/attn_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MARGIN = 16,
    LABEL_PAD = 6,  /* between labels and the cells */
    PANEL_GAP = 28, /* between panels of a grid */
    BAR_GAP = 24,   /* between the cells and the colour bar */
    BAR_WIDTH = 16,
    MAX_LABEL_CELLS = 20, /* longer labels are cut and end in an ellipsis */
    /* A title wider than the picture wraps at this many lines, the last cut with an ellipsis,
     * and may widen a narrow picture to TITLE_MIN_CELLS glyphs but no more: a sentence as the
     * title made a picture of 2,400 pixels with the map in a corner. */
    MAX_SUBTITLE_CELLS = 60,
    MAX_TITLE_LINES = 3,
    TITLE_MIN_CELLS = 40,
    TITLE_SCALE = 2,
    TITLE_LINE_HEIGHT = VIZ_FONT_HEIGHT * TITLE_SCALE + 4
};

/* One line of a wrapped title: bytes [start, start + bytes), then an ellipsis when cut. */
typedef struct title_line {
    const char *start;
    size_t bytes;
    int cut;
} title_line;

static int glyph_cells(uint32_t cp)
{
    return viz_codepoint_columns(cp) > 0;
}

/* The end of the longest start of p that takes at most max_cells glyphs. */
static const char *skip_cells(const char *p, int64_t max_cells)
{
    int64_t cells = 0;
    for (const char *next = p; *p != '\0'; p = next) {
        const uint32_t cp = viz_utf8_next(&next);
        if (cells + glyph_cells(cp) > max_cells)
            break;
        cells += glyph_cells(cp);
    }
    return p;
}

/* Splits title into at most MAX_TITLE_LINES lines of at most max_cells glyphs, breaking at
 * spaces where it can (else inside a word). Returns the number of lines. */
static int wrap_title(const char *title, int64_t max_cells, title_line lines[MAX_TITLE_LINES])
{
    int n = 0;
    for (const char *p = title; n < MAX_TITLE_LINES; n++) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        const char *end = skip_cells(p, max_cells);
        if (*end != '\0' && n == MAX_TITLE_LINES - 1) {
            /* The last line: what fits beside the ellipsis. */
            end = skip_cells(p, max_cells - 1);
            lines[n] = (title_line){p, (size_t)(end - p), 1};
            return n + 1;
        }
        if (*end != '\0' && *end != ' ') {
            const char *space = end;
            while (space > p && space[-1] != ' ')
                space--;
            if (space > p)
                end = space - 1;
        }
        lines[n] = (title_line){p, (size_t)(end - p), 0};
        p = end;
    }
    return n;
}

static const unsigned text_color = 0x222222, frame_color = 0x808080;

attn_viz_heatmap_options attn_viz_heatmap_default_options(void)
{
    attn_viz_heatmap_options options;
    memset(&options, 0, sizeof options);
    options.colormap = ATTN_VIZ_BLUES;
    options.vmin = 0.0f;
    options.vmax = 1.0f;
    return options;
}

static attn_status check_text(const char *fn, const char *what, const char *text)
{
    if (text != NULL && !attn_utf8_valid(text, strlen(text)))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is not valid UTF-8", fn, what);
    return ATTN_OK;
}

attn_status viz_check_heatmap(const char *fn, const attn_viz_matrix *matrices, int64_t count,
                              const attn_viz_heatmap_options *options)
{
    ATTN_CHECK_ARG(matrices != NULL, "%s: matrices must not be NULL", fn);
    ATTN_CHECK_ARG(count >= 1, "%s: count is %lld, expected at least 1 matrix", fn,
                   (long long)count);
    for (int64_t k = 0; k < count; k++) {
        const attn_viz_matrix *m = &matrices[k];
        ATTN_CHECK_ARG(m->weights != NULL, "%s: matrices[%lld].weights must not be NULL", fn,
                       (long long)k);
        ATTN_CHECK_ARG(m->rows >= 1 && m->cols >= 1 && m->rows <= 100000 && m->cols <= 100000,
                       "%s: matrices[%lld] is %lld x %lld, expected 1..100000 rows and columns",
                       fn, (long long)k, (long long)m->rows, (long long)m->cols);
        for (int64_t i = 0; i < m->rows * m->cols; i++)
            ATTN_CHECK_ARG(isfinite(m->weights[i]),
                           "%s: matrices[%lld].weights[%lld][%lld] is %g, expected a finite value",
                           fn, (long long)k, (long long)(i / m->cols), (long long)(i % m->cols),
                           (double)m->weights[i]);
        char what[64];
        snprintf(what, sizeof what, "matrices[%lld].row_labels", (long long)k);
        ATTN_TRY(viz_check_labels(fn, what, m->row_labels, m->rows));
        snprintf(what, sizeof what, "matrices[%lld].col_labels", (long long)k);
        ATTN_TRY(viz_check_labels(fn, what, m->col_labels, m->cols));
        snprintf(what, sizeof what, "matrices[%lld].title", (long long)k);
        ATTN_TRY(check_text(fn, what, m->title));
    }
    if (options == NULL)
        return ATTN_OK;
    ATTN_CHECK_ARG(options->colormap == ATTN_VIZ_BLUES || options->colormap == ATTN_VIZ_GREYS,
                   "%s: unknown colormap %d", fn, (int)options->colormap);
    ATTN_CHECK_ARG(isfinite(options->vmin) && isfinite(options->vmax) &&
                       options->vmin < options->vmax,
                   "%s: the colour scale [vmin, vmax] = [%g, %g] must be finite with vmin < vmax",
                   fn, (double)options->vmin, (double)options->vmax);
    ATTN_CHECK_ARG(options->grid_columns >= 0, "%s: grid_columns is %d, expected >= 0", fn,
                   options->grid_columns);
    ATTN_CHECK_ARG(options->cell_size == 0 ||
                       (options->cell_size >= 4 && options->cell_size <= 200),
                   "%s: cell_size is %d, expected 0 (automatic) or 4..200", fn,
                   options->cell_size);
    return check_text(fn, "options->title", options->title);
}

const char *viz_label(const attn_viz_matrix *m, int axis, int64_t i, char number[24])
{
    const char *const *labels = axis == 0 ? m->row_labels : m->col_labels;
    if (labels != NULL)
        return labels[i];
    snprintf(number, 24, "%lld", (long long)i);
    return number;
}

/* The label as drawn: at most max_cells glyphs, the last an ellipsis when cut. out has room
 * for 4 * max_cells + 4 bytes. */
static void cut_label(const char *label, int64_t max_cells, char *out)
{
    const char *p = label;
    int64_t cells = viz_text_cells(label);
    size_t used = 0;
    int64_t kept = 0;
    uint32_t cp;
    const char *start = p;
    while ((cp = viz_utf8_next(&p)) != 0) {
        int glyph = viz_codepoint_columns(cp) > 0;
        if (cells > max_cells && kept + glyph > max_cells - 1)
            break;
        memcpy(out + used, start, (size_t)(p - start));
        used += (size_t)(p - start);
        kept += glyph;
        start = p;
    }
    if (cells > max_cells) {
        memcpy(out + used, "\xE2\x80\xA6", 3);
        used += 3;
    }
    out[used] = '\0';
}

static void picture_label(const char *label, char out[4 * MAX_LABEL_CELLS + 4])
{
    cut_label(label, MAX_LABEL_CELLS, out);
}

static int64_t label_cells(const attn_viz_matrix *m, int axis, int64_t i)
{
    char number[24];
    int64_t cells = viz_text_cells(viz_label(m, axis, i, number));
    return cells < MAX_LABEL_CELLS ? cells : MAX_LABEL_CELLS;
}

typedef struct heatmap_layout {
    int cell, scale;               /* cell side; font scale of labels */
    int vertical_columns;          /* source labels rotated to read upwards */
    int row_label_width;           /* room left of the cells */
    int col_label_height;          /* room above the cells */
    int subtitle_height;           /* room above the column labels in a grid */
    int slot_width, slot_height;   /* one panel's share of the grid */
    int grid_columns, grid_rows;
    int top;                       /* below the title */
    int64_t title_cells;           /* glyphs per title line, at most */
    int bar_x, bar_y, bar_height;
} heatmap_layout;

static heatmap_layout plan_layout(const attn_viz_matrix *matrices, int64_t count,
                                  const attn_viz_heatmap_options *options, int *width,
                                  int *height)
{
    heatmap_layout l;
    memset(&l, 0, sizeof l);
    int64_t max_rows = 1, max_cols = 1, row_cells = 1, col_cells = 1;
    for (int64_t k = 0; k < count; k++) {
        const attn_viz_matrix *m = &matrices[k];
        max_rows = m->rows > max_rows ? m->rows : max_rows;
        max_cols = m->cols > max_cols ? m->cols : max_cols;
        for (int64_t i = 0; i < m->rows; i++) {
            int64_t c = label_cells(m, 0, i);
            row_cells = c > row_cells ? c : row_cells;
        }
        for (int64_t j = 0; j < m->cols; j++) {
            int64_t c = label_cells(m, 1, j);
            col_cells = c > col_cells ? c : col_cells;
        }
    }
    int64_t longest = max_rows > max_cols ? max_rows : max_cols;
    if (options->cell_size > 0) {
        l.cell = options->cell_size;
    } else {
        /* About 500 pixels for a single map, 320 per panel of a grid. */
        double target = count > 1 ? 320.0 : 500.0;
        double cell = floor(target / (double)longest);
        l.cell = (int)(cell < 6.0 ? 6.0 : cell > 40.0 ? 40.0 : cell);
    }
    l.scale = l.cell >= 22 ? 2 : 1;
    int advance = VIZ_FONT_ADVANCE * l.scale;
    l.vertical_columns = col_cells * advance > l.cell - 2;
    l.row_label_width = (int)row_cells * advance + LABEL_PAD;
    l.col_label_height = l.vertical_columns ? (int)col_cells * advance + LABEL_PAD
                                            : VIZ_FONT_HEIGHT * l.scale + LABEL_PAD;
    l.subtitle_height = count > 1 ? VIZ_FONT_HEIGHT * l.scale + 10 : 0;
    l.slot_width = l.row_label_width + (int)max_cols * l.cell;
    /* A panel widens for its name, so that names such as "line 3, layer 2, mean of heads"
     * are not cut. */
    for (int64_t k = 0; count > 1 && k < count; k++) {
        if (matrices[k].title == NULL)
            continue;
        const int64_t cells = viz_text_cells(matrices[k].title);
        const int name_width =
            (int)(cells < MAX_SUBTITLE_CELLS ? cells : MAX_SUBTITLE_CELLS) * advance;
        if (l.row_label_width + name_width > l.slot_width)
            l.slot_width = l.row_label_width + name_width;
    }
    l.slot_height = l.subtitle_height + l.col_label_height + (int)max_rows * l.cell;
    int columns = options->grid_columns > 0 ? options->grid_columns
                                            : (int)ceil(sqrt((double)count) - 1e-9);
    l.grid_columns = columns > count ? (int)count : columns;
    l.grid_rows = (int)((count + l.grid_columns - 1) / l.grid_columns);
    int grid_width = l.grid_columns * l.slot_width + (l.grid_columns - 1) * PANEL_GAP;
    int grid_height = l.grid_rows * l.slot_height + (l.grid_rows - 1) * PANEL_GAP;
    l.bar_x = MARGIN + grid_width + BAR_GAP;
    int tick_width = 4 * advance; /* "0.25" */
    *width = l.bar_x + BAR_WIDTH + 4 + LABEL_PAD + tick_width + MARGIN;
    int title_lines = 0;
    if (options->title != NULL) {
        const int64_t cells = viz_text_cells(options->title);
        const int64_t fit = (*width - 2 * MARGIN) / (VIZ_FONT_ADVANCE * TITLE_SCALE);
        const int64_t widened = cells < TITLE_MIN_CELLS ? cells : TITLE_MIN_CELLS;
        l.title_cells = widened > fit ? widened : fit;
        const int title_width = (int)l.title_cells * VIZ_FONT_ADVANCE * TITLE_SCALE + 2 * MARGIN;
        *width = title_width > *width ? title_width : *width;
        title_line lines[MAX_TITLE_LINES];
        title_lines = wrap_title(options->title, l.title_cells, lines);
    }
    l.top = MARGIN + (title_lines > 0 ? title_lines * TITLE_LINE_HEIGHT + 8 : 0);
    l.bar_y = l.top + l.subtitle_height + l.col_label_height;
    int cells_height = (int)max_rows * l.cell;
    l.bar_height = cells_height < 120 ? 120 : cells_height > 400 ? 400 : cells_height;
    *height = l.top + grid_height + MARGIN;
    if (l.bar_y + l.bar_height + VIZ_FONT_HEIGHT * l.scale / 2 + MARGIN > *height)
        *height = l.bar_y + l.bar_height + VIZ_FONT_HEIGHT * l.scale / 2 + MARGIN;
    return l;
}

/* Light text on dark cells, dark text on light ones (by relative luminance). */
static viz_rgb annotation_color(viz_rgb fill)
{
    double luminance = (0.2126 * fill.r + 0.7152 * fill.g + 0.0722 * fill.b) / 255.0;
    return viz_color(luminance < 0.45 ? 0xffffff : text_color);
}

static void format_value(float value, char text[32])
{
    snprintf(text, 32, "%.2f", (double)value);
    if (strncmp(text, "0.", 2) == 0)
        memmove(text, text + 1, strlen(text));
    else if (strncmp(text, "-0.", 3) == 0)
        memmove(text + 1, text + 2, strlen(text + 1));
}

static void draw_panel(viz_scene *scene, const heatmap_layout *l, const attn_viz_matrix *m,
                       const attn_viz_heatmap_options *options, int slot_x, int slot_y)
{
    viz_rgb ink = viz_color(text_color);
    int grid_x = slot_x + l->row_label_width;
    int grid_y = slot_y + l->subtitle_height + l->col_label_height;
    int s = l->scale;
    char label[4 * MAX_LABEL_CELLS + 4], number[24];
    if (m->title != NULL && l->subtitle_height > 0) {
        char subtitle[4 * MAX_SUBTITLE_CELLS + 4];
        cut_label(m->title, MAX_SUBTITLE_CELLS, subtitle);
        viz_item_attributes(scene,
                            viz_scene_text(scene, grid_x, slot_y + VIZ_FONT_BASELINE * s, subtitle,
                                           s, VIZ_ANCHOR_START, 0, ink),
                            "class=\"subtitle\"");
    }
    double span = (double)options->vmax - (double)options->vmin;
    for (int64_t i = 0; i < m->rows; i++) {
        const char *row = viz_label(m, 0, i, number);
        for (int64_t j = 0; j < m->cols; j++) {
            char column_number[24];
            const char *column = viz_label(m, 1, j, column_number);
            float value = m->weights[i * m->cols + j];
            viz_rgb fill = viz_colormap(options->colormap, ((double)value - options->vmin) / span);
            int x = grid_x + (int)j * l->cell, y = grid_y + (int)i * l->cell;
            viz_item *cell = viz_scene_rect(scene, x, y, l->cell, l->cell, fill);
            viz_item_attributes(scene, cell,
                                "class=\"cell\" data-row=\"%lld\" data-col=\"%lld\" "
                                "data-value=\"%.9g\"",
                                (long long)i, (long long)j, (double)value);
            viz_item_tooltip(scene, cell, "%s \xE2\x86\x90 %s: %.3f", row, column, (double)value);
            char text[32];
            format_value(value, text);
            if (options->annotate && viz_text_width(text, 1) + 4 <= l->cell)
                viz_scene_text(scene, x + l->cell / 2.0,
                               y + (l->cell + VIZ_FONT_CAP_HEIGHT) / 2, text, 1,
                               VIZ_ANCHOR_MIDDLE, 0, annotation_color(fill));
        }
        picture_label(row, label);
        viz_item_attributes(scene,
                            viz_scene_text(scene, grid_x - LABEL_PAD,
                                           grid_y + (int)i * l->cell +
                                               (l->cell + VIZ_FONT_CAP_HEIGHT * s) / 2,
                                           label, s, VIZ_ANCHOR_END, 0, ink),
                            "class=\"row-label\"");
    }
    for (int64_t j = 0; j < m->cols; j++) {
        picture_label(viz_label(m, 1, j, number), label);
        int centre = grid_x + (int)j * l->cell + l->cell / 2;
        viz_item *text;
        if (l->vertical_columns)
            /* Rotated, the glyphs' tops face left: the baseline sits right of the centre. */
            text = viz_scene_text(scene, centre + (VIZ_FONT_CAP_HEIGHT * s) / 2,
                                  grid_y - LABEL_PAD, label, s, VIZ_ANCHOR_START, 1, ink);
        else
            text = viz_scene_text(scene, centre, grid_y - LABEL_PAD, label, s, VIZ_ANCHOR_MIDDLE,
                                  0, ink);
        viz_item_attributes(scene, text, "class=\"col-label\"");
    }
    viz_item *frame = viz_scene_rect(scene, grid_x - 0.5, grid_y - 0.5,
                                     (double)m->cols * l->cell + 1, (double)m->rows * l->cell + 1,
                                     viz_color(frame_color));
    if (frame != NULL) {
        frame->has_fill = 0;
        frame->stroke = viz_color(frame_color);
        frame->stroke_width = 1.0;
    }
}

static void draw_colorbar(viz_scene *scene, const heatmap_layout *l,
                          const attn_viz_heatmap_options *options)
{
    viz_rgb ink = viz_color(text_color);
    viz_item *bar =
        viz_scene_colorbar(scene, l->bar_x, l->bar_y, BAR_WIDTH, l->bar_height, options->colormap);
    viz_item_attributes(scene, bar, "class=\"colorbar\" data-vmin=\"%.9g\" data-vmax=\"%.9g\"",
                        (double)options->vmin, (double)options->vmax);
    viz_item *frame = viz_scene_rect(scene, l->bar_x - 0.5, l->bar_y - 0.5, BAR_WIDTH + 1,
                                     l->bar_height + 1, ink);
    if (frame != NULL) {
        frame->has_fill = 0;
        frame->stroke = viz_color(frame_color);
        frame->stroke_width = 1.0;
    }
    for (int k = 0; k <= 4; k++) {
        double fraction = k / 4.0;
        double y = l->bar_y + l->bar_height - fraction * l->bar_height;
        int tick_y = (int)floor(y);
        double x = l->bar_x + BAR_WIDTH;
        viz_scene_line(scene, x, tick_y + 0.5, x + 4, tick_y + 0.5, viz_color(frame_color), 1.0);
        char text[32];
        double value = options->vmin + fraction * ((double)options->vmax - options->vmin);
        snprintf(text, sizeof text, "%.3g", value);
        viz_item_attributes(scene,
                            viz_scene_text(scene, x + 4 + LABEL_PAD,
                                           tick_y + (VIZ_FONT_CAP_HEIGHT * l->scale) / 2, text,
                                           l->scale, VIZ_ANCHOR_START, 0, ink),
                            "class=\"colorbar-tick\"");
    }
}

static void draw_title(viz_scene *scene, const char *title, int64_t max_cells)
{
    title_line lines[MAX_TITLE_LINES];
    const int n = wrap_title(title, max_cells, lines);
    for (int i = 0; i < n; i++) {
        char *text = malloc(lines[i].bytes + 4);
        if (text == NULL) {
            scene->failed = 1;
            return;
        }
        memcpy(text, lines[i].start, lines[i].bytes);
        strcpy(text + lines[i].bytes, lines[i].cut ? "\xE2\x80\xA6" : "");
        viz_item_attributes(
            scene,
            viz_scene_text(scene, scene->width / 2.0,
                           MARGIN + VIZ_FONT_BASELINE * TITLE_SCALE + i * TITLE_LINE_HEIGHT, text,
                           TITLE_SCALE, VIZ_ANCHOR_MIDDLE, 0, viz_color(text_color)),
            "class=\"title\"");
        free(text);
    }
}

static attn_status build_scene(const char *fn, const attn_viz_matrix *matrices, int64_t count,
                               const attn_viz_heatmap_options *options, attn_viz_format format,
                               viz_scene *scene)
{
    memset(scene, 0, sizeof *scene);
    /* A single map has no subtitle, so its own title goes into the picture's: alone, or
     * after the options' title ("TITLE: MAP"), as the terminal text shows both. */
    attn_viz_heatmap_options chosen = *options;
    char *joined = NULL;
    const char *own = count == 1 ? matrices[0].title : NULL;
    if (own != NULL && chosen.title == NULL) {
        chosen.title = own;
    } else if (own != NULL && strcmp(own, chosen.title) != 0) {
        size_t size = strlen(chosen.title) + strlen(own) + 3;
        if ((joined = malloc(size)) == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        snprintf(joined, size, "%s: %s", chosen.title, own);
        chosen.title = joined;
    }
    options = &chosen;
    heatmap_layout l = plan_layout(matrices, count, options, &scene->width, &scene->height);
    /* Known before a single cell is laid out, so an oversized PNG fails at once. */
    if (format == ATTN_VIZ_PNG) {
        attn_status size_status = viz_check_raster_size(fn, scene->width, scene->height);
        if (size_status != ATTN_OK) {
            free(joined);
            return size_status;
        }
    }
    viz_scene_rect(scene, 0, 0, scene->width, scene->height, viz_color(0xffffff));
    if (options->title != NULL)
        draw_title(scene, options->title, l.title_cells);
    for (int64_t k = 0; k < count; k++) {
        int column = (int)(k % l.grid_columns), row = (int)(k / l.grid_columns);
        draw_panel(scene, &l, &matrices[k], options, MARGIN + column * (l.slot_width + PANEL_GAP),
                   l.top + row * (l.slot_height + PANEL_GAP));
    }
    draw_colorbar(scene, &l, options);
    free(joined);
    attn_status status = viz_scene_status(scene, fn);
    if (status != ATTN_OK)
        viz_scene_free(scene);
    return status;
}

attn_status attn_viz_heatmap_render(const attn_viz_matrix *matrices, int64_t count,
                                    const attn_viz_heatmap_options *options,
                                    attn_viz_format format, unsigned char **bytes, size_t *size)
{
    static const char *fn = "attn_viz_heatmap_render";
    ATTN_CHECK_NOT_NULL(bytes);
    ATTN_CHECK_NOT_NULL(size);
    ATTN_TRY(viz_check_heatmap(fn, matrices, count, options));
    attn_viz_heatmap_options defaults = attn_viz_heatmap_default_options();
    viz_scene scene;
    ATTN_TRY(build_scene(fn, matrices, count, options != NULL ? options : &defaults, format,
                         &scene));
    attn_status status = viz_scene_encode(&scene, format, fn, bytes, size);
    viz_scene_free(&scene);
    return status;
}

attn_status attn_viz_heatmap_write(const char *path, const attn_viz_matrix *matrices,
                                   int64_t count, const attn_viz_heatmap_options *options)
{
    static const char *fn = "attn_viz_heatmap_write";
    ATTN_CHECK_NOT_NULL(path);
    attn_viz_format format;
    ATTN_TRY(attn_viz_format_from_path(path, &format));
    ATTN_TRY(viz_check_heatmap(fn, matrices, count, options));
    attn_viz_heatmap_options defaults = attn_viz_heatmap_default_options();
    viz_scene scene;
    ATTN_TRY(build_scene(fn, matrices, count, options != NULL ? options : &defaults, format,
                         &scene));
    attn_status status = viz_scene_write(&scene, fn, path);
    viz_scene_free(&scene);
    return status;
}
