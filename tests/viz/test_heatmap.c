/* Heat maps: colour maps, the SVG and PNG pictures of the same scene, terminal text, errors. */
#include "viz_test_util.h"

#include <math.h>
#include <sys/stat.h>

static const char *const source[] = {"p", "h", "o", "e", "n", "i", "x"};
static const char *const target[] = {"F", "IY", "N", "IH", "K", "S"};

/* A made-up alignment of "phoenix" to F IY N IH K S, with values that differ in every cell. */
static void phoenix_weights(float w[6 * 7])
{
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 7; j++)
            w[i * 7 + j] = (float)((i * 7 + j) % 11) / 10.0f;
}

static attn_viz_matrix phoenix(const float *w)
{
    attn_viz_matrix m = {w, 6, 7, target, source, NULL};
    return m;
}

/* CIE L* of an 8-bit sRGB colour, written independently of the library. */
static double lightness(const unsigned char rgb[3])
{
    double linear[3];
    for (int k = 0; k < 3; k++) {
        double c = rgb[k] / 255.0;
        linear[k] = c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4);
    }
    double y = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2];
    double f = y > 216.0 / 24389.0 ? cbrt(y) : (24389.0 / 27.0 * y + 16.0) / 116.0;
    return 116.0 * f - 16.0;
}

static void test_colormaps_ramp_evenly_in_lightness(void)
{
    const attn_viz_colormap maps[2] = {ATTN_VIZ_BLUES, ATTN_VIZ_GREYS};
    for (int m = 0; m < 2; m++) {
        unsigned char first[3], last[3];
        CHECK_OK(attn_viz_colormap_rgb(maps[m], 0.0, first));
        CHECK_OK(attn_viz_colormap_rgb(maps[m], 1.0, last));
        double l0 = lightness(first), l1 = lightness(last);
        CHECK(fabs(l1 - l0) > 60.0, "map %d spans %g to %g in L*", m, l0, l1);
        int even = 1;
        for (int k = 0; k <= 20; k++) {
            double t = k / 20.0;
            unsigned char rgb[3];
            CHECK_OK(attn_viz_colormap_rgb(maps[m], t, rgb));
            double expected = l0 + t * (l1 - l0);
            if (fabs(lightness(rgb) - expected) > 1.0) {
                even = 0;
                fprintf(stderr, "map %d at %g: L* %g, expected %g\n", m, t, lightness(rgb),
                        expected);
            }
        }
        CHECK(even, "map %d: L* linear in the value", m);
    }
    unsigned char rgb[3], low[3], high[3];
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_BLUES, 0.0, low));
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_BLUES, 1.0, high));
    CHECK(low[0] > 230 && low[1] > 230 && low[2] > 230, "blues start near white");
    CHECK(high[2] > high[0] && high[2] > high[1] && high[2] < 160, "blues end in dark blue");
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_GREYS, 0.0, rgb));
    CHECK(rgb[0] == 0 && rgb[1] == 0 && rgb[2] == 0, "greys: 0 is black");
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_GREYS, 1.0, rgb));
    CHECK(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255, "greys: 1 is white");
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_GREYS, 7.0, rgb));
    CHECK(rgb[0] == 255, "values above 1 are clamped");
    CHECK_OK(attn_viz_colormap_rgb(ATTN_VIZ_GREYS, NAN, rgb));
    CHECK(rgb[0] == 0, "NaN counts as 0");
    CHECK_FAILS(attn_viz_colormap_rgb(ATTN_VIZ_BLUES, 0.5, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_colormap_rgb((attn_viz_colormap)9, 0.5, rgb), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_format_follows_the_extension(void)
{
    attn_viz_format format;
    CHECK_OK(attn_viz_format_from_path("out/a.svg", &format));
    CHECK(format == ATTN_VIZ_SVG, "svg");
    CHECK_OK(attn_viz_format_from_path("A.PNG", &format));
    CHECK(format == ATTN_VIZ_PNG, "PNG in capitals");
    CHECK_FAILS(attn_viz_format_from_path("a.jpg", &format), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), ".jpg") != NULL, "names the extension: %s", attn_last_error());
    CHECK_FAILS(attn_viz_format_from_path("dir.png/picture", &format), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_format_from_path(NULL, &format), ATTN_ERR_INVALID_ARGUMENT);
}

/* The cell rectangles of an SVG, in document order: x, y, width, height, value. */
static int svg_cells(const char *svg, double cells[][5], int capacity)
{
    int n = 0;
    for (const char *p = strstr(svg, "<rect"); p != NULL; p = strstr(p + 1, "<rect")) {
        const char *end = strchr(p, '>');
        const char *mark = strstr(p, "class=\"cell\"");
        if (mark == NULL || mark > end)
            continue;
        if (n == capacity)
            return -1;
        cells[n][0] = attribute_number(p, "x");
        cells[n][1] = attribute_number(p, "y");
        cells[n][2] = attribute_number(p, "width");
        cells[n][3] = attribute_number(p, "height");
        cells[n][4] = attribute_number(p, "data-value");
        n++;
    }
    return n;
}

static void test_png_shows_the_svg_cells_in_their_colours(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    const attn_viz_colormap maps[2] = {ATTN_VIZ_BLUES, ATTN_VIZ_GREYS};
    for (int mi = 0; mi < 2; mi++) {
        attn_viz_heatmap_options options = attn_viz_heatmap_default_options();
        options.title = "phoenix";
        options.colormap = maps[mi];
        options.vmin = -0.2f; /* a scale that is not 0..1, to see it used */
        options.vmax = 1.2f;
        unsigned char *svg = NULL, *png = NULL;
        size_t svg_size = 0, png_size = 0;
        CHECK_OK(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &svg, &svg_size));
        CHECK_OK(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_PNG, &png, &png_size));
        if (svg == NULL || png == NULL)
            return;
        CHECK(strlen((const char *)svg) == svg_size, "SVG size");
        int width = 0, height = 0;
        unsigned char *pixels = decode_png(png, png_size, &width, &height);
        CHECK(pixels != NULL, "the PNG decodes");
        const char *root = strstr((const char *)svg, "<svg");
        CHECK(root != NULL && attribute_number(root, "width") == width &&
                  attribute_number(root, "height") == height,
              "PNG and SVG have the same size (%d x %d)", width, height);
        double cells[64][5];
        int n = svg_cells((const char *)svg, cells, 64);
        CHECK(n == 42, "one cell per weight, got %d", n);
        int colours_match = 1, in_order = 1;
        for (int c = 0; pixels != NULL && c < n; c++) {
            int i = c / 7, j = c % 7;
            CHECK_CLOSE(cells[c][4], w[i * 7 + j], 1e-6, 0);
            if (c > 0 && j > 0 && !(cells[c][0] > cells[c - 1][0] && cells[c][1] == cells[c - 1][1]))
                in_order = 0;
            if (c >= 7 && !(cells[c][1] > cells[c - 7][1] && cells[c][0] == cells[c - 7][0]))
                in_order = 0;
            int px = (int)(cells[c][0] + cells[c][2] / 2), py = (int)(cells[c][1] + cells[c][3] / 2);
            unsigned char expected[3];
            attn_viz_colormap_rgb(maps[mi], (w[i * 7 + j] + 0.2) / 1.4, expected);
            const unsigned char *got = pixels + 3 * ((size_t)py * (size_t)width + (size_t)px);
            if (memcmp(got, expected, 3) != 0) {
                colours_match = 0;
                fprintf(stderr, "cell (%d, %d) at (%d, %d): %d %d %d, expected %d %d %d\n", i, j,
                        px, py, got[0], got[1], got[2], expected[0], expected[1], expected[2]);
            }
        }
        CHECK(in_order, "rows go down, columns go right");
        CHECK(colours_match, "each PNG cell has its weight's colour (map %d)", mi);
        /* Labels are drawn: dark pixels left of the first cell, in its row. */
        int dark = 0;
        for (int x = 0; pixels != NULL && n > 0 && x < (int)cells[0][0]; x++)
            for (int y = (int)cells[0][1]; y < (int)(cells[0][1] + cells[0][3]); y++)
                dark += pixels[3 * ((size_t)y * (size_t)width + (size_t)x)] < 100;
        CHECK(dark > 10, "the row label 'F' is drawn (%d dark pixels)", dark);
        free(pixels);
        free(svg);
        free(png);
    }
}

static void test_svg_escapes_labels(void)
{
    const char *const rows[] = {"<s>", "a&b"};
    const char *const cols[] = {"\"q\"", "é", "x\x01y"};
    float w[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    attn_viz_matrix m = {w, 2, 3, rows, cols, NULL};
    unsigned char *svg = NULL;
    size_t size = 0;
    CHECK_OK(attn_viz_heatmap_render(&m, 1, NULL, ATTN_VIZ_SVG, &svg, &size));
    if (svg == NULL)
        return;
    const char *text = (const char *)svg;
    CHECK(strstr(text, ">&lt;s&gt;</text>") != NULL, "< and > escaped");
    CHECK(strstr(text, ">a&amp;b</text>") != NULL, "& escaped");
    CHECK(strstr(text, ">&quot;q&quot;</text>") != NULL, "quotes escaped");
    CHECK(strstr(text, ">é</text>") != NULL, "UTF-8 kept");
    CHECK(strchr(text, '\x01') == NULL, "control characters replaced");
    CHECK(strstr(text, "<s>") == NULL, "no raw label markup");
    free(svg);
}

/* A single map's own title reaches the picture's title: after the options' title when both
 * are given (no subtitle, the panel would cut it), alone when none is. */
static void test_single_map_keeps_its_title(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    m.title = "layer 2, head 1";
    attn_viz_heatmap_options options = attn_viz_heatmap_default_options();
    const char *picture_titles[2] = {"phoenix to phonemes", NULL};
    const char *expected[2] = {"phoenix to phonemes: layer 2, head 1", "layer 2, head 1"};
    for (int k = 0; k < 2; k++) {
        options.title = picture_titles[k];
        unsigned char *svg = NULL;
        size_t size = 0;
        CHECK_OK(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &svg, &size));
        if (svg == NULL)
            return;
        const char *text = (const char *)svg;
        CHECK(count_occurrences(text, "layer 2, head 1") == 1 &&
                  strstr(text, expected[k]) != NULL,
              "the picture's title is '%s'", expected[k]);
        CHECK(count_occurrences(text, "class=\"subtitle\"") == 0, "no subtitle");
        free(svg);
    }
}

static void test_grid_has_a_panel_per_matrix(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix panels[5];
    const char *titles[5] = {"layer 0, head 0", "layer 0, head 1", "layer 1, head 0",
                             "layer 1, head 1", "layer 2, head 0"};
    for (int k = 0; k < 5; k++) {
        panels[k] = phoenix(w);
        panels[k].title = titles[k];
    }
    attn_viz_heatmap_options options = attn_viz_heatmap_default_options();
    options.grid_columns = 2;
    unsigned char *svg = NULL;
    size_t size = 0;
    CHECK_OK(attn_viz_heatmap_render(panels, 5, &options, ATTN_VIZ_SVG, &svg, &size));
    if (svg == NULL)
        return;
    const char *text = (const char *)svg;
    for (int k = 0; k < 5; k++)
        CHECK(strstr(text, titles[k]) != NULL, "sub-title %s", titles[k]);
    CHECK(count_occurrences(text, "class=\"cell\"") == 5 * 42, "5 panels of 42 cells");
    CHECK(count_occurrences(text, "class=\"colorbar\"") == 1, "one shared colour bar");
    double cells[5 * 42][5];
    CHECK(svg_cells(text, cells, 5 * 42) == 5 * 42, "cells parsed");
    CHECK(cells[42][1] == cells[0][1] && cells[42][0] > cells[0][0], "panel 1 right of panel 0");
    CHECK(cells[84][0] == cells[0][0] && cells[84][1] > cells[0][1], "panel 2 under panel 0");
    free(svg);
}

/* The width of a rendered SVG, from its root element. */
static int svg_width(const char *text)
{
    const char *at = strstr(text, "width=\"");
    return at != NULL ? atoi(at + 7) : -1;
}

static void test_a_long_title_wraps_within_the_map_width(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    unsigned char *plain = NULL, *titled = NULL;
    size_t size = 0;
    CHECK_OK(attn_viz_heatmap_render(&m, 1, NULL, ATTN_VIZ_SVG, &plain, &size));
    attn_viz_heatmap_options options = attn_viz_heatmap_default_options();
    options.title = "the phoenix is a long-lived bird that is cyclically regenerated or "
                    "reborn, rising from the ashes of its predecessor, as told in many myths";
    CHECK_OK(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &titled, &size));
    if (plain == NULL || titled == NULL) {
        free(plain);
        free(titled);
        return;
    }
    const int width = svg_width((const char *)titled), map_width = svg_width((const char *)plain);
    /* 40 glyphs of 12 pixels and the margins at most, where one line took 1,800 pixels */
    CHECK(width <= (map_width > 512 ? map_width : 512), "width %d for a map %d wide", width,
          map_width);
    CHECK(count_occurrences((const char *)titled, "class=\"title\"") == 3, "3 title lines");
    CHECK(strstr((const char *)titled, ">the phoenix is a long-lived bird that is<") != NULL,
          "broken at a space: %.600s", (const char *)titled);
    free(plain);
    free(titled);
}

static void test_terminal_text_has_labels_and_shades(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    char *text = NULL;
    CHECK_OK(attn_viz_heatmap_text(&m, 1, NULL, NULL, &text));
    if (text == NULL)
        return;
    CHECK(count_occurrences(text, "\n") == 6 + 1 + 2, "header, 6 rows, blank, scale: %s", text);
    CHECK(strstr(text, "   p h o e n i x") != NULL, "source labels over the columns:\n%s", text);
    CHECK(strncmp(strstr(text, "\nIY"), "\nIY ", 4) == 0, "row label then the cells");
    CHECK(strstr(text, "\xE2\x96\x88") != NULL && strstr(text, "\xE2\x96\x91") != NULL,
          "shade blocks");
    free(text);

    attn_viz_text_options ascii = {ATTN_VIZ_TEXT_ASCII, 0, 0};
    const char *const rows[] = {"Économique", "zone"};
    const char *const cols[] = {"européenne", "東京", "a"};
    float small[6] = {0, 0.5f, 1, 1, 0.5f, 0};
    attn_viz_matrix accented = {small, 2, 3, rows, cols, "tête"};
    CHECK_OK(attn_viz_heatmap_text(&accented, 1, NULL, &ascii, &text));
    if (text != NULL) {
        int plain = 1;
        for (const char *p = text; *p; p++)
            plain &= (unsigned char)*p < 0x80;
        CHECK(plain, "ASCII style writes only ASCII:\n%s", text);
        CHECK(strstr(text, "tete") != NULL && strstr(text, "Economique") != NULL,
              "accents dropped to base letters:\n%s", text);
        CHECK(strstr(text, "?") != NULL, "other characters become '?':\n%s", text);
        /* "européenne" does not fit a cell: the labels run downwards, cut after 8 lines. */
        const char *line = strchr(text, '\n');
        char column[9] = {0};
        for (int k = 0; k < 8 && line != NULL; k++) {
            column[k] = strlen(line + 1) > 11 ? line[1 + 11] : '\0';
            line = strchr(line + 1, '\n');
        }
        CHECK(strcmp(column, "europee~") == 0, "vertical source label, got '%s':\n%s", column,
              text);
        CHECK(strstr(text, "@@") != NULL, "full weights use the darkest character");
        free(text);
    }

    attn_viz_text_options narrow = {ATTN_VIZ_TEXT_COLOR256, 24, 5};
    CHECK_OK(attn_viz_heatmap_text(&accented, 1, NULL, &narrow, &text));
    if (text != NULL) {
        CHECK(strstr(text, "Écon\xE2\x80\xA6") != NULL, "long row label cut to 5 columns:\n%s",
              text);
        CHECK(strstr(text, "\x1b[48;5;") != NULL, "256-colour backgrounds");
        free(text);
    }
    CHECK_FAILS(attn_viz_heatmap_text(&m, 1, NULL, &(attn_viz_text_options){ATTN_VIZ_TEXT_ASCII,
                                                                             5, 0},
                                      &text),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_heatmap_text(&m, 1, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_bad_heatmaps_are_refused(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    unsigned char *bytes = NULL;
    size_t size = 0;
    CHECK_FAILS(attn_viz_heatmap_render(NULL, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_heatmap_render(&m, 0, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, NULL, ATTN_VIZ_SVG, NULL, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, NULL, (attn_viz_format)7, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_viz_matrix bad = m;
    bad.rows = 0;
    CHECK_FAILS(attn_viz_heatmap_render(&bad, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = m;
    bad.weights = NULL;
    CHECK_FAILS(attn_viz_heatmap_render(&bad, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    w[9] = NAN;
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "[1][2]") != NULL, "names the cell: %s", attn_last_error());
    w[9] = 0.5f;
    const char *const broken[] = {"p", "h", "\xC3", "e", "n", "i", "x"};
    bad = m;
    bad.col_labels = broken;
    CHECK_FAILS(attn_viz_heatmap_render(&bad, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    const char *const missing[] = {"F", NULL, "N", "IH", "K", "S"};
    bad = m;
    bad.row_labels = missing;
    CHECK_FAILS(attn_viz_heatmap_render(&bad, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_viz_heatmap_options options = attn_viz_heatmap_default_options();
    options.vmin = 1.0f;
    options.vmax = 1.0f;
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    options = attn_viz_heatmap_default_options();
    options.cell_size = 3;
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    options = attn_viz_heatmap_default_options();
    options.colormap = (attn_viz_colormap)5;
    CHECK_FAILS(attn_viz_heatmap_render(&m, 1, &options, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    /* A picture too large to rasterise fails cleanly rather than allocating gigabytes. */
    static float big[300 * 300];
    attn_viz_matrix huge = {big, 300, 300, NULL, NULL, NULL};
    options = attn_viz_heatmap_default_options();
    options.cell_size = 200;
    CHECK_FAILS(attn_viz_heatmap_render(&huge, 1, &options, ATTN_VIZ_PNG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
}

static void test_files_are_written_whole_or_not_at_all(void)
{
    float w[6 * 7];
    phoenix_weights(w);
    attn_viz_matrix m = phoenix(w);
    const char *path = test_scratch_path("map.png");
    CHECK_OK(attn_viz_heatmap_write(path, &m, 1, NULL));
    struct stat info;
    CHECK(stat(path, &info) == 0 && info.st_size > 100, "the PNG is there");
    mode_t mask = umask(0);
    umask(mask);
    CHECK((info.st_mode & 0777) == (0666 & ~mask), "an ordinary file's permissions: %o",
          (unsigned)(info.st_mode & 0777));
    FILE *f = fopen(path, "rb");
    unsigned char signature[8] = {0};
    if (f != NULL) {
        CHECK(fread(signature, 1, 8, f) == 8, "read the signature");
        fclose(f);
    }
    CHECK(memcmp(signature, "\x89PNG\r\n\x1a\n", 8) == 0, "PNG signature");
    CHECK_OK(attn_viz_heatmap_write(test_scratch_path("map.svg"), &m, 1, NULL));
    CHECK(folder_entries(test_scratch_folder()) == 2, "no temporary files left behind");

    CHECK_FAILS(attn_viz_heatmap_write(test_scratch_path("map.jpg"), &m, 1, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_heatmap_write(test_scratch_path("no/such/folder/map.png"), &m, 1, NULL),
                ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "no/such/folder/map.png") != NULL, "names the path: %s",
          attn_last_error());
    /* Renaming over a folder fails after the temporary file was written: it must go. */
    const char *folder = test_scratch_path("taken.svg");
    CHECK(mkdir(folder, 0755) == 0, "made a folder named like the output");
    CHECK_FAILS(attn_viz_heatmap_write(folder, &m, 1, NULL), ATTN_ERR_IO);
    CHECK(folder_entries(test_scratch_folder()) == 3, "the failed write left no temporary file");
    CHECK_FAILS(attn_viz_heatmap_write(NULL, &m, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_colormaps_ramp_evenly_in_lightness);
    RUN_TEST(test_format_follows_the_extension);
    RUN_TEST(test_a_long_title_wraps_within_the_map_width);
    RUN_TEST(test_png_shows_the_svg_cells_in_their_colours);
    RUN_TEST(test_svg_escapes_labels);
    RUN_TEST(test_single_map_keeps_its_title);
    RUN_TEST(test_grid_has_a_panel_per_matrix);
    RUN_TEST(test_terminal_text_has_labels_and_shades);
    RUN_TEST(test_bad_heatmaps_are_refused);
    RUN_TEST(test_files_are_written_whole_or_not_at_all);
    return test_summary();
}
