/* The parameter store: layout of the four buffers, initialisers, lookup, zero_grad, and
 * saving and loading by name. */
#include "autodiff_testing.h"

#include <math.h>
#include <string.h>

static attn_params *store_of(int n, const char *const *names, const int64_t (*shapes)[2],
                             const int *ndims, const attn_init *inits)
{
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    for (int i = 0; i < n; i++)
        CHECK_OK(attn_params_add(store, names[i], ndims[i], shapes[i], inits[i], NULL));
    CHECK_OK(attn_params_finalize(store));
    return store;
}

static void test_layout_is_one_aligned_buffer_per_kind(void)
{
    const char *names[] = {"a.weight", "a.bias", "b"};
    const int64_t shapes[][2] = {{3, 5}, {3, 0}, {17, 0}};
    const int ndims[] = {2, 1, 1};
    const attn_init inits[] = {attn_init_normal(1.0f), attn_init_zeros(), attn_init_ones()};
    attn_params *store = store_of(3, names, shapes, ndims, inits);
    CHECK(attn_params_count(store) == 3, "three parameters");
    CHECK(attn_params_numel(store) == 15 + 3 + 17, "numel %lld",
          (long long)attn_params_numel(store));
    size_t end = 0;
    for (attn_param_id id = 0; id < 3; id++) {
        attn_param_info info;
        CHECK_OK(attn_params_info(store, id, &info));
        CHECK(strcmp(info.name, names[id]) == 0, "name %s", info.name);
        CHECK(info.offset % 16 == 0 && info.offset >= end, "offset %zu aligned, after %zu",
              info.offset, end);
        end = info.offset + (size_t)info.numel;
        for (int b = 0; b < 4; b++) {
            float *base = attn_params_buffer(store, (attn_param_buffer)b);
            CHECK(((uintptr_t)base) % 64 == 0, "buffer %d 64-byte aligned", b);
            CHECK(attn_params_data(store, id, (attn_param_buffer)b) == base + info.offset,
                  "same layout in buffer %d", b);
        }
        attn_param_id found = -1;
        CHECK_OK(attn_params_find(store, names[id], &found));
        CHECK(found == id, "find %s", names[id]);
    }
    CHECK(attn_params_buffer_floats(store) >= end, "buffer covers every parameter");
    CHECK_FAILS(attn_params_find(store, "missing", &(attn_param_id){0}), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "missing") != NULL, "message names it: %s", attn_last_error());

    /* Padding stays zero, so one loop over a whole buffer (an optimizer) is harmless. */
    CHECK_OK(attn_params_init(store, 1));
    const float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
    int padding_zero = 1;
    for (size_t i = 15; i < 16; i++)
        padding_zero &= values[i] == 0.0f;
    CHECK(padding_zero, "padding after a.weight stays zero");

    float *grads = attn_params_buffer(store, ATTN_PARAM_GRADS);
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
        grads[i] = 1.5f;
    attn_params_zero_grad(store);
    int zero = 1;
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
        zero &= grads[i] == 0.0f;
    CHECK(zero, "zero_grad clears every gradient");
    attn_params_destroy(store);
}

static void test_initialisers(void)
{
    const char *names[] = {"w", "n", "u", "z", "o", "x3"};
    const int64_t shapes[][2] = {{64, 32}, {4000, 0}, {3000, 0}, {5, 0}, {5, 0}, {6, 0}};
    const int ndims[] = {2, 1, 1, 1, 1, 1};
    const attn_init inits[] = {attn_init_xavier_uniform(2.0f),
                               attn_init_normal(0.5f),
                               attn_init_uniform(0.25f),
                               attn_init_zeros(),
                               attn_init_ones(),
                               attn_init_normal(1.0f)};
    attn_params *store = store_of(6, names, shapes, ndims, inits);
    CHECK_OK(attn_params_init(store, 7));

    const float *w = attn_params_data(store, 0, ATTN_PARAM_VALUES);
    double bound = 2.0 * sqrt(6.0 / (64.0 + 32.0)), top = 0.0;
    for (int i = 0; i < 64 * 32; i++)
        top = fmax(top, fabs(w[i]));
    CHECK(top <= bound && top > 0.95 * bound, "xavier: max |w| %g within and near %g", top, bound);

    const float *n = attn_params_data(store, 1, ATTN_PARAM_VALUES);
    double sum = 0.0, squares = 0.0;
    for (int i = 0; i < 4000; i++) {
        sum += n[i];
        squares += (double)n[i] * n[i];
    }
    double mean = sum / 4000, std = sqrt(squares / 4000 - mean * mean);
    CHECK(fabs(mean) < 0.05 && fabs(std - 0.5) < 0.03, "normal(0.5): mean %g std %g", mean, std);

    const float *u = attn_params_data(store, 2, ATTN_PARAM_VALUES);
    double lo = 1, hi = -1;
    for (int i = 0; i < 3000; i++) {
        lo = fmin(lo, u[i]);
        hi = fmax(hi, u[i]);
    }
    CHECK(lo >= -0.25 && hi <= 0.25 && lo < -0.24 && hi > 0.24, "uniform(0.25): [%g, %g]", lo, hi);

    const float *z = attn_params_data(store, 3, ATTN_PARAM_VALUES);
    const float *o = attn_params_data(store, 4, ATTN_PARAM_VALUES);
    CHECK(z[0] == 0.0f && z[4] == 0.0f && o[0] == 1.0f && o[4] == 1.0f, "zeros and ones");

    /* Same seed, same values; another seed, others. A parameter's values depend on its name,
     * not on the parameters around it. */
    const char *alone_names[] = {"x3"};
    const int64_t alone_shapes[][2] = {{6, 0}};
    const int alone_ndims[] = {1};
    const attn_init alone_inits[] = {attn_init_normal(1.0f)};
    attn_params *alone = store_of(1, alone_names, alone_shapes, alone_ndims, alone_inits);
    CHECK_OK(attn_params_init(alone, 7));
    CHECK(memcmp(attn_params_data(alone, 0, ATTN_PARAM_VALUES),
                 attn_params_data(store, 5, ATTN_PARAM_VALUES), 6 * sizeof(float)) == 0,
          "x3 has the same values in another store with the same seed");
    CHECK_OK(attn_params_init(alone, 8));
    CHECK(memcmp(attn_params_data(alone, 0, ATTN_PARAM_VALUES),
                 attn_params_data(store, 5, ATTN_PARAM_VALUES), 6 * sizeof(float)) != 0,
          "another seed gives other values");
    attn_params_destroy(alone);
    attn_params_destroy(store);
}

static void test_bad_registrations(void)
{
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    const int64_t shape[2] = {2, 3}, bad[2] = {2, 0};
    CHECK_OK(attn_params_add(store, "a", 2, shape, attn_init_zeros(), NULL));
    CHECK_FAILS(attn_params_add(store, "a", 2, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "'a'") != NULL, "duplicate named: %s", attn_last_error());
    CHECK_FAILS(attn_params_add(store, "", 2, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, NULL, 2, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 2, bad, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 0, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 7, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 2, NULL, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 1, shape, attn_init_xavier_uniform(1.0f), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 1, shape, attn_init_normal(-1.0f), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 1, shape, attn_init_normal(NAN), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "b", 1, shape, (attn_init){(attn_init_kind)9, 1.0f}, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_init(store, 1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_params_buffer(store, ATTN_PARAM_VALUES) == NULL, "no buffer before finalising");
    CHECK_OK(attn_params_finalize(store));
    CHECK_FAILS(attn_params_finalize(store), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_add(store, "c", 2, shape, attn_init_zeros(), NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "finalised") != NULL, "%s", attn_last_error());
    attn_param_info info;
    CHECK_FAILS(attn_params_info(store, 1, &info), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_info(store, -1, &info), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_params_data(store, 5, ATTN_PARAM_VALUES) == NULL, "bad id gives NULL");
    CHECK(attn_params_data(store, 0, (attn_param_buffer)4) == NULL, "bad buffer gives NULL");
    CHECK_FAILS(attn_params_create(NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_params_destroy(store);
    attn_params_destroy(NULL);

    attn_params *empty = NULL;
    CHECK_OK(attn_params_create(&empty));
    CHECK_OK(attn_params_finalize(empty));
    CHECK(attn_params_count(empty) == 0 && attn_params_buffer_floats(empty) == 0, "empty store");
    CHECK_OK(attn_params_init(empty, 3));
    attn_params_destroy(empty);
}

static void test_save_and_load_by_name(void)
{
    const char *names[] = {"enc.w", "enc.b", "dec.w"};
    const int64_t shapes[][2] = {{4, 3}, {4, 0}, {2, 5}};
    const int ndims[] = {2, 1, 2};
    const attn_init inits[] = {attn_init_normal(1.0f), attn_init_normal(1.0f),
                               attn_init_normal(1.0f)};
    attn_params *store = store_of(3, names, shapes, ndims, inits);
    CHECK_OK(attn_params_init(store, 11));
    const char *path = test_scratch_path("params.safetensors");
    attn_metadata_entry meta = {"note", "{\"x\": 1}"};
    CHECK_OK(attn_params_save(store, path, &meta, 1));

    /* Registered in another order: loading goes by name. */
    const char *names2[] = {"dec.w", "enc.w", "enc.b"};
    const int64_t shapes2[][2] = {{2, 5}, {4, 3}, {4, 0}};
    const int ndims2[] = {2, 2, 1};
    attn_params *other = store_of(3, names2, shapes2, ndims2, inits);
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    const char *note = NULL;
    CHECK_OK(attn_tensor_file_metadata(file, "note", &note));
    CHECK(note && strcmp(note, "{\"x\": 1}") == 0, "metadata kept");
    CHECK_OK(attn_params_load(other, file, ATTN_PARAM_VALUES, NULL));
    attn_tensor_file_close(file);
    for (int i = 0; i < 3; i++) {
        attn_param_id a, b;
        CHECK_OK(attn_params_find(store, names[i], &a));
        CHECK_OK(attn_params_find(other, names[i], &b));
        attn_param_info info;
        CHECK_OK(attn_params_info(store, a, &info));
        CHECK(memcmp(attn_params_data(store, a, ATTN_PARAM_VALUES),
                     attn_params_data(other, b, ATTN_PARAM_VALUES),
                     (size_t)info.numel * sizeof(float)) == 0,
              "%s loaded exactly", names[i]);
    }

    /* A checkpoint: values and a moment in one write, the moment under a prefix. */
    float *m = attn_params_buffer(store, ATTN_PARAM_ADAM_M);
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
        m[i] = (float)i * 0.5f;
    attn_named_tensor tensors[6];
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_VALUES, NULL, tensors, 6));
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_ADAM_M, "adam_m.", tensors + 3, 3));
    CHECK(strcmp(tensors[0].name, "enc.w") == 0 && strcmp(tensors[3].name, "adam_m.enc.w") == 0,
          "names %s and %s", tensors[0].name, tensors[3].name);
    CHECK_FAILS(attn_params_tensors(store, ATTN_PARAM_VALUES, NULL, tensors, 2),
                ATTN_ERR_INVALID_ARGUMENT);
    const char *checkpoint = test_scratch_path("checkpoint.safetensors");
    CHECK_OK(attn_tensor_file_write(checkpoint, tensors, 6, NULL, 0));
    CHECK_OK(attn_tensor_file_open(checkpoint, &file));
    CHECK_OK(attn_params_load(other, file, ATTN_PARAM_ADAM_M, "adam_m."));
    CHECK_OK(attn_params_load(other, file, ATTN_PARAM_VALUES, NULL));
    attn_param_id enc_b;
    CHECK_OK(attn_params_find(other, "enc.b", &enc_b));
    CHECK(memcmp(attn_params_data(other, enc_b, ATTN_PARAM_ADAM_M),
                 attn_params_data(store, 1, ATTN_PARAM_ADAM_M), 4 * sizeof(float)) == 0,
          "moment loaded under its prefix");
    CHECK_FAILS(attn_params_load(other, file, ATTN_PARAM_ADAM_V, "adam_v."), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "adam_v.") != NULL, "missing tensor named: %s",
          attn_last_error());
    attn_tensor_file_close(file);

    /* A store with a parameter the file lacks, or of another shape. */
    const char *names3[] = {"enc.w", "extra"};
    const int64_t shapes3[][2] = {{4, 3}, {1, 0}};
    const int ndims3[] = {2, 1};
    attn_params *missing = store_of(2, names3, shapes3, ndims3, inits);
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK_FAILS(attn_params_load(missing, file, ATTN_PARAM_VALUES, NULL), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "extra") != NULL, "%s", attn_last_error());
    const int64_t wrong_shapes[][2] = {{3, 4}, {4, 0}, {2, 5}};
    attn_params *wrong = store_of(3, names, wrong_shapes, ndims, inits);
    CHECK_FAILS(attn_params_load(wrong, file, ATTN_PARAM_VALUES, NULL), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "enc.w") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_params_load(wrong, NULL, ATTN_PARAM_VALUES, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_params_load(wrong, file, (attn_param_buffer)7, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_tensor_file_close(file);
    CHECK_FAILS(attn_params_save(store, "/nonexistent-folder/x.safetensors", NULL, 0), ATTN_ERR_IO);
    attn_params_destroy(wrong);
    attn_params_destroy(missing);
    attn_params_destroy(other);
    attn_params_destroy(store);
}

/* A corrupted file must not load: NaN or infinite values anywhere, negative Adam second
 * moments (v >= 0 always; sqrt(v) of a negative one is NaN at the next step). */
static void test_load_refuses_values_no_run_writes(void)
{
    const char *names[] = {"enc.w", "dec.w"};
    const int64_t shapes[][2] = {{4, 3}, {2, 5}};
    const int ndims[] = {2, 2};
    const attn_init inits[] = {attn_init_normal(1.0f), attn_init_normal(1.0f)};
    attn_params *store = store_of(2, names, shapes, ndims, inits);
    attn_params *other = store_of(2, names, shapes, ndims, inits);
    CHECK_OK(attn_params_init(store, 3));
    const char *path = test_scratch_path("corrupt.safetensors");
    const float bad_values[] = {NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof bad_values / sizeof bad_values[0]; k++) {
        float *dec_w = attn_params_data(store, 1, ATTN_PARAM_VALUES);
        float kept = dec_w[7];
        dec_w[7] = bad_values[k];
        CHECK_OK(attn_params_save(store, path, NULL, 0));
        dec_w[7] = kept;
        attn_tensor_file *file = NULL;
        CHECK_OK(attn_tensor_file_open(path, &file));
        CHECK_FAILS(attn_params_load(other, file, ATTN_PARAM_VALUES, NULL), ATTN_ERR_FORMAT);
        CHECK(strstr(attn_last_error(), "'dec.w'") != NULL &&
                  strstr(attn_last_error(), "element 7") != NULL &&
                  strstr(attn_last_error(), path) != NULL,
              "names the file, tensor and element: %s", attn_last_error());
        attn_tensor_file_close(file);
    }

    /* Second moments: zero loads (a parameter that never had a gradient), negative does not;
     * the same negative number is a fine first moment. */
    float *v = attn_params_buffer(store, ATTN_PARAM_ADAM_V);
    float *m = attn_params_buffer(store, ATTN_PARAM_ADAM_M);
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
        v[i] = m[i] = 0.0f;
    attn_named_tensor tensors[4];
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_ADAM_M, "adam_m.", tensors, 2));
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_ADAM_V, "adam_v.", tensors + 2, 2));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_write(path, tensors, 4, NULL, 0));
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK_OK(attn_params_load(other, file, ATTN_PARAM_ADAM_V, "adam_v."));
    attn_tensor_file_close(file);
    attn_params_data(store, 0, ATTN_PARAM_ADAM_V)[2] = -1e-3f;
    attn_params_data(store, 0, ATTN_PARAM_ADAM_M)[2] = -1e-3f;
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_ADAM_M, "adam_m.", tensors, 2));
    CHECK_OK(attn_params_tensors(store, ATTN_PARAM_ADAM_V, "adam_v.", tensors + 2, 2));
    CHECK_OK(attn_tensor_file_write(path, tensors, 4, NULL, 0));
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK_OK(attn_params_load(other, file, ATTN_PARAM_ADAM_M, "adam_m."));
    CHECK_FAILS(attn_params_load(other, file, ATTN_PARAM_ADAM_V, "adam_v."), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "'adam_v.enc.w'") != NULL &&
              strstr(attn_last_error(), "negative Adam second moment") != NULL,
          "says what is wrong: %s", attn_last_error());
    attn_tensor_file_close(file);
    attn_params_destroy(other);
    attn_params_destroy(store);
}

/* In bf16 a linear layer multiplies by its weight packed once per update: its forward and
 * its input gradient equal the plain bf16 products bit for bit, and after the values change
 * (an optimizer step) and attn_params_values_changed says so, they follow the new weights. */
static void test_bf16_linear_reads_the_weight_packed_once_per_update(void)
{
    static const char *const names[] = {"w"};
    static const int64_t shapes[][2] = {{37, 45}};
    static const int ndims[] = {2};
    const attn_init inits[] = {attn_init_uniform(0.5f)};
    attn_params *store = store_of(1, names, shapes, ndims, inits);
    CHECK_OK(attn_params_init(store, 3));
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(store, &graph));
    attn_graph_set_precision(graph, ATTN_PRECISION_BF16);
    enum { ROWS = 30, IN = 45, OUT = 37 };
    float x[ROWS * IN], dy[ROWS * OUT], want[ROWS * IN];
    test_fill_uniform(x, ROWS * IN, -1.0f, 1.0f, 4);
    test_fill_uniform(dy, ROWS * OUT, -1.0f, 1.0f, 5);
    float *w = attn_params_buffer(store, ATTN_PARAM_VALUES);
    for (int update = 0; update < 2; update++) {
        if (update == 1) {
            for (int i = 0; i < OUT * IN; i++)
                w[i] = w[i] * -1.5f + 0.01f;
            attn_params_values_changed(store);
        }
        attn_graph_reset(graph);
        attn_var *weight, *input, *y;
        const int64_t x_shape[2] = {ROWS, IN};
        CHECK_OK(attn_graph_param(graph, 0, &weight));
        CHECK_OK(attn_graph_input(graph, 2, x_shape, x, 1, &input));
        CHECK_OK(attn_op_linear(graph, input, weight, NULL, &y));
        CHECK_OK(attn_graph_backward_from(graph, y, dy));
        float plain[ROWS * OUT];
        CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ATTN_NO_TRANS, ATTN_TRANS, ROWS, OUT, IN,
                                     1.0f, x, IN, w, IN, 0.0f, plain, OUT));
        CHECK(memcmp(plain, y->value.data, sizeof plain) == 0,
              "update %d: the forward is the plain bf16 product", update);
        memset(want, 0, sizeof want);
        CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ATTN_NO_TRANS, ATTN_NO_TRANS, ROWS, IN,
                                     OUT, 1.0f, dy, OUT, w, IN, 1.0f, want, IN));
        CHECK(memcmp(want, input->grad, sizeof want) == 0,
              "update %d: the input gradient is the plain bf16 product", update);
    }
    attn_graph_destroy(graph);
    attn_params_destroy(store);
}

int main(void)
{
    RUN_TEST(test_layout_is_one_aligned_buffer_per_kind);
    RUN_TEST(test_initialisers);
    RUN_TEST(test_bad_registrations);
    RUN_TEST(test_save_and_load_by_name);
    RUN_TEST(test_load_refuses_values_no_run_writes);
    RUN_TEST(test_bf16_linear_reads_the_weight_packed_once_per_update);
    return test_summary();
}
