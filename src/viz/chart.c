/* Line charts (training curves): axes with ticks at round numbers, grid lines, a legend. */
#include "viz/viz_internal.h"

#include "attn/attn_data.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MARGIN = 16,
    SCALE = 2, /* font scale of every text in a chart */
    TICK = 5,
    MARKER_LIMIT = 40 /* series with at most this many points get markers */
};

static const unsigned palette[] = {0x1f5fa8, 0xd9580d, 0x2a9d4b, 0xb02a37, 0x6f42c1, 0x555555};
static const unsigned text_color = 0x222222, axis_color = 0x444444, grid_color = 0xe6e6e6;

static int drawable(const attn_viz_series *s, int64_t i)
{
    return isfinite(s->x[i]) && isfinite(s->y[i]);
}

static attn_status check_chart(const char *fn, const attn_viz_series *series, int64_t count,
                               const attn_viz_chart_options *options)
{
    ATTN_CHECK_ARG(series != NULL, "%s: series must not be NULL", fn);
    ATTN_CHECK_ARG(count >= 1 && count <= 64, "%s: count is %lld, expected 1..64 series", fn,
                   (long long)count);
    int64_t points = 0;
    for (int64_t k = 0; k < count; k++) {
        const attn_viz_series *s = &series[k];
        ATTN_CHECK_ARG(s->count >= 0, "%s: series[%lld].count is %lld", fn, (long long)k,
                       (long long)s->count);
        ATTN_CHECK_ARG(s->count == 0 || (s->x != NULL && s->y != NULL),
                       "%s: series[%lld] has %lld points but x or y is NULL", fn, (long long)k,
                       (long long)s->count);
        ATTN_CHECK_ARG(s->name == NULL || attn_utf8_valid(s->name, strlen(s->name)),
                       "%s: series[%lld].name is not valid UTF-8", fn, (long long)k);
        for (int64_t i = 0; i < s->count; i++)
            points += drawable(s, i);
    }
    ATTN_CHECK_ARG(points > 0, "%s: no series has a point with finite x and y", fn);
    if (options == NULL)
        return ATTN_OK;
    ATTN_CHECK_ARG((options->width == 0 && options->height == 0) ||
                       (options->width >= 200 && options->width <= 4000 &&
                        options->height >= 200 && options->height <= 4000),
                   "%s: the size %d x %d is outside 200..4000 pixels (0 x 0: the default)", fn,
                   options->width, options->height);
    const char *texts[] = {options->title, options->x_label, options->y_label};
    for (int i = 0; i < 3; i++)
        ATTN_CHECK_ARG(texts[i] == NULL || attn_utf8_valid(texts[i], strlen(texts[i])),
                       "%s: a title or axis label is not valid UTF-8", fn);
    return ATTN_OK;
}

typedef struct axis {
    double lo, hi, step;
    int decimals;
} axis;

/* About five ticks at multiples of 1, 2, 2.5 or 5 times a power of ten, the ends rounded out
 * to ticks. */
static axis nice_axis(double lo, double hi)
{
    axis a;
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double rough = (hi - lo) / 5.0;
    double power = pow(10.0, floor(log10(rough)));
    static const double steps[] = {1.0, 2.0, 2.5, 5.0, 10.0};
    double step = 10.0 * power;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i] * power >= rough) {
            step = steps[i] * power;
            break;
        }
    a.step = step;
    a.lo = floor(lo / step + 1e-9) * step;
    a.hi = ceil(hi / step - 1e-9) * step;
    int decimals = (int)-floor(log10(step) + 1e-9);
    if (fabs(step / power - 2.5) < 1e-9)
        decimals++;
    a.decimals = decimals > 0 ? decimals : 0;
    return a;
}

static void tick_text(const axis *a, double value, char text[40])
{
    if (fabs(value) < a->step * 1e-6)
        value = 0.0;
    if (fabs(value) >= 1e7 || (a->decimals > 6 && value != 0.0))
        snprintf(text, 40, "%.3g", value);
    else
        snprintf(text, 40, "%.*f", a->decimals, value);
}

static int tick_count(const axis *a)
{
    return (int)floor((a->hi - a->lo) / a->step + 0.5) + 1;
}

typedef struct plot {
    double left, right, top, bottom;
    axis x, y;
} plot;

static double to_px(const plot *p, double x)
{
    return p->left + (x - p->x.lo) / (p->x.hi - p->x.lo) * (p->right - p->left);
}

static double to_py(const plot *p, double y)
{
    return p->bottom - (y - p->y.lo) / (p->y.hi - p->y.lo) * (p->bottom - p->top);
}

static void data_range(const attn_viz_series *series, int64_t count, double range[4])
{
    range[0] = range[2] = DBL_MAX;
    range[1] = range[3] = -DBL_MAX;
    for (int64_t k = 0; k < count; k++)
        for (int64_t i = 0; i < series[k].count; i++)
            if (drawable(&series[k], i)) {
                range[0] = fmin(range[0], series[k].x[i]);
                range[1] = fmax(range[1], series[k].x[i]);
                range[2] = fmin(range[2], series[k].y[i]);
                range[3] = fmax(range[3], series[k].y[i]);
            }
}

static void draw_axes(viz_scene *scene, const plot *p, const attn_viz_chart_options *options)
{
    viz_rgb ink = viz_color(text_color), grid = viz_color(grid_color);
    viz_rgb axis_ink = viz_color(axis_color);
    int cap = VIZ_FONT_CAP_HEIGHT * SCALE;
    char text[40];
    for (int i = 0; i < tick_count(&p->x); i++) {
        double value = p->x.lo + i * p->x.step;
        double x = floor(to_px(p, value)) + 0.5;
        viz_scene_line(scene, x, p->top, x, p->bottom, grid, 1.0);
        viz_scene_line(scene, x, p->bottom, x, p->bottom + TICK, axis_ink, 1.0);
        tick_text(&p->x, value, text);
        viz_item_attributes(scene,
                            viz_scene_text(scene, x, p->bottom + TICK + 4 + cap, text, SCALE,
                                           VIZ_ANCHOR_MIDDLE, 0, ink),
                            "class=\"x-tick\"");
    }
    for (int i = 0; i < tick_count(&p->y); i++) {
        double value = p->y.lo + i * p->y.step;
        double y = floor(to_py(p, value)) + 0.5;
        viz_scene_line(scene, p->left, y, p->right, y, grid, 1.0);
        viz_scene_line(scene, p->left - TICK, y, p->left, y, axis_ink, 1.0);
        tick_text(&p->y, value, text);
        viz_item_attributes(scene,
                            viz_scene_text(scene, p->left - TICK - 4, floor(y) + cap / 2, text,
                                           SCALE, VIZ_ANCHOR_END, 0, ink),
                            "class=\"y-tick\"");
    }
    viz_scene_line(scene, p->left - 0.5, p->top, p->left - 0.5, p->bottom + 0.5, axis_ink, 1.0);
    viz_scene_line(scene, p->left - 0.5, p->bottom + 0.5, p->right, p->bottom + 0.5, axis_ink,
                   1.0);
    if (options->x_label != NULL)
        viz_item_attributes(scene,
                            viz_scene_text(scene, (p->left + p->right) / 2,
                                           p->bottom + TICK + 4 + cap + 10 +
                                               VIZ_FONT_HEIGHT * SCALE,
                                           options->x_label, SCALE, VIZ_ANCHOR_MIDDLE, 0, ink),
                            "class=\"x-label\"");
    if (options->y_label != NULL)
        viz_item_attributes(scene,
                            viz_scene_text(scene, MARGIN + cap, floor((p->top + p->bottom) / 2),
                                           options->y_label, SCALE, VIZ_ANCHOR_MIDDLE, 1, ink),
                            "class=\"y-label\"");
}

static int64_t drawable_points(const attn_viz_series *s)
{
    int64_t n = 0;
    for (int64_t i = 0; i < s->count; i++)
        n += drawable(s, i);
    return n;
}

/* One polyline per run of drawable points, and markers on short series. */
static void draw_series(viz_scene *scene, const plot *p, const attn_viz_series *s, int64_t k,
                        double *xy)
{
    viz_rgb color = viz_color(palette[k % (int64_t)(sizeof palette / sizeof palette[0])]);
    size_t run = 0;
    for (int64_t i = 0; i <= s->count; i++) {
        if (i < s->count && drawable(s, i)) {
            xy[2 * run] = to_px(p, s->x[i]);
            xy[2 * run + 1] = to_py(p, s->y[i]);
            run++;
            continue;
        }
        if (run > 0)
            viz_item_attributes(scene, viz_scene_polyline(scene, xy, run, color, 2.0),
                                "class=\"series\" data-series=\"%lld\"", (long long)k);
        run = 0;
    }
    if (drawable_points(s) > MARKER_LIMIT)
        return;
    for (int64_t i = 0; i < s->count; i++)
        if (drawable(s, i)) {
            viz_item *marker = viz_scene_circle(scene, to_px(p, s->x[i]), to_py(p, s->y[i]),
                                                3.5, color);
            viz_item_attributes(scene, marker, "class=\"marker\" data-series=\"%lld\"",
                                (long long)k);
            viz_item_tooltip(scene, marker, "%s: (%g, %g)", s->name != NULL ? s->name : "",
                             s->x[i], s->y[i]);
        }
}

static void draw_legend(viz_scene *scene, const plot *p, const attn_viz_series *series,
                        int64_t count)
{
    double name_width = 0;
    int64_t named = 0;
    for (int64_t k = 0; k < count; k++)
        if (series[k].name != NULL) {
            name_width = fmax(name_width, viz_text_width(series[k].name, SCALE));
            named++;
        }
    if (named == 0)
        return;
    int row_height = VIZ_FONT_HEIGHT * SCALE;
    double width = 8 + 28 + 8 + name_width + 8, height = (double)named * row_height + 8;
    double x = floor(p->right - width - 8) + 0.5, y = floor(p->top + 8) + 0.5;
    viz_item *box = viz_scene_rect(scene, x, y, width, height, viz_color(0xffffff));
    if (box != NULL) {
        box->stroke = viz_color(0xbbbbbb);
        box->stroke_width = 1.0;
    }
    viz_item_attributes(scene, box, "class=\"legend\"");
    int64_t row = 0;
    for (int64_t k = 0; k < count; k++) {
        if (series[k].name == NULL)
            continue;
        viz_rgb color = viz_color(palette[k % (int64_t)(sizeof palette / sizeof palette[0])]);
        double centre = floor(y + 4 + (double)row * row_height + row_height / 2.0);
        viz_scene_line(scene, x + 8, centre, x + 36, centre, color, 2.0);
        if (drawable_points(&series[k]) <= MARKER_LIMIT)
            viz_scene_circle(scene, x + 22, centre, 3.5, color);
        viz_item_attributes(scene,
                            viz_scene_text(scene, x + 44,
                                           centre + (VIZ_FONT_CAP_HEIGHT * SCALE) / 2,
                                           series[k].name, SCALE, VIZ_ANCHOR_START, 0,
                                           viz_color(text_color)),
                            "class=\"legend-name\"");
        row++;
    }
}

static attn_status build_chart(const char *fn, const attn_viz_series *series, int64_t count,
                               const attn_viz_chart_options *options, viz_scene *scene)
{
    memset(scene, 0, sizeof *scene);
    scene->width = options->width > 0 ? options->width : 720;
    scene->height = options->height > 0 ? options->height : 440;
    double range[4];
    data_range(series, count, range);
    plot p;
    p.x = nice_axis(range[0], range[1]);
    p.y = nice_axis(range[2], range[3]);

    double tick_width = 0;
    char text[40];
    for (int i = 0; i < tick_count(&p.y); i++) {
        tick_text(&p.y, p.y.lo + i * p.y.step, text);
        tick_width = fmax(tick_width, viz_text_width(text, SCALE));
    }
    int line = VIZ_FONT_HEIGHT * SCALE;
    p.left = MARGIN + (options->y_label != NULL ? line + 8 : 0) + tick_width + TICK + 8;
    p.right = scene->width - MARGIN - 24; /* room for half of the last x tick label */
    p.top = MARGIN + (options->title != NULL ? line + 12 : 8);
    p.bottom = scene->height - MARGIN - line - TICK - 4 - (options->x_label != NULL ? line + 6 : 0);
    p.left = floor(p.left);
    ATTN_CHECK_ARG(p.right - p.left >= 40 && p.bottom - p.top >= 40,
                   "%s: a %d x %d chart leaves no room for the plot", fn, scene->width,
                   scene->height);

    size_t longest = 1;
    for (int64_t k = 0; k < count; k++)
        longest = (size_t)series[k].count > longest ? (size_t)series[k].count : longest;
    double *xy = malloc(2 * longest * sizeof *xy);
    if (xy == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);

    viz_scene_rect(scene, 0, 0, scene->width, scene->height, viz_color(0xffffff));
    if (options->title != NULL)
        viz_item_attributes(scene,
                            viz_scene_text(scene, scene->width / 2.0,
                                           MARGIN + VIZ_FONT_BASELINE * SCALE, options->title,
                                           SCALE, VIZ_ANCHOR_MIDDLE, 0, viz_color(text_color)),
                            "class=\"title\"");
    draw_axes(scene, &p, options);
    /* The plot area and its data range, for readers of the SVG (and the tests). */
    viz_item *area = viz_scene_rect(scene, p.left, p.top, p.right - p.left, p.bottom - p.top,
                                    viz_color(0xffffff));
    if (area != NULL)
        area->has_fill = 0;
    viz_item_attributes(scene, area,
                        "class=\"plot-area\" data-x-min=\"%.17g\" data-x-max=\"%.17g\" "
                        "data-y-min=\"%.17g\" data-y-max=\"%.17g\"",
                        p.x.lo, p.x.hi, p.y.lo, p.y.hi);
    for (int64_t k = 0; k < count; k++)
        draw_series(scene, &p, &series[k], k, xy);
    draw_legend(scene, &p, series, count);
    free(xy);
    attn_status status = viz_scene_status(scene, fn);
    if (status != ATTN_OK)
        viz_scene_free(scene);
    return status;
}

attn_status attn_viz_chart_render(const attn_viz_series *series, int64_t count,
                                  const attn_viz_chart_options *options, attn_viz_format format,
                                  unsigned char **bytes, size_t *size)
{
    static const char *fn = "attn_viz_chart_render";
    ATTN_CHECK_NOT_NULL(bytes);
    ATTN_CHECK_NOT_NULL(size);
    ATTN_TRY(check_chart(fn, series, count, options));
    attn_viz_chart_options defaults = {0};
    viz_scene scene;
    ATTN_TRY(build_chart(fn, series, count, options != NULL ? options : &defaults, &scene));
    attn_status status = viz_scene_encode(&scene, format, fn, bytes, size);
    viz_scene_free(&scene);
    return status;
}

attn_status attn_viz_chart_write(const char *path, const attn_viz_series *series, int64_t count,
                                 const attn_viz_chart_options *options)
{
    static const char *fn = "attn_viz_chart_write";
    ATTN_CHECK_NOT_NULL(path);
    attn_viz_format format;
    ATTN_TRY(attn_viz_format_from_path(path, &format));
    ATTN_TRY(check_chart(fn, series, count, options));
    attn_viz_chart_options defaults = {0};
    viz_scene scene;
    ATTN_TRY(build_chart(fn, series, count, options != NULL ? options : &defaults, &scene));
    attn_status status = viz_scene_write(&scene, fn, path);
    viz_scene_free(&scene);
    return status;
}
