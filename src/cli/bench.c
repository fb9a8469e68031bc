#include "attn/attn.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

int attn_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: attn bench attention [--json] [--quick]\n"
               "       attn bench gemm [--json]\n"
               "       attn bench decode [--json] [--quick] [--batch 1|64|both]\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "attention") == 0)
        return attn_cmd_bench_attention(argc - 1, argv + 1);
    if (strcmp(argv[1], "decode") == 0)
        return attn_cmd_bench_decode(argc - 1, argv + 1);
    if (strcmp(argv[1], "gemm") == 0)
        return attn_bench_gemm(argc - 1, argv + 1);
    fprintf(stderr, "attn bench: unknown benchmark '%s'\n", argv[1]);
    return 2;
}
