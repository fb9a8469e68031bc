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

/* A copy of one tokenizer, through its JSON: the form a model file keeps it in. */
static attn_status copy_tokenizer(const attn_tokenizer *tokenizer, attn_tokenizer **out)
{
    char *json = NULL;
    attn_status status = attn_tokenizer_to_json(tokenizer, &json);
    if (status == ATTN_OK)
        status = attn_tokenizer_from_json(json, out);
    free(json);
    return status;
}

/* A --src-tokens or --tgt-tokens given with --teacher must name the teachers' kind. */
static int check_tokens_flag(const train_args *a, const char *flag, const char *spec,
                             const attn_tokenizer *teachers)
{
    attn_tokenizer_config asked;
    if (!train_args_given(a, flag) || attn_tokenizer_config_parse(spec, &asked) != ATTN_OK ||
        asked.kind == attn_tokenizer_get_kind(teachers))
        return 0;
    fprintf(stderr,
            "attn train: %s %s, but the student reads and writes with its teachers' tokenizers "
            "and theirs is %s: leave %s out, or give teachers trained with %s %s\n",
            flag, spec, attn_tokenizer_kind_name(attn_tokenizer_get_kind(teachers)), flag, flag,
            spec);
    return 1;
}

int train_adopt_teacher_tokenizers(const train_args *a, const cli_translator *teachers,
                                   attn_tokenizer **source, attn_tokenizer **target)
{
    const attn_tokenizer *src = attn_bundle_tokenizer(teachers->bundle, ATTN_BUNDLE_SOURCE);
    const attn_tokenizer *tgt = attn_bundle_tokenizer(teachers->bundle, ATTN_BUNDLE_TARGET);
    if (check_tokens_flag(a, "--src-tokens", a->src_tokens, src) != 0 ||
        check_tokens_flag(a, "--tgt-tokens", a->tgt_tokens, tgt) != 0)
        return 2;
    if (copy_tokenizer(src, source) != ATTN_OK || copy_tokenizer(tgt, target) != ATTN_OK)
        return cli_library_error_in("train", "--teacher %s", attn_bundle_name(teachers->bundle));
    return 0;
}

/* Source and target tokens of the encoded corpus that the vocabularies lack (read as <unk>). */
static void count_unknown(const attn_corpus *corpus, int64_t *source, int64_t *target)
{
    *source = *target = 0;
    for (int64_t i = 0; i < attn_corpus_size(corpus); i++) {
        const int32_t *ids;
        int64_t n;
        if (attn_corpus_source_ids(corpus, i, &ids, &n) == ATTN_OK)
            for (int64_t t = 0; t < n; t++)
                *source += ids[t] == ATTN_UNK_ID;
        if (attn_corpus_target_ids(corpus, i, &ids, &n) == ATTN_OK)
            for (int64_t t = 0; t < n; t++)
                *target += ids[t] == ATTN_UNK_ID;
    }
}

int train_teach(const train_args *a, const attn_trainer_options *o, const cli_translator *teachers,
                const attn_corpus *train, const attn_tokenizer *source,
                const attn_tokenizer *target, attn_teacher_targets **out)
{
    *out = NULL;
    if (teachers == NULL) {
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
    /* cli_translator_load has checked that the teachers share their tokenizers, so the first
     * speaks for all: a new student took its tokenizers, a resumed one must have them. */
    if (attn_bundle_check_tokenizers(teachers->bundle, source, target,
                                     "the student's tokenizers") != ATTN_OK)
        return cli_library_error_in(
            "train", "--teacher %s (the checkpoint's run had other teachers: resume with those)",
            a->teacher);
    /* The data may hold tokens the teachers never learned: they read <unk> there. */
    int64_t unknown_source, unknown_target;
    count_unknown(train, &unknown_source, &unknown_target);
    if (unknown_source + unknown_target > 0)
        fprintf(stderr,
                "attn train: warning: %lld source and %lld target tokens of the training data "
                "are not in the teachers' vocabularies and read as <unk>\n",
                (long long)unknown_source, (long long)unknown_target);
    attn_model **models = calloc((size_t)teachers->count, sizeof *models);
    if (models == NULL) {
        fprintf(stderr, "attn train: out of memory\n");
        return 1;
    }
    for (int64_t k = 0; k < teachers->count; k++)
        models[k] = attn_bundle_model(teachers->bundles[k]);
    /* A pass over the whole corpus per teacher: minutes on a large one, so say it starts. */
    fprintf(stderr, "attn train: running %lld teacher%s over the %lld training pairs\n",
            (long long)teachers->count, teachers->count == 1 ? "" : "s",
            (long long)attn_corpus_size(train));
    const double start = seconds_now();
    int code = 0;
    if (attn_teacher_targets_compute(models, teachers->count, train, o->batch_tokens, out) !=
        ATTN_OK)
        code = cli_library_error_in("train", "--teacher %s", a->teacher);
    else
        fprintf(stderr,
                "attn train: %lld teacher%s read the %lld training pairs in %.0f s: "
                "distributions at %lld target positions (%.0f MB), weight %g in the loss\n",
                (long long)teachers->count, teachers->count == 1 ? "" : "s",
                (long long)attn_teacher_targets_pairs(*out), seconds_now() - start,
                (long long)attn_teacher_targets_positions(*out),
                4e-6 * (double)attn_teacher_targets_positions(*out) *
                    (double)attn_teacher_targets_vocab(*out),
                o->teacher_weight);
    free(models);
    return code;
}
