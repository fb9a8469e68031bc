/* attn bench: dispatches to one benchmark, each with its own options. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/options.h"

#include <stdio.h>
#include <string.h>

typedef struct benchmark {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
} benchmark;

static const benchmark benchmarks[] = {
    {"attention", attn_cmd_bench_attention, "attn bench attention [--json] [--quick] [--reps N]"},
    {"gemm", attn_bench_gemm, "attn bench gemm [--json] [--threads N] [--reps N] [--isa NAME]"},
    {"decode", attn_cmd_bench_decode,
     "attn bench decode [--json] [--quick] [--batch 1|64|both] [--reps N] [--min-seconds S]"},
    {"generate", attn_cmd_bench_generate,
     "attn bench generate [--json] [--batch 1|32|both] [--precision auto|fp32|bf16|int8] "
     "[--prompt N] [--new-tokens N]"},
    {"train", attn_cmd_bench_train,
     "attn bench train [--config small|base|both] [--steps N] [--threads N] [--json]"},
};
enum { N_BENCHMARKS = sizeof benchmarks / sizeof benchmarks[0] };

static void print_help(FILE *out)
{
    for (size_t i = 0; i < N_BENCHMARKS; i++)
        fprintf(out, "%s%s\n", i == 0 ? "usage: " : "       ", benchmarks[i].usage);
    fprintf(out, "\nMeasures kernels and models against references; 'attn bench NAME --help'\n"
                 "describes one benchmark.\n");
}

int attn_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : 0;
    }
    const char *names[N_BENCHMARKS];
    for (size_t i = 0; i < N_BENCHMARKS; i++) {
        if (strcmp(argv[1], benchmarks[i].name) == 0)
            return benchmarks[i].run(argc - 1, argv + 1);
        names[i] = benchmarks[i].name;
    }
    const char *nearest = cli_nearest(argv[1], strlen(argv[1]), names, N_BENCHMARKS);
    if (nearest != NULL)
        fprintf(stderr, "attn bench: unknown benchmark '%s' (did you mean %s?)\n", argv[1],
                nearest);
    else
        fprintf(stderr, "attn bench: unknown benchmark '%s' (see 'attn bench --help')\n", argv[1]);
    return CLI_EXIT_USAGE;
}
