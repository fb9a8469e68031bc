/* Recurrent layers and cells with torch.nn.GRU / GRUCell names, and the additive and Luong
 * attention modules of RNN encoder-decoders. */
#include "core/internal.h"
#include "nn/nn_internal.h"

#include <math.h>
#include <stdio.h>

static attn_status check_cell_kind(const char *fn, attn_rnn_cell cell)
{
    ATTN_CHECK_ARG(cell == ATTN_RNN_GRU || cell == ATTN_RNN_LSTM,
                   "%s: cell must be ATTN_RNN_GRU or ATTN_RNN_LSTM, got %d", fn, (int)cell);
    return ATTN_OK;
}

static int64_t gates(attn_rnn_cell cell)
{
    return cell == ATTN_RNN_LSTM ? 4 : 3;
}

/* PyTorch's reset_parameters for recurrent modules. */
static attn_init recurrent_init(int64_t hidden)
{
    return attn_init_uniform((float)(1.0 / sqrt((double)hidden)));
}

static attn_status var_or_null(attn_graph *graph, attn_param_id id, attn_var **out)
{
    *out = NULL;
    return id < 0 ? ATTN_OK : attn_graph_param(graph, id, out);
}

/* ---- one layer of nn.GRU / nn.LSTM ---------------------------------------------------------- */

attn_status attn_nn_rnn_layer_register(attn_nn_rnn_layer *m, attn_params *store, const char *prefix,
                                       attn_rnn_cell cell, int64_t layer, int64_t input_size,
                                       int64_t hidden_size, int bidirectional)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_TRY(check_cell_kind(fn, cell));
    ATTN_CHECK_ARG(layer >= 0, "%s: layer must be >= 0, got %lld", fn, (long long)layer);
    ATTN_CHECK_ARG(input_size >= 1 && hidden_size >= 1,
                   "%s: sizes must be positive (input_size=%lld, hidden_size=%lld)", fn,
                   (long long)input_size, (long long)hidden_size);
    ATTN_CHECK_ARG(bidirectional == 0 || bidirectional == 1,
                   "%s: bidirectional must be 0 or 1, got %d", fn, bidirectional);
    m->cell = cell;
    m->input_size = input_size;
    m->hidden_size = hidden_size;
    m->bidirectional = bidirectional;
    const int64_t rows = gates(cell) * hidden_size;
    const attn_init init = recurrent_init(hidden_size);
    for (int d = 0; d < 2; d++) {
        m->weight_ih[d] = m->weight_hh[d] = m->bias_ih[d] = m->bias_hh[d] = -1;
        if (d == 1 && !bidirectional)
            break;
        const char *suffix = d == 0 ? "" : "_reverse";
        char name[64];
        snprintf(name, sizeof name, "weight_ih_l%lld%s", (long long)layer, suffix);
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, name, 2, rows, input_size, init,
                                   &m->weight_ih[d]));
        snprintf(name, sizeof name, "weight_hh_l%lld%s", (long long)layer, suffix);
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, name, 2, rows, hidden_size, init,
                                   &m->weight_hh[d]));
        snprintf(name, sizeof name, "bias_ih_l%lld%s", (long long)layer, suffix);
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, name, 1, rows, 0, init, &m->bias_ih[d]));
        snprintf(name, sizeof name, "bias_hh_l%lld%s", (long long)layer, suffix);
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, name, 1, rows, 0, init, &m->bias_hh[d]));
    }
    return ATTN_OK;
}

attn_status attn_nn_rnn_layer_forward(const attn_nn_rnn_layer *m, attn_graph *graph, attn_var *x,
                                      const int32_t *lengths, attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(graph);
    attn_rnn_vars directions[2];
    for (int d = 0; d < 1 + m->bidirectional; d++) {
        ATTN_TRY(attn_graph_param(graph, m->weight_ih[d], &directions[d].weight_ih));
        ATTN_TRY(attn_graph_param(graph, m->weight_hh[d], &directions[d].weight_hh));
        ATTN_TRY(attn_graph_param(graph, m->bias_ih[d], &directions[d].bias_ih));
        ATTN_TRY(attn_graph_param(graph, m->bias_hh[d], &directions[d].bias_hh));
    }
    return attn_op_rnn_layer(graph, m->cell, &directions[0],
                             m->bidirectional ? &directions[1] : NULL, x, lengths, out);
}

/* ---- nn.GRUCell / nn.LSTMCell -----------------------------------------------------------------
 */

attn_status attn_nn_rnn_cell_register(attn_nn_rnn_cell *m, attn_params *store, const char *prefix,
                                      attn_rnn_cell cell, int64_t input_size, int64_t hidden_size)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_TRY(check_cell_kind(fn, cell));
    ATTN_CHECK_ARG(input_size >= 1 && hidden_size >= 1,
                   "%s: sizes must be positive (input_size=%lld, hidden_size=%lld)", fn,
                   (long long)input_size, (long long)hidden_size);
    m->cell = cell;
    m->input_size = input_size;
    m->hidden_size = hidden_size;
    const int64_t rows = gates(cell) * hidden_size;
    const attn_init init = recurrent_init(hidden_size);
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "weight_ih", 2, rows, input_size, init,
                               &m->weight_ih));
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "weight_hh", 2, rows, hidden_size, init,
                               &m->weight_hh));
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "bias_ih", 1, rows, 0, init, &m->bias_ih));
    return attn_nn_add_param(fn, store, prefix, "bias_hh", 1, rows, 0, init, &m->bias_hh);
}

attn_status attn_nn_rnn_cell_forward(const attn_nn_rnn_cell *m, attn_graph *graph, attn_var *x,
                                     attn_var *h, attn_var *c, attn_var **h_out, attn_var **c_out)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(graph);
    attn_rnn_vars p;
    ATTN_TRY(attn_graph_param(graph, m->weight_ih, &p.weight_ih));
    ATTN_TRY(attn_graph_param(graph, m->weight_hh, &p.weight_hh));
    ATTN_TRY(attn_graph_param(graph, m->bias_ih, &p.bias_ih));
    ATTN_TRY(attn_graph_param(graph, m->bias_hh, &p.bias_hh));
    return attn_op_rnn_cell(graph, m->cell, &p, x, h, c, h_out, c_out);
}

/* ---- additive attention -----------------------------------------------------------------------
 */

static attn_init vector_init(int64_t dim)
{
    return attn_init_uniform((float)(1.0 / sqrt((double)dim)));
}

attn_status attn_nn_additive_attention_register(attn_nn_additive_attention *m, attn_params *store,
                                                const char *prefix, int64_t query_dim,
                                                int64_t key_dim, int64_t attn_dim)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(query_dim >= 1 && key_dim >= 1 && attn_dim >= 1,
                   "%s: sizes must be positive (query_dim=%lld, key_dim=%lld, attn_dim=%lld)", fn,
                   (long long)query_dim, (long long)key_dim, (long long)attn_dim);
    m->query_dim = query_dim;
    m->key_dim = key_dim;
    m->attn_dim = attn_dim;
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "query_proj.weight", 2, attn_dim, query_dim,
                               attn_init_xavier_uniform(1.0f), &m->query_weight));
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "query_proj.bias", 1, attn_dim, 0,
                               attn_init_zeros(), &m->query_bias));
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "key_proj.weight", 2, attn_dim, key_dim,
                               attn_init_xavier_uniform(1.0f), &m->key_weight));
    return attn_nn_add_param(fn, store, prefix, "v", 1, attn_dim, 0, vector_init(attn_dim), &m->v);
}

attn_status attn_nn_additive_attention_keys(const attn_nn_additive_attention *m, attn_graph *graph,
                                            attn_var *annotations, attn_var **keys)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *w;
    ATTN_TRY(attn_graph_param(graph, m->key_weight, &w));
    return attn_op_linear(graph, annotations, w, NULL, keys);
}

attn_status attn_nn_additive_attention_forward(const attn_nn_additive_attention *m,
                                               attn_graph *graph, attn_var *query, attn_var *keys,
                                               attn_var *annotations, const int32_t *key_lengths,
                                               attn_var **context, attn_var **weights)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_additive_vars p;
    ATTN_TRY(attn_graph_param(graph, m->query_weight, &p.w_query));
    ATTN_TRY(attn_graph_param(graph, m->query_bias, &p.bias));
    ATTN_TRY(attn_graph_param(graph, m->v, &p.v));
    return attn_op_additive_attention(graph, &p, query, keys, annotations, key_lengths, context,
                                      weights);
}

/* ---- Luong attention --------------------------------------------------------------------------
 */

attn_status attn_nn_luong_attention_register(attn_nn_luong_attention *m, attn_params *store,
                                             const char *prefix, attn_luong_score score,
                                             attn_luong_align align, int64_t window,
                                             int64_t query_dim, int64_t key_dim, int64_t attn_dim)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG((unsigned)score <= ATTN_LUONG_CONCAT, "%s: unknown score %d", fn, (int)score);
    ATTN_CHECK_ARG((unsigned)align <= ATTN_LUONG_LOCAL_P, "%s: unknown alignment %d", fn,
                   (int)align);
    ATTN_CHECK_ARG(query_dim >= 1 && key_dim >= 1, "%s: sizes must be positive", fn);
    ATTN_CHECK_ARG(score != ATTN_LUONG_DOT || query_dim == key_dim,
                   "%s: the dot score needs query_dim == key_dim, got %lld and %lld", fn,
                   (long long)query_dim, (long long)key_dim);
    const int uses_attn_dim = score == ATTN_LUONG_CONCAT || align == ATTN_LUONG_LOCAL_P;
    ATTN_CHECK_ARG(!uses_attn_dim || attn_dim >= 1,
                   "%s: attn_dim must be >= 1 for concat scores and local-p, got %lld", fn,
                   (long long)attn_dim);
    ATTN_CHECK_ARG(align != ATTN_LUONG_LOCAL_M || window >= 0,
                   "%s: local-m needs window >= 0, got %lld", fn, (long long)window);
    ATTN_CHECK_ARG(align != ATTN_LUONG_LOCAL_P || window >= 1,
                   "%s: local-p needs window >= 1, got %lld", fn, (long long)window);
    m->score = score;
    m->align = align;
    m->window = align == ATTN_LUONG_GLOBAL ? 0 : window;
    m->query_dim = query_dim;
    m->key_dim = key_dim;
    m->attn_dim = uses_attn_dim ? attn_dim : 0;
    m->weight = m->v = m->predict_weight = m->predict_v = -1;
    const attn_init matrix = attn_init_xavier_uniform(1.0f);
    if (score == ATTN_LUONG_GENERAL)
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "weight", 2, query_dim, key_dim, matrix,
                                   &m->weight));
    if (score == ATTN_LUONG_CONCAT) {
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "weight", 2, attn_dim, query_dim + key_dim,
                                   matrix, &m->weight));
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "v", 1, attn_dim, 0, vector_init(attn_dim),
                                   &m->v));
    }
    if (align == ATTN_LUONG_LOCAL_P) {
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "predict_weight", 2, attn_dim, query_dim,
                                   matrix, &m->predict_weight));
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "predict_v", 1, attn_dim, 0,
                                   vector_init(attn_dim), &m->predict_v));
    }
    return ATTN_OK;
}

attn_status attn_nn_luong_attention_keys(const attn_nn_luong_attention *m, attn_graph *graph,
                                         attn_var *annotations, attn_var **keys)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(keys);
    if (m->score != ATTN_LUONG_CONCAT) {
        *keys = annotations;
        return ATTN_OK;
    }
    attn_var *w;
    ATTN_TRY(attn_graph_param(graph, m->weight, &w));
    return attn_op_luong_project_keys(graph, annotations, w, keys);
}

attn_status attn_nn_luong_attention_forward(const attn_nn_luong_attention *m, attn_graph *graph,
                                            int64_t position, attn_var *query, attn_var *keys,
                                            attn_var *annotations, const int32_t *key_lengths,
                                            attn_var **context, attn_var **weights)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(graph);
    attn_luong_vars p;
    ATTN_TRY(var_or_null(graph, m->weight, &p.w));
    ATTN_TRY(var_or_null(graph, m->v, &p.v));
    ATTN_TRY(var_or_null(graph, m->predict_weight, &p.w_p));
    ATTN_TRY(var_or_null(graph, m->predict_v, &p.v_p));
    return attn_op_luong_attention(graph, m->score, m->align, m->window, &p, position, query, keys,
                                   annotations, key_lengths, context, weights);
}
