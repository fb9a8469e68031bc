/* Predicted labels against gold labels, for attn eval and attn viz --confusion. */
#include "cli/label_files.h"
#include "cli/library_error.h"

#include <stdio.h>
#include <string.h>

/* The label of a line: the text before its first TAB (all of it without one). */
static char *label_of(char *line)
{
    char *tab = strchr(line, '\t');
    if (tab != NULL)
        *tab = '\0';
    return line;
}

int cli_score_labels(const char *command, const char *gold_name, attn_lines *gold,
                     const char *hyp_name, attn_lines *hyp, attn_classification_report **out)
{
    *out = NULL;
    if (gold->count != hyp->count) {
        fprintf(stderr,
                "attn %s: %s has %lld lines but %s has %lld: give one predicted label per gold "
                "line\n",
                command, hyp_name, (long long)hyp->count, gold_name, (long long)gold->count);
        return 1;
    }
    for (int64_t i = 0; i < gold->count; i++) {
        const char *names[2] = {gold_name, hyp_name};
        char *lines[2] = {label_of(gold->line[i]), label_of(hyp->line[i])};
        for (int f = 0; f < 2; f++)
            if (lines[f][0] == '\0') {
                fprintf(stderr, "attn %s: %s:%lld: empty label\n", command, names[f],
                        (long long)(i + 1));
                return 1;
            }
    }
    if (attn_classification_score((const char *const *)gold->line, (const char *const *)hyp->line,
                                  gold->count, out) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", command, cli_library_message());
        return 1;
    }
    return 0;
}
