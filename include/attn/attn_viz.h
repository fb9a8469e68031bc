/* attn pictures: heat maps of attention weights (SVG, PNG, terminal) and training curves.
 *
 * Everything here takes plain arrays, so a decoder can draw the cross-attention it returns and a
 * training loop can plot its own log without going through files.
 *
 * Conventions:
 *  - A heat map shows one matrix of weights [rows, cols]: rows are the output (target) tokens,
 *    drawn top to bottom with their labels on the left; columns are the source tokens, drawn
 *    left to right with their labels along the top (vertical when they do not fit a cell).
 *  - Labels are UTF-8. SVG keeps them as text. PNG draws them with a built-in 5x7 bitmap font
 *    covering printable ASCII; Latin letters with diacritics (U+00C0..U+017F) are drawn as the
 *    base letter with the accent above it (acute, grave, circumflex, diaeresis, tilde, ring,
 *    caron, macron, breve, dot, cedilla; other marks are dropped, keeping the base letter);
 *    typographic quotes and dashes become their ASCII forms, U+2581 (the SentencePiece word
 *    mark) becomes '_', the arrows U+2190/U+2192 and the ellipsis U+2026 have glyphs, and any
 *    other character is drawn as a hollow box.
 *  - The output format follows the file name: ".svg" or ".png" (any case); anything else is
 *    ATTN_ERR_INVALID_ARGUMENT. Files are written atomically: a temporary file in the same
 *    folder, synced, then renamed over the destination.
 *  - Rendered bytes and strings returned through an out pointer are malloc'ed: free() them.
 */
#ifndef ATTN_VIZ_H
#define ATTN_VIZ_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_viz_format {
    ATTN_VIZ_SVG = 1,
    ATTN_VIZ_PNG = 2
} attn_viz_format;

/* The format a file name asks for, from its extension. */
ATTN_API attn_status attn_viz_format_from_path(const char *path, attn_viz_format *format);

/* Sequential colour maps, each ramping evenly in CIE L* lightness so equal steps of weight look
 * like equal steps of shade. */
typedef enum attn_viz_colormap {
    ATTN_VIZ_BLUES = 0, /* white (0) to dark blue (1): the usual alignment figure */
    ATTN_VIZ_GREYS = 1  /* black (0) to white (1), as in Bahdanau et al. (2015), Fig. 3 */
} attn_viz_colormap;

/* The 8-bit sRGB colour of t in [0, 1] (clamped; NaN counts as 0). rgb receives 3 bytes. */
ATTN_API attn_status attn_viz_colormap_rgb(attn_viz_colormap map, double t, unsigned char *rgb);

/* ---- heat maps ------------------------------------------------------------------------ */

/* One matrix to draw. Values need not lie in [vmin, vmax] (they are clamped for colour) but
 * must be finite. */
typedef struct attn_viz_matrix {
    const float *weights;          /* [rows, cols], row-major */
    int64_t rows, cols;            /* rows: output tokens, cols: source tokens; both >= 1 */
    const char *const *row_labels; /* [rows] UTF-8 strings, or NULL to number them 0, 1, ... */
    const char *const *col_labels; /* [cols] UTF-8 strings, or NULL to number them */
    const char *title;             /* its sub-title in a grid ("layer 2, head 5"), or NULL */
} attn_viz_matrix;

typedef struct attn_viz_heatmap_options {
    const char *title;          /* above the whole picture, or NULL */
    attn_viz_colormap colormap; /* default ATTN_VIZ_BLUES */
    float vmin, vmax;           /* the colour scale's ends, vmin < vmax; default 0 and 1 */
    int annotate;               /* nonzero: write each value in its cell (when it fits) */
    int grid_columns;           /* panels per row when drawing several; 0: about square */
    int cell_size;              /* side of a cell in pixels, in [4, 200]; 0: chosen from size */
} attn_viz_heatmap_options;

ATTN_API attn_viz_heatmap_options attn_viz_heatmap_default_options(void);

/* Draws count >= 1 matrices as one picture: a single heat map, or a grid of panels (row-major,
 * each with its sub-title) sharing one colour bar. options NULL means the defaults.
 * render gives the file's bytes; write writes them to path in the format its name asks for. */
ATTN_API attn_status attn_viz_heatmap_render(const attn_viz_matrix *matrices, int64_t count,
                                             const attn_viz_heatmap_options *options,
                                             attn_viz_format format, unsigned char **bytes,
                                             size_t *size);
ATTN_API attn_status attn_viz_heatmap_write(const char *path, const attn_viz_matrix *matrices,
                                            int64_t count,
                                            const attn_viz_heatmap_options *options);

typedef enum attn_viz_text_style {
    ATTN_VIZ_TEXT_SHADES = 0,   /* Unicode shade blocks: " ░▒▓█" */
    ATTN_VIZ_TEXT_COLOR256 = 1, /* xterm 256-colour backgrounds in the colour map */
    ATTN_VIZ_TEXT_ASCII = 2     /* plain ASCII: " .:-=+*#%@"; labels too are cut to ASCII */
} attn_viz_text_style;

typedef struct attn_viz_text_options {
    attn_viz_text_style style;
    int width;       /* terminal columns to fit in, >= 20; 0 means 80 */
    int label_width; /* most columns a row label takes, >= 1; 0 means 12 */
} attn_viz_text_options;

/* The heat maps as text for a terminal (UTF-8, lines ending in "\n"): each matrix under its
 * sub-title, row labels on the left, source labels above the columns (running downwards, one
 * character per line, when they do not fit their cells), then a scale line. Labels longer than
 * their room are cut and end in "…" ("~" in ASCII). Widths count East Asian wide characters as
 * two columns. options and text may be NULL (the defaults). */
ATTN_API attn_status attn_viz_heatmap_text(const attn_viz_matrix *matrices, int64_t count,
                                           const attn_viz_heatmap_options *options,
                                           const attn_viz_text_options *text, char **out);

/* Reads matrices from a JSON file holding one object {"source": [...], "target": [...],
 * "weights": [[...], ...]}, or JSON lines (one such object per line). "weights" has one row per
 * target token and one column per source token; "source" and "target" may be left out (the
 * positions are numbered then; a label ending in the BPE end-of-word marker "</w>" is read
 * without it); optional "title" (a string), or "line", "layer" and "head" (integers) name
 * the panel ("layer 2, head 5"; "line 3, layer 2, mean of heads" for a layer without a head,
 * as attn translate --alignment writes it). Errors: ATTN_ERR_IO if the file cannot be read,
 * ATTN_ERR_FORMAT with "file:line:" for malformed JSON, a missing or ragged "weights", a label
 * count that does not match it, non-numeric or non-finite weights, labels that are not UTF-8.
 * *matrices gets *count >= 1 matrices; release them with attn_viz_matrices_free. */
ATTN_API attn_status attn_viz_matrices_read(const char *path, attn_viz_matrix **matrices,
                                            int64_t *count);
/* Frees what attn_viz_matrices_read returned (and only that); NULL is fine. */
ATTN_API void attn_viz_matrices_free(attn_viz_matrix *matrices, int64_t count);

/* ---- line charts and training curves --------------------------------------------------- */

/* One line of a chart. Points whose x or y is not finite are left out and break the line. */
typedef struct attn_viz_series {
    const char *name; /* UTF-8, shown in the legend */
    const double *x, *y;
    int64_t count;
} attn_viz_series;

typedef struct attn_viz_chart_options {
    const char *title, *x_label, *y_label; /* NULL: none */
    int width, height;                      /* pixels, each in [200, 4000]; 0: 720 x 440 */
} attn_viz_chart_options;

/* A line chart with axes, ticks at round numbers, light grid lines and a legend; series with
 * at most 40 points also get a marker at each point. count >= 1 series, at least one with a
 * drawable point. options NULL means the defaults. */
ATTN_API attn_status attn_viz_chart_render(const attn_viz_series *series, int64_t count,
                                           const attn_viz_chart_options *options,
                                           attn_viz_format format, unsigned char **bytes,
                                           size_t *size);
ATTN_API attn_status attn_viz_chart_write(const char *path, const attn_viz_series *series,
                                          int64_t count, const attn_viz_chart_options *options);

/* A training log read from JSON lines, one record per non-blank line, such as
 * {"step": 100, "epoch": 1, "train_loss": 2.3, "valid_loss": 2.5, "lr": 0.001}. Each field may
 * be missing or null on a line (NaN here); other fields are ignored. */
typedef struct attn_viz_training_log {
    int64_t count;
    double *step, *epoch, *train_loss, *valid_loss, *lr; /* [count] each */
    /* The x axis of the curves: "step" when any record has a step, else "epoch" when any has
     * an epoch, else "record" (1, 2, ... in file order). x points to that column (or to its
     * own storage for "record"); records without it are left out of the curves. */
    const char *x_name;
    double *x;
} attn_viz_training_log;

/* ATTN_ERR_IO if the file cannot be read; ATTN_ERR_FORMAT "file:line: ..." for a line that is
 * not a JSON object or has a field of the wrong type, and for a log without records. */
ATTN_API attn_status attn_viz_training_log_read(const char *path, attn_viz_training_log *log);
/* Frees the arrays and zeroes the struct; NULL or an already-freed log is fine. */
ATTN_API void attn_viz_training_log_free(attn_viz_training_log *log);

/* The training and validation loss of count >= 1 logs against each log's x, in one chart:
 * series "train (with label smoothing, if any)" and "valid (plain cross-entropy)", as attn
 * train logs them, whichever a log has, each joining the records that have its value. With
 * names (NULL when count is 1) each series is prefixed by its log's name ("bf16: valid ..."),
 * so runs can be compared in one picture. Texts the options leave NULL (or options NULL):
 * titled "loss", axes named the first log's x_name and "loss". */
ATTN_API attn_status attn_viz_loss_curves_write(const char *path,
                                                const attn_viz_training_log *logs,
                                                const char *const *names, int64_t count,
                                                const attn_viz_chart_options *options);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_VIZ_H */
