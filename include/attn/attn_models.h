/* attn models: Transformer encoder-decoder, encoder-only classifier and decoder-only
 * language model, and RNN encoder-decoders with or without attention (see the RNN section
 * at the end), built from the nn layers (layer 4).
 *
 * A model is described by a small JSON config (attn_model_config); the same JSON is stored in
 * every saved model, so a file alone rebuilds its model.
 *
 * Architectures:
 *  - "transformer" (encoder-decoder, "Attention Is All You Need"): source and target
 *    embeddings scaled by sqrt(d_model) plus sinusoidal positions, dropout; N encoder layers
 *    (self-attention over the source, padding masked), N decoder layers (causal
 *    self-attention, cross-attention to the encoder output, source padding masked); post-
 *    or pre-norm; optional final layer norms (nn.Transformer always has them); an output
 *    projection to the target vocabulary, optionally tied to the target embedding; shared or
 *    separate embeddings.
 *  - "transformer_classifier": the encoder over the source, pooled into one vector per
 *    sentence (config pooling: the mean over non-padding positions, the state of a
 *    classification token read first, or a learned query attending over the states), a
 *    linear layer to num_classes.
 *  - "transformer_lm": a causal language model over the target: the same blocks as the
 *    encoder with causal self-attention, then the output projection. With pre-norm,
 *    "gelu_tanh", learned positions, unscaled embeddings, a final norm and a tied output
 *    without bias it is GPT-2 (attn_model_from_llmc reads llm.c's checkpoints).
 *  - "transformer_mlm": BERT's masked language model (Devlin et al. 2019): the classifier's
 *    encoder (the same parameters under the same names, so a classifier starts from it by
 *    name) over the source, then an output projection to the source vocabulary at every
 *    position, tied to the embedding (as BERT's decoder; BERT's extra dense + GELU + norm
 *    transform before it is left out), with a bias unless output_bias is false. Its loss
 *    counts only the positions the masking chose (attn_model_batch.mlm_targets).
 *
 * Parameter names (PyTorch's nn.Transformer names inside the stacks):
 *   src_embed.weight, tgt_embed.weight (or embed.weight when shared, and for the classifier,
 *   the masked and the causal language model), encoder.layers.<i>.*, encoder.norm.*, decoder.layers.<i>.*,
 *   decoder.norm.*, generator.weight (absent when tied), generator.bias (absent without
 *   output_bias), classifier.weight, classifier.bias (absent without output_bias),
 *   pooling.* (attention pooling, see attn_pooling); with
 *   learned positions pos_embed.weight (classifier and language models) or src_pos_embed.weight
 *   and tgt_pos_embed.weight (encoder-decoder), each [max_len, d_model]. The language
 *   model's blocks are decoder.layers.<i>.* with the layout of an encoder layer (self_attn,
 *   linear1, linear2, norm1, norm2). With ffn "swiglu" each layer also has linear3 (the up
 *   projection; linear1 is the gate, linear2 the down projection); with bias false the
 *   blocks have no in_proj_bias, out_proj.bias, linear*.bias nor norm*.bias; an RMSNorm
 *   (norm "rms_norm") has only its .weight, in the blocks and the final norms alike.
 *
 * Block options of LLaMA-style models: positions "rope", norm "rms_norm", ffn "swiglu",
 * bias false (with output_bias false, a model without any bias, as PaLM and LLaMA).
 *
 * Attention dropout is not applied (dropout acts on embeddings, sublayer outputs and the
 * feed-forward's hidden layer, as the paper describes).
 */
#ifndef ATTN_MODELS_H
#define ATTN_MODELS_H

#include "attn/attn_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ------------------------------------------------------------------- */

#define ATTN_MODEL_CONFIG_VERSION 1

typedef enum attn_model_arch {
    ATTN_ARCH_TRANSFORMER = 0,            /* "transformer" */
    ATTN_ARCH_TRANSFORMER_CLASSIFIER = 1, /* "transformer_classifier" */
    ATTN_ARCH_TRANSFORMER_LM = 2,         /* "transformer_lm" */
    ATTN_ARCH_RNN = 3,                    /* "rnn": see the RNN section below */
    ATTN_ARCH_TRANSFORMER_MLM = 4,        /* "transformer_mlm" */
    ATTN_ARCH_RNN_CLASSIFIER = 5          /* "rnn_classifier": see the RNN section below */
} attn_model_arch;

/* Whether models of arch are text classifiers (transformer_classifier, rnn_classifier): a
 * pooled encoder with a linear layer over num_classes, read by attn_bundle_classify. */
ATTN_API int attn_model_arch_is_classifier(attn_model_arch arch);

/* The decoder's attention in an "rnn" model (JSON names in quotes). */
typedef enum attn_rnn_attention {
    ATTN_RNN_BAHDANAU = 0,      /* "bahdanau": additive, scored from s_{i-1} */
    ATTN_RNN_LUONG_DOT = 1,     /* "luong-dot" */
    ATTN_RNN_LUONG_GENERAL = 2, /* "luong-general" */
    ATTN_RNN_LUONG_CONCAT = 3,  /* "luong-concat" */
    ATTN_RNN_NO_ATTENTION = 4   /* "none": the context is the encoder's last state */
} attn_rnn_attention;

/* Luong attention's alignment: "none" (global), "m" (local-m) or "p" (local-p). */
typedef enum attn_rnn_local {
    ATTN_RNN_GLOBAL = 0,
    ATTN_RNN_LOCAL_M = 1,
    ATTN_RNN_LOCAL_P = 2
} attn_rnn_local;

/* How a Transformer adds positions to its embeddings (JSON names in quotes). */
typedef enum attn_positions {
    ATTN_POSITIONS_SINUSOIDAL = 0, /* "sinusoidal": the fixed table, laid out as
                                    * positional_encoding says */
    ATTN_POSITIONS_LEARNED = 1,    /* "learned": a trained table [max_len, d_model] added to
                                    * the (scaled, if scale_embeddings) token embeddings, as
                                    * GPT-2's wpe */
    ATTN_POSITIONS_ROPE = 2        /* "rope": nothing is added to the embeddings; every
                                    * self-attention turns q and k of each head by position
                                    * (attn_rope_rotate: RoFormer's rotary embeddings in the
                                    * GPT-NeoX / LLaMA "rotate half" layout, base rope_base).
                                    * The encoder-decoder's cross-attention is not rotated. */
} attn_positions;

/* How the classifier turns the encoder's states h_1 .. h_n into one vector (JSON names in
 * quotes). */
typedef enum attn_pooling {
    ATTN_POOLING_MEAN = 0,     /* "mean": the mean of h_1 .. h_n (padding left out) */
    ATTN_POOLING_CLS = 1,      /* "cls": a classification token before the text, its state
                                * pooled (BERT's [CLS]): the encoder reads <s> (ATTN_BOS_ID,
                                * never in a source otherwise) then the tokens, so a source
                                * may be max_len - 1 tokens long */
    ATTN_POOLING_ATTENTION = 2 /* "attention": Yang et al. 2016's attention pooling,
                                * u_t = tanh(W h_t + b), a_t = softmax_t(u_t . q),
                                * pooled = sum_t a_t h_t, with a learned query (context
                                * vector) q: "pooling.proj.weight" W [d_model, d_model],
                                * "pooling.proj.bias" b [d_model], "pooling.query" q
                                * [1, d_model] */
} attn_pooling;

/* The token pooling "cls" puts before every source: id 1, which is <s> in the data layer's
 * vocabularies (ATTN_BOS_ID) and never a source token, so its embedding row is free to
 * become the classification token's. */
#define ATTN_MODEL_CLS_ID 1

/* The JSON name of each field is the struct field's name. Which fields an architecture has:
 *   all:                    version, arch, d_model, num_heads, ffn_dim, dropout, activation,
 *                           norm_first, max_len, positional_encoding, positions,
 *                           rope_base, norm, ffn, bias, scale_embeddings, output_bias,
 *                           layer_norm_eps, label_smoothing
 *   transformer:            encoder_layers, decoder_layers, encoder_final_norm,
 *                           decoder_final_norm, src_vocab, tgt_vocab, share_embeddings,
 *                           tie_output
 *   transformer_classifier: encoder_layers, encoder_final_norm, src_vocab, num_classes,
 *                           pooling
 *   transformer_lm:         decoder_layers, decoder_final_norm, tgt_vocab, tie_output
 *   transformer_mlm:        encoder_layers, encoder_final_norm, src_vocab
 *   rnn:                    version, arch, dropout, src_vocab, tgt_vocab, max_len,
 *                           label_smoothing and the rnn fields (none of the "all" others)
 *   rnn_classifier:         version, arch, dropout, src_vocab, num_classes, pooling, max_len,
 *                           label_smoothing, cell, layers, hidden, embedding_dim,
 *                           bidirectional
 * Fields an architecture does not have stay 0 in the struct and are rejected in JSON. */
typedef struct attn_model_config {
    int version;                        /* ATTN_MODEL_CONFIG_VERSION */
    attn_model_arch arch;               /* JSON: "transformer", ... */
    int64_t d_model, num_heads, ffn_dim;
    int64_t encoder_layers, decoder_layers;
    double dropout;                     /* [0, 1) */
    attn_activation activation;         /* JSON: "relu", "gelu" or "gelu_tanh" */
    int norm_first;                     /* JSON bool: pre-norm (true) or post-norm (false) */
    int encoder_final_norm, decoder_final_norm; /* JSON bools */
    int64_t src_vocab, tgt_vocab, num_classes;
    attn_pooling pooling;               /* JSON: "mean", "cls" or "attention" (classifier;
                                         * missing from older files: "mean") */
    int share_embeddings;               /* JSON bool; needs src_vocab == tgt_vocab */
    int tie_output;                     /* JSON bool: output projection = target embedding */
    int scale_embeddings;               /* JSON bool: embeddings times sqrt(d_model) */
    attn_pe_layout positional_encoding; /* JSON: "interleaved" or "concatenated" */
    attn_positions positions;           /* JSON: "sinusoidal", "learned" or "rope" */
    double rope_base;                   /* > 0: the base of "rope" (10000); unused otherwise */
    attn_norm_kind norm;                /* JSON: "layer_norm" or "rms_norm": every norm of
                                         * the model (the blocks' and the final ones) */
    attn_ffn_kind ffn;                  /* JSON: "mlp" (with activation) or "swiglu" (SiLU
                                         * gate linear1, up linear3, down linear2) */
    int bias;                           /* JSON bool: biases in the blocks' linear layers and
                                         * LayerNorms (false: none, as PaLM and LLaMA) */
    int output_bias;                    /* JSON bool: the generator (classifier) has a bias */
    int64_t max_len;                    /* longest sequence the positions cover */
    double layer_norm_eps;              /* > 0 */
    double label_smoothing;             /* [0, 1]: of the training loss */
    /* rnn only (see the RNN section) */
    attn_rnn_cell cell;                 /* JSON: "gru" or "lstm" */
    int64_t layers;                     /* stacked layers, encoder and decoder alike */
    int64_t hidden;                     /* units per direction and in the decoder */
    int64_t embedding_dim;              /* source and target embeddings */
    int64_t attention_dim;              /* bahdanau, luong-concat and local-p scoring nets */
    int bidirectional;                  /* JSON bool: the encoder reads both ways */
    attn_rnn_attention attention;       /* JSON: "bahdanau", "luong-dot", ... or "none" */
    attn_rnn_local local;               /* JSON: "none", "m" or "p" (Luong attention only) */
    int64_t window;                     /* D of local attention, >= 1 */
    int input_feeding;                  /* JSON bool: Luong's h~_{i-1} into step i */
    int reverse_source;                 /* JSON bool: read each source sentence backwards */
} attn_model_config;

/* The defaults of an architecture: the base model of the paper (d_model 512, 8 heads,
 * 6 + 6 layers, FFN 2048, dropout 0.1, ReLU, post-norm, label smoothing 0.1), final norms
 * on, tied output with a bias, sinusoidal interleaved positions (rope_base 10000 for when
 * they are "rope"), LayerNorms, the MLP feed-forward, biases, max_len 1024, eps 1e-5;
 * the vocabulary sizes and num_classes are 0 and must be set. An unknown arch gives the
 * transformer's defaults.
 * rnn: Bahdanau's model at a smaller size: one layer of GRUs, 256 hidden units, 256-wide
 * embeddings and attention, bidirectional encoder, "bahdanau" attention, local "none",
 * window 10, no input feeding, no reversal, dropout 0.1, label smoothing 0, max_len 1024.
 * rnn_classifier: the same encoder (one bidirectional GRU layer, 256 hidden units, 256-wide
 * embeddings), "attention" pooling, dropout 0.1, label smoothing 0, max_len 1024. */
ATTN_API attn_model_config attn_model_config_default(attn_model_arch arch);
/* How many source tokens a model of config c reads at most: max_len, less the classification
 * token's place under a Transformer classifier's cls pooling. */
ATTN_API int64_t attn_model_config_source_limit(const attn_model_config *c);

/* Every constraint, with a message naming the field: sizes positive, num_heads divides
 * d_model, dropout and smoothing in range, shared embeddings need equal vocabularies,
 * fields of other architectures 0, version supported. */
ATTN_API attn_status attn_model_config_validate(const attn_model_config *config);
/* JSON with every field of the architecture; *json is malloc'ed (free it with free()). */
ATTN_API attn_status attn_model_config_to_json(const attn_model_config *config, char **json);
/* Parses and validates. "version" and "arch" are required; other missing fields take the
 * architecture's defaults. ATTN_ERR_FORMAT, naming the field, for malformed JSON, an
 * unknown or duplicate field, a field of another architecture, or a value of the wrong type
 * (an integer field must hold an integer); ATTN_ERR_INVALID_ARGUMENT for values out of
 * range (as attn_model_config_validate); ATTN_ERR_UNSUPPORTED for a newer version. */
ATTN_API attn_status attn_model_config_from_json(const char *json, attn_model_config *config);

/* ---- a model --------------------------------------------------------------------------- */

typedef struct attn_model attn_model;

/* Builds the modules and a finalised parameter store (all zero: call attn_model_init, or
 * load weights). */
ATTN_API attn_status attn_model_create(const attn_model_config *config, attn_model **out);
/* NULL is ignored. */
ATTN_API void attn_model_destroy(attn_model *model);
/* Initialises every parameter from seed (attn_params_init). */
ATTN_API attn_status attn_model_init(attn_model *model, uint64_t seed);
ATTN_API const attn_model_config *attn_model_get_config(const attn_model *model);
/* The model's parameter store (values, gradients and Adam moments). */
ATTN_API attn_params *attn_model_params(attn_model *model);

/* The metadata key under which a saved model keeps its config JSON. */
#define ATTN_MODEL_CONFIG_KEY "attn_config"

/* The metadata key of a model file whose matrices are stored in bf16 or int8 (value
 * "bf16" or "int8"); absent from fp32 files. An int8 matrix "<name>" (I8, [out, in]) has its
 * per-row scales beside it as "<name>" ATTN_MODEL_SCALE_SUFFIX (F32, [out]). */
#define ATTN_MODEL_PRECISION_KEY "attn_precision"
#define ATTN_MODEL_SCALE_SUFFIX ".scale"

/* Writes every parameter value and the config JSON (under ATTN_MODEL_CONFIG_KEY) as one
 * safetensors file, atomically. extra metadata (e.g. the tokenizers' JSON) may be NULL;
 * its keys must differ from ATTN_MODEL_CONFIG_KEY and ATTN_MODEL_PRECISION_KEY. A model set
 * to bf16 or int8 (attn_model_set_precision) writes its matrices in that precision. */
ATTN_API attn_status attn_model_save(attn_model *model, const char *path,
                                     const attn_metadata_entry *extra, size_t n_extra);
/* Rebuilds a model from a file written by attn_model_save (or by another tool that stores
 * the same config and names). */
ATTN_API attn_status attn_model_load(const char *path, attn_model **out);
/* The same from a file already open, so that a caller reading more than the model from it
 * (tokenizers, a checkpoint's training state) reads it once. name is how messages call the
 * file (its path; NULL: "the file"). */
ATTN_API attn_status attn_model_from_file(const attn_tensor_file *file, const char *name,
                                          attn_model **out);
/* Reads every parameter of the model from an open file by name (see attn_params_load); an
 * fp32 model only. */
ATTN_API attn_status attn_model_load_weights(attn_model *model, const attn_tensor_file *file);

/* Transfer (BERT's fine-tuning): copies a masked language model's encoder (arch
 * "transformer_mlm": embeddings, positions, layers, final norm; every parameter but its output
 * bias) into a classifier by name, bit for bit. The classifier's encoder must have the same
 * shapes (a config made from the encoder's, with arch, num_classes, pooling, dropout and label
 * smoothing of its own); its pooling and classifier layer are left as they are (a new head).
 * *encoder_floats (may be NULL) gets where the encoder ends in the classifier's parameter
 * buffer, the trainer's frozen_floats for training the head alone. Both models fp32. */
ATTN_API attn_status attn_model_copy_encoder(attn_model *classifier, const attn_model *encoder,
                                             int64_t *encoder_floats);

/* Inference in a lower precision: every matrix of the model (projections, embeddings, the
 * output layer) is rounded to bf16 or quantized to int8 per output row (symmetric, an fp32
 * scale per row), and the model's fp32 values become those stored values, so the encoder
 * and every other path read the same weights. The step decoder then multiplies with the
 * stored matrices (AVX512_BF16 / AVX512_VNNI, emulated on CPUs without: the same results,
 * slower), as do an RNN model's linear layers and decoder cells on any graph that records
 * nothing. Biases and layer norms stay fp32. Lowering is one way: a bf16 or int8 model
 * refuses a higher precision (ATTN_ERR_INVALID_ARGUMENT), as its fp32 weights are gone.
 * A model read from a bf16 or int8 file (attn quantize) already has that precision.
 * ATTN_PRECISION_AUTO keeps a bf16 or int8 model's own and gives an fp32 model
 * attn_precision_resolve's choice: bf16 where the CPU multiplies bf16 natively, else fp32. */
ATTN_API attn_status attn_model_set_precision(attn_model *model, attn_precision precision);
/* fp32 unless set or read from a bf16 or int8 file. */
ATTN_API attn_precision attn_model_precision(const attn_model *model);

/* ---- llm.c's GPT-2 checkpoints ---------------------------------------------------------- */

/* llm.c's train_gpt2 (github.com/karpathy/llm.c) writes GPT-2 as 256 int32 (magic 20240326,
 * version 3, maxT, V, L, NH, C, Vp) and float32 tensors wte [Vp, C], wpe [maxT, C], per layer
 * ln1, qkv, attproj, ln2, fc, fcproj, then lnf. In attn that model is a "transformer_lm" of
 * d_model C, num_heads NH, ffn_dim 4C, decoder_layers L, tgt_vocab V, max_len maxT,
 * "gelu_tanh", pre-norm with a final norm, learned positions, unscaled embeddings, a tied
 * output without bias, layer_norm_eps 1e-5, dropout and label smoothing 0.
 * The token table's padding rows V .. Vp-1 (llm.c pads its vocabulary for speed) are not
 * part of attn's model; a model file written by attn_llmc_to_model_file keeps them as the
 * tensor ATTN_LLMC_PADDED_ROWS ([Vp - V, C], ignored by attn_model_load) and Vp under the
 * metadata key ATTN_LLMC_PADDED_VOCAB_KEY, so converting back gives the same bytes. */
#define ATTN_LLMC_PADDED_VOCAB_KEY "llmc_padded_vocab"
#define ATTN_LLMC_PADDED_ROWS "llmc.padded_vocab_rows"

/* Reads an llm.c checkpoint into a new model (as above). *padded_vocab gets Vp and
 * *padded_rows the malloc'ed rows V .. Vp-1 ([Vp - V, C], NULL when Vp == V; free() them);
 * either pointer may be NULL. ATTN_ERR_FORMAT naming the file and the problem for a wrong
 * magic, a non-positive or inconsistent header size (Vp < V, NH not dividing C), sizes that
 * overflow, a file shorter (truncated) or longer than its header says, or a weight that is
 * NaN or infinite (naming the tensor, layer and element); ATTN_ERR_UNSUPPORTED for a version
 * other than 3 (float32); ATTN_ERR_IO when it cannot be read. */
ATTN_API attn_status attn_model_from_llmc(const char *path, attn_model **out, int64_t *padded_vocab,
                                          float **padded_rows);
/* Writes the model as an llm.c checkpoint, atomically (a temporary file renamed over path).
 * padded_vocab 0 takes tgt_vocab rounded up to a multiple of 128; padded_rows [padded_vocab -
 * tgt_vocab, d_model] or NULL for zeros (as llm.c's exporter pads). ATTN_ERR_INVALID_ARGUMENT
 * naming every config field llm.c cannot represent (arch, positions, activation, norm_first,
 * decoder_final_norm, tie_output, output_bias, scale_embeddings, ffn_dim != 4 d_model,
 * layer_norm_eps); dropout and label smoothing are training settings and are not stored. */
ATTN_API attn_status attn_model_save_llmc(attn_model *model, const char *path, int64_t padded_vocab,
                                          const float *padded_rows);
/* File to file, keeping the padding rows (see above); config (may be NULL) gets the model's
 * config for a report. Messages name the files. */
ATTN_API attn_status attn_llmc_to_model_file(const char *llmc_path, const char *model_path,
                                             attn_model_config *config);
ATTN_API attn_status attn_model_file_to_llmc(const char *model_path, const char *llmc_path,
                                             attn_model_config *config);

/* ---- running a model ------------------------------------------------------------------- */

/* A batch, as the data layer produces it (attn_batch converts field by field). Token arrays
 * are row-major int32, padded after each row's length (the padding value is never read).
 *  - src [size, src_len], src_lengths [size]: the encoder's input (transformer, classifier).
 *  - tgt [size, tgt_len], tgt_lengths [size]: target sequences <s> ... </s> (transformer,
 *    language model); lengths count <s> and </s>, 1 <= tgt_lengths <= tgt_len. The decoder
 *    reads tgt[:, 0 .. len-2] and predicts tgt[:, 1 .. len-1].
 *  - labels [size]: classes in [0, num_classes) (classifier).
 *  - mlm_targets [size, src_len]: the original id at each masked position, -1 elsewhere
 *    (masked language model, whose src holds the masked text: attn_mlm_mask).
 * Fields an architecture does not read may be zero / NULL. */
typedef struct attn_model_batch {
    int64_t size;
    int64_t src_len;
    const int32_t *src;
    const int32_t *src_lengths;
    int64_t tgt_len;
    const int32_t *tgt;
    const int32_t *tgt_lengths;
    const int32_t *labels;
    /* Distillation, for the training loss only (NULL: none): a teacher's distribution over the
     * target vocabulary at every predicted position, [size, tgt_len - 1, teacher_vocab] as the
     * logits (teacher_vocab must be the model's tgt_vocab; rows past a target's end are not
     * read), mixed into the loss with teacher_weight (attn_op_cross_entropy_with_teacher). */
    const float *teacher;
    int64_t teacher_vocab;
    double teacher_weight;
    const int32_t *mlm_targets; /* last: the older fields keep their places */
} attn_model_batch;

/* The training loss: mean cross-entropy over every predicted (non-padding) token, or over
 * the sentences for the classifier, with the config's label smoothing and the batch's teacher
 * (if it has one) mixed in. A scalar variable on graph, which must be a graph of this model's
 * store (attn_graph_create(attn_model_params)).
 * Set the graph's mode first: training (dropout) and recording (for attn_graph_backward). */
ATTN_API attn_status attn_model_forward_loss(attn_model *model, attn_graph *graph,
                                             const attn_model_batch *batch, attn_var **loss);
/* The same loss with what a trainer reports beside it: smoothed != 0 gives the training loss
 * above, 0 plain cross-entropy without the teacher (validation); *tokens gets the number of
 * scored rows (predicted tokens, or sentences for the classifier) and *correct how many of them
 * have their label as the logits' arg-max (the first on ties). attn_model_forward_loss, the
 * trainer and `attn bench train` all run this one function. */
ATTN_API attn_status attn_model_forward_loss_counted(attn_model *model, attn_graph *graph,
                                                     const attn_model_batch *batch, int smoothed,
                                                     attn_var **loss, int64_t *tokens,
                                                     int64_t *correct);
/* The logits: [size, tgt_len - 1, tgt_vocab] for the transformer and the language model
 * (row t predicts tgt[:, t + 1]), [size, num_classes] for the classifier (whose batch needs no
 * labels here), [size, src_len, src_vocab] for the masked language model. */
ATTN_API attn_status attn_model_forward_logits(attn_model *model, attn_graph *graph,
                                               const attn_model_batch *batch,
                                               attn_var **logits);

/* Hooks for decoding (greedy or beam search re-run the decoder on the growing prefix; a KV
 * cache can come later behind the same calls).
 * encode: memory [size, src_len, d_model] (transformer and classifier: the encoder output,
 * after the final norm). */
ATTN_API attn_status attn_model_encode(attn_model *model, attn_graph *graph, int64_t size,
                                       int64_t src_len, const int32_t *src,
                                       const int32_t *src_lengths, attn_var **memory);
/* decode: logits [size, len, tgt_vocab] for decoder inputs ids [size, len] (row stride
 * ids_stride >= len) of lengths [size] (NULL: all len). The transformer and the rnn models
 * need memory and src_lengths from attn_model_encode (on the same graph; src_lengths NULL
 * means every source is src_len long); the language model takes NULL for both. An rnn
 * model runs its decoder from the start of ids: for decoding token by token, use
 * attn_model_step_start / attn_model_step instead. */
ATTN_API attn_status attn_model_decode(attn_model *model, attn_graph *graph, attn_var *memory,
                                       const int32_t *src_lengths, int64_t size, int64_t len,
                                       const int32_t *ids, int64_t ids_stride,
                                       const int32_t *lengths, attn_var **logits);

/* ---- Looking at attention ------------------------------------------------------------- */

/* The attention maps a Transformer draws: its encoder's self-attention (source x source),
 * its decoder's masked self-attention (target x target) and the decoder's attention over
 * the encoder's output (target x source). */
typedef enum attn_attention_kind {
    ATTN_ENCODER_SELF_ATTENTION = 0,
    ATTN_DECODER_SELF_ATTENTION = 1,
    ATTN_CROSS_ATTENTION = 2
} attn_attention_kind;

/* Teacher-forced attention weights of one sentence: the encoder reads src [src_len], the
 * decoder reads tgt [tgt_len] (its input, as attn_model_decode: <s> then the tokens), and
 * weights [num_heads, len_q, len_k] receives the maps of `kind` in layer `layer` (from 0,
 * of the encoder for ATTN_ENCODER_SELF_ATTENTION, else of the decoder), one per head: row i
 * is query position i's distribution over the key positions (the decoder's rows are
 * causal: zero right of the diagonal). len_q x len_k is src_len x src_len, tgt_len x tgt_len
 * or tgt_len x src_len. The encoder-decoder has the three kinds, the classifier only the
 * encoder's (tgt may be NULL), the language model only the decoder's (src may be NULL);
 * rnn models have no multi-head attention (ATTN_ERR_UNSUPPORTED: their alignments come
 * from attn_model_step's cross output). Runs on graph after resetting it, with dropout and
 * recording off, and leaves it reset; graph is attn_graph_create(attn_model_params(model)).
 * For the cross-attention of a hypothesis the step decoder produced, these are the weights
 * it used, to float rounding. */
ATTN_API attn_status attn_model_attention_weights(attn_model *model, attn_graph *graph,
                                                  const int32_t *src, int64_t src_len,
                                                  const int32_t *tgt, int64_t tgt_len,
                                                  attn_attention_kind kind, int64_t layer,
                                                  float *weights);

/* Which tokens a classifier's pooling reads, for one text src [src_len]: weights [src_len],
 * one per token. "attention": the learned query's weights a_t (they sum to 1); "mean": 1/src_len
 * each; "cls": the classification token's attention in the last encoder layer, the mean over
 * its heads, on each text token (its weight on itself left out, so they sum to at most 1).
 * Runs on graph after resetting it, with dropout and recording off, and leaves it reset. */
ATTN_API attn_status attn_model_pooling_weights(attn_model *model, attn_graph *graph,
                                                const int32_t *src, int64_t src_len,
                                                float *weights);

/* ---- Decoding one step at a time --------------------------------------------------------- *
 *
 * A step decoder generates target tokens for a batch of rows in lockstep (greedy or beam
 * search) after attn_model_encode, one position per call, without re-running the decoder
 * over the prefix. The Transformer keeps each decoder layer's self-attention keys and values
 * of the steps so far (a KV cache of max_steps positions per row) and projects the encoder
 * memory to its cross-attention keys and values once, at the start; the rnn models carry
 * their recurrent state. The language model ("transformer_lm") decodes from no memory.
 * Inference only: no dropout, nothing recorded. Each step reproduces what attn_model_decode
 * computes at that position of the same prefix (to float rounding).
 *
 * Rows. The decoder starts with one row per sentence of the memory (the language model:
 * max_rows rows). attn_model_step_select keeps, drops, reorders and duplicates rows (beam
 * search: start with the batch, then select each sentence's row beam times; batched greedy
 * decoding: drop the finished sentences), up to max_rows rows at any time. A row carries its
 * source (cross-attention keys and values, src_length) and its history with it.
 *
 * Memory. The decoder owns all its memory (heap, allocated at start, freed by
 * attn_model_step_destroy): the graph and memory are read only by attn_model_step_start, so
 * the caller may reset the graph right after it. The Transformer's steps allocate nothing;
 * the rnn models' steps run on a private graph whose arena stops growing after the first
 * step. Neither grows with the number of steps taken. The decoder may copy the weights at
 * the start: change them (training, loading) only between decoders. */
typedef struct attn_step_decoder attn_step_decoder;

/* memory and src_lengths: attn_model_encode's output on graph (not recording) and the same
 * src_lengths (NULL: every source is memory's src_len long); both NULL for the language
 * model. max_rows >= the memory's batch size (the language model: >= 1) bounds the rows;
 * max_steps >= 1 bounds the number of steps (the transformer: at most the config's
 * max_len). *out is NULL on failure. */
ATTN_API attn_status attn_model_step_start(attn_model *model, attn_graph *graph,
                                           attn_var *memory, const int32_t *src_lengths,
                                           int64_t max_rows, int64_t max_steps,
                                           attn_step_decoder **out);
/* One step for every row: ids [size] are each row's previous token (<s> at the first
 * step); logits [size, tgt_vocab] (the caller's buffer) receives the raw logits of the next
 * token. cross (NULL: not wanted) [size, cross_maps, src_len] receives this step's
 * cross-attention weights: the transformer's one map per decoder layer and head, layer-major
 * (layer l, head h at l * heads + h); the rnn models' one map (all zeros for attention
 * "none"); positions at or beyond a row's src_length are 0. The language model has no
 * cross-attention (cross_maps 0; pass NULL). ATTN_ERR_INVALID_ARGUMENT after max_steps
 * steps. size 0 is fine (nothing is written). */
ATTN_API attn_status attn_model_step(attn_step_decoder *decoder, const int32_t *ids,
                                     float *logits, float *cross);
/* New row r = old row rows[r] for r < new_size: 0 <= rows[r] < the current size, repeats
 * allowed, 0 <= new_size <= max_rows. Cheap: a row kept once moves by pointer, and only a
 * duplicated row's history is copied. */
/* count >= 1 steps at once, the next count tokens of every row known in advance (a prompt):
 * ids [size, count] (row r's tokens at ids + r * count); logits [size, tgt_vocab] receives the
 * last step's. Equal to count calls of attn_model_step, to the bit, but a Transformer reads
 * each weight matrix once for many positions instead of once per position, which is most of
 * a step's time with few rows. Decoders with cross-attention maps refuse it. */
ATTN_API attn_status attn_model_step_prefill(attn_step_decoder *decoder, const int32_t *ids,
                                             int64_t count, float *logits);
ATTN_API attn_status attn_model_step_select(attn_step_decoder *decoder, const int64_t *rows,
                                            int64_t new_size);
/* The current number of rows (0 for NULL). */
ATTN_API int64_t attn_model_step_size(const attn_step_decoder *decoder);
/* Steps taken so far (0 for NULL). */
ATTN_API int64_t attn_model_step_count(const attn_step_decoder *decoder);
/* The source length of the memory (0 for the language model or NULL). */
ATTN_API int64_t attn_model_step_src_len(const attn_step_decoder *decoder);
/* Cross-attention maps per row: decoder_layers * num_heads (transformer), 1 (rnn), 0
 * (language model, or NULL). */
ATTN_API int64_t attn_model_step_cross_maps(const attn_step_decoder *decoder);
/* Frees the decoder; NULL is ignored. */
ATTN_API void attn_model_step_destroy(attn_step_decoder *decoder);

/* An ensemble: one step decoder over count >= 1 members started on the same sources (the
 * models may differ in architecture; each member's model read the source with its own
 * encoder). The members must agree on the target vocabulary size, rows, steps and src_len.
 * Each step steps every member; the returned logits are the mean of the members' logits,
 * whose log-softmax is the mean of the members' log-probabilities renormalised (a product of
 * experts; see ensemble_step.c). cross is the first member's maps (cross_maps is its).
 * select reorders every member alike. On success the ensemble owns the members
 * (attn_model_step_destroy frees them); on failure the caller still does. */
ATTN_API attn_status attn_model_step_ensemble(attn_step_decoder *const *members, int64_t count,
                                              attn_step_decoder **out);

/* ---- RNN encoder-decoders (arch "rnn") ------------------------------------------------ *
 *
 * Encoder: source embeddings (embedding_dim), dropout, `layers` recurrent layers (GRU or
 * LSTM, `hidden` units per direction, one direction or both, dropout between layers) over
 * the padded sources, each sentence read backwards with reverse_source. The annotations
 * h_j are the top layer's outputs [B, S, A], A = 2 * hidden when bidirectional (forward and
 * reverse states side by side) or hidden; attn_model_encode returns them as the memory.
 * The encoder's last state u is the reverse direction's state after reading the whole
 * sentence (its output at position 0, Bahdanau's h<-_1) when bidirectional, else the
 * forward state after the last real token.
 *
 * Decoder: `layers` cells of `hidden` units, target embeddings (embedding_dim) with
 * dropout, dropout between cells; step i reads y_{i-1} = tgt[:, i] and predicts
 * tgt[:, i + 1]. An LSTM decoder's cells start from c = 0.
 *  - "bahdanau" (Bahdanau, Cho and Bengio 2015): every layer starts from s_0 = tanh(W u + b)
 *    (one "bridge" linear per layer; the paper's W_s h<-_1); the top layer's s_{i-1}
 *    scores the annotations, e_ij = v . tanh(W_s s_{i-1} + b + W_h h_j), c_i = the
 *    softmax-weighted sum of the h_j; s_i = cells([y_{i-1}; c_i], s_{i-1}); logits =
 *    generator(dropout([s_i; y_{i-1}; c_i])): a linear deep-output readout.
 *  - "luong-dot", "luong-general", "luong-concat" (Luong, Pham and Manning 2015): the
 *    same start; s_i = cells([y_{i-1}; h~_{i-1}], s_{i-1}) with input_feeding (h~_0 = 0),
 *    else cells(y_{i-1}, s_{i-1}); the top layer's s_i scores the annotations (global;
 *    local "m": window [i - D, i + D]; local "p": around the predicted p_i, attn_luong_align),
 *    h~_i = tanh(W_c [c_i; s_i]), logits = generator(dropout(h~_i)). luong-dot needs
 *    A = hidden (a one-direction encoder).
 *  - "none" (Cho et al. 2014; Sutskever, Vinyals and Le 2014 with reverse_source): every
 *    layer starts from u itself and u is the context of every step: s_i = cells([y_{i-1};
 *    u], s_{i-1}), logits = generator(dropout([s_i; y_{i-1}; u])).
 * local and input_feeding apply to Luong attention only.
 *
 * Parameter names: src_embed.weight, tgt_embed.weight; encoder.weight_ih_l<k>[_reverse]
 * etc. (nn.GRU / nn.LSTM); bridge.<k>.weight, bridge.<k>.bias (not with "none");
 * decoder.<k>.weight_ih etc. (nn.GRUCell / nn.LSTMCell); attention.* (attn_nn.h's additive
 * or Luong module); combine.weight (W_c, Luong); generator.weight, generator.bias.
 *
 * RNN text classifiers (arch "rnn_classifier"): Yang et al. 2016's word encoder and word
 * attention. The encoder above (src_embed.weight, encoder.*; no reverse_source) gives the
 * annotations h_t [B, S, A] of each text, pooled as the Transformer classifier pools its
 * states (the same code and names, d_model read as A): "attention", u_t = tanh(W h_t + b),
 * a_t = softmax_t(u_t . q) over the text's tokens (padding masked), pooled = sum_t a_t h_t
 * (pooling.proj.weight [A, A], pooling.proj.bias [A], pooling.query [1, A]); or "mean", the
 * mean of h_t over the text. "cls" is refused: a recurrent encoder has no token that reads the
 * whole text in both directions. Then dropout and classifier.weight [num_classes, A],
 * classifier.bias. It has no self-attention: attn_model_attention_weights refuses it, and
 * attn_model_pooling_weights gives a_t.
 */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MODELS_H */
