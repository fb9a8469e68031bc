/* attn train's outputs, checked before any work depends on them: none may be an input or another
 * output, each must be writable now, and no other run may be writing them. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "cli/train.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct named_path {
    const char *option; /* "--train" */
    const char *path;   /* NULL: not given */
} named_path;

/* Two names of one file: the same inode when both exist, else the same resolved name (the
 * folder resolved, so "./m.safetensors" and "m.safetensors" agree). */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    const int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
    if (a_exists && b_exists)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (a_exists != b_exists)
        return 0;
    char folder_a[PATH_MAX], folder_b[PATH_MAX];
    const char *base_a = strrchr(a, '/'), *base_b = strrchr(b, '/');
    snprintf(folder_a, sizeof folder_a, "%.*s", base_a ? (int)(base_a - a + 1) : 1,
             base_a ? a : ".");
    snprintf(folder_b, sizeof folder_b, "%.*s", base_b ? (int)(base_b - b + 1) : 1,
             base_b ? b : ".");
    char real_a[PATH_MAX], real_b[PATH_MAX];
    if (realpath(folder_a, real_a) == NULL || realpath(folder_b, real_b) == NULL)
        return strcmp(a, b) == 0;
    return strcmp(real_a, real_b) == 0 &&
           strcmp(base_a ? base_a + 1 : a, base_b ? base_b + 1 : b) == 0;
}

int train_guard_outputs(const train_args *a, const char *checkpoint, attn_tensor_file_lock **locks)
{
    const named_path inputs[] = {
        {"--train", a->train},         {"--valid", a->valid},         {"--train-src", a->train_src},
        {"--train-tgt", a->train_tgt}, {"--valid-src", a->valid_src}, {"--valid-tgt", a->valid_tgt},
        {"--config", a->config},       {"--resume", a->resume},
    };
    const named_path outputs[] = {
        {"--out", a->out}, {"--checkpoint", checkpoint}, {"--log", a->log}};
    const size_t n_inputs = sizeof inputs / sizeof inputs[0];
    const size_t n_outputs = sizeof outputs / sizeof outputs[0];
    for (size_t o = 0; o < n_outputs; o++) {
        if (outputs[o].path == NULL)
            continue;
        for (size_t i = 0; i < n_inputs; i++) {
            /* Resuming writes the next checkpoint over the one it read: that is the point. */
            const int resume_into_itself = strcmp(inputs[i].option, "--resume") == 0 &&
                                           strcmp(outputs[o].option, "--checkpoint") == 0;
            if (inputs[i].path != NULL && !resume_into_itself &&
                same_file(outputs[o].path, inputs[i].path))
                return train_usage_error("%s %s is the %s file: training would overwrite it; "
                                         "write %s elsewhere",
                                         outputs[o].option, outputs[o].path, inputs[i].option,
                                         outputs[o].option);
        }
        for (size_t other = 0; other < o; other++)
            if (outputs[other].path != NULL && same_file(outputs[o].path, outputs[other].path))
                return train_usage_error("%s and %s are the same file (%s): one would replace "
                                         "the other; give them different names",
                                         outputs[other].option, outputs[o].option, outputs[o].path);
    }
    /* Found now, not at the first write, which without --valid is the end of the run. */
    const char *files[2] = {a->out, checkpoint};
    for (int k = 0; k < 2; k++) {
        if (attn_tensor_file_check_writable(files[k]) != ATTN_OK ||
            attn_tensor_file_lock_path(files[k], &locks[k]) != ATTN_OK) {
            fprintf(stderr, "attn train: %s %s: %s\n", k == 0 ? "--out" : "--checkpoint", files[k],
                    attn_last_error());
            attn_tensor_file_unlock(locks[0]);
            locks[0] = NULL;
            return 1;
        }
    }
    return 0;
}
