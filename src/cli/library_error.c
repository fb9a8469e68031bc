/* Library failures printed for a user (see library_error.h). */
#include "cli/library_error.h"

#include "attn/attn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *cli_library_message(void)
{
    const char *message = attn_last_error();
    /* A message may pass through several functions, each naming itself. */
    while (strncmp(message, "attn_", 5) == 0) {
        const size_t name = 5 + strspn(message + 5, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (strncmp(message + name, ": ", 2) != 0)
            break;
        message += name + 2;
    }
    return message;
}

/* A fix the CLI knows for a message: the commands it applies to (names separated by spaces),
 * a text the message contains, and what to do. */
typedef struct known_fix {
    const char *commands, *message_part, *fix;
} known_fix;

static const known_fix known_fixes[] = {
    /* The first line without a TAB: a file of one language, not a ragged pair file. */
    {"train", ":1: expected source<TAB>target, found 0 TABs",
     "a file of one language goes with the other side's as --train-src FILE --train-tgt FILE "
     "(--valid-src/--valid-tgt for validation)"},
    {"translate viz serve", "is not a safetensors model file",
     "--model takes the .safetensors file 'attn train --out' wrote"},
};

static int applies_to(const char *commands, const char *command)
{
    const size_t length = strlen(command);
    for (const char *p = strstr(commands, command); p != NULL; p = strstr(p + 1, command))
        if ((p == commands || p[-1] == ' ') && (p[length] == '\0' || p[length] == ' '))
            return 1;
    return 0;
}

/* context: what failed, or NULL. */
static int print_error(const char *command, const char *context)
{
    const char *message = cli_library_message();
    if (message[0] == '\0')
        message = "failed without a message";
    fprintf(stderr, "attn %s: ", command);
    if (context != NULL)
        fprintf(stderr, "%s: ", context);
    fputs(message, stderr);
    /* On the same line: a failure is one line of stderr. */
    for (size_t i = 0; i < sizeof known_fixes / sizeof known_fixes[0]; i++) {
        const known_fix *k = &known_fixes[i];
        if (applies_to(k->commands, command) && strstr(message, k->message_part) != NULL)
            fprintf(stderr, "; %s", k->fix);
    }
    fputc('\n', stderr);
    return 1;
}

int cli_library_error_in(const char *command, const char *context_format, ...)
{
    char context[1024];
    va_list arguments;
    va_start(arguments, context_format);
    vsnprintf(context, sizeof context, context_format, arguments);
    va_end(arguments);
    return print_error(command, context);
}

int cli_library_error(const char *command)
{
    return print_error(command, NULL);
}
