/* attn viz: attention heat maps and training curves as SVG, PNG or terminal text. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/translator.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: attn viz --matrix FILE [--index N|all] [--out FILE.svg|FILE.png] [options]\n"
            "       attn viz --model MODEL --text TEXT [--out FILE.svg|FILE.png] [options]\n"
            "       attn viz --log FILE.jsonl --out FILE.svg|FILE.png [--title TEXT]\n"
            "\n"
            "Draws attention weights as a heat map (output tokens down the left, source tokens\n"
            "along the top, a colour scale), or a training log's loss curves.\n"
            "\n"
            "heat maps:\n"
            "  --matrix FILE     JSON {\"source\": [...], \"target\": [...], \"weights\": "
            "[[...], ...]}\n"
            "                    (one row of weights per target token), or JSON lines of such\n"
            "                    objects; optional \"title\", or \"layer\" and \"head\", name "
            "each one\n"
            "  --index N|all     which object of a JSON-lines file (default 0); all: every one, "
            "as a grid\n"
            "  --out FILE        write FILE.svg or FILE.png; without it, print to the terminal\n"
            "  --title TEXT      a title over the picture\n"
            "  --colormap NAME   blues (white to dark blue, default) or greys (black to white)\n"
            "  --vmin X, --vmax X  the ends of the colour scale (default 0 and 1)\n"
            "  --annotate        write each weight in its cell\n"
            "  --columns N       panels per row of a grid (default: about square)\n"
            "  --cell N          cell size in pixels, 4..200 (default: from the matrix size)\n"
            "  --style NAME      terminal: shades (default), color (256 colours) or ascii\n"
            "  --width N         terminal: columns to fit in (default $COLUMNS, else 80)\n"
            "\n"
            "a model's attention (heat map options above apply too):\n"
            "  --model FILE      a model 'attn train' wrote; TEXT is translated (greedy, or beam\n"
            "                    search with --beam) and the attention of that translation is\n"
            "                    drawn\n"
            "  --text TEXT       the source text\n"
            "  --kind KIND       cross (default): the cross-attention that produced the output,\n"
            "                    output tokens (then </s>) down, source tokens along the top;\n"
            "                    self: the decoder's masked self-attention, the output token\n"
            "                    each position predicts down, the tokens it reads (<s>, then\n"
            "                    the output) along the top; encoder: the encoder's\n"
            "                    self-attention, source tokens on both axes (Transformer\n"
            "                    models; self and encoder re-run the model on the output)\n"
            "  --layer L         layer, from 0 (default: the last), of the decoder or encoder\n"
            "  --head H|all      one head, or every head of the layer as a grid (default: the\n"
            "                    mean over the layer's heads)\n"
            "  --beam K          beam size (default 1: greedy)\n"
            "\n"
            "training curves:\n"
            "  --log FILE        JSON lines such as {\"step\": 100, \"epoch\": 1, "
            "\"train_loss\": 2.3,\n"
            "                    \"valid_loss\": 2.5}; fields may be missing on a line\n");
}

typedef struct viz_args {
    const char *matrix, *log, *out, *title;
    const char *model, *source_text;
    long layer, head;   /* -1: the last layer; head -1: the mean, -2: all */
    long beam;
    attn_attention_kind kind;
    long index; /* -1: all */
    attn_viz_heatmap_options heatmap;
    attn_viz_text_options text;
} viz_args;

static int parse_long(const char *option, const char *text, long lo, long hi, long *value)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "attn viz: %s expects an integer in %ld..%ld, got '%s'\n", option, lo, hi,
                text);
        return 0;
    }
    *value = v;
    return 1;
}

static int parse_float(const char *option, const char *text, float *value)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v) || fabs(v) > 1e30) {
        fprintf(stderr, "attn viz: %s expects a number, got '%s'\n", option, text);
        return 0;
    }
    *value = (float)v;
    return 1;
}

/* Returns 0 to go on, or the exit code. */
static int parse_args(int argc, char **argv, viz_args *a)
{
    memset(a, 0, sizeof *a);
    a->heatmap = attn_viz_heatmap_default_options();
    a->layer = -1;
    a->head = -1;
    a->beam = 1;
    a->kind = ATTN_CROSS_ATTENTION;
    const char *columns_env = getenv("COLUMNS");
    long columns = 0;
    if (columns_env != NULL) {
        char *end;
        columns = strtol(columns_env, &end, 10);
        if (*end != '\0' || columns < 20 || columns > 10000)
            columns = 0;
    }
    a->text.width = (int)columns;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(stdout);
            return -1;
        }
        if (strcmp(arg, "--annotate") == 0) {
            a->heatmap.annotate = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "attn viz: unknown option or missing value: '%s' (see attn viz "
                            "--help)\n",
                    arg);
            return 2;
        }
        const char *value = argv[++i];
        long number;
        if (strcmp(arg, "--matrix") == 0) {
            a->matrix = value;
        } else if (strcmp(arg, "--log") == 0) {
            a->log = value;
        } else if (strcmp(arg, "--out") == 0) {
            a->out = value;
        } else if (strcmp(arg, "--title") == 0) {
            a->heatmap.title = a->title = value;
        } else if (strcmp(arg, "--model") == 0) {
            a->model = value;
        } else if (strcmp(arg, "--text") == 0) {
            a->source_text = value;
        } else if (strcmp(arg, "--layer") == 0) {
            if (!parse_long(arg, value, 0, 1000000L, &a->layer))
                return 2;
        } else if (strcmp(arg, "--head") == 0) {
            if (strcmp(value, "all") == 0)
                a->head = -2;
            else if (!parse_long(arg, value, 0, 1000000L, &a->head))
                return 2;
        } else if (strcmp(arg, "--beam") == 0) {
            if (!parse_long(arg, value, 1, 1024, &a->beam))
                return 2;
        } else if (strcmp(arg, "--kind") == 0) {
            if (strcmp(value, "cross") == 0) {
                a->kind = ATTN_CROSS_ATTENTION;
            } else if (strcmp(value, "self") == 0) {
                a->kind = ATTN_DECODER_SELF_ATTENTION;
            } else if (strcmp(value, "encoder") == 0) {
                a->kind = ATTN_ENCODER_SELF_ATTENTION;
            } else {
                fprintf(stderr, "attn viz: --kind is cross, self or encoder, got '%s'\n", value);
                return 2;
            }
        } else if (strcmp(arg, "--index") == 0) {
            if (strcmp(value, "all") == 0)
                a->index = -1;
            else if (!parse_long(arg, value, 0, 1000000000L, &a->index))
                return 2;
        } else if (strcmp(arg, "--colormap") == 0) {
            if (strcmp(value, "blues") == 0) {
                a->heatmap.colormap = ATTN_VIZ_BLUES;
            } else if (strcmp(value, "greys") == 0 || strcmp(value, "grays") == 0) {
                a->heatmap.colormap = ATTN_VIZ_GREYS;
            } else {
                fprintf(stderr, "attn viz: --colormap is blues or greys, got '%s'\n", value);
                return 2;
            }
        } else if (strcmp(arg, "--vmin") == 0) {
            if (!parse_float(arg, value, &a->heatmap.vmin))
                return 2;
        } else if (strcmp(arg, "--vmax") == 0) {
            if (!parse_float(arg, value, &a->heatmap.vmax))
                return 2;
        } else if (strcmp(arg, "--columns") == 0) {
            if (!parse_long(arg, value, 1, 1000, &number))
                return 2;
            a->heatmap.grid_columns = (int)number;
        } else if (strcmp(arg, "--cell") == 0) {
            if (!parse_long(arg, value, 4, 200, &number))
                return 2;
            a->heatmap.cell_size = (int)number;
        } else if (strcmp(arg, "--width") == 0) {
            if (!parse_long(arg, value, 20, 10000, &number))
                return 2;
            a->text.width = (int)number;
        } else if (strcmp(arg, "--style") == 0) {
            if (strcmp(value, "shades") == 0) {
                a->text.style = ATTN_VIZ_TEXT_SHADES;
            } else if (strcmp(value, "color") == 0 || strcmp(value, "colour") == 0) {
                a->text.style = ATTN_VIZ_TEXT_COLOR256;
            } else if (strcmp(value, "ascii") == 0) {
                a->text.style = ATTN_VIZ_TEXT_ASCII;
            } else {
                fprintf(stderr, "attn viz: --style is shades, color or ascii, got '%s'\n", value);
                return 2;
            }
        } else {
            fprintf(stderr, "attn viz: unknown option '%s' (see attn viz --help)\n", arg);
            return 2;
        }
    }
    if ((a->matrix != NULL) + (a->log != NULL) + (a->model != NULL) != 1) {
        fprintf(stderr, "attn viz: give one of --matrix FILE, --log FILE or --model FILE (see "
                        "attn viz --help)\n");
        return 2;
    }
    if ((a->model != NULL) != (a->source_text != NULL)) {
        fprintf(stderr, "attn viz: %s\n", a->model != NULL ? "--model needs --text TEXT"
                                                           : "--text needs --model FILE");
        return 2;
    }
    if (a->log != NULL && a->out == NULL) {
        fprintf(stderr, "attn viz: --log needs --out FILE.svg or FILE.png\n");
        return 2;
    }
    if (!(a->heatmap.vmin < a->heatmap.vmax)) {
        fprintf(stderr, "attn viz: --vmin (%g) must be below --vmax (%g)\n",
                (double)a->heatmap.vmin, (double)a->heatmap.vmax);
        return 2;
    }
    if (a->out != NULL) {
        attn_viz_format format;
        if (attn_viz_format_from_path(a->out, &format) != ATTN_OK) {
            fprintf(stderr, "attn viz: --out %s: use a name ending in .svg or .png\n", a->out);
            return 2;
        }
    }
    return 0;
}

static int fail(void)
{
    fprintf(stderr, "attn viz: %s\n", attn_last_error());
    return 1;
}

static int draw_log(const viz_args *a)
{
    attn_viz_training_log log;
    if (attn_viz_training_log_read(a->log, &log) != ATTN_OK)
        return fail();
    attn_viz_chart_options options = {0};
    options.title = a->title;
    attn_status status = attn_viz_loss_curves_write(a->out, &log, &options);
    attn_viz_training_log_free(&log);
    return status == ATTN_OK ? 0 : fail();
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

/* Draws the panels asked for (every head, one, or their mean) under the title
 * "TEXT → OUTPUT". Returns the exit code. */
static int draw_layer(const viz_args *a, const layer_maps *m, const char *output)
{
    const int64_t panels = a->head == -2 ? m->heads : 1;
    const size_t cells = (size_t)(m->rows * m->cols);
    float *mean = a->head == -1 ? calloc(cells > 0 ? cells : 1, sizeof *mean) : NULL;
    attn_viz_matrix *matrices = calloc((size_t)panels, sizeof *matrices);
    char (*titles)[96] = calloc((size_t)panels, sizeof *titles);
    int code = 1;
    if (matrices == NULL || titles == NULL || (a->head == -1 && mean == NULL)) {
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
            snprintf(titles[p], sizeof titles[p], "%slayer %lld, mean of %lld head%s",
                     m->kind_name, (long long)m->layer, (long long)m->heads,
                     m->heads == 1 ? "" : "s");
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
        matrices[p] = (attn_viz_matrix){weights,       m->rows,      m->cols,
                                        m->row_labels, m->col_labels, titles[p]};
    }
    attn_viz_heatmap_options heatmap = a->heatmap;
    char *title = NULL;
    if (heatmap.title == NULL) {
        size_t size = strlen(a->source_text) + strlen(output) + strlen(m->kind_name) + 48;
        title = malloc(size);
        if (title != NULL && a->head == -2)
            snprintf(title, size, "%s \xe2\x86\x92 %s: %slayer %lld", a->source_text, output,
                     m->kind_name, (long long)m->layer);
        else if (title != NULL)
            snprintf(title, size, "%s \xe2\x86\x92 %s", a->source_text, output);
        heatmap.title = title;
    }
    code = draw(a, matrices, panels, &heatmap);
    free(title);
done:
    free(mean);
    free(matrices);
    free(titles);
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
    int code = check_layer_and_head(a, result->cross_layers, result->cross_heads,
                                    "decoder layers");
    if (code != 0)
        return code;
    layer_maps m = {"cross-attention ", a->layer < 0 ? result->cross_layers - 1 : a->layer,
                    result->cross_heads,
                    h->steps, src_length, NULL, NULL, NULL};
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
        fprintf(stderr, "attn viz: --kind %s: this model has no self-attention (an rnn with "
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

static int draw_model(const viz_args *a)
{
    cli_translator t;
    int32_t *src = NULL;
    int64_t count = 0;
    attn_decode_result *result = NULL;
    char *output = NULL;
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
    if (code == 0 && (output = cli_translator_text(&t, &result->sentences[0].hypotheses[0])) ==
                         NULL)
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
    if (code != 0)
        return code < 0 ? 0 : code;
    if (a.model != NULL)
        return draw_model(&a);
    return a.log != NULL ? draw_log(&a) : draw_matrices(&a);
}
