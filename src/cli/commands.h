/* Subcommands of the attn program. Each takes argv starting at its own name and returns the
 * process exit code: 0 success, 1 failure while running, 2 bad usage. */
#ifndef ATTN_CLI_COMMANDS_H
#define ATTN_CLI_COMMANDS_H

#include "attn/attn.h"

int attn_cmd_average(int argc, char **argv);
int attn_cmd_convert(int argc, char **argv);
int attn_cmd_bench(int argc, char **argv);
int attn_cmd_classify(int argc, char **argv);
int attn_cmd_eval(int argc, char **argv);
int attn_cmd_bench_attention(int argc, char **argv);
int attn_cmd_bench_decode(int argc, char **argv);
int attn_cmd_bench_generate(int argc, char **argv);
int attn_cmd_quantize(int argc, char **argv);
int attn_cmd_bench_train(int argc, char **argv);
int attn_cmd_generate(int argc, char **argv);
int attn_cmd_info(int argc, char **argv);
int attn_cmd_serve(int argc, char **argv);
int attn_cmd_tokenize(int argc, char **argv);
int attn_cmd_train(int argc, char **argv);
int attn_cmd_translate(int argc, char **argv);
/* attn bench gemm, dispatched from attn_cmd_bench (argv starts at "gemm"). */
int attn_bench_gemm(int argc, char **argv);
int attn_cmd_viz(int argc, char **argv);

/* GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary 50257, context 1024) as attn convert
 * --from llmc describes it: the model attn bench train and generate time. */
attn_model_config cli_gpt2_config(void);

#endif
