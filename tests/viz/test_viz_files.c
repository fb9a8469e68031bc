/* Reading matrices and training logs from JSON, and charts of curves. */
#include "viz_test_util.h"

#include <math.h>

static void test_one_matrix_object(void)
{
    const char *path = test_write_scratch_text("one.json", "{\"source\": [\"p\", \"h\", \"o\"],\n"
                                                           " \"target\": [\"F\", \"OW\"],\n"
                                                           " \"weights\": [[0.9, 0.1, 0.0],\n"
                                                           "             [0.0, 0.2, 0.8]]}\n");
    attn_viz_matrix *m = NULL;
    int64_t count = 0;
    CHECK_OK(attn_viz_matrices_read(path, &m, &count));
    CHECK(count == 1, "one matrix, got %lld", (long long)count);
    if (m == NULL || count != 1)
        return;
    CHECK(m->rows == 2 && m->cols == 3, "2 x 3");
    CHECK(strcmp(m->col_labels[2], "o") == 0 && strcmp(m->row_labels[1], "OW") == 0, "labels");
    CHECK_CLOSE(m->weights[5], 0.8, 1e-7, 0);
    CHECK_CLOSE(m->weights[1], 0.1, 1e-7, 0);
    CHECK(m->title == NULL, "no title");
    attn_viz_matrices_free(m, count);
}

static void test_json_lines_name_their_panels(void)
{
    const char *path = test_write_scratch_text(
        "heads.jsonl", "{\"layer\": 2, \"head\": 5, \"weights\": [[1]]}\n"
                       "\n"
                       "{\"title\": \"cross-attention\", \"layer\": 1, \"weights\": [[0.5, 0.5]]}\n"
                       "{\"head\": 3, \"source\": [\"ü\"], \"target\": [\"y\"], \"weights\": "
                       "[[1]]}\n");
    attn_viz_matrix *m = NULL;
    int64_t count = 0;
    CHECK_OK(attn_viz_matrices_read(path, &m, &count));
    CHECK(count == 3, "three records, got %lld", (long long)count);
    if (m == NULL || count != 3)
        return;
    CHECK(m[0].title != NULL && strcmp(m[0].title, "layer 2, head 5") == 0, "layer and head");
    CHECK(m[1].title != NULL && strcmp(m[1].title, "cross-attention") == 0, "title wins");
    CHECK(m[2].title != NULL && strcmp(m[2].title, "head 3") == 0, "head only");
    CHECK(m[0].row_labels == NULL && m[0].col_labels == NULL, "labels may be left out");
    CHECK(m[1].cols == 2 && m[1].rows == 1, "1 x 2");
    CHECK(strcmp(m[2].col_labels[0], "ü") == 0, "UTF-8 label");
    attn_viz_matrices_free(m, count);
}

/* The read must fail with ATTN_ERR_FORMAT and a message holding every one of the fragments. */
static void expect_matrix_error(const char *text, const char *fragment1, const char *fragment2)
{
    const char *path = test_write_scratch_text("bad.jsonl", text);
    attn_viz_matrix *m = (attn_viz_matrix *)&m;
    int64_t count = 7;
    CHECK_FAILS(attn_viz_matrices_read(path, &m, &count), ATTN_ERR_FORMAT);
    CHECK(m == NULL && count == 0, "nothing returned on failure");
    const char *message = attn_last_error();
    CHECK(strstr(message, fragment1) != NULL && strstr(message, fragment2) != NULL,
          "'%s' should mention '%s' and '%s'", message, fragment1, fragment2);
}

static void test_bad_matrix_files_say_where(void)
{
    const char *ok = "{\"weights\": [[1]]}\n";
    char text[512];
    snprintf(text, sizeof text, "%s%s{\"weights\": [[1, 2], [3]}\n", ok, ok);
    expect_matrix_error(text, "bad.jsonl:3:", "malformed JSON");
    expect_matrix_error("{\"weights\": [[0.5, 0.5], [1]]}", "bad.jsonl:1:", "ragged");
    expect_matrix_error("{\"weights\": [[0.5, 0.5]], \"source\": [\"a\"]}", "\"source\" has 1",
                        "2 columns");
    expect_matrix_error("{\"weights\": [[0.5], [0.5]], \"target\": [\"a\"]}", "\"target\" has 1",
                        "2 rows");
    expect_matrix_error("\n\n{\"source\": [\"a\"]}", "bad.jsonl:3:", "no \"weights\"");
    expect_matrix_error("{\"weights\": [[\"x\"]]}", "[0][0]", "not a finite number");
    expect_matrix_error("{\"weights\": [[1e300]]}", "[0][0]", "float range");
    expect_matrix_error("{\"weights\": []}", "non-empty", "weights");
    expect_matrix_error("[[1]]", "bad.jsonl:1:", "expected a JSON object");
    expect_matrix_error("{\"weights\": [[1]], \"source\": [\"\xC3\"]}", "\"source\"[0]",
                        "UTF-8");
    expect_matrix_error("{\"weights\": [[1]], \"layer\": -1}", "\"layer\"", "integer");
    expect_matrix_error("  \n", "bad.jsonl", "no matrices");
    attn_viz_matrix *m = NULL;
    int64_t count = 0;
    CHECK_FAILS(attn_viz_matrices_read(test_scratch_path("absent.json"), &m, &count), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "absent.json") != NULL, "names the file");
    CHECK_FAILS(attn_viz_matrices_read(NULL, &m, &count), ATTN_ERR_INVALID_ARGUMENT);
    attn_viz_matrices_free(NULL, 0);
}

static void test_training_log_fields_may_be_missing(void)
{
    const char *path = test_write_scratch_text(
        "train.jsonl", "{\"step\": 100, \"epoch\": 1, \"train_loss\": 2.5, \"lr\": 0.001}\n"
                       "{\"step\": 200, \"epoch\": 1, \"train_loss\": 2.0, \"note\": \"x\"}\n"
                       "\n"
                       "{\"step\": 200, \"epoch\": 1, \"valid_loss\": 2.25, \"train_loss\": null}\n"
                       "{\"epoch\": 2, \"train_loss\": 1.5}\n");
    attn_viz_training_log log;
    CHECK_OK(attn_viz_training_log_read(path, &log));
    CHECK(log.count == 4, "four records, got %lld", (long long)log.count);
    if (log.count != 4)
        return;
    CHECK(strcmp(log.x_name, "step") == 0 && log.x == log.step, "steps are the x axis");
    CHECK(log.step[1] == 200 && isnan(log.step[3]), "steps");
    CHECK(log.train_loss[0] == 2.5 && isnan(log.train_loss[2]) && log.train_loss[3] == 1.5,
          "train loss, null is missing");
    CHECK(isnan(log.valid_loss[0]) && log.valid_loss[2] == 2.25, "valid loss");
    CHECK(log.lr[0] == 0.001 && isnan(log.lr[1]), "lr");
    CHECK_OK(attn_viz_loss_curves_write(test_scratch_path("loss.svg"), &log, NULL, 1, NULL));
    attn_viz_training_log_free(&log);
    CHECK(log.count == 0 && log.step == NULL, "freed and zeroed");
    attn_viz_training_log_free(&log);

    path = test_write_scratch_text("epochs.jsonl", "{\"epoch\": 1, \"valid_loss\": 3}\n"
                                                   "{\"epoch\": 2, \"valid_loss\": 2}\n");
    CHECK_OK(attn_viz_training_log_read(path, &log));
    CHECK(log.x_name != NULL && strcmp(log.x_name, "epoch") == 0 && log.x == log.epoch,
          "epochs when no steps");
    attn_viz_training_log_free(&log);
    path = test_write_scratch_text("bare.jsonl", "{\"train_loss\": 3}\n{\"train_loss\": 2}\n");
    CHECK_OK(attn_viz_training_log_read(path, &log));
    CHECK(log.x_name != NULL && strcmp(log.x_name, "record") == 0 && log.x != NULL &&
              log.x[0] == 1 && log.x[1] == 2,
          "record numbers when neither");
    attn_viz_training_log_free(&log);
    path = test_write_scratch_text("lr.jsonl", "{\"step\": 1, \"lr\": 3}\n");
    CHECK_OK(attn_viz_training_log_read(path, &log));
    CHECK_FAILS(attn_viz_loss_curves_write(test_scratch_path("nothing.svg"), &log, NULL, 1, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_viz_training_log_free(&log);
}

/* Two runs in one chart: each curve's legend entry starts with its log's name. */
static void test_several_logs_share_one_chart(void)
{
    attn_viz_training_log logs[2];
    const char *first = test_write_scratch_text("a.jsonl", "{\"step\": 1, \"train_loss\": 3}\n"
                                                           "{\"step\": 2, \"valid_loss\": 2}\n");
    CHECK_OK(attn_viz_training_log_read(first, &logs[0]));
    const char *second = test_write_scratch_text("b.jsonl", "{\"step\": 1, \"valid_loss\": 2.5}\n");
    CHECK_OK(attn_viz_training_log_read(second, &logs[1]));
    const char *names[2] = {"fp32", "bf16"};
    const char *out = test_scratch_path("two.svg");
    CHECK_OK(attn_viz_loss_curves_write(out, logs, names, 2, NULL));
    char text[1 << 16] = {0};
    FILE *f = fopen(out, "rb");
    CHECK(f != NULL, "the chart was written");
    if (f != NULL) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    CHECK(strstr(text, "fp32: train (with label smoothing, if any)") != NULL &&
              strstr(text, "fp32: valid (plain cross-entropy)") != NULL &&
              strstr(text, "bf16: valid (plain cross-entropy)") != NULL,
          "three named curves");
    CHECK(strstr(text, "bf16: train") == NULL, "no curve for a loss the log lacks");
    CHECK_FAILS(attn_viz_loss_curves_write(out, logs, NULL, 2, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "names") != NULL, "two logs need names: %s", attn_last_error());
    attn_viz_training_log_free(&logs[0]);
    attn_viz_training_log_free(&logs[1]);
}

static void expect_log_error(const char *text, const char *fragment)
{
    const char *path = test_write_scratch_text("bad.jsonl", text);
    attn_viz_training_log log;
    CHECK_FAILS(attn_viz_training_log_read(path, &log), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), fragment) != NULL, "'%s' should mention '%s'",
          attn_last_error(), fragment);
    CHECK(log.count == 0 && log.step == NULL, "nothing kept on failure");
}

static void test_bad_training_logs_say_where(void)
{
    expect_log_error("{\"step\": 1}\n{\"step\": 2, \"train_loss\": }\n", "bad.jsonl:2:");
    expect_log_error("{\"step\": 1}\n\n{\"step\": \"three\"}\n", "bad.jsonl:3: \"step\"");
    expect_log_error("{\"step\": 1} {\"step\": 2}\n", "one record per line");
    expect_log_error("[1, 2]\n", "expected a JSON object");
    expect_log_error("{\"valid_loss\": 1e999}\n", "\"valid_loss\" is not a finite number");
    expect_log_error("\n  \n", "no records");
    attn_viz_training_log log;
    CHECK_FAILS(attn_viz_training_log_read(test_scratch_path("absent.jsonl"), &log), ATTN_ERR_IO);
    CHECK_FAILS(attn_viz_training_log_read(NULL, &log), ATTN_ERR_INVALID_ARGUMENT);
}

/* The polyline points of series k in an SVG, as pairs; returns how many. */
static int series_points(const char *svg, int k, double *xy, int capacity)
{
    char mark[64];
    snprintf(mark, sizeof mark, "class=\"series\" data-series=\"%d\"", k);
    int n = 0;
    for (const char *p = strstr(svg, "<polyline points=\""); p != NULL;
         p = strstr(p + 1, "<polyline points=\"")) {
        const char *end = strchr(p, '>');
        const char *found = strstr(p, mark);
        if (found == NULL || found > end)
            continue;
        const char *q = p + strlen("<polyline points=\"");
        while (*q != '"' && n < capacity) {
            char *next;
            xy[2 * n] = strtod(q, &next);
            xy[2 * n + 1] = strtod(next + 1, &next);
            n++;
            q = next;
            while (*q == ' ')
                q++;
        }
    }
    return n;
}

static void test_chart_puts_points_where_the_axes_say(void)
{
    const double x[5] = {0, 10, 20, NAN, 40};
    const double y[5] = {3.0, 2.0, 1.5, 1.0, 1.25};
    const double vx[2] = {20, 40}, vy[2] = {2.0, 1.75};
    attn_viz_series series[2] = {{"train", x, y, 5}, {"valid", vx, vy, 2}};
    attn_viz_chart_options options = {"loss", "step", "loss", 640, 400};
    unsigned char *svg = NULL;
    size_t size = 0;
    CHECK_OK(attn_viz_chart_render(series, 2, &options, ATTN_VIZ_SVG, &svg, &size));
    if (svg == NULL)
        return;
    const char *text = (const char *)svg;
    const char *area = strstr(text, "class=\"plot-area\"");
    CHECK(area != NULL, "the plot area is marked");
    if (area == NULL)
        return;
    while (area > text && strncmp(area, "<rect", 5) != 0)
        area--;
    double left = attribute_number(area, "x"), top = attribute_number(area, "y");
    double width = attribute_number(area, "width"), height = attribute_number(area, "height");
    double x0 = attribute_number(area, "data-x-min"), x1 = attribute_number(area, "data-x-max");
    double y0 = attribute_number(area, "data-y-min"), y1 = attribute_number(area, "data-y-max");
    CHECK(x0 <= 0 && x1 >= 40 && y0 <= 1.0 && y1 >= 3.0, "the axes cover the data");
    CHECK(x1 - x0 <= 80 && y1 - y0 <= 4.0, "without wasting half the plot");
    double xy[16];
    int n = series_points(text, 0, xy, 8);
    CHECK(n == 4, "the NaN point is left out: %d points", n);
    const int kept[4] = {0, 1, 2, 4};
    for (int i = 0; i < n && i < 4; i++) {
        CHECK_CLOSE(xy[2 * i], left + (x[kept[i]] - x0) / (x1 - x0) * width, 0.01, 0);
        CHECK_CLOSE(xy[2 * i + 1], top + height - (y[kept[i]] - y0) / (y1 - y0) * height, 0.01, 0);
    }
    CHECK(count_occurrences(text, "class=\"series\" data-series=\"0\"") == 2,
          "the NaN breaks the line in two");
    CHECK(series_points(text, 1, xy, 8) == 2, "valid has 2 points");
    CHECK(count_occurrences(text, "class=\"marker\"") == 4 + 2, "markers on short series");
    CHECK(strstr(text, ">train</text>") != NULL && strstr(text, ">valid</text>") != NULL,
          "legend");
    free(svg);

    unsigned char *png = NULL;
    CHECK_OK(attn_viz_chart_render(series, 2, &options, ATTN_VIZ_PNG, &png, &size));
    int w = 0, h = 0;
    unsigned char *pixels = png != NULL ? decode_png(png, size, &w, &h) : NULL;
    CHECK(pixels != NULL && w == 640 && h == 400, "PNG of the asked size: %d x %d", w, h);
    if (pixels != NULL) {
        /* The train line's colour at its second point (x=10, y=2). */
        int px = (int)(left + (10 - x0) / (x1 - x0) * width);
        int py = (int)(top + height - (2.0 - y0) / (y1 - y0) * height);
        const unsigned char *p = pixels + 3 * ((size_t)py * 640 + (size_t)px);
        CHECK(p[2] > p[0] + 60, "a blue point where the line passes: %d %d %d", p[0], p[1], p[2]);
    }
    free(pixels);
    free(png);
}

static void test_bad_charts_are_refused(void)
{
    const double x[2] = {NAN, 1}, y[2] = {1, NAN};
    attn_viz_series nothing = {"none", x, y, 2};
    unsigned char *bytes = NULL;
    size_t size = 0;
    CHECK_FAILS(attn_viz_chart_render(&nothing, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_viz_series null_data = {"x", NULL, y, 2};
    CHECK_FAILS(attn_viz_chart_render(&null_data, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_viz_chart_render(NULL, 1, NULL, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    const double one[1] = {5};
    attn_viz_series single = {"one", one, one, 1};
    attn_viz_chart_options tiny = {NULL, NULL, NULL, 100, 100};
    CHECK_FAILS(attn_viz_chart_render(&single, 1, &tiny, ATTN_VIZ_SVG, &bytes, &size),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_viz_chart_render(&single, 1, NULL, ATTN_VIZ_PNG, &bytes, &size));
    free(bytes);
    CHECK_FAILS(attn_viz_chart_write(test_scratch_path("chart.gif"), &single, 1, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_one_matrix_object);
    RUN_TEST(test_json_lines_name_their_panels);
    RUN_TEST(test_bad_matrix_files_say_where);
    RUN_TEST(test_training_log_fields_may_be_missing);
    RUN_TEST(test_several_logs_share_one_chart);
    RUN_TEST(test_bad_training_logs_say_where);
    RUN_TEST(test_chart_puts_points_where_the_axes_say);
    RUN_TEST(test_bad_charts_are_refused);
    return test_summary();
}
