/* A classifier's predicted labels against the gold ones, as attn eval --metric accuracy|f1
 * scores them and attn viz --confusion draws them. */
#ifndef ATTN_CLI_LABEL_FILES_H
#define ATTN_CLI_LABEL_FILES_H

#include "attn/attn.h"

/* Scores hyp's labels against gold's, line by line (a line "label<TAB>..." counts as its label;
 * the lines are cut there). 0 with *out set (free it with attn_classification_report_destroy),
 * or 1 after a message on stderr, "attn COMMAND: ...", naming the file and line of an empty
 * label or the files when their lengths differ. */
int cli_score_labels(const char *command, const char *gold_name, attn_lines *gold,
                     const char *hyp_name, attn_lines *hyp, attn_classification_report **out);

#endif
