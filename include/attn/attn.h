/* attn: attention and attention-based sequence-to-sequence models in C.
 * Include this one header for the whole library. */
#ifndef ATTN_H
#define ATTN_H

#include "attn/attn_core.h"
#include "attn/attn_kernels.h"
#include "attn/attn_attention.h"
#include "attn/attn_tensor_file.h"
#include "attn/attn_data.h"
#include "attn/attn_rnn.h"
#include "attn/attn_viz.h"
#include "attn/attn_metrics.h"
#include "attn/attn_autodiff.h"
#include "attn/attn_nn.h"
#include "attn/attn_models.h"
#include "attn/attn_optim.h"
#include "attn/attn_trainer.h"
#include "attn/attn_decode.h"
#include "attn/attn_bundle.h"
#include "attn/attn_serve.h"

#endif /* ATTN_H */
