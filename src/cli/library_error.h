/* The library's failures as a user reads them: the library's messages lead with the function
 * that failed ("attn_corpus_read_tsv: t.tsv:3: ..."), which means nothing on the command line,
 * and cannot know the option that fixes them, which the CLI often does. */
#ifndef ATTN_CLI_LIBRARY_ERROR_H
#define ATTN_CLI_LIBRARY_ERROR_H

/* attn_last_error() without the library function names that lead it ("t.tsv:3: ..."). */
const char *cli_library_message(void);

/* Prints the line "attn COMMAND: MESSAGE" on stderr, MESSAGE being cli_library_message(), then
 * "; FIX" when the CLI knows a fix for that message and command. Returns 1, the exit
 * code of a command that failed on its input. */
int cli_library_error(const char *command);

/* The same with what failed before the message: "attn COMMAND: CONTEXT: MESSAGE", CONTEXT
 * formatted by printf ("--resume %s", path). */
int cli_library_error_in(const char *command, const char *context_format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
