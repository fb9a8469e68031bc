/* Multi-head attention with weights packed once per update: what the graph's bf16 training
 * uses, so that a layer's projections do not round and repack the same weights at every
 * call. Not part of the public API. */
#ifndef ATTN_ATTENTION_MHA_INTERNAL_H
#define ATTN_ATTENTION_MHA_INTERNAL_H

#include "attn/attn_attention.h"
#include "attn/attn_kernels.h"
#include "core/internal.h"

/* Packed op(B) of the whole in_proj_weight and out_proj_weight (attn_gemm_packed_b_create
 * of the weight: _t with ATTN_TRANS for the forward's x W^T, the plain one with
 * ATTN_NO_TRANS for the backward's dp W). Any may be NULL; a packed weight is used only
 * where a product takes the whole weight (the fused self-attention projection, the output
 * projection): the others multiply by the plain weight as before. Products are bit for bit
 * those of the plain weight in the options' precision. */
typedef struct attn_mha_packed_weights {
    const attn_gemm_packed_b *in_proj_t, *in_proj, *out_proj_t, *out_proj;
} attn_mha_packed_weights;

/* attn_mha_forward and attn_mha_backward reading the packed weights (NULL: none). */
ATTN_INTERNAL attn_status attn_mha_forward_packed(
    const attn_mha_dims *dims, const attn_mha_params *params, const attn_mha_packed_weights *packed,
    const float *query, const float *key, const float *value, const attn_sdpa_options *options,
    float *out, float *weights, int average_attn_weights, float *saved, float *scratch);
ATTN_INTERNAL attn_status attn_mha_backward_packed(
    const attn_mha_dims *dims, const attn_mha_params *params, const attn_mha_packed_weights *packed,
    const float *query, const float *key, const float *value, const attn_sdpa_options *options,
    const float *saved, const float *grad_out, float *scratch, float *grad_query, float *grad_key,
    float *grad_value, const attn_mha_grads *grads);

#endif /* ATTN_ATTENTION_MHA_INTERNAL_H */
