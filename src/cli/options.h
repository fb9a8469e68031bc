/* The one command-line parser of the attn program. Each subcommand describes its options in a
 * table (name, value placeholder, help, kind, range or choices) over a struct of its own
 * arguments; cli_parse fills the struct and prints every usage error and --help in one style.
 *
 * Accepted: "--opt value", "--opt=value", flags without a value, --help and -h. An unknown
 * option is answered with the nearest known one, a missing or bad value with what the option
 * takes, each in one line on stderr, and exit status 2. */
#ifndef ATTN_CLI_OPTIONS_H
#define ATTN_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_EXIT_USAGE = 2, CLI_MAX_REPEATS = 64 };

/* cli_parse's answer when the command should go on (every other answer is an exit code). */
enum { CLI_GO_ON = -1 };

typedef enum cli_kind {
    CLI_FLAG,    /* no value; sets an int field to 1 */
    CLI_INT,     /* int64_t field; a range when min < max; `choices` are words besides numbers */
    CLI_NUMBER,  /* finite double field; a range when min < max */
    CLI_STRING,  /* const char * field (points into argv) */
    CLI_CHOICE,  /* int field: one of `choices` */
    CLI_STRINGS, /* cli_strings field: each occurrence appends (the option may repeat) */
    CLI_SECTION  /* not an option: `help` heads a group of options in --help */
} cli_kind;

/* Values of a CLI_STRINGS option, in command-line order. */
typedef struct cli_strings {
    const char *items[CLI_MAX_REPEATS];
    int count;
} cli_strings;

typedef struct cli_option {
    const char *name; /* "--beam" */
    cli_kind kind;
    size_t offset;          /* of the field in the command's argument struct */
    const char *value_name; /* "K", in --help and messages; NULL for flags */
    const char *help;       /* wrapped in --help; "\n" forces a line break */
    double min, max;        /* CLI_INT, CLI_NUMBER: accepted range when min < max (max may be
                             * INFINITY) */
    /* CLI_CHOICE: the accepted words; CLI_INT: words accepted besides numbers ("all"). NULL
     * ends the list. A word stores choice_values[i], or i without choice_values. */
    const char *const *choices;
    const int *choice_values;
    int show_default; /* --help appends the field's initial value: " [5]" */
    int group;        /* the command's own grouping (train: what --resume allows) */
} cli_option;

/* The fields every entry names; a table adds .min, .max, .choices, ... as designated
 * initializers after it: {CLI_OPTION("--beam", CLI_INT, offsetof(args, beam), "K", "..."),
 * .min = 1, .max = 64}. */
#define CLI_OPTION(option_name, option_kind, field_offset, value, text)                            \
    .name = (option_name), .kind = (option_kind), .offset = (field_offset), .value_name = (value), \
    .help = (text)

typedef struct cli_command {
    const char *name;        /* "translate", "bench decode": messages say "attn NAME: " */
    const char *usage;       /* the lines after "usage: ", each starting with "attn " */
    const char *description; /* paragraphs between the usage and the options, or NULL */
    const cli_option *options;
    size_t n_options;
    const char *epilogue; /* text after the options, or NULL */
} cli_command;

/* Fills `args` (already holding the defaults) from argv[1..argc) and sets given[i] for each
 * option seen (given has n_options entries, zeroed by the caller). Returns CLI_GO_ON, 0 after
 * --help (printed on stdout), or CLI_EXIT_USAGE after a message on stderr. */
int cli_parse(const cli_command *command, int argc, char **argv, void *args, int *given);

/* Whether the option `name` of the command was given; 0 for a name the table lacks. */
int cli_was_given(const cli_command *command, const int *given, const char *name);

/* Prints "attn NAME: MESSAGE (see 'attn NAME --help')" on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command *command, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints the command's --help. */
void cli_print_help(const cli_command *command, const void *defaults, FILE *out);

/* The candidate nearest to `word` by edit distance, or NULL when none is near enough to be a
 * likely typo. Compares the first `length` bytes of word. */
const char *cli_nearest(const char *word, size_t length, const char *const *candidates,
                        size_t n_candidates);

#endif
