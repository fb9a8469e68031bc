/* Subcommands of the attn program. Each takes argv starting at its own name and returns the
 * process exit code: 0 success, 1 failure while running, 2 bad usage. */
#ifndef ATTN_CLI_COMMANDS_H
#define ATTN_CLI_COMMANDS_H

int attn_cmd_average(int argc, char **argv);
int attn_cmd_convert(int argc, char **argv);
int attn_cmd_bench(int argc, char **argv);
int attn_cmd_classify(int argc, char **argv);
int attn_cmd_eval(int argc, char **argv);
int attn_cmd_bench_attention(int argc, char **argv);
int attn_cmd_bench_decode(int argc, char **argv);
int attn_cmd_quantize(int argc, char **argv);
int attn_cmd_bench_train(int argc, char **argv);
int attn_cmd_generate(int argc, char **argv);
int attn_cmd_info(int argc, char **argv);
int attn_cmd_serve(int argc, char **argv);
int attn_cmd_train(int argc, char **argv);
int attn_cmd_translate(int argc, char **argv);
/* attn bench gemm, dispatched from attn_cmd_bench (argv starts at "gemm"). */
int attn_bench_gemm(int argc, char **argv);
int attn_cmd_viz(int argc, char **argv);

#endif
