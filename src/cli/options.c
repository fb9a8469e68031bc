/* The table-driven option parser every attn subcommand uses (see options.h). */
#include "cli/options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { LEFT_COLUMN = 26, LINE_WIDTH = 80 };

static int is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

static void print_hint(const cli_command *command)
{
    fprintf(stderr, " (see 'attn %s --help')\n", command->name);
}

int cli_usage_error(const cli_command *command, const char *format, ...)
{
    va_list list;
    va_start(list, format);
    fprintf(stderr, "attn %s: ", command->name);
    vfprintf(stderr, format, list);
    va_end(list);
    print_hint(command);
    return CLI_EXIT_USAGE;
}

/* ---- did you mean ------------------------------------------------------------------------ */

/* Edit distance between a[0, n) and b counting insertions, deletions, substitutions and swaps
 * of neighbours ("optimal string alignment"), or more than `limit` (the exact value past it
 * does not matter). */
static size_t edit_distance(const char *a, size_t n, const char *b, size_t limit)
{
    enum { LONGEST = 63 };
    const size_t m = strlen(b);
    if ((n > m ? n - m : m - n) > limit || n > LONGEST || m > LONGEST)
        return limit + 1;
    size_t d[LONGEST + 1][LONGEST + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *cli_nearest(const char *word, size_t length, const char *const *candidates,
                        size_t n_candidates)
{
    /* A typo changes about one character in four; more than that is another word. */
    const size_t limit = length < 6 ? 1 : length < 10 ? 2 : 3;
    const char *best = NULL;
    size_t best_distance = limit + 1;
    for (size_t i = 0; i < n_candidates; i++) {
        const size_t d = edit_distance(word, length, candidates[i], limit);
        if (d < best_distance) {
            best = candidates[i];
            best_distance = d;
        }
    }
    return best;
}

/* ---- --help ------------------------------------------------------------------------------ */

static size_t choice_count(const cli_option *o)
{
    size_t n = 0;
    while (o->choices != NULL && o->choices[n] != NULL)
        n++;
    return n;
}

static int choice_value(const cli_option *o, size_t i)
{
    return o->choice_values != NULL ? o->choice_values[i] : (int)i;
}

/* The word a stored choice value came from (the first word storing it), or NULL. */
static const char *choice_name(const cli_option *o, int value)
{
    for (size_t i = 0; i < choice_count(o); i++)
        if (choice_value(o, i) == value)
            return o->choices[i];
    return NULL;
}

/* " [default]" from the field's initial value, or "" when there is none to show. */
static void format_default(const cli_option *o, const void *defaults, char *out, size_t size)
{
    out[0] = '\0';
    if (!o->show_default || defaults == NULL)
        return;
    const char *field = (const char *)defaults + o->offset;
    switch (o->kind) {
    case CLI_INT: {
        int64_t value;
        memcpy(&value, field, sizeof value);
        const char *word = value < 0 ? choice_name(o, (int)value) : NULL;
        if (word != NULL)
            snprintf(out, size, " [%s]", word);
        else
            snprintf(out, size, " [%lld]", (long long)value);
        break;
    }
    case CLI_NUMBER: {
        double value;
        memcpy(&value, field, sizeof value);
        snprintf(out, size, " [%g]", value);
        break;
    }
    case CLI_STRING: {
        const char *value;
        memcpy(&value, field, sizeof value);
        if (value != NULL)
            snprintf(out, size, " [%s]", value);
        break;
    }
    case CLI_CHOICE: {
        int value;
        memcpy(&value, field, sizeof value);
        const char *word = choice_name(o, value);
        if (word != NULL)
            snprintf(out, size, " [%s]", word);
        break;
    }
    default:
        break;
    }
}

/* Writes text word-wrapped to the help column; "\n" in text starts a new line. The first line
 * continues the current one. */
static void print_wrapped(FILE *out, const char *text)
{
    const size_t width = LINE_WIDTH - (LEFT_COLUMN + 3);
    size_t used = 0;
    int first_word = 1;
    for (const char *p = text; *p != '\0';) {
        if (*p == '\n') {
            fprintf(out, "\n%*s", LEFT_COLUMN + 3, "");
            used = 0;
            first_word = 1;
            p++;
            continue;
        }
        if (*p == ' ') {
            p++;
            continue;
        }
        const size_t length = strcspn(p, " \n");
        if (!first_word && used + 1 + length > width) {
            fprintf(out, "\n%*s", LEFT_COLUMN + 3, "");
            used = 0;
            first_word = 1;
        }
        fprintf(out, "%s%.*s", first_word ? "" : " ", (int)length, p);
        used += length + !first_word;
        first_word = 0;
        p += length;
    }
    fputc('\n', out);
}

static void print_option(FILE *out, const char *left, const char *help)
{
    if (strlen(left) > LEFT_COLUMN)
        fprintf(out, "  %s\n  %-*s ", left, LEFT_COLUMN, "");
    else
        fprintf(out, "  %-*s ", LEFT_COLUMN, left);
    print_wrapped(out, help);
}

void cli_print_help(const cli_command *command, const void *defaults, FILE *out)
{
    fprintf(out, "usage: %s\n", command->usage);
    if (command->description != NULL)
        fprintf(out, "\n%s", command->description);
    if (command->n_options == 0 || command->options[0].kind != CLI_SECTION)
        fprintf(out, "\noptions:\n");
    for (size_t i = 0; i < command->n_options; i++) {
        const cli_option *o = &command->options[i];
        if (o->kind == CLI_SECTION) {
            fprintf(out, "\n%s\n", o->help);
            continue;
        }
        char left[128], with_default[2048], shown[64];
        if (o->kind == CLI_FLAG || o->value_name == NULL)
            snprintf(left, sizeof left, "%s", o->name);
        else
            snprintf(left, sizeof left, "%s %s", o->name, o->value_name);
        format_default(o, defaults, shown, sizeof shown);
        snprintf(with_default, sizeof with_default, "%s%s", o->help, shown);
        print_option(out, left, with_default);
    }
    print_option(out, "--help", "this text");
    if (command->epilogue != NULL)
        fprintf(out, "\n%s", command->epilogue);
}

/* ---- parsing ----------------------------------------------------------------------------- */

/* What a value of the option must be, for messages: "an integer in [1, 64]". */
static void describe_value(const cli_option *o, char *out, size_t size)
{
    char range[96] = "";
    if ((o->kind == CLI_INT || o->kind == CLI_NUMBER) && o->min < o->max && isinf(o->max))
        snprintf(range, sizeof range, " >= %.15g", o->min);
    else if ((o->kind == CLI_INT || o->kind == CLI_NUMBER) && o->min < o->max)
        snprintf(range, sizeof range, " in [%.15g, %.15g]", o->min, o->max);
    size_t used = 0;
    const size_t n = choice_count(o);
    if (o->kind == CLI_INT)
        used = (size_t)snprintf(out, size, "an integer%s%s", range, n > 0 ? " or " : "");
    else if (o->kind == CLI_NUMBER)
        used = (size_t)snprintf(out, size, "a number%s", range);
    else if (o->kind != CLI_CHOICE)
        used = (size_t)snprintf(out, size, "%s", o->value_name != NULL ? o->value_name : "");
    for (size_t i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s",
                                 i == 0      ? ""
                                 : i + 1 < n ? ", "
                                             : " or ",
                                 o->choices[i]);
}

static const cli_option *find_option(const cli_command *command, const char *name, size_t length)
{
    for (size_t k = 0; k < command->n_options; k++) {
        const cli_option *o = &command->options[k];
        if (o->kind != CLI_SECTION && strlen(o->name) == length &&
            strncmp(o->name, name, length) == 0)
            return o;
    }
    return NULL;
}

static int unknown_option(const cli_command *command, const char *arg, size_t length)
{
    const char *names[256];
    size_t n = 0;
    for (size_t k = 0; k < command->n_options && n < 256; k++)
        if (command->options[k].kind != CLI_SECTION)
            names[n++] = command->options[k].name;
    if (n < 256)
        names[n++] = "--help";
    const char *nearest = cli_nearest(arg, length, names, n);
    if (nearest != NULL) {
        fprintf(stderr, "attn %s: unknown option %.*s (did you mean %s?)\n", command->name,
                (int)length, arg, nearest);
        return CLI_EXIT_USAGE;
    }
    return cli_usage_error(command, "unknown option %.*s", (int)length, arg);
}

/* One argument (with its value): *i moves past what it used. Returns CLI_GO_ON with *option
 * and *value set, 0 for --help, or CLI_EXIT_USAGE after a message. */
static int next_argument(const cli_command *command, int argc, char **argv, int *i,
                         const cli_option **option, const char **value)
{
    const char *arg = argv[*i];
    if (is_help(arg))
        return 0;
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
        return cli_usage_error(command, "unexpected argument '%s'", arg);
    const char *equals = strchr(arg, '=');
    const size_t length = equals != NULL ? (size_t)(equals - arg) : strlen(arg);
    const cli_option *o = find_option(command, arg, length);
    if (o == NULL)
        return unknown_option(command, arg, length);
    *option = o;
    *value = equals != NULL ? equals + 1 : NULL;
    if (o->kind == CLI_FLAG) {
        if (equals != NULL)
            return cli_usage_error(command, "%s takes no value", o->name);
        return CLI_GO_ON;
    }
    if (equals == NULL) {
        if (*i + 1 >= argc) {
            char what[512];
            describe_value(o, what, sizeof what);
            return cli_usage_error(command, "%s needs a value: %s", o->name, what);
        }
        *value = argv[++*i];
    }
    return CLI_GO_ON;
}

static int bad_value(const cli_command *command, const cli_option *o, const char *value)
{
    char what[512];
    describe_value(o, what, sizeof what);
    return cli_usage_error(command, "%s expects %s, got '%s'", o->name, what, value);
}

static int in_range(const cli_option *o, double value)
{
    return !(o->min < o->max) || (value >= o->min && value <= o->max);
}

/* Converts and stores one value. Returns CLI_GO_ON or CLI_EXIT_USAGE after a message. */
static int store(const cli_command *command, const cli_option *o, const char *value, void *args)
{
    char *field = (char *)args + o->offset;
    for (size_t i = 0; i < choice_count(o); i++)
        if (strcmp(value, o->choices[i]) == 0) {
            if (o->kind == CLI_CHOICE) {
                const int stored = choice_value(o, i);
                memcpy(field, &stored, sizeof stored);
            } else {
                const int64_t stored = choice_value(o, i);
                memcpy(field, &stored, sizeof stored);
            }
            return CLI_GO_ON;
        }
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: {
        const int on = 1;
        memcpy(field, &on, sizeof on);
        return CLI_GO_ON;
    }
    case CLI_INT: {
        const long long number = strtoll(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0' || !in_range(o, (double)number))
            return bad_value(command, o, value);
        const int64_t stored = number;
        memcpy(field, &stored, sizeof stored);
        return CLI_GO_ON;
    }
    case CLI_NUMBER: {
        const double number = strtod(value, &end);
        if (errno != 0 || end == value || *end != '\0' || !isfinite(number) || !in_range(o, number))
            return bad_value(command, o, value);
        memcpy(field, &number, sizeof number);
        return CLI_GO_ON;
    }
    case CLI_STRING:
        memcpy(field, &value, sizeof value);
        return CLI_GO_ON;
    case CLI_STRINGS: {
        cli_strings *list = (cli_strings *)(void *)field;
        if (list->count == CLI_MAX_REPEATS)
            return cli_usage_error(command, "%s given more than %d times", o->name,
                                   CLI_MAX_REPEATS);
        list->items[list->count++] = value;
        return CLI_GO_ON;
    }
    case CLI_CHOICE:
    case CLI_SECTION:
        break;
    }
    return bad_value(command, o, value);
}

int cli_parse(const cli_command *command, int argc, char **argv, void *args, int *given)
{
    /* First the shape of the command line, so that --help anywhere shows the defaults
     * untouched and wins over a bad value. */
    for (int i = 1; i < argc; i++) {
        const cli_option *o = NULL;
        const char *value = NULL;
        const int code = next_argument(command, argc, argv, &i, &o, &value);
        if (code == 0) {
            cli_print_help(command, args, stdout);
            return 0;
        }
        if (code != CLI_GO_ON)
            return code;
    }
    for (int i = 1; i < argc; i++) {
        const cli_option *o = NULL;
        const char *value = NULL;
        next_argument(command, argc, argv, &i, &o, &value);
        const size_t k = (size_t)(o - command->options);
        if (given[k] && o->kind != CLI_STRINGS)
            return cli_usage_error(command, "%s given twice", o->name);
        given[k] = 1;
        const int code = store(command, o, value != NULL ? value : "", args);
        if (code != CLI_GO_ON)
            return code;
    }
    return CLI_GO_ON;
}

int cli_was_given(const cli_command *command, const int *given, const char *name)
{
    const cli_option *o = find_option(command, name, strlen(name));
    return o != NULL && given[o - command->options];
}
