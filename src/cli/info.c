/* attn info: what this build of the library can do on this CPU. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/precision.h"

#include <stdio.h>

int attn_cmd_info(int argc, char **argv)
{
    static const cli_command command = {
        "info",
        "attn info",
        "Prints the version, threading, the instruction sets this CPU supports, the GEMM\n"
        "backend, whether data-parallel training over MPI is built in, whether bf16 and\n"
        "int8 products are native or emulated, and what --precision auto chooses.\n",
        NULL,
        0,
        NULL};
    const int code = cli_parse(&command, argc, argv, NULL, NULL);
    if (code != CLI_GO_ON)
        return code;
    printf("%s\n", attn_build_info());
    printf("GEMM: %s\n", attn_gemm_backend());
    if (attn_distributed_built())
        printf("distributed training: MPI (%s): mpirun -np N attn train ...\n",
               attn_distributed_description());
    else
        printf("distributed training: %s\n", attn_distributed_description());
    printf("SentencePiece: %s\n",
           attn_tokenizer_spm_available()
               ? "built in (bpe:N, spm:N, spm-bpe:N, --src-spm/--tgt-spm FILE.model)"
               : "built without SentencePiece, so without bpe:N, spm:N and spm-bpe:N; install "
                 "libsentencepiece-dev and rebuild");
    printf("CPU features: %s\n", attn_cpu_features());
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++)
        printf("  %-12s %s\n", attn_isa_name((attn_isa)isa),
               attn_isa_supported((attn_isa)isa) ? "supported" : "not supported");
    /* Under the instruction set selected now (ATTN_ISA), as every command would run. */
    char text[128];
    static const attn_precision low[] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    for (int i = 0; i < 2; i++) {
        if (attn_precision_native(low[i]))
            printf("%s: native (%s)\n", attn_precision_name(low[i]),
                   attn_precision_instructions(low[i]));
        else
            printf("%s: emulated (no native %s on the %s path): the same results, slower\n",
                   attn_precision_name(low[i]), attn_precision_instructions(low[i]),
                   attn_isa_name(attn_get_isa()));
    }
    printf("default precision: %s\n",
           cli_precision_describe(ATTN_PRECISION_AUTO, text, sizeof text));
    return 0;
}
