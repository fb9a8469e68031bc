#include "attn/attn.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

int attn_cmd_info(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: attn info\n\nPrints the version, threading, the instruction sets this "
               "CPU supports and the GEMM backend.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "attn info: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("%s\n", attn_build_info());
    printf("GEMM: %s\n", attn_gemm_backend());
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_AVX512; isa++)
        printf("  %-9s %s\n", attn_isa_name((attn_isa)isa),
               attn_isa_supported((attn_isa)isa) ? "supported" : "not supported");
    return 0;
}
