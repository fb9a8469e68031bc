/* A command's precision as its user reads it (see precision.h). */
#include "cli/precision.h"
#include "cli/library_error.h"

#include <stdio.h>

const char *cli_precision_describe(attn_precision requested, char *text, size_t size)
{
    const attn_precision used = attn_precision_resolve(requested);
    const char *isa = attn_isa_name(attn_get_isa());
    const char *prefix = requested == ATTN_PRECISION_AUTO ? "auto -> " : "";
    if (requested == ATTN_PRECISION_AUTO && used == ATTN_PRECISION_FP32)
        snprintf(text, size, "auto -> fp32 (no native %s on the %s path)",
                 attn_precision_instructions(ATTN_PRECISION_BF16), isa);
    else if (used == ATTN_PRECISION_FP32)
        snprintf(text, size, "fp32");
    else if (attn_precision_native(used))
        snprintf(text, size, "%s%s (native %s)", prefix, attn_precision_name(used),
                 attn_precision_instructions(used));
    else
        snprintf(text, size, "%s%s (emulated: no native %s on the %s path, slower)", prefix,
                 attn_precision_name(used), attn_precision_instructions(used), isa);
    return text;
}

void cli_precision_warn_emulated(const char *command, attn_precision precision)
{
    /* Once per process: a server or a bench that sets several models' precision would
     * otherwise repeat the same line. */
    static int warned;
    if (warned || attn_precision_native(precision))
        return;
    warned = 1;
    fprintf(stderr,
            "attn %s: warning: %s runs emulated here (no native %s on the %s path): the same "
            "results, slower\n",
            command, attn_precision_name(precision), attn_precision_instructions(precision),
            attn_isa_name(attn_get_isa()));
}

int cli_set_model_precision(const char *command, attn_model *model, const char *name)
{
    attn_precision precision = attn_model_precision(model);
    if ((name != NULL && attn_precision_parse(name, &precision) != ATTN_OK) ||
        attn_model_set_precision(model, precision) != ATTN_OK)
        return cli_library_error(command);
    cli_precision_warn_emulated(command, attn_model_precision(model));
    return 0;
}
