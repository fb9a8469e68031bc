/* attn train --teacher: the teachers' distributions over the training corpus, computed before
 * the student's first update (token-level distillation), with the command's messages. */
#include "cli/library_error.h"
#include "cli/train.h"
#include "cli/translator.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int train_teach(const train_args *a, const attn_trainer_options *o, const attn_corpus *train,
                const attn_tokenizer *source, const attn_tokenizer *target,
                attn_teacher_targets **out)
{
    *out = NULL;
    if (a->teacher == NULL) {
        fprintf(stderr,
                "attn train: the checkpoint's run learned from teachers (teacher weight %g): "
                "give the same --teacher models again to resume it\n",
                o->teacher_weight);
        return 1;
    }
    if (o->teacher_weight == 0.0) {
        fprintf(stderr, "attn train: the checkpoint's run learned from no teachers: resume it "
                        "without --teacher (or start a new run with them)\n");
        return 1;
    }
    cli_translator teachers;
    int code = cli_translator_load(&teachers, "train", a->teacher);
    for (int64_t k = 0; k < teachers.count && code == 0; k++)
        if (attn_bundle_check_tokenizers(teachers.bundles[k], source, target,
                                         "the training data's tokenizers") != ATTN_OK)
            code = cli_library_error_in(
                "train",
                "--teacher %s (train the teachers on the same data with the same "
                "--src-tokens and --tgt-tokens)",
                attn_bundle_name(teachers.bundles[k]));
    attn_model **models = NULL;
    if (code == 0 && (models = calloc((size_t)teachers.count, sizeof *models)) == NULL) {
        fprintf(stderr, "attn train: out of memory\n");
        code = 1;
    }
    if (code == 0) {
        for (int64_t k = 0; k < teachers.count; k++)
            models[k] = attn_bundle_model(teachers.bundles[k]);
        /* A pass over the whole corpus per teacher: minutes on a large one, so say it starts. */
        fprintf(stderr, "attn train: running %lld teacher%s over the %lld training pairs\n",
                (long long)teachers.count, teachers.count == 1 ? "" : "s",
                (long long)attn_corpus_size(train));
        const double start = seconds_now();
        if (attn_teacher_targets_compute(models, teachers.count, train, o->batch_tokens, out) !=
            ATTN_OK)
            code = cli_library_error_in("train", "--teacher %s", a->teacher);
        else
            fprintf(stderr,
                    "attn train: %lld teacher%s read the %lld training pairs in %.0f s: "
                    "distributions at %lld target positions (%.0f MB), weight %g in the loss\n",
                    (long long)teachers.count, teachers.count == 1 ? "" : "s",
                    (long long)attn_teacher_targets_pairs(*out), seconds_now() - start,
                    (long long)attn_teacher_targets_positions(*out),
                    4e-6 * (double)attn_teacher_targets_positions(*out) *
                        (double)attn_teacher_targets_vocab(*out),
                    o->teacher_weight);
    }
    free(models);
    cli_translator_free(&teachers);
    return code;
}
