/* GRU and LSTM: a double reference written here from the formulas (per sentence, per step,
 * with lengths and both directions), its backward against finite differences, then the
 * library (every instruction set, cell and layer APIs) against it. */
#include "../attention/classic_test_util.h"
#include "kernels/rnn_internal.h"

#include <stdlib.h>

typedef struct problem {
    attn_rnn_cell cell;
    int64_t B, T, I, H;
    int reverse;
    int64_t *lengths;                      /* NULL = all T */
    double *x, *w_ih, *w_hh, *b_ih, *b_hh; /* biases may be NULL */
    double *h0, *c0;                       /* may be NULL (zeros) */
    /* the loss: sum(gout * output) + sum(gh * h_n) + sum(gc * c_n) */
    double *gout, *gh, *gc;
} problem;

static int64_t gate_rows(const problem *p)
{
    return (p->cell == ATTN_RNN_GRU ? 3 : 4) * p->H;
}
static int64_t length_of(const problem *p, int64_t b)
{
    return p->lengths ? p->lengths[b] : p->T;
}
static int64_t position_of(const problem *p, int64_t length, int64_t s)
{
    return p->reverse ? length - 1 - s : s;
}
static size_t n_x(const problem *p)
{
    return (size_t)(p->B * p->T * p->I);
}
static size_t n_out(const problem *p)
{
    return (size_t)(p->B * p->T * p->H);
}
static size_t n_state(const problem *p)
{
    return (size_t)(p->B * p->H);
}
static size_t n_wih(const problem *p)
{
    return (size_t)(gate_rows(p) * p->I);
}
static size_t n_whh(const problem *p)
{
    return (size_t)(gate_rows(p) * p->H);
}
static int is_lstm(const problem *p)
{
    return p->cell == ATTN_RNN_LSTM;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Everything the backward needs, per position (b * T + t). */
typedef struct trace {
    double *gates;           /* [B*T, 4H]: GRU r, z, n, W_hn h + b_hn; LSTM i, f, g, o */
    double *h_prev, *c_prev; /* [B*T, H] */
    double *out;             /* [B*T, H], zero at padding */
    double *h_n, *c_n;       /* [B, H] */
} trace;

static trace new_trace(const problem *p)
{
    trace t = {new_doubles(n_out(p) * 4), new_doubles(n_out(p)),   new_doubles(n_out(p)),
               new_doubles(n_out(p)),     new_doubles(n_state(p)), new_doubles(n_state(p))};
    return t;
}

static void free_trace(trace *t)
{
    free(t->gates);
    free(t->h_prev);
    free(t->c_prev);
    free(t->out);
    free(t->h_n);
    free(t->c_n);
}

static void forward(const problem *p, trace *t)
{
    int64_t H = p->H, I = p->I;
    double *h = new_doubles((size_t)H), *c = new_doubles((size_t)H);
    double *h_new = new_doubles((size_t)H), *c_new = new_doubles((size_t)H);
    memset(t->out, 0, n_out(p) * sizeof(double));
    for (int64_t b = 0; b < p->B; b++) {
        for (int64_t j = 0; j < H; j++) {
            h[j] = p->h0 ? p->h0[b * H + j] : 0.0;
            c[j] = p->c0 ? p->c0[b * H + j] : 0.0;
        }
        int64_t length = length_of(p, b);
        for (int64_t s = 0; s < length; s++) {
            int64_t row = b * p->T + position_of(p, length, s);
            const double *x = p->x + row * I;
            double *gates = t->gates + row * 4 * H;
            for (int64_t j = 0; j < H; j++) {
                t->h_prev[row * H + j] = h[j];
                t->c_prev[row * H + j] = c[j];
                double ai[4], ah[4];
                for (int64_t q = 0; q < gate_rows(p) / H; q++) {
                    int64_t m = q * H + j;
                    ai[q] = p->b_ih ? p->b_ih[m] : 0.0;
                    ah[q] = p->b_hh ? p->b_hh[m] : 0.0;
                    for (int64_t k = 0; k < I; k++)
                        ai[q] += p->w_ih[m * I + k] * x[k];
                    for (int64_t k = 0; k < H; k++)
                        ah[q] += p->w_hh[m * H + k] * h[k];
                }
                if (!is_lstm(p)) {
                    double r = sigmoid(ai[0] + ah[0]), z = sigmoid(ai[1] + ah[1]);
                    double n = tanh(ai[2] + r * ah[2]);
                    gates[j] = r, gates[H + j] = z, gates[2 * H + j] = n, gates[3 * H + j] = ah[2];
                    h_new[j] = (1 - z) * n + z * h[j];
                } else {
                    double i = sigmoid(ai[0] + ah[0]), f = sigmoid(ai[1] + ah[1]);
                    double g = tanh(ai[2] + ah[2]), o = sigmoid(ai[3] + ah[3]);
                    gates[j] = i, gates[H + j] = f, gates[2 * H + j] = g, gates[3 * H + j] = o;
                    c_new[j] = f * c[j] + i * g;
                    h_new[j] = o * tanh(c_new[j]);
                }
            }
            memcpy(h, h_new, (size_t)H * sizeof(double));
            if (is_lstm(p))
                memcpy(c, c_new, (size_t)H * sizeof(double));
            memcpy(t->out + row * H, h, (size_t)H * sizeof(double));
        }
        memcpy(t->h_n + b * H, h, (size_t)H * sizeof(double));
        memcpy(t->c_n + b * H, c, (size_t)H * sizeof(double));
    }
    free(h);
    free(c);
    free(h_new);
    free(c_new);
}

static double loss(void *ctx)
{
    const problem *p = ctx;
    trace t = new_trace(p);
    forward(p, &t);
    double l = 0;
    for (size_t i = 0; i < n_out(p); i++)
        l += p->gout[i] * t.out[i];
    for (size_t i = 0; i < n_state(p); i++)
        l += p->gh[i] * t.h_n[i] + (is_lstm(p) ? p->gc[i] * t.c_n[i] : 0.0);
    free_trace(&t);
    return l;
}

typedef struct grads {
    double *x, *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;
} grads;

static grads new_grads(const problem *p)
{
    grads g = {new_doubles(n_x(p)),
               new_doubles(n_wih(p)),
               new_doubles(n_whh(p)),
               new_doubles((size_t)gate_rows(p)),
               new_doubles((size_t)gate_rows(p)),
               new_doubles(n_state(p)),
               new_doubles(n_state(p))};
    return g;
}

static void free_grads(grads *g)
{
    double *all[] = {g->x, g->w_ih, g->w_hh, g->b_ih, g->b_hh, g->h0, g->c0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* Backpropagation through time, the chain rule written out. */
static void backward(const problem *p, grads *g)
{
    int64_t H = p->H, I = p->I, G = gate_rows(p);
    trace t = new_trace(p);
    forward(p, &t);
    double *dh = new_doubles((size_t)H), *dc = new_doubles((size_t)H);
    double *dh_prev = new_doubles((size_t)H);
    double *dai = new_doubles((size_t)G), *dah = new_doubles((size_t)G);
    for (int64_t b = 0; b < p->B; b++) {
        for (int64_t j = 0; j < H; j++) {
            dh[j] = p->gh[b * H + j];
            dc[j] = is_lstm(p) ? p->gc[b * H + j] : 0.0;
        }
        int64_t length = length_of(p, b);
        for (int64_t s = length - 1; s >= 0; s--) {
            int64_t row = b * p->T + position_of(p, length, s);
            const double *gates = t.gates + row * 4 * H, *hp = t.h_prev + row * H;
            for (int64_t j = 0; j < H; j++) {
                double d = dh[j] + p->gout[row * H + j];
                if (!is_lstm(p)) {
                    double r = gates[j], z = gates[H + j], n = gates[2 * H + j];
                    double hn = gates[3 * H + j];
                    double dan = d * (1 - z) * (1 - n * n);
                    double dar = dan * hn * r * (1 - r);
                    double daz = d * (hp[j] - n) * z * (1 - z);
                    dai[j] = dah[j] = dar;
                    dai[H + j] = dah[H + j] = daz;
                    dai[2 * H + j] = dan;
                    dah[2 * H + j] = dan * r;
                    dh_prev[j] = d * z;
                } else {
                    double i = gates[j], f = gates[H + j], gg = gates[2 * H + j];
                    double o = gates[3 * H + j], cp = t.c_prev[row * H + j];
                    double tc = tanh(f * cp + i * gg);
                    double dcell = dc[j] + d * o * (1 - tc * tc);
                    dai[j] = dcell * gg * i * (1 - i);
                    dai[H + j] = dcell * cp * f * (1 - f);
                    dai[2 * H + j] = dcell * i * (1 - gg * gg);
                    dai[3 * H + j] = d * tc * o * (1 - o);
                    for (int64_t q = 0; q < 4; q++)
                        dah[q * H + j] = dai[q * H + j];
                    dc[j] = dcell * f;
                    dh_prev[j] = 0;
                }
            }
            for (int64_t m = 0; m < G; m++) {
                g->b_ih[m] += dai[m];
                g->b_hh[m] += dah[m];
                for (int64_t k = 0; k < I; k++) {
                    g->w_ih[m * I + k] += dai[m] * p->x[row * I + k];
                    g->x[row * I + k] += dai[m] * p->w_ih[m * I + k];
                }
                for (int64_t k = 0; k < H; k++) {
                    g->w_hh[m * H + k] += dah[m] * hp[k];
                    dh_prev[k] += dah[m] * p->w_hh[m * H + k];
                }
            }
            memcpy(dh, dh_prev, (size_t)H * sizeof(double));
        }
        for (int64_t j = 0; j < H; j++) {
            g->h0[b * H + j] = dh[j];
            g->c0[b * H + j] = dc[j];
        }
    }
    free(dh);
    free(dc);
    free(dh_prev);
    free(dai);
    free(dah);
    free_trace(&t);
}

enum { WITH_BIAS = 1, WITH_H0 = 2, WITH_LENGTHS = 4, REVERSE = 8 };

/* Weights scaled by 1/sqrt(fan-in) as PyTorch initialises them, times `gain`. Lengths are
 * drawn at random, with sentence 0 full and, with 3 sentences or more, sentence 1 empty. */
static problem make_problem(attn_rnn_cell cell, int64_t B, int64_t T, int64_t I, int64_t H,
                            int flags, double gain, uint64_t seed)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.cell = cell, p.B = B, p.T = T, p.I = I, p.H = H, p.reverse = (flags & REVERSE) != 0;
    int64_t G = gate_rows(&p);
    double wi = gain / sqrt((double)I), wh = gain / sqrt((double)H);
    p.x = random_doubles(n_x(&p), -1, 1, seed + 1);
    p.w_ih = random_doubles(n_wih(&p), -wi, wi, seed + 2);
    p.w_hh = random_doubles(n_whh(&p), -wh, wh, seed + 3);
    if (flags & WITH_BIAS) {
        p.b_ih = random_doubles((size_t)G, -wh, wh, seed + 4);
        p.b_hh = random_doubles((size_t)G, -wh, wh, seed + 5);
    }
    if (flags & WITH_H0) {
        p.h0 = random_doubles(n_state(&p), -1, 1, seed + 6);
        p.c0 = is_lstm(&p) ? random_doubles(n_state(&p), -1, 1, seed + 7) : NULL;
    }
    if (flags & WITH_LENGTHS) {
        p.lengths = test_alloc((size_t)(B > 0 ? B : 1) * sizeof(int64_t));
        double *u = random_doubles((size_t)B, 0, 1, seed + 8);
        for (int64_t b = 0; b < B; b++)
            p.lengths[b] = b == 0 ? T : b == 1 && B >= 3 ? 0 : (int64_t)(u[b] * (double)(T + 1));
        for (int64_t b = 0; b < B; b++)
            p.lengths[b] = p.lengths[b] > T ? T : p.lengths[b];
        free(u);
    }
    p.gout = random_doubles(n_out(&p), -1, 1, seed + 9);
    p.gh = random_doubles(n_state(&p), -1, 1, seed + 10);
    p.gc = random_doubles(n_state(&p), -1, 1, seed + 11);
    /* padding outputs are zero, so their gradient weights do not matter */
    return p;
}

static void free_problem(problem *p)
{
    double *all[] = {p->x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, p->h0, p->c0, p->gout, p->gh, p->gc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free(p->lengths);
}

static void test_reference_backward_matches_finite_differences(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++)
        for (int variant = 0; variant < 3; variant++) {
            /* lengths forward with biases and h0; lengths reversed; one unit, one step */
            int flags = variant == 0   ? WITH_BIAS | WITH_H0 | WITH_LENGTHS
                        : variant == 1 ? WITH_H0 | WITH_LENGTHS | REVERSE
                                       : WITH_BIAS | WITH_H0;
            problem p = variant < 2
                            ? make_problem((attn_rnn_cell)cell, 4, 5, 3, 4, flags, 1.5,
                                           100 + 10 * (uint64_t)variant)
                            : make_problem((attn_rnn_cell)cell, 2, 1, 1, 1, flags, 1.5, 300);
            grads g = new_grads(&p);
            backward(&p, &g);
            char what[64];
#define NAME(field)                                                                                \
    (snprintf(what, sizeof what, "%s v%d %s", cell ? "lstm" : "gru", variant, field), what)
            CHECK_GRADIENT(NAME("dx"), p.x, n_x(&p), g.x, loss, &p);
            CHECK_GRADIENT(NAME("dW_ih"), p.w_ih, n_wih(&p), g.w_ih, loss, &p);
            CHECK_GRADIENT(NAME("dW_hh"), p.w_hh, n_whh(&p), g.w_hh, loss, &p);
            CHECK_GRADIENT(NAME("dh0"), p.h0, n_state(&p), g.h0, loss, &p);
            if (p.c0 != NULL)
                CHECK_GRADIENT(NAME("dc0"), p.c0, n_state(&p), g.c0, loss, &p);
            if (p.b_ih != NULL) {
                CHECK_GRADIENT(NAME("db_ih"), p.b_ih, (size_t)gate_rows(&p), g.b_ih, loss, &p);
                CHECK_GRADIENT(NAME("db_hh"), p.b_hh, (size_t)gate_rows(&p), g.b_hh, loss, &p);
            }
#undef NAME
            free_grads(&g);
            free_problem(&p);
        }
}

/* ---- the library against the reference ---------------------------------------------- */

static float *prefilled(size_t n, uint64_t seed)
{
    float *x = new_floats(n);
    test_fill_uniform(x, n, -0.5f, 0.5f, seed);
    return x;
}

/* Inputs in float and the library's outputs, gradient buffers prefilled (they accumulate). */
typedef struct library_run {
    float *x, *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0, *dout, *dh_n, *dc_n;
    float *out, *h_n, *c_n;
    float *dx, *dw_ih, *dw_hh, *db_ih, *db_hh, *dh0, *dc0;
    int64_t stride;
} library_run;

static float *floats_or_null(const double *x, size_t n)
{
    return x ? to_floats(x, n) : NULL;
}

/* The precision run_layer multiplies in (the bf16 test switches it). */
static attn_precision layer_precision = ATTN_PRECISION_FP32;

static attn_rnn_layer_dims layer_dims(const problem *p, int64_t stride)
{
    attn_rnn_layer_dims d = {p->cell, p->B, p->T, p->I, p->H, p->reverse, stride, layer_precision};
    return d;
}

static library_run prepare_run(const problem *p, int64_t stride, uint64_t prefill_seed)
{
    size_t G = (size_t)gate_rows(p);
    library_run r;
    memset(&r, 0, sizeof r);
    r.stride = stride;
    r.x = to_floats(p->x, n_x(p));
    r.w_ih = to_floats(p->w_ih, n_wih(p));
    r.w_hh = to_floats(p->w_hh, n_whh(p));
    r.b_ih = floats_or_null(p->b_ih, G);
    r.b_hh = floats_or_null(p->b_hh, G);
    r.h0 = floats_or_null(p->h0, n_state(p));
    r.c0 = floats_or_null(p->c0, n_state(p));
    /* The output gradient with NaN at padding and in the gap past H: never read. */
    size_t rows = (size_t)(p->B * p->T);
    r.dout = new_floats(rows * (size_t)stride);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t t = 0; t < p->T; t++)
            for (int64_t j = 0; j < stride; j++)
                r.dout[(b * p->T + t) * stride + j] =
                    t < length_of(p, b) && j < p->H ? (float)p->gout[(b * p->T + t) * p->H + j]
                                                    : NAN;
    r.dh_n = to_floats(p->gh, n_state(p));
    r.dc_n = to_floats(p->gc, n_state(p));
    r.out = new_floats(rows * (size_t)stride);
    for (size_t i = 0; i < rows * (size_t)stride; i++)
        r.out[i] = -7.0f; /* the gap past H must keep it */
    r.h_n = new_floats(n_state(p));
    r.c_n = new_floats(n_state(p));
    r.dx = prefilled(n_x(p), prefill_seed + 1);
    r.dw_ih = prefilled(n_wih(p), prefill_seed + 2);
    r.dw_hh = prefilled(n_whh(p), prefill_seed + 3);
    r.db_ih = prefilled(G, prefill_seed + 4);
    r.db_hh = prefilled(G, prefill_seed + 5);
    r.dh0 = prefilled(n_state(p), prefill_seed + 6);
    r.dc0 = prefilled(n_state(p), prefill_seed + 7);
    return r;
}

static void free_run(library_run *r)
{
    float *all[] = {r->x,     r->w_ih,  r->w_hh,  r->b_ih,  r->b_hh, r->h0,  r->c0,
                    r->dout,  r->dh_n,  r->dc_n,  r->out,   r->h_n,  r->c_n, r->dx,
                    r->dw_ih, r->dw_hh, r->db_ih, r->db_hh, r->dh0,  r->dc0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* Forward and backward of the layer; buffers are filled with NaN first to show that the
 * library never reads what it has not written. */
static void run_layer(const problem *p, library_run *r)
{
    attn_rnn_layer_dims dims = layer_dims(p, r->stride);
    attn_rnn_params params = {r->w_ih, r->w_hh, r->b_ih, r->b_hh};
    attn_rnn_grads g = {r->dw_ih, r->dw_hh, p->b_ih ? r->db_ih : NULL, p->b_ih ? r->db_hh : NULL};
    size_t n_saved = attn_rnn_layer_saved_floats(&dims);
    size_t n_work = attn_rnn_layer_workspace_floats(&dims);
    float *saved = attn_aligned_alloc((n_saved > 0 ? n_saved : 1) * sizeof(float));
    float *work = attn_aligned_alloc((n_work > 0 ? n_work : 1) * sizeof(float));
    memset(saved, 0xff, n_saved * sizeof(float));
    memset(work, 0xff, n_work * sizeof(float));
    CHECK_OK(attn_rnn_layer_forward(&dims, &params, r->x, p->lengths, r->h0, r->c0, r->out, r->h_n,
                                    is_lstm(p) ? r->c_n : NULL, saved, work));
    memset(work, 0xff, n_work * sizeof(float));
    CHECK_OK(attn_rnn_layer_backward(&dims, &params, r->x, p->lengths, saved, r->dout, r->dh_n,
                                     is_lstm(p) ? r->dc_n : NULL, work, r->dx, r->dh0,
                                     is_lstm(p) ? r->dc0 : NULL, &g));
    attn_aligned_free(saved);
    attn_aligned_free(work);
}

/* got = the prefilled value + the reference gradient, since backward accumulates. */
static void check_accumulated(const char *what, const float *got, const double *grad, size_t n,
                              uint64_t prefill_seed, double atol, double rtol)
{
    float *before = prefilled(n, prefill_seed);
    double *expected = new_doubles(n);
    for (size_t i = 0; i < n; i++)
        expected[i] = (double)before[i] + grad[i];
    CHECK_ARRAYS_CLOSE(what, got, expected, n, atol, rtol);
    free(before);
    free(expected);
}

/* The strided output: the first H of each row against the reference, the gap untouched. */
static void check_output(const char *what, const problem *p, const library_run *r,
                         const double *expected, double atol, double rtol)
{
    size_t rows = (size_t)(p->B * p->T);
    float *packed = new_floats(n_out(p));
    int gap_kept = 1;
    for (size_t row = 0; row < rows; row++)
        for (int64_t j = 0; j < r->stride; j++) {
            float v = r->out[row * (size_t)r->stride + (size_t)j];
            if (j < p->H)
                packed[row * (size_t)p->H + (size_t)j] = v;
            else
                gap_kept &= v == -7.0f;
        }
    CHECK_ARRAYS_CLOSE(what, packed, expected, n_out(p), atol, rtol);
    CHECK(gap_kept, "%s: the stride's gap is left alone", what);
    free(packed);
}

static void check_against_reference(const problem *p, int64_t stride, const char *label,
                                    double atol, double rtol)
{
    trace t = new_trace(p);
    forward(p, &t);
    grads g = new_grads(p);
    backward(p, &g);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        library_run r = prepare_run(p, stride, 40);
        run_layer(p, &r);
        char what[160];
#define NAME(field)                                                                                \
    (snprintf(what, sizeof what, "%s %s %s", label, attn_isa_name(isas[i]), field), what)
        check_output(NAME("output"), p, &r, t.out, atol, rtol);
        CHECK_ARRAYS_CLOSE(NAME("h_n"), r.h_n, t.h_n, n_state(p), atol, rtol);
        if (is_lstm(p))
            CHECK_ARRAYS_CLOSE(NAME("c_n"), r.c_n, t.c_n, n_state(p), atol, rtol);
        double ga = 4 * atol, gr = 4 * rtol; /* gradients sum over steps and sentences */
        check_accumulated(NAME("dx"), r.dx, g.x, n_x(p), 41, ga, gr);
        check_accumulated(NAME("dW_ih"), r.dw_ih, g.w_ih, n_wih(p), 42, ga, gr);
        check_accumulated(NAME("dW_hh"), r.dw_hh, g.w_hh, n_whh(p), 43, ga, gr);
        if (p->b_ih != NULL) {
            check_accumulated(NAME("db_ih"), r.db_ih, g.b_ih, (size_t)gate_rows(p), 44, ga, gr);
            check_accumulated(NAME("db_hh"), r.db_hh, g.b_hh, (size_t)gate_rows(p), 45, ga, gr);
        }
        check_accumulated(NAME("dh0"), r.dh0, g.h0, n_state(p), 46, ga, gr);
        if (is_lstm(p))
            check_accumulated(NAME("dc0"), r.dc0, g.c0, n_state(p), 47, ga, gr);
#undef NAME
        free_run(&r);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free_trace(&t);
    free_grads(&g);
}

static void test_every_isa_matches_reference(void)
{
    /* B, T, I, H: the batch and length sizes 1, 3, 17 and the feature sizes 1, 7, 64, 80 */
    static const int64_t cases[][4] = {
        {1, 1, 1, 1}, {3, 3, 7, 64}, {17, 3, 64, 7}, {3, 17, 7, 80}, {17, 17, 80, 1}, {1, 17, 1, 7},
    };
    static const int variants[] = {WITH_BIAS | WITH_H0 | WITH_LENGTHS, WITH_LENGTHS | REVERSE,
                                   WITH_BIAS | WITH_H0 | REVERSE, 0};
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
                const int64_t *k = cases[c];
                problem p = make_problem((attn_rnn_cell)cell, k[0], k[1], k[2], k[3], variants[v],
                                         1.0, 1000 + 100 * c + 10 * v);
                int64_t stride = v % 2 == 0 ? k[3] : 2 * k[3] + 1;
                char label[96];
                snprintf(label, sizeof label, "%s B%lld T%lld I%lld H%lld flags%d",
                         cell ? "lstm" : "gru", (long long)k[0], (long long)k[1], (long long)k[2],
                         (long long)k[3], variants[v]);
                check_against_reference(&p, stride, label, 2e-6, 2e-5);
                free_problem(&p);
            }
}

/* Enough sentences for the gate math to split over threads (and H for the bias sums). */
static void test_threaded_batch_matches_reference(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++) {
        problem p = make_problem((attn_rnn_cell)cell, 70, 5, 16, 80,
                                 WITH_BIAS | WITH_H0 | WITH_LENGTHS | REVERSE, 1.0, 4000);
        check_against_reference(&p, p.H, cell ? "threaded lstm" : "threaded gru", 2e-6, 2e-5);
        free_problem(&p);
    }
}

/* Large weights drive every gate into saturation, where sigma and tanh round to 0 and +-1. */
static void test_saturated_gates(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++) {
        problem p = make_problem((attn_rnn_cell)cell, 5, 6, 9, 33,
                                 WITH_BIAS | WITH_H0 | WITH_LENGTHS, 30.0, 5000);
        /* Inputs 30x larger give pre-activations whose float GEMM rounding (~1e-5) the
         * saturated derivatives (1 - sigma, a cancellation) amplify to ~2e-4 in dx; the
         * point here is that saturation stays finite and right, not float-exact. */
        check_against_reference(&p, p.H, cell ? "saturated lstm" : "saturated gru", 5e-4, 1e-4);
        free_problem(&p);
    }
}

/* ---- the cell API -------------------------------------------------------------------- */

/* Steps of the cell chained by the caller, state updated in place (h_out = h), equal the
 * layer over the whole sentence (the reference with T steps); the backward of the steps
 * in reverse gives its gradients. */
static void test_cell_steps_match_reference(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            problem p = make_problem((attn_rnn_cell)cell, 3, 4, 7, 17,
                                     with_bias ? WITH_BIAS | WITH_H0 : 0, 1.0, 6000);
            int64_t B = p.B, T = p.T, I = p.I, H = p.H, G = gate_rows(&p);
            trace t = new_trace(&p);
            forward(&p, &t);
            grads g = new_grads(&p);
            backward(&p, &g);
            attn_rnn_cell_dims dims = {p.cell, B, I, H};
            size_t n_saved = attn_rnn_cell_saved_floats(&dims);
            size_t n_work = attn_rnn_cell_workspace_floats(&dims);
            attn_isa isas[ATTN_ISA_LAST + 1];
            int n_isas = supported_isas(isas);
            for (int i = 0; i < n_isas; i++) {
                CHECK_OK(attn_set_isa(isas[i]));
                library_run r = prepare_run(&p, H, 60);
                attn_rnn_params params = {r.w_ih, r.w_hh, r.b_ih, r.b_hh};
                attn_rnn_grads pg = {r.dw_ih, r.dw_hh, with_bias ? r.db_ih : NULL,
                                     with_bias ? r.db_hh : NULL};
                float *saved = new_floats(n_saved * (size_t)T), *work = new_floats(n_work);
                float *xt = new_floats((size_t)(B * I)), *dxt = new_floats((size_t)(B * I));
                float *h = new_floats((size_t)(B * H)), *c = new_floats((size_t)(B * H));
                float *out = new_floats(n_out(&p)), *dht = new_floats((size_t)(B * H));
                int use_h0 = r.h0 != NULL;
                if (use_h0) {
                    memcpy(h, r.h0, (size_t)(B * H) * sizeof(float));
                    if (is_lstm(&p))
                        memcpy(c, r.c0, (size_t)(B * H) * sizeof(float));
                }
                for (int64_t s = 0; s < T; s++) {
                    for (int64_t b = 0; b < B; b++)
                        memcpy(xt + b * I, r.x + (b * T + s) * I, (size_t)I * sizeof(float));
                    /* step 0 without h0: NULL state means zeros */
                    const float *h_in = s == 0 && !use_h0 ? NULL : h;
                    const float *c_in = s == 0 && !use_h0 ? NULL : c;
                    CHECK_OK(attn_rnn_cell_forward(&dims, &params, xt, h_in, c_in, h,
                                                   is_lstm(&p) ? c : NULL,
                                                   saved + (size_t)s * n_saved, work));
                    for (int64_t b = 0; b < B; b++)
                        memcpy(out + (b * T + s) * H, h + b * H, (size_t)H * sizeof(float));
                }
                char what[96];
#define NAME(field)                                                                                \
    (snprintf(what, sizeof what, "cell %s %s %s", cell ? "lstm" : "gru", attn_isa_name(isas[i]),   \
              field),                                                                              \
     what)
                CHECK_ARRAYS_CLOSE(NAME("outputs"), out, t.out, n_out(&p), 2e-6, 2e-5);
                if (is_lstm(&p))
                    CHECK_ARRAYS_CLOSE(NAME("c"), c, t.c_n, n_state(&p), 2e-6, 2e-5);

                /* Backward: dh carries between steps in dht (dh of step s feeds step s-1). */
                float *dc = new_floats((size_t)(B * H)), *dout = new_floats((size_t)(B * H));
                memcpy(dht, r.dh_n, (size_t)(B * H) * sizeof(float));
                memcpy(dc, r.dc_n, (size_t)(B * H) * sizeof(float));
                float *dx_all = new_floats(n_x(&p));
                for (int64_t s = T - 1; s >= 0; s--) {
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t j = 0; j < H; j++)
                            dout[b * H + j] = dht[b * H + j] + r.dout[(b * T + s) * H + j];
                    for (int64_t b = 0; b < B; b++)
                        memcpy(xt + b * I, r.x + (b * T + s) * I, (size_t)I * sizeof(float));
                    memset(dht, 0, (size_t)(B * H) * sizeof(float));
                    memset(dxt, 0, (size_t)(B * I) * sizeof(float));
                    /* dc is both dc_out and the accumulated dc: copy the incoming one */
                    float *dc_in = new_floats((size_t)(B * H));
                    memcpy(dc_in, dc, (size_t)(B * H) * sizeof(float));
                    memset(dc, 0, (size_t)(B * H) * sizeof(float));
                    CHECK_OK(attn_rnn_cell_backward(&dims, &params, xt, saved + (size_t)s * n_saved,
                                                    dout, is_lstm(&p) ? dc_in : NULL, work, dxt,
                                                    dht, is_lstm(&p) ? dc : NULL, &pg));
                    free(dc_in);
                    for (int64_t b = 0; b < B; b++)
                        memcpy(dx_all + (b * T + s) * I, dxt + b * I, (size_t)I * sizeof(float));
                }
                CHECK_ARRAYS_CLOSE(NAME("dx"), dx_all, g.x, n_x(&p), 1e-5, 1e-4);
                check_accumulated(NAME("dW_ih"), r.dw_ih, g.w_ih, n_wih(&p), 62, 1e-5, 1e-4);
                check_accumulated(NAME("dW_hh"), r.dw_hh, g.w_hh, n_whh(&p), 63, 1e-5, 1e-4);
                if (with_bias) {
                    check_accumulated(NAME("db_ih"), r.db_ih, g.b_ih, (size_t)G, 64, 1e-5, 1e-4);
                    check_accumulated(NAME("db_hh"), r.db_hh, g.b_hh, (size_t)G, 65, 1e-5, 1e-4);
                }
                CHECK_ARRAYS_CLOSE(NAME("dh0"), dht, g.h0, n_state(&p), 1e-5, 1e-4);
                if (is_lstm(&p))
                    CHECK_ARRAYS_CLOSE(NAME("dc0"), dc, g.c0, n_state(&p), 1e-5, 1e-4);
#undef NAME
                float *all[] = {saved, work, xt, dxt, h, c, out, dht, dc, dout, dx_all};
                for (size_t a = 0; a < sizeof all / sizeof all[0]; a++)
                    free(all[a]);
                free_run(&r);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free_trace(&t);
            free_grads(&g);
            free_problem(&p);
        }
}

/* A step from projections computed elsewhere (a model decoding with bf16 or int8 weights
 * computes them with its stored matrices): given the exact projections (in double, rounded
 * once), the gate math and the state handling (zeros for a NULL state, h_out over h in place)
 * match the double reference at the tolerance of the cell API above. */
static void test_cell_from_projections_matches_reference(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++)
        for (int with_state = 0; with_state < 2; with_state++) {
            problem p = make_problem((attn_rnn_cell)cell, 3, 4, 7, 17,
                                     WITH_BIAS | (with_state ? WITH_H0 : 0), 1.0, 6100);
            const int64_t B = p.B, T = p.T, I = p.I, H = p.H, G = gate_rows(&p);
            const int64_t stride = attn_rnn_cell_gate_stride(p.cell, H);
            CHECK(stride == G + H, "the gate math keeps H values beside the G gates");
            trace t = new_trace(&p);
            forward(&p, &t);
            attn_isa isas[ATTN_ISA_LAST + 1];
            const int n_isas = supported_isas(isas);
            for (int i = 0; i < n_isas; i++) {
                CHECK_OK(attn_set_isa(isas[i]));
                float *gates = new_floats((size_t)(B * stride)), *gh = new_floats((size_t)(B * G));
                float *h = new_floats((size_t)(B * H)), *c = new_floats((size_t)(B * H));
                float *out = new_floats(n_out(&p));
                if (with_state) {
                    for (size_t k = 0; k < n_state(&p); k++) {
                        h[k] = (float)p.h0[k];
                        c[k] = is_lstm(&p) ? (float)p.c0[k] : 0.0f;
                    }
                }
                for (int64_t s = 0; s < T; s++) {
                    const int zeros = s == 0 && !with_state;
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t g = 0; g < G; g++) {
                            double x_part = p.b_ih[g], h_part = p.b_hh[g];
                            for (int64_t k = 0; k < I; k++)
                                x_part += p.x[(b * T + s) * I + k] * p.w_ih[g * I + k];
                            for (int64_t k = 0; k < H && !zeros; k++)
                                h_part += (double)h[b * H + k] * p.w_hh[g * H + k];
                            gates[b * stride + g] = (float)x_part;
                            gh[b * G + g] = (float)h_part;
                        }
                    attn_rnn_cell_forward_projected(p.cell, B, H, gates, gh, zeros ? NULL : h,
                                                    zeros ? NULL : c, h, is_lstm(&p) ? c : NULL);
                    for (int64_t b = 0; b < B; b++)
                        memcpy(out + (b * T + s) * H, h + b * H, (size_t)H * sizeof(float));
                }
                char what[96];
                snprintf(what, sizeof what, "projected %s %s %s", cell ? "lstm" : "gru",
                         with_state ? "h0" : "zeros", attn_isa_name(isas[i]));
                CHECK_ARRAYS_CLOSE(what, out, t.out, n_out(&p), 2e-6, 2e-5);
                if (is_lstm(&p))
                    CHECK_ARRAYS_CLOSE(what, c, t.c_n, n_state(&p), 2e-6, 2e-5);
                free(gates);
                free(gh);
                free(h);
                free(c);
                free(out);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free_trace(&t);
            free_problem(&p);
        }
}

/* A layer on stored bf16 or int8 matrices (an encoder decoding in that precision): against the
 * fp32 layer over the same stored values, with lengths (one empty sentence) and the reverse
 * direction, the outputs move by what rounding the activations allows (bf16 2^-9, int8 1/254
 * of a row's largest value, through T = 6 steps of gates that do not amplify it: within 0.01
 * and 0.03), padding stays zero, and the products did change (error > 0). The reference
 * instruction set ignores the stored matrices (it computes in double). */
static void test_layer_on_stored_matrices(void)
{
    static const attn_precision precisions[2] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    static const double tolerance[2] = {0.01, 0.03};
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++)
        for (int q = 0; q < 2; q++) {
            problem p = make_problem((attn_rnn_cell)cell, 5, 6, 24, 40,
                                     WITH_BIAS | WITH_LENGTHS | REVERSE, 1.0, 6200);
            p.lengths[1] = 0;
            const int64_t G = gate_rows(&p);
            attn_isa isas[ATTN_ISA_LAST + 1];
            const int n_isas = supported_isas(isas);
            for (int i = 0; i < n_isas; i++) {
                CHECK_OK(attn_set_isa(isas[i]));
                library_run r = prepare_run(&p, p.H, 70);
                attn_quantized_matrix w_ih, w_hh;
                CHECK_OK(
                    attn_quantized_matrix_create("test", precisions[q], G, p.I, r.w_ih, &w_ih));
                CHECK_OK(
                    attn_quantized_matrix_create("test", precisions[q], G, p.H, r.w_hh, &w_hh));
                for (int64_t o = 0; o < G; o++) {
                    attn_quantized_matrix_float_row(&w_ih, o, r.w_ih + o * p.I);
                    attn_quantized_matrix_float_row(&w_hh, o, r.w_hh + o * p.H);
                }
                attn_rnn_layer_dims dims = layer_dims(&p, p.H);
                attn_rnn_params params = {r.w_ih, r.w_hh, r.b_ih, r.b_hh};
                attn_rnn_stored stored = {&w_ih, &w_hh, NULL};
                stored.scratch = attn_aligned_alloc(attn_rnn_stored_scratch_bytes(&dims, &stored));
                const size_t n_saved = attn_rnn_layer_saved_floats(&dims);
                const size_t n_work = attn_rnn_layer_workspace_floats(&dims);
                float *saved = attn_aligned_alloc(n_saved * sizeof(float));
                float *work = attn_aligned_alloc(n_work * sizeof(float));
                float *exact = new_floats(n_out(&p)), *got = new_floats(n_out(&p));
                memset(got, 0xff, n_out(&p) * sizeof(float));
                CHECK_OK(attn_rnn_layer_forward(&dims, &params, r.x, p.lengths, NULL, NULL, exact,
                                                NULL, NULL, saved, work));
                CHECK_OK(attn_rnn_layer_forward_stored(&dims, &params, &stored, r.x, p.lengths, got,
                                                       saved, work));
                double worst = 0.0;
                int padding_zero = 1;
                for (int64_t b = 0; b < p.B; b++)
                    for (int64_t t = 0; t < p.T; t++)
                        for (int64_t j = 0; j < p.H; j++) {
                            const size_t k = (size_t)((b * p.T + t) * p.H + j);
                            worst = fmax(worst, fabs((double)got[k] - (double)exact[k]));
                            padding_zero &= t < length_of(&p, b) || got[k] == 0.0f;
                        }
                const int stored_used = isas[i] != ATTN_ISA_REFERENCE;
                CHECK(worst < tolerance[q] && (worst > 0.0) == stored_used && padding_zero,
                      "%s %s %s: within %g of fp32 over the stored values (%g), padding zero",
                      cell ? "lstm" : "gru", attn_precision_name(precisions[q]),
                      attn_isa_name(isas[i]), tolerance[q], worst);
                attn_aligned_free(stored.scratch);
                attn_aligned_free(saved);
                attn_aligned_free(work);
                free(exact);
                free(got);
                attn_quantized_matrix_free(&w_ih);
                attn_quantized_matrix_free(&w_hh);
                free_run(&r);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free_problem(&p);
        }
}

/* ---- layouts, padding, determinism --------------------------------------------------- */

/* Both directions of a bidirectional layer write one [B, T, 2H] buffer; each half equals
 * the direction run alone, and padding rows are zero in both halves. */
static void test_bidirectional_shared_buffer(void)
{
    problem fwd = make_problem(ATTN_RNN_LSTM, 5, 7, 6, 9, WITH_BIAS | WITH_LENGTHS, 1.0, 7000);
    problem bwd = fwd;
    bwd.reverse = 1;
    int64_t B = fwd.B, T = fwd.T, H = fwd.H;
    trace tf = new_trace(&fwd), tb = new_trace(&bwd);
    forward(&fwd, &tf);
    forward(&bwd, &tb);
    library_run r = prepare_run(&fwd, 2 * H, 1);
    attn_rnn_params params = {r.w_ih, r.w_hh, r.b_ih, r.b_hh};
    attn_rnn_layer_dims df = layer_dims(&fwd, 2 * H), db = layer_dims(&bwd, 2 * H);
    float *saved = new_floats(attn_rnn_layer_saved_floats(&df));
    float *work = new_floats(attn_rnn_layer_workspace_floats(&df));
    float *both = new_floats((size_t)(B * T * 2 * H));
    memset(both, 0xff, (size_t)(B * T * 2 * H) * sizeof(float));
    CHECK_OK(attn_rnn_layer_forward(&df, &params, r.x, fwd.lengths, NULL, NULL, both, NULL, NULL,
                                    saved, work));
    CHECK_OK(attn_rnn_layer_forward(&db, &params, r.x, bwd.lengths, NULL, NULL, both + H, NULL,
                                    NULL, saved, work));
    float *half = new_floats(n_out(&fwd));
    for (int d = 0; d < 2; d++) {
        for (int64_t row = 0; row < B * T; row++)
            memcpy(half + row * H, both + row * 2 * H + d * H, (size_t)H * sizeof(float));
        CHECK_ARRAYS_CLOSE(d == 0 ? "forward half" : "reverse half", half, d == 0 ? tf.out : tb.out,
                           n_out(&fwd), 2e-6, 2e-5);
    }
    CHECK(!has_nan(both, (size_t)(B * T * 2 * H)), "every element written, padding included");
    free(saved);
    free(work);
    free(both);
    free(half);
    free_run(&r);
    free_trace(&tf);
    free_trace(&tb);
    free_problem(&fwd);
}

/* Final states: the state after each sentence's last real token (position length - 1
 * forward, position 0 reversed); a sentence of length 0 keeps h0 and gets zero outputs;
 * the gradient of h_n for it goes straight to dh0. T = 0 is the same for everyone. */
static void test_final_states_and_empty_sentences(void)
{
    for (int reverse = 0; reverse < 2; reverse++)
        for (int64_t T = 0; T <= 4; T += 4) {
            problem p = make_problem(
                ATTN_RNN_GRU, 3, T, 2, 5,
                WITH_BIAS | WITH_H0 | (T ? WITH_LENGTHS : 0) | (reverse ? REVERSE : 0), 1.0, 8000);
            int64_t H = p.H;
            attn_isa isas[ATTN_ISA_LAST + 1];
            int n_isas = supported_isas(isas);
            for (int i = 0; i < n_isas; i++) {
                CHECK_OK(attn_set_isa(isas[i]));
                library_run r = prepare_run(&p, H, 2);
                memset(r.dh0, 0, n_state(&p) * sizeof(float));
                run_layer(&p, &r);
                int ok = 1;
                for (int64_t b = 0; b < p.B; b++) {
                    int64_t length = length_of(&p, b);
                    if (length == 0) {
                        ok &= memcmp(r.h_n + b * H, r.h0 + b * H, (size_t)H * sizeof(float)) == 0;
                        ok &= memcmp(r.dh0 + b * H, r.dh_n + b * H, (size_t)H * sizeof(float)) == 0;
                    } else {
                        int64_t last = reverse ? 0 : length - 1;
                        ok &= memcmp(r.h_n + b * H, r.out + (b * p.T + last) * H,
                                     (size_t)H * sizeof(float)) == 0;
                    }
                    for (int64_t t = length; t < p.T; t++)
                        ok &= all_zero(r.out + (b * p.T + t) * H, (size_t)H);
                }
                CHECK(ok, "%s reverse=%d T=%lld: final states, empty sentences, zero padding",
                      attn_isa_name(isas[i]), reverse, (long long)T);
                free_run(&r);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free_problem(&p);
        }
}

static int runs_identical(const library_run *a, const library_run *b, const problem *p)
{
    size_t G = (size_t)gate_rows(p), f = sizeof(float);
    return memcmp(a->out, b->out, n_out(p) * f) == 0 &&
           memcmp(a->h_n, b->h_n, n_state(p) * f) == 0 &&
           memcmp(a->c_n, b->c_n, n_state(p) * f) == 0 && memcmp(a->dx, b->dx, n_x(p) * f) == 0 &&
           memcmp(a->dw_ih, b->dw_ih, n_wih(p) * f) == 0 &&
           memcmp(a->dw_hh, b->dw_hh, n_whh(p) * f) == 0 &&
           memcmp(a->db_ih, b->db_ih, G * f) == 0 && memcmp(a->db_hh, b->db_hh, G * f) == 0 &&
           memcmp(a->dh0, b->dh0, n_state(p) * f) == 0 &&
           memcmp(a->dc0, b->dc0, n_state(p) * f) == 0;
}

static void test_runs_are_bit_identical(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++) {
        problem p = make_problem((attn_rnn_cell)cell, 70, 3, 8, 80,
                                 WITH_BIAS | WITH_H0 | WITH_LENGTHS | REVERSE, 1.0, 9000);
        attn_isa isas[ATTN_ISA_LAST + 1];
        int n_isas = supported_isas(isas);
        for (int i = 0; i < n_isas; i++) {
            CHECK_OK(attn_set_isa(isas[i]));
            library_run a = prepare_run(&p, p.H, 5), b = prepare_run(&p, p.H, 5);
            run_layer(&p, &a);
            run_layer(&p, &b);
            CHECK(runs_identical(&a, &b, &p), "%s %s: two runs differ", cell ? "lstm" : "gru",
                  attn_isa_name(isas[i]));
            free_run(&a);
            free_run(&b);
        }
        CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
        free_problem(&p);
    }
}

/* bf16 products over all positions: the outputs and the weight gradients move from fp32's,
 * by no more than bf16's 8 significant bits allow, on every optimized instruction set. */
static void test_bf16_products_stay_close_to_fp32(void)
{
    for (int cell = ATTN_RNN_GRU; cell <= ATTN_RNN_LSTM; cell++) {
        problem p = make_problem((attn_rnn_cell)cell, 9, 5, 24, 16,
                                 WITH_BIAS | WITH_H0 | WITH_LENGTHS, 1.0, 9100);
        attn_isa isas[ATTN_ISA_LAST + 1];
        int n_isas = supported_isas(isas);
        for (int i = 0; i < n_isas; i++) {
            if (isas[i] == ATTN_ISA_REFERENCE)
                continue; /* the reference computes in double whatever the precision */
            CHECK_OK(attn_set_isa(isas[i]));
            library_run fp32 = prepare_run(&p, p.H, 5), bf16 = prepare_run(&p, p.H, 5);
            run_layer(&p, &fp32);
            layer_precision = ATTN_PRECISION_BF16;
            run_layer(&p, &bf16);
            layer_precision = ATTN_PRECISION_FP32;
            size_t outs = (size_t)(p.B * p.T * p.H), w = (size_t)n_wih(&p);
            double out_gap = test_max_abs_diff(fp32.out, bf16.out, outs);
            double grad_gap = test_max_abs_diff(fp32.dw_ih, bf16.dw_ih, w);
            double out_scale = test_max_abs(fp32.out, outs),
                   grad_scale = test_max_abs(fp32.dw_ih, w);
            CHECK(out_gap > 0 && grad_gap > 0, "%s %s: bf16 changes the results",
                  cell ? "lstm" : "gru", attn_isa_name(isas[i]));
            CHECK(out_gap <= 3e-2 * out_scale && grad_gap <= 3e-2 * grad_scale,
                  "%s %s: bf16 within 3%% of fp32 (output %.3g of %.3g, dW_ih %.3g of %.3g)",
                  cell ? "lstm" : "gru", attn_isa_name(isas[i]), out_gap, out_scale, grad_gap,
                  grad_scale);
            free_run(&fp32);
            free_run(&bf16);
        }
        CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
        free_problem(&p);
    }
}

/* ---- bad input ----------------------------------------------------------------------- */

static void test_bad_input(void)
{
    enum { B = 2, T = 3, I = 4, H = 5 };
    static float buf[4096];
    int64_t lengths[B] = {3, 1};
    attn_rnn_layer_dims dims = {ATTN_RNN_LSTM, B, T, I, H, 0, 0, ATTN_PRECISION_FP32};
    attn_rnn_params params = {buf, buf, NULL, NULL};
    attn_rnn_params no_hh = {buf, NULL, NULL, NULL};
    CHECK(attn_rnn_layer_saved_floats(&dims) > 0 && attn_rnn_layer_workspace_floats(&dims) > 0 &&
              attn_rnn_layer_saved_floats(&dims) + attn_rnn_layer_workspace_floats(&dims) < 4096,
          "sizes for valid dims");
    float *out = buf + 3072; /* apart from the inputs (zeros) and the buffers */
    CHECK_OK(attn_rnn_layer_forward(&dims, &params, buf, lengths, NULL, NULL, out, NULL, NULL,
                                    buf + 1024, buf + 2048));
    CHECK_FAILS(
        attn_rnn_layer_forward(NULL, &params, buf, lengths, NULL, NULL, buf, NULL, NULL, buf, buf),
        ATTN_ERR_INVALID_ARGUMENT);
    attn_rnn_layer_dims int8 = dims;
    int8.precision = ATTN_PRECISION_INT8;
    CHECK_FAILS(attn_rnn_layer_forward(&int8, &params, buf, lengths, NULL, NULL, out, NULL, NULL,
                                       buf + 1024, buf + 2048),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "precision=int8") != NULL, "the message names it: %s",
          attn_last_error());
    CHECK_FAILS(
        attn_rnn_layer_forward(&dims, NULL, buf, lengths, NULL, NULL, buf, NULL, NULL, buf, buf),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(
        attn_rnn_layer_forward(&dims, &no_hh, buf, lengths, NULL, NULL, buf, NULL, NULL, buf, buf),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_rnn_layer_forward") != NULL &&
              strstr(attn_last_error(), "weight_hh") != NULL,
          "names the function and the argument: %s", attn_last_error());
    CHECK_FAILS(attn_rnn_layer_forward(&dims, &params, NULL, lengths, NULL, NULL, buf, NULL, NULL,
                                       buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_forward(&dims, &params, buf, lengths, NULL, NULL, NULL, NULL, NULL,
                                       buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_forward(&dims, &params, buf, lengths, NULL, NULL, buf, NULL, NULL,
                                       NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_forward(&dims, &params, buf, lengths, NULL, NULL, buf, NULL, NULL,
                                       buf, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_backward(&dims, &params, buf, lengths, NULL, buf, NULL, NULL, buf,
                                        NULL, NULL, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_backward(&dims, &params, buf, lengths, buf, buf, NULL, NULL, NULL,
                                        NULL, NULL, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rnn_layer_backward(&dims, &params, NULL, lengths, buf, buf, NULL, NULL, buf,
                                        NULL, NULL, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    static const int64_t bad_lengths[][B] = {{4, 1}, {3, -1}};
    for (size_t i = 0; i < 2; i++) {
        CHECK_FAILS(attn_rnn_layer_forward(&dims, &params, buf, bad_lengths[i], NULL, NULL, out,
                                           NULL, NULL, buf + 1024, buf + 2048),
                    ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "lengths[") != NULL, "names the length: %s",
              attn_last_error());
        CHECK_FAILS(attn_rnn_layer_backward(&dims, &params, buf, bad_lengths[i], buf + 1024, buf,
                                            NULL, NULL, buf + 2048, NULL, NULL, NULL, NULL),
                    ATTN_ERR_INVALID_ARGUMENT);
    }
    const int64_t huge = (int64_t)1 << 40;
    /* cell, B, T, I, H, output_stride */
    static const int64_t bad[][6] = {{2, 2, 3, 4, 5, 0},  {0, -1, 3, 4, 5, 0}, {0, 2, -3, 4, 5, 0},
                                     {0, 2, 3, 0, 5, 0},  {0, 2, 3, 4, 0, 0},  {1, 2, 3, 4, 5, 4},
                                     {1, 2, 3, 4, 5, -6}, {0, 2, 3, 4, 0, 6}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 3; i++) {
        attn_rnn_layer_dims d = dims;
        if (i < sizeof bad / sizeof bad[0]) {
            d.cell = (attn_rnn_cell)bad[i][0];
            d.batch = bad[i][1], d.seq_len = bad[i][2], d.input_size = bad[i][3];
            d.hidden_size = bad[i][4], d.output_stride = bad[i][5];
        } else { /* products that overflow */
            size_t j = i - sizeof bad / sizeof bad[0];
            d.batch = j == 0 ? huge : 2, d.seq_len = j == 0 ? huge : 3;
            d.input_size = j == 1 ? huge : 4, d.hidden_size = j >= 1 ? huge : 5;
        }
        CHECK_FAILS(
            attn_rnn_layer_forward(&d, &params, buf, NULL, NULL, NULL, buf, NULL, NULL, buf, buf),
            ATTN_ERR_INVALID_ARGUMENT);
        CHECK(attn_rnn_layer_saved_floats(&d) == 0 && attn_rnn_layer_workspace_floats(&d) == 0,
              "no buffer sizes for bad dims %zu", i);
    }
    CHECK(attn_rnn_layer_saved_floats(NULL) == 0 && attn_rnn_cell_saved_floats(NULL) == 0,
          "NULL dims have no size");

    /* The cell API: the same checks under its own name. */
    attn_rnn_cell_dims cd = {ATTN_RNN_GRU, B, I, H};
    CHECK_OK(
        attn_rnn_cell_forward(&cd, &params, buf, NULL, NULL, out, NULL, buf + 1024, buf + 2048));
    CHECK_FAILS(attn_rnn_cell_forward(&cd, &params, buf, NULL, NULL, NULL, NULL, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_rnn_cell_forward") != NULL &&
              strstr(attn_last_error(), "h_out") != NULL,
          "names the function and the argument: %s", attn_last_error());
    CHECK_FAILS(attn_rnn_cell_forward(&cd, &params, NULL, NULL, NULL, buf, NULL, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(
        attn_rnn_cell_backward(&cd, &params, buf, NULL, NULL, NULL, buf, NULL, NULL, NULL, NULL),
        ATTN_ERR_INVALID_ARGUMENT);
    attn_rnn_cell_dims bad_cell = {ATTN_RNN_GRU, B, I, -1};
    CHECK_FAILS(attn_rnn_cell_backward(&bad_cell, &params, buf, buf, NULL, NULL, buf, NULL, NULL,
                                       NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_rnn_cell_workspace_floats(&bad_cell) == 0, "no size for bad cell dims");

    /* An empty batch is a valid no-op, even without buffers. */
    attn_rnn_layer_dims empty = {ATTN_RNN_GRU, 0, T, I, H, 0, 0, ATTN_PRECISION_FP32};
    CHECK_OK(
        attn_rnn_layer_forward(&empty, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    CHECK_OK(attn_rnn_layer_backward(&empty, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                     NULL, NULL, NULL));
    attn_rnn_cell_dims empty_cell = {ATTN_RNN_LSTM, 0, I, H};
    CHECK_OK(attn_rnn_cell_forward(&empty_cell, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_threaded_batch_matches_reference);
    RUN_TEST(test_saturated_gates);
    RUN_TEST(test_cell_steps_match_reference);
    RUN_TEST(test_cell_from_projections_matches_reference);
    RUN_TEST(test_layer_on_stored_matrices);
    RUN_TEST(test_bidirectional_shared_buffer);
    RUN_TEST(test_final_states_and_empty_sentences);
    RUN_TEST(test_runs_are_bit_identical);
    RUN_TEST(test_bf16_products_stay_close_to_fp32);
    RUN_TEST(test_bad_input);
    return test_summary();
}
