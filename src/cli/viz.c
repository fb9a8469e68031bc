/* attn viz: attention heat maps and training curves as SVG, PNG or terminal text. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/label_files.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/translator.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct viz_args {
    const char *matrix, *log, *out, *title;
    const char *gold, *predicted; /* --confusion's --ref and --hyp */
    int confusion;
    const char *model, *source_text;
    int64_t layer, head; /* -1: the last layer; head -1: the mean, -2: all */
    int64_t beam;
    int kind;       /* attn_attention_kind, or VIZ_POOLING */
    int kind_given; /* --kind was on the command line (a language model has one kind) */
    int layer_or_head_given, vmax_given;
    int64_t index;  /* -1: all */
    int64_t columns, cell, width;
    int colormap, style; /* attn_viz_colormap, attn_viz_text_style */
    int annotate;
    double vmin, vmax;
    attn_viz_heatmap_options heatmap;
    attn_viz_text_options text;
} viz_args;

#define FIELD(name) offsetof(viz_args, name)

static const char *const all_word[] = {"all", NULL};
static const int index_all[] = {-1}, head_all[] = {-2};
/* --kind pooling: which tokens a classifier's pooling reads, beside the attention kinds. */
enum { VIZ_POOLING = 100 };
static const char *const kind_names[] = {"cross", "self", "encoder", "pooling", NULL};
static const int kind_values[] = {ATTN_CROSS_ATTENTION, ATTN_DECODER_SELF_ATTENTION,
                                  ATTN_ENCODER_SELF_ATTENTION, VIZ_POOLING};
static const char *const colormap_names[] = {"blues", "greys", "grays", NULL};
static const int colormap_values[] = {ATTN_VIZ_BLUES, ATTN_VIZ_GREYS, ATTN_VIZ_GREYS};
static const char *const style_names[] = {"shades", "color", "colour", "ascii", NULL};
static const int style_values[] = {ATTN_VIZ_TEXT_SHADES, ATTN_VIZ_TEXT_COLOR256,
                                   ATTN_VIZ_TEXT_COLOR256, ATTN_VIZ_TEXT_ASCII};

static const cli_option viz_options[] = {
    {.kind = CLI_SECTION, .help = "heat maps:"},
    {CLI_OPTION(
        "--matrix", CLI_STRING, FIELD(matrix), "FILE",
        "JSON {\"source\": [...], \"target\": [...], \"weights\": [[...], ...]} (one row of "
        "weights per target token), or JSON lines of such objects; optional \"title\", or "
        "\"layer\" and \"head\", name each one")},
    {CLI_OPTION("--index", CLI_INT, FIELD(index), "N|all",
                "which object of a JSON-lines file (default 0); all: every one, as a grid"),
     .min = 0, .max = 1e9, .choices = all_word, .choice_values = index_all},
    {CLI_OPTION("--out", CLI_STRING, FIELD(out), "FILE",
                "write FILE.svg or FILE.png; without it, print to the terminal")},
    {CLI_OPTION("--title", CLI_STRING, FIELD(title), "TEXT", "a title over the picture")},
    {CLI_OPTION("--colormap", CLI_CHOICE, FIELD(colormap), "NAME",
                "blues (white to dark blue, default) or greys (black to white)"),
     .min = 0, .max = 0, .choices = colormap_names, .choice_values = colormap_values},
    {CLI_OPTION("--vmin", CLI_NUMBER, FIELD(vmin), "X",
                "the low end of the colour scale (default 0)"),
     .min = -1e30, .max = 1e30},
    {CLI_OPTION("--vmax", CLI_NUMBER, FIELD(vmax), "X",
                "the high end of the colour scale (default 1)"),
     .min = -1e30, .max = 1e30},
    {CLI_OPTION("--annotate", CLI_FLAG, FIELD(annotate), NULL, "write each weight in its cell")},
    {CLI_OPTION("--columns", CLI_INT, FIELD(columns), "N",
                "panels per row of a grid (default: about square)"),
     .min = 1, .max = 1000},
    {CLI_OPTION("--cell", CLI_INT, FIELD(cell), "N",
                "cell size in pixels (default: from the matrix size)"),
     .min = 4, .max = 200},
    {CLI_OPTION("--style", CLI_CHOICE, FIELD(style), "NAME",
                "terminal: shades (default), color (256 colours) or ascii"),
     .min = 0, .max = 0, .choices = style_names, .choice_values = style_values},
    {CLI_OPTION("--width", CLI_INT, FIELD(width), "N",
                "terminal: columns to fit in (default $COLUMNS, else 80)"),
     .min = 20, .max = 10000},
    {.kind = CLI_SECTION, .help = "a model's attention (heat map options above apply too):"},
    {CLI_OPTION(
        "--model", CLI_STRING, FIELD(model), "FILE",
        "a model 'attn train' wrote; TEXT is translated as attn translate does (beam search, "
        "--beam) and the attention of that translation is drawn")},
    {CLI_OPTION("--text", CLI_STRING, FIELD(source_text), "TEXT", "the source text")},
    {CLI_OPTION(
         "--kind", CLI_CHOICE, FIELD(kind), "KIND",
         "cross (default): the cross-attention that produced the output, output tokens (then "
         "</s>) down, source tokens along the top; self: the decoder's masked self-attention, the "
         "output token each position predicts down, the tokens it reads (<s>, then the output) "
         "along the top; encoder: the encoder's self-attention, source tokens on both axes "
         "(Transformer models; self and encoder re-run the model on the output). A classifier: "
         "pooling (default), a strip of the weight its pooling gives each token, the predicted "
         "class at its left (colour scale up to the largest weight unless --vmax), or encoder"),
     .min = 0, .max = 0, .choices = kind_names, .choice_values = kind_values},
    {CLI_OPTION("--layer", CLI_INT, FIELD(layer), "L",
                "layer, from 0 (default: the last), of the decoder or encoder"),
     .min = 0, .max = 1000000},
    {CLI_OPTION(
         "--head", CLI_INT, FIELD(head), "H|all",
         "one head, or every head of the layer as a grid (default: the mean over the layer's "
         "heads)"),
     .min = 0, .max = 1000000, .choices = all_word, .choice_values = head_all},
    {CLI_OPTION("--beam", CLI_INT, FIELD(beam), "K", "hypotheses kept; 1: greedy"), .min = 1,
     .max = ATTN_DECODE_MAX_BEAM, .show_default = 1},
    {.kind = CLI_SECTION, .help = "a classifier's confusion matrix (heat map options apply too):"},
    {CLI_OPTION("--confusion", CLI_FLAG, FIELD(confusion), NULL,
                "draw the confusion matrix of --hyp's labels against --ref's, as attn eval "
                "--metric accuracy prints it: rows the gold classes, columns the predicted, each "
                "cell the share of its row's lines")},
    {CLI_OPTION("--ref", CLI_STRING, FIELD(gold), "FILE",
                "the gold labels, one per line (label<TAB>text lines count as their label)")},
    {CLI_OPTION("--hyp", CLI_STRING, FIELD(predicted), "FILE",
                "the predicted labels, line i for line i of --ref (attn classify's output)")},
    {.kind = CLI_SECTION, .help = "training curves:"},
    {CLI_OPTION(
        "--log", CLI_STRING, FIELD(log), "FILE[,FILE...]",
        "JSON lines such as {\"step\": 100, \"epoch\": 1, \"train_loss\": 2.3, \"valid_loss\": "
        "2.5}; fields may be missing on a line. Several logs, comma-separated, share one "
        "chart, each curve named by its file")},
};
#define N_VIZ_OPTIONS (sizeof viz_options / sizeof viz_options[0])

static const cli_command viz_command = {
    "viz",
    "attn viz --matrix FILE [--index N|all] [--out FILE.svg|FILE.png] [options]\n"
    "       attn viz --model MODEL --text TEXT [--out FILE.svg|FILE.png] [options]\n"
    "       attn viz --confusion --ref GOLD --hyp PREDICTED [--out FILE.svg|FILE.png]\n"
    "       attn viz --log FILE.jsonl[,FILE.jsonl...] --out FILE.svg|FILE.png [--title TEXT]",
    "Draws attention weights as a heat map (output tokens down the left, source tokens\n"
    "along the top, a colour scale), or a training log's loss curves.\n",
    viz_options,
    N_VIZ_OPTIONS,
    NULL};

/* Returns CLI_GO_ON, or the exit code. */
static int parse_args(int argc, char **argv, viz_args *a)
{
    memset(a, 0, sizeof *a);
    a->heatmap = attn_viz_heatmap_default_options();
    a->layer = -1;
    a->head = -1;
    a->beam = CLI_DEFAULT_BEAM;
    a->kind = ATTN_CROSS_ATTENTION;
    a->colormap = (int)a->heatmap.colormap;
    a->vmin = (double)a->heatmap.vmin;
    a->vmax = (double)a->heatmap.vmax;
    a->columns = a->heatmap.grid_columns;
    a->cell = a->heatmap.cell_size;
    a->style = (int)a->text.style;
    const char *columns_env = getenv("COLUMNS");
    if (columns_env != NULL) {
        char *end;
        a->width = strtol(columns_env, &end, 10);
        if (*end != '\0' || a->width < 20 || a->width > 10000)
            a->width = 0;
    }
    int given[N_VIZ_OPTIONS] = {0};
    const int code = cli_parse(&viz_command, argc, argv, a, given);
    if (code != CLI_GO_ON)
        return code;
    a->kind_given = cli_was_given(&viz_command, given, "--kind");
    a->layer_or_head_given = cli_was_given(&viz_command, given, "--layer") ||
                             cli_was_given(&viz_command, given, "--head");
    a->vmax_given = cli_was_given(&viz_command, given, "--vmax");
    a->heatmap.title = a->title;
    a->heatmap.colormap = (attn_viz_colormap)a->colormap;
    a->heatmap.vmin = (float)a->vmin;
    a->heatmap.vmax = (float)a->vmax;
    a->heatmap.annotate = a->annotate;
    a->heatmap.grid_columns = (int)a->columns;
    a->heatmap.cell_size = (int)a->cell;
    a->text.style = (attn_viz_text_style)a->style;
    a->text.width = (int)a->width;
    if ((a->matrix != NULL) + (a->log != NULL) + (a->model != NULL) + a->confusion != 1)
        return cli_usage_error(&viz_command, "give one of --matrix FILE, --log FILE, --model FILE "
                                             "or --confusion");
    if (a->confusion != (a->gold != NULL && a->predicted != NULL) ||
        (!a->confusion && (a->gold != NULL || a->predicted != NULL)))
        return cli_usage_error(&viz_command, "%s",
                               a->confusion ? "--confusion needs --ref GOLD and --hyp PREDICTED"
                                            : "--ref and --hyp go with --confusion");
    if ((a->model != NULL) != (a->source_text != NULL))
        return cli_usage_error(&viz_command, "%s",
                               a->model != NULL ? "--model needs --text TEXT"
                                                : "--text needs --model FILE");
    if (a->log != NULL && a->out == NULL)
        return cli_usage_error(&viz_command, "--log needs --out FILE.svg or FILE.png");
    if (!(a->heatmap.vmin < a->heatmap.vmax))
        return cli_usage_error(&viz_command, "--vmin (%g) must be below --vmax (%g)",
                               (double)a->heatmap.vmin, (double)a->heatmap.vmax);
    if (a->out != NULL) {
        attn_viz_format format;
        if (attn_viz_format_from_path(a->out, &format) != ATTN_OK)
            return cli_usage_error(&viz_command, "--out %s: use a name ending in .svg or .png",
                                   a->out);
    }
    return CLI_GO_ON;
}

static int fail(void)
{
    cli_library_error("viz");
    return 1;
}

enum { MAX_LOGS = 16 };

/* A log's name in the legend: its file name without the folder and the extension. */
static void log_name(const char *path, char *name, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    size_t length = strlen(base);
    if (length >= size)
        length = size - 1; /* a legend entry, not a path: a cut name still tells runs apart */
    memcpy(name, base, length);
    name[length] = '\0';
    char *dot = strrchr(name, '.');
    if (dot != NULL && dot != name)
        *dot = '\0';
}

static int draw_log(const viz_args *a)
{
    attn_viz_training_log logs[MAX_LOGS];
    char names[MAX_LOGS][64];
    const char *name_of[MAX_LOGS];
    int64_t count = 0;
    int exit_code = 0;
    for (const char *start = a->log; exit_code == 0;) {
        const char *comma = strchr(start, ',');
        const size_t length = comma != NULL ? (size_t)(comma - start) : strlen(start);
        char path[4096];
        if (length == 0 || length >= sizeof path || count == MAX_LOGS) {
            exit_code =
                cli_usage_error(&viz_command, "--log %s: give 1 to %d log files, comma-separated",
                                a->log, MAX_LOGS);
            break;
        }
        memcpy(path, start, length);
        path[length] = '\0';
        if (attn_viz_training_log_read(path, &logs[count]) != ATTN_OK) {
            exit_code = fail();
            break;
        }
        log_name(path, names[count], sizeof names[count]);
        name_of[count] = names[count];
        count++;
        if (comma == NULL)
            break;
        start = comma + 1;
    }
    if (exit_code == 0) {
        attn_viz_chart_options options = {0};
        options.title = a->title;
        if (attn_viz_loss_curves_write(a->out, logs, count > 1 ? name_of : NULL, count, &options) !=
            ATTN_OK)
            exit_code = fail();
    }
    for (int64_t i = 0; i < count; i++)
        attn_viz_training_log_free(&logs[i]);
    return exit_code;
}

static int draw_matrices(const viz_args *a)
{
    attn_viz_matrix *matrices = NULL;
    int64_t count = 0;
    if (attn_viz_matrices_read(a->matrix, &matrices, &count) != ATTN_OK)
        return fail();
    const attn_viz_matrix *chosen = matrices;
    int64_t chosen_count = count;
    if (a->index >= 0) {
        if (a->index >= count) {
            fprintf(stderr, "attn viz: --index %ld, but %s holds %lld matri%s\n", a->index,
                    a->matrix, (long long)count, count == 1 ? "x" : "ces");
            attn_viz_matrices_free(matrices, count);
            return 2;
        }
        chosen = &matrices[a->index];
        chosen_count = 1;
    }
    int code = 0;
    if (a->out != NULL) {
        if (attn_viz_heatmap_write(a->out, chosen, chosen_count, &a->heatmap) != ATTN_OK)
            code = fail();
    } else {
        char *text = NULL;
        if (attn_viz_heatmap_text(chosen, chosen_count, &a->heatmap, &a->text, &text) != ATTN_OK) {
            code = fail();
        } else {
            fputs(text, stdout);
            free(text);
        }
    }
    attn_viz_matrices_free(matrices, count);
    return code;
}

/* Draws matrices to --out or the terminal. Returns the exit code. */
static int draw(const viz_args *a, const attn_viz_matrix *matrices, int64_t count,
                const attn_viz_heatmap_options *heatmap)
{
    if (a->out != NULL)
        return attn_viz_heatmap_write(a->out, matrices, count, heatmap) == ATTN_OK ? 0 : fail();
    char *text = NULL;
    if (attn_viz_heatmap_text(matrices, count, heatmap, &a->text, &text) != ATTN_OK)
        return fail();
    fputs(text, stdout);
    free(text);
    return 0;
}

/* The maps of one layer of the translation, one per head, and how to label them. */
typedef struct layer_maps {
    const char *kind_name; /* in titles: "cross-attention ", ... */
    int64_t layer, heads, rows, cols;
    float *weights; /* [heads, rows, cols] */
    const char **row_labels, **col_labels;
} layer_maps;

/* The labels without the BPE end-of-word marker, which says nothing to a reader of the
 * picture: an array (malloc'ed, as is *text, which holds the strings), or NULL when out of
 * memory. */
static const char **shown_labels(const char *const *labels, int64_t count, char **text)
{
    size_t size = 1;
    for (int64_t i = 0; i < count; i++)
        size += attn_token_text_length(labels[i]) + 1;
    const char **shown = malloc((size_t)count * sizeof *shown + 1);
    *text = malloc(size);
    if (shown == NULL || *text == NULL) {
        free(shown);
        free(*text);
        *text = NULL;
        return NULL;
    }
    char *at = *text;
    for (int64_t i = 0; i < count; i++) {
        const size_t length = attn_token_text_length(labels[i]);
        memcpy(at, labels[i], length);
        at[length] = '\0';
        shown[i] = at;
        at += length + 1;
    }
    return shown;
}

/* Draws the panels asked for (every head, one, or their mean) under the title
 * "TEXT → OUTPUT". Returns the exit code. */
static int draw_layer(const viz_args *a, const layer_maps *m, const char *output)
{
    const int64_t panels = a->head == -2 ? m->heads : 1;
    const size_t cells = (size_t)(m->rows * m->cols);
    float *mean = a->head == -1 ? calloc(cells > 0 ? cells : 1, sizeof *mean) : NULL;
    attn_viz_matrix *matrices = calloc((size_t)panels, sizeof *matrices);
    char(*titles)[96] = calloc((size_t)panels, sizeof *titles);
    char *row_text = NULL, *col_text = NULL;
    const char **rows = shown_labels(m->row_labels, m->rows, &row_text);
    const char **cols = shown_labels(m->col_labels, m->cols, &col_text);
    int code = 1;
    if (matrices == NULL || titles == NULL || (a->head == -1 && mean == NULL) || rows == NULL ||
        cols == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    for (int64_t p = 0; p < panels; p++) {
        const float *weights;
        if (a->head == -1) {
            for (int64_t h = 0; h < m->heads; h++)
                for (size_t e = 0; e < cells; e++)
                    mean[e] += m->weights[(size_t)h * cells + e] / (float)m->heads;
            weights = mean;
            snprintf(titles[p], sizeof titles[p], "%slayer %lld, mean of %lld head%s", m->kind_name,
                     (long long)m->layer, (long long)m->heads, m->heads == 1 ? "" : "s");
        } else {
            const int64_t head = a->head == -2 ? p : a->head;
            weights = m->weights + (size_t)head * cells;
            /* A grid's panels are narrow: the layer goes into the picture's title. */
            if (a->head == -2)
                snprintf(titles[p], sizeof titles[p], "head %lld", (long long)head);
            else
                snprintf(titles[p], sizeof titles[p], "%slayer %lld, head %lld", m->kind_name,
                         (long long)m->layer, (long long)head);
        }
        matrices[p] = (attn_viz_matrix){weights, m->rows, m->cols, rows, cols, titles[p]};
    }
    attn_viz_heatmap_options heatmap = a->heatmap;
    char *title = NULL;
    if (heatmap.title == NULL) {
        /* "source → output", or the text alone for a language model (output NULL). */
        const char *arrow = output != NULL ? " \xe2\x86\x92 " : "";
        const char *shown = output != NULL ? output : "";
        size_t size = strlen(a->source_text) + strlen(shown) + strlen(m->kind_name) + 48;
        title = malloc(size);
        if (title != NULL && a->head == -2)
            snprintf(title, size, "%s%s%s: %slayer %lld", a->source_text, arrow, shown,
                     m->kind_name, (long long)m->layer);
        else if (title != NULL)
            snprintf(title, size, "%s%s%s", a->source_text, arrow, shown);
        heatmap.title = title;
    }
    code = draw(a, matrices, panels, &heatmap);
    free(title);
done:
    free(mean);
    free(matrices);
    free(titles);
    free(rows);
    free(row_text);
    free(cols);
    free(col_text);
    return code;
}

/* The layer and head asked for exist (a message and exit code 2 when not). */
static int check_layer_and_head(const viz_args *a, int64_t layers, int64_t heads,
                                const char *layers_name)
{
    if (a->layer >= layers) {
        fprintf(stderr, "attn viz: --layer %ld: the model has %lld %s (from 0)\n", a->layer,
                (long long)layers, layers_name);
        return 2;
    }
    if (a->head >= heads) {
        fprintf(stderr, "attn viz: --head %ld: the model has %lld heads per layer (from 0)\n",
                a->head, (long long)heads);
        return 2;
    }
    return 0;
}

/* The best hypothesis's output labels: its tokens, then </s> when the model ended it. */
static void output_labels(const cli_translator *t, const attn_hypothesis *h, const char **labels)
{
    attn_bundle_labels(t->bundle, ATTN_BUNDLE_TARGET, h->tokens, h->length, labels);
    if (h->finished)
        labels[h->length] = "</s>";
}

/* --kind cross: the alignment the search kept for the hypothesis (what produced it). */
static int draw_cross(const viz_args *a, cli_translator *t, const attn_decode_result *result,
                      const int32_t *src, int64_t src_length, const char *output)
{
    const attn_hypothesis *h = &result->sentences[0].hypotheses[0];
    int code = check_layer_and_head(a, result->cross_layers, result->cross_heads, "decoder layers");
    if (code != 0)
        return code;
    layer_maps m = {"cross-attention ",
                    a->layer < 0 ? result->cross_layers - 1 : a->layer,
                    result->cross_heads,
                    h->steps,
                    src_length,
                    NULL,
                    NULL,
                    NULL};
    const size_t cells = (size_t)(m.rows * m.cols);
    m.weights = malloc((size_t)m.heads * cells * sizeof *m.weights + 1);
    m.col_labels = malloc((size_t)src_length * sizeof *m.col_labels);
    m.row_labels = malloc((size_t)h->steps * sizeof *m.row_labels + 1);
    code = 1;
    if (m.weights == NULL || m.col_labels == NULL || m.row_labels == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    attn_bundle_labels(t->bundle, ATTN_BUNDLE_SOURCE, src, src_length, m.col_labels);
    output_labels(t, h, m.row_labels);
    for (int64_t head = 0; head < m.heads; head++)
        if (attn_decode_alignment(result, h, src_length, m.layer, head,
                                  m.weights + (size_t)head * cells) != ATTN_OK) {
            code = fail();
            goto done;
        }
    code = draw_layer(a, &m, output);
done:
    free(m.weights);
    free(m.col_labels);
    free(m.row_labels);
    return code;
}

/* --kind self and encoder: the Transformer re-run on the source and the hypothesis
 * (teacher-forced), which gives the maps the search computed on the way to it. */
static int draw_self(const viz_args *a, cli_translator *t, const attn_decode_result *result,
                     const int32_t *src, int64_t src_length, const char *output)
{
    const attn_hypothesis *h = &result->sentences[0].hypotheses[0];
    const attn_model_config *c = attn_bundle_config(t->bundle);
    const int encoder = a->kind == ATTN_ENCODER_SELF_ATTENTION;
    if (c->arch != ATTN_ARCH_TRANSFORMER) {
        fprintf(stderr,
                "attn viz: --kind %s: this model has no self-attention (an rnn with "
                "attention); --kind cross draws its alignment\n",
                encoder ? "encoder" : "self");
        return 2;
    }
    const int64_t layers = encoder ? c->encoder_layers : c->decoder_layers;
    int code = check_layer_and_head(a, layers, c->num_heads,
                                    encoder ? "encoder layers" : "decoder layers");
    if (code != 0)
        return code;
    /* The decoder read <s> and then each output token but the last (a hypothesis has taken
     * at least one step: its </s> or its first token). */
    const int64_t steps = h->steps;
    const int64_t len = encoder ? src_length : steps;
    layer_maps m = {encoder ? "encoder self-attention " : "decoder self-attention ",
                    a->layer < 0 ? layers - 1 : a->layer,
                    c->num_heads,
                    len,
                    len,
                    NULL,
                    NULL,
                    NULL};
    int32_t *inputs = malloc((size_t)steps * sizeof *inputs + 1);
    m.weights = malloc((size_t)(m.heads * len * len) * sizeof *m.weights + 1);
    m.row_labels = malloc((size_t)len * sizeof *m.row_labels + 1);
    m.col_labels = malloc((size_t)len * sizeof *m.col_labels + 1);
    code = 1;
    if (inputs == NULL || m.weights == NULL || m.row_labels == NULL || m.col_labels == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    inputs[0] = ATTN_BOS_ID;
    for (int64_t i = 1; i < steps; i++)
        inputs[i] = h->tokens[i - 1];
    if (encoder) {
        attn_bundle_labels(t->bundle, ATTN_BUNDLE_SOURCE, src, src_length, m.row_labels);
        attn_bundle_labels(t->bundle, ATTN_BUNDLE_SOURCE, src, src_length, m.col_labels);
    } else {
        output_labels(t, h, m.row_labels);
        m.col_labels[0] = "<s>";
        attn_bundle_labels(t->bundle, ATTN_BUNDLE_TARGET, h->tokens, steps - 1, m.col_labels + 1);
    }
    if (attn_model_attention_weights(attn_bundle_model(t->bundle), attn_bundle_graph(t->bundle),
                                     src, src_length, inputs, steps, a->kind, m.layer,
                                     m.weights) != ATTN_OK) {
        code = fail();
        goto done;
    }
    code = draw_layer(a, &m, output);
done:
    free(inputs);
    free(m.weights);
    free(m.row_labels);
    free(m.col_labels);
    return code;
}

/* One sequence's self-attention, read [len] as the model reads it (the encoder's for kind
 * ATTN_ENCODER_SELF_ATTENTION, else the decoder's), labels [len], layer from --layer of the
 * model's `layers` (the last by default), drawn as draw_layer draws a layer, under the title
 * "TEXT → output" (output NULL: the text alone). Returns the exit code. */
static int draw_sequence(const viz_args *a, attn_bundle *bundle, attn_attention_kind kind,
                         const char *kind_name, int64_t layers, const int32_t *read, int64_t len,
                         const char **labels, const char *output)
{
    const int encoder = kind == ATTN_ENCODER_SELF_ATTENTION;
    layer_maps m = {kind_name, a->layer < 0 ? layers - 1 : a->layer,
                    attn_bundle_config(bundle)->num_heads, len, len, NULL, labels, labels};
    m.weights = malloc((size_t)(m.heads * len * len) * sizeof *m.weights + 1);
    int code;
    if (m.weights == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        code = 1;
    } else if (attn_model_attention_weights(attn_bundle_model(bundle), attn_bundle_graph(bundle),
                                            encoder ? read : NULL, encoder ? len : 0,
                                            encoder ? NULL : read, encoder ? 0 : len, kind,
                                            m.layer, m.weights) != ATTN_OK) {
        code = fail();
    } else {
        code = draw_layer(a, &m, output);
    }
    free(m.weights);
    return code;
}

/* A language model: its causal self-attention over the text as it reads it (the prompt's
 * </s>, the line's start, then the tokens), the tokens on both axes. */
static int draw_language_model(const viz_args *a, attn_bundle *bundle, int kind_given)
{
    const attn_model_config *c = attn_bundle_config(bundle);
    if (kind_given && a->kind != ATTN_DECODER_SELF_ATTENTION) {
        fprintf(stderr,
                "attn viz: --kind %s: %s is a language model, whose one attention is its "
                "causal self-attention: use --kind self\n",
                a->kind == ATTN_CROSS_ATTENTION       ? "cross"
                : a->kind == ATTN_ENCODER_SELF_ATTENTION ? "encoder"
                                                         : "pooling",
                a->model);
        return 2;
    }
    int code = check_layer_and_head(a, c->decoder_layers, c->num_heads, "layers");
    if (code != 0)
        return code;
    int32_t *ids = NULL;
    int64_t count = 0, unknown = 0, cut = 0;
    if (attn_bundle_encode_prompt(bundle, a->source_text, 0, &ids, &count, &unknown, &cut) !=
        ATTN_OK)
        return fail();
    const char **labels = malloc((size_t)count * sizeof *labels + 1);
    if (labels == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        code = 1;
    } else if (attn_bundle_labels(bundle, ATTN_BUNDLE_TARGET, ids, count, labels) != ATTN_OK) {
        code = fail();
    } else {
        code = draw_sequence(a, bundle, ATTN_DECODER_SELF_ATTENTION, "self-attention ",
                             c->decoder_layers, ids, count, labels, NULL);
    }
    free(ids);
    free(labels);
    return code;
}

/* The most probable class of a classifier for ids, as "label (probability)" in label
 * [size]. 0, or the exit code. */
static int predicted_class(attn_bundle *bundle, const int32_t *ids, int64_t count, char *label,
                           size_t size)
{
    const attn_labels *classes = attn_bundle_classes(bundle);
    const int64_t n = attn_labels_count(classes);
    float *probabilities = malloc((size_t)n * sizeof *probabilities);
    if (probabilities == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        return 1;
    }
    if (attn_bundle_classify(bundle, 1, &ids, &count, probabilities) != ATTN_OK) {
        free(probabilities);
        return fail();
    }
    const int64_t best = attn_argmax(n, probabilities);
    snprintf(label, size, "%s (%.2f)", attn_labels_name(classes, best), probabilities[best]);
    free(probabilities);
    return 0;
}

/* --kind pooling: one row, the weight of each token in the pooled vector. */
static int draw_pooling(const viz_args *a, attn_bundle *bundle, const int32_t *ids, int64_t count,
                        const char *label)
{
    float *weights = malloc((size_t)count * sizeof *weights);
    const char **tokens = malloc((size_t)count * sizeof *tokens);
    char *token_text = NULL;
    const char **shown = NULL;
    int code = 1;
    if (weights == NULL || tokens == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    if (attn_bundle_pooling_weights(bundle, ids, count, weights) != ATTN_OK ||
        attn_bundle_labels(bundle, ATTN_BUNDLE_SOURCE, ids, count, tokens) != ATTN_OK) {
        code = fail();
        goto done;
    }
    if ((shown = shown_labels(tokens, count, &token_text)) == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    static const char *const pooling_names[] = {"mean", "classification token", "attention"};
    char title[96];
    snprintf(title, sizeof title, "%s pooling",
             pooling_names[attn_bundle_config(bundle)->pooling]);
    const attn_viz_matrix strip = {weights, 1, count, &label, shown, title};
    attn_viz_heatmap_options heatmap = a->heatmap;
    /* Over a long text each weight is small: a scale up to 1 would leave the strip white. */
    if (!a->vmax_given) {
        heatmap.vmax = weights[0];
        for (int64_t t = 1; t < count; t++)
            heatmap.vmax = weights[t] > heatmap.vmax ? weights[t] : heatmap.vmax;
    }
    char *whole_title = NULL;
    if (heatmap.title == NULL) {
        const size_t size = strlen(a->source_text) + strlen(label) + 8;
        if ((whole_title = malloc(size)) != NULL)
            snprintf(whole_title, size, "%s \xe2\x86\x92 %s", a->source_text, label);
        heatmap.title = whole_title;
    }
    code = draw(a, &strip, 1, &heatmap);
    free(whole_title);
done:
    free(weights);
    free(tokens);
    free(token_text);
    free(shown);
    return code;
}

/* A classifier's encoder self-attention over ids [count], read after the classification
 * token under pooling "cls", as the model reads them. */
static int draw_classifier_encoder(const viz_args *a, attn_bundle *bundle, const int32_t *ids,
                                   int64_t count, const char *label)
{
    const attn_model_config *c = attn_bundle_config(bundle);
    const int cls = c->pooling == ATTN_POOLING_CLS;
    const int64_t len = count + cls;
    int32_t *read = malloc((size_t)len * sizeof *read);
    const char **labels = malloc((size_t)len * sizeof *labels);
    int code;
    if (read == NULL || labels == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        code = 1;
    } else if (attn_bundle_labels(bundle, ATTN_BUNDLE_SOURCE, ids, count, labels + cls) !=
               ATTN_OK) {
        code = fail();
    } else {
        if (cls) {
            read[0] = ATTN_MODEL_CLS_ID;
            labels[0] = "<cls>";
        }
        memcpy(read + cls, ids, (size_t)count * sizeof *ids);
        code = draw_sequence(a, bundle, ATTN_ENCODER_SELF_ATTENTION, "encoder self-attention ",
                             c->encoder_layers, read, len, labels, label);
    }
    free(read);
    free(labels);
    return code;
}

/* A classifier: its pooling (a strip over the text) or its encoder's self-attention (the
 * classification token first, as the model reads it, under pooling "cls"). */
static int draw_classifier(const viz_args *a, attn_bundle *bundle)
{
    const attn_model_config *c = attn_bundle_config(bundle);
    const int pooling = !a->kind_given || a->kind == VIZ_POOLING;
    if (!pooling && a->kind != ATTN_ENCODER_SELF_ATTENTION) {
        fprintf(stderr,
                "attn viz: --kind %s: %s is a classifier, an encoder without a decoder: use "
                "--kind pooling (which tokens its pooling reads) or --kind encoder\n",
                a->kind == ATTN_CROSS_ATTENTION ? "cross" : "self", a->model);
        return 2;
    }
    if (!pooling && c->arch == ATTN_ARCH_RNN_CLASSIFIER) {
        fprintf(stderr,
                "attn viz: --kind encoder: %s is an rnn classifier, which has no self-attention "
                "(its recurrent encoder reads the text in order; only its pooling attends): use "
                "--kind pooling\n",
                a->model);
        return 2;
    }
    if (pooling && a->layer_or_head_given) {
        fprintf(stderr, "attn viz: --layer and --head choose an attention map: the pooling is one "
                        "(use --kind encoder for the encoder's layers and heads)\n");
        return 2;
    }
    int code = pooling ? 0 : check_layer_and_head(a, c->encoder_layers, c->num_heads, "layers");
    if (code != 0)
        return code;
    int32_t *ids = NULL;
    int64_t count = 0;
    if (attn_bundle_encode(bundle, a->source_text, &ids, &count, NULL) != ATTN_OK)
        return fail();
    if (count == 0) {
        fprintf(stderr, "attn viz: --text has no tokens to classify\n");
        free(ids);
        return 2;
    }
    char label[160];
    code = predicted_class(bundle, ids, count, label, sizeof label);
    if (code == 0)
        code = pooling ? draw_pooling(a, bundle, ids, count, label)
                       : draw_classifier_encoder(a, bundle, ids, count, label);
    free(ids);
    return code;
}

/* --confusion: rows the gold classes, columns the predicted, each row's lines as shares (a
 * class only predicted has an empty row). */
static int draw_confusion(const viz_args *a)
{
    attn_lines gold, predicted;
    memset(&gold, 0, sizeof gold);
    memset(&predicted, 0, sizeof predicted);
    attn_classification_report *r = NULL;
    float *shares = NULL;
    int code = 1;
    if (attn_lines_read(a->gold, &gold) != ATTN_OK ||
        attn_lines_read(a->predicted, &predicted) != ATTN_OK) {
        code = fail();
        goto done;
    }
    if (cli_score_labels("viz", a->gold, &gold, a->predicted, &predicted, &r) != 0)
        goto done;
    const int64_t n = r->classes;
    if ((shares = malloc((size_t)(n * n) * sizeof *shares)) == NULL) {
        fprintf(stderr, "attn viz: out of memory\n");
        goto done;
    }
    for (int64_t g = 0; g < n; g++)
        for (int64_t p = 0; p < n; p++)
            shares[g * n + p] =
                r->gold[g] > 0 ? (float)r->confusion[g * n + p] / (float)r->gold[g] : 0.0f;
    char title[160];
    snprintf(title, sizeof title, "accuracy %.2f%%, macro-F1 %.2f%%", r->accuracy, r->macro_f1);
    const attn_viz_matrix matrix = {shares,
                                    n,
                                    n,
                                    (const char *const *)r->labels,
                                    (const char *const *)r->labels,
                                    "rows gold, columns predicted: share of each gold class"};
    attn_viz_heatmap_options heatmap = a->heatmap;
    if (heatmap.title == NULL)
        heatmap.title = title;
    code = draw(a, &matrix, 1, &heatmap);
done:
    free(shares);
    attn_classification_report_destroy(r);
    attn_lines_free(&gold);
    attn_lines_free(&predicted);
    return code;
}

static int draw_model(const viz_args *a)
{
    cli_translator t;
    int32_t *src = NULL;
    int64_t count = 0;
    attn_decode_result *result = NULL;
    char *output = NULL;
    if (strchr(a->model, ',') != NULL) {
        fprintf(stderr,
                "attn viz: --model %s: an ensemble has no one set of attention maps; draw "
                "one of its models\n",
                a->model);
        return 2;
    }
    attn_bundle *bundle = NULL;
    if (attn_bundle_load(a->model, &bundle) != ATTN_OK)
        return fail();
    const attn_model_arch arch = attn_bundle_config(bundle)->arch;
    if (arch == ATTN_ARCH_TRANSFORMER_LM || attn_model_arch_is_classifier(arch)) {
        const int code = arch == ATTN_ARCH_TRANSFORMER_LM
                             ? draw_language_model(a, bundle, a->kind_given)
                             : draw_classifier(a, bundle);
        attn_bundle_destroy(bundle);
        return code;
    }
    attn_bundle_destroy(bundle);
    if (a->kind == VIZ_POOLING) {
        fprintf(stderr, "attn viz: --kind pooling: %s translates; only a classifier pools its "
                        "encoder (cross, self or encoder draw a translation's attention)\n",
                a->model);
        return 2;
    }
    int code = cli_translator_load(&t, "viz", a->model);
    if (code == 0)
        code = cli_translator_encode(&t, "--text", a->source_text, &src, &count);
    if (code == 0 && count == 0) {
        fprintf(stderr, "attn viz: --text has no tokens to translate\n");
        code = 2;
    }
    if (code == 0) {
        attn_decode_options options = attn_decode_default_options();
        options.beam_size = a->beam;
        options.alignments = 1;
        code = cli_translator_decode(&t, 1, &src, &count, &options, &result);
    }
    if (code == 0 && result->sentences[0].count == 0) {
        fprintf(stderr, "attn viz: the model gave no hypothesis (its logits are not finite)\n");
        code = 1;
    }
    if (code == 0 &&
        (output = cli_translator_text(&t, &result->sentences[0].hypotheses[0])) == NULL)
        code = 1;
    if (code == 0)
        code = a->kind == ATTN_CROSS_ATTENTION ? draw_cross(a, &t, result, src, count, output)
                                               : draw_self(a, &t, result, src, count, output);
    free(output);
    attn_decode_result_destroy(result);
    free(src);
    cli_translator_free(&t);
    return code;
}

int attn_cmd_viz(int argc, char **argv)
{
    viz_args a;
    int code = parse_args(argc, argv, &a);
    if (code != CLI_GO_ON)
        return code;
    if (a.model != NULL)
        return draw_model(&a);
    if (a.confusion)
        return draw_confusion(&a);
    return a.log != NULL ? draw_log(&a) : draw_matrices(&a);
}
