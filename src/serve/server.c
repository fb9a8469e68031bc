/* attn serve: the HTTP JSON API on libmicrohttpd, the request queue and the worker that owns the
 * bundle (attn_serve.h, docs/serving.md).
 *
 * Threads: libmicrohttpd runs one thread per connection; each reads and checks its request,
 * queues a job and sleeps on the job's condition until the worker has answered every sentence.
 * The worker alone touches the bundle: it encodes a new job's texts (a bad text fails only its
 * own request), plans batches (batching.c), decodes them and writes each sentence's JSON. */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime, inet_pton */
#include "attn/attn_serve.h"
#include "core/internal.h"
#include "serve/batching.h"
#include "serve/page.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    HTTP_OK = 200,
    HTTP_BAD_REQUEST = 400,
    HTTP_NOT_FOUND = 404,
    HTTP_METHOD_NOT_ALLOWED = 405,
    HTTP_TOO_LARGE = 413,
    HTTP_INTERNAL_ERROR = 500
};

/* A prompt's continuation as it is sampled: the text of its current line is decoded whole after
 * each token (a word or BPE tokenizer puts spaces by context) and its new end is the next piece,
 * as attn generate --prompt prints it; the pieces joined are the continuation's text. */
typedef struct continuation {
    int32_t *line; /* the current line's ids: the prompt's last line, then the new ones */
    int64_t length, capacity;
    size_t given; /* bytes of the line's text already given out (or the prompt's) */
    char *text;   /* the pieces so far, NUL-terminated */
    size_t text_length, text_capacity;
} continuation;

/* A request (translate, attention, generate or classify): the batching view (job) and what the
 * worker and the connection share. */
typedef struct request {
    serve_job job;
    struct attn_server *server;
    int64_t n;             /* sentences, or prompts */
    char **texts;          /* [n], owned */
    int32_t **ids;         /* [n] (worker) */
    int64_t *counts;       /* [n] (worker) */
    int64_t *decode_order; /* [job.decodable]: sentence indices with tokens, in order */
    cJSON **results;       /* [n]: each sentence's answer (worker) */
    int64_t answered;      /* sentences with results (worker) */
    int attention;         /* POST /v1/attention: one text, its maps in results[0] */
    int kind;              /* attn_attention_kind, or POOLING_KIND (a classifier) */
    int64_t layer, head; /* -1: the last layer; -1: the mean of the heads */
    int truncate;        /* generate: cut a prompt too long for the context to its last tokens;
                          * classify: read a text too long for the model as its first tokens */
    int stream;          /* generate: answer one JSON line per token as they come */
    int pooling;         /* classify: each answer with its tokens and their pooling weights */
    continuation *continuations; /* generate: [n] (worker) */
    /* A streamed answer's lines not yet sent, under the server's lock: the worker appends, the
     * connection's reader takes. */
    char *lines;
    size_t lines_length, lines_capacity, lines_sent;
    int final_line_queued; /* the connection added the last line (results or error) */
    int accepted;          /* under the server's lock: the worker encoded the request */
    int finished;          /* under the server's lock: results or error are final */
    int http_status;       /* on failure */
    char error[512];       /* on failure */
    pthread_cond_t finished_changed;
    struct request *next_incoming;
} request;

struct attn_server {
    attn_bundle *bundle;
    attn_server_options options;
    struct MHD_Daemon *daemon;
    int port;
    char *model_json; /* GET /v1/model's answer, made once */

    pthread_mutex_t lock;
    pthread_cond_t worker_wake;             /* a job arrived, or stopping */
    pthread_cond_t idle;                    /* in_flight fell */
    request *incoming_head, *incoming_tail; /* queued by connections, not yet seen by the worker */
    int64_t queued_sentences;               /* for /v1/health */
    int64_t in_flight;                      /* requests received and not yet answered */
    int stopping;
    pthread_t worker;
    int worker_started;
};

/* Per-connection state across libmicrohttpd's calls of one request. */
typedef struct connection_state {
    char *body;
    size_t length, capacity;
    int too_large;
} connection_state;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- requests ------------------------------------------------------------------------------ */

static void request_free(request *r)
{
    if (r == NULL)
        return;
    for (int64_t i = 0; i < r->n; i++) {
        free(r->texts != NULL ? r->texts[i] : NULL);
        free(r->ids != NULL ? r->ids[i] : NULL);
        if (r->results != NULL)
            cJSON_Delete(r->results[i]);
    }
    for (int64_t i = 0; r->continuations != NULL && i < r->n; i++) {
        free(r->continuations[i].line);
        free(r->continuations[i].text);
    }
    free(r->continuations);
    free(r->lines);
    free(r->texts);
    free(r->ids);
    free(r->counts);
    free(r->decode_order);
    free(r->results);
    pthread_cond_destroy(&r->finished_changed);
    free(r);
}

/* Marks r answered (under the lock) and wakes its connection. */
static void request_finish(attn_server *s, request *r)
{
    pthread_mutex_lock(&s->lock);
    r->finished = 1;
    pthread_cond_broadcast(&r->finished_changed);
    pthread_mutex_unlock(&s->lock);
}

/* Tells r's connection (under the lock) that its prompts are encoded: a streamed answer may
 * start, since a prompt that cannot be read now fails before the first line. */
static void request_accept(attn_server *s, request *r)
{
    pthread_mutex_lock(&s->lock);
    r->accepted = 1;
    pthread_cond_broadcast(&r->finished_changed);
    pthread_mutex_unlock(&s->lock);
}

/* Records r's failure; the caller finishes r once no list of the worker holds it. */
static void request_set_error(request *r, int http_status, const char *message)
{
    if (r->http_status != 0)
        return;
    r->http_status = http_status;
    snprintf(r->error, sizeof r->error, "%s", message);
}

static void request_fail(attn_server *s, request *r, int http_status, const char *message)
{
    request_set_error(r, http_status, message);
    request_finish(s, r);
}

/* ---- the worker ---------------------------------------------------------------------------- */

/* The answer for a sentence without tokens: no search, an empty translation. */
static cJSON *empty_result(const request *r)
{
    cJSON *result = cJSON_CreateObject();
    if (result == NULL)
        return NULL;
    cJSON_AddStringToObject(result, "translation", "");
    cJSON_AddNumberToObject(result, "score", 0.0);
    if (r->job.options.nbest > 1)
        cJSON_AddArrayToObject(result, "nbest");
    return result;
}

/* Encodes r's texts. 0, or 1 after failing r (400 naming the sentence). */
static int encode_request(attn_server *s, request *r)
{
    r->ids = calloc((size_t)r->n, sizeof *r->ids);
    r->counts = calloc((size_t)r->n, sizeof *r->counts);
    r->decode_order = calloc((size_t)r->n, sizeof *r->decode_order);
    r->results = calloc((size_t)r->n, sizeof *r->results);
    if (r->ids == NULL || r->counts == NULL || r->decode_order == NULL || r->results == NULL) {
        request_fail(s, r, HTTP_INTERNAL_ERROR, "out of memory");
        return 1;
    }
    const int classify = r->job.task == SERVE_CLASSIFY;
    for (int64_t i = 0; i < r->n; i++) {
        /* A classifier reads every text through the truncating encoder so that a text too long
         * is refused with this endpoint's remedy rather than the library's. */
        int64_t cut = 0;
        const attn_status status =
            classify ? attn_bundle_encode_truncated(s->bundle, r->texts[i], &r->ids[i],
                                                    &r->counts[i], NULL, &cut)
                     : attn_bundle_encode(s->bundle, r->texts[i], &r->ids[i], &r->counts[i], NULL);
        if (status != ATTN_OK) {
            char message[sizeof r->error];
            snprintf(message, sizeof message, "text[%lld]: %s", (long long)i, attn_last_error());
            request_fail(s, r, HTTP_BAD_REQUEST, message);
            return 1;
        }
        if (cut > 0 && !r->truncate) {
            char message[sizeof r->error];
            snprintf(message, sizeof message,
                     "text[%lld] has %lld tokens, above the %lld the model reads; shorten it, "
                     "or send \"truncate\": true to classify its first %lld tokens",
                     (long long)i, (long long)(r->counts[i] + cut), (long long)r->counts[i],
                     (long long)r->counts[i]);
            request_fail(s, r, HTTP_BAD_REQUEST, message);
            return 1;
        }
        if (r->counts[i] > 0) {
            r->decode_order[r->job.decodable++] = i;
            continue;
        }
        if (classify) {
            char message[64];
            snprintf(message, sizeof message, "text[%lld] has no tokens to classify",
                     (long long)i);
            request_fail(s, r, HTTP_BAD_REQUEST, message);
            return 1;
        }
        if ((r->results[i] = empty_result(r)) == NULL) {
            request_fail(s, r, HTTP_INTERNAL_ERROR, "out of memory");
            return 1;
        }
        r->answered++;
    }
    return 0;
}

static cJSON *labels_json(const attn_bundle *bundle, attn_bundle_side side, const int32_t *ids,
                          int64_t count, const char *last)
{
    const char **labels = malloc((size_t)(count + 1) * sizeof *labels);
    if (labels == NULL)
        return NULL;
    attn_bundle_labels(bundle, side, ids, count, labels);
    if (last != NULL)
        labels[count++] = last;
    cJSON *array = cJSON_CreateStringArray(labels, (int)count);
    free(labels);
    return array;
}

/* The cross-attention of the best hypothesis, as attn translate --alignment writes it: the
 * last decoder layer, its heads averaged, rows the output tokens then </s> when finished. */
static cJSON *alignment_json(const attn_server *s, const attn_decode_result *result,
                             const attn_hypothesis *h, const int32_t *src, int64_t src_length)
{
    cJSON *alignment = cJSON_CreateObject();
    float *weights = malloc((size_t)(h->steps * src_length) * sizeof *weights);
    int ok = alignment != NULL && weights != NULL &&
             attn_decode_alignment(result, h, src_length, -1, -1, weights) == ATTN_OK;
    if (ok) {
        cJSON_AddNumberToObject(alignment, "layer", (double)(result->cross_layers - 1));
        cJSON *source = labels_json(s->bundle, ATTN_BUNDLE_SOURCE, src, src_length, NULL);
        cJSON *target = labels_json(s->bundle, ATTN_BUNDLE_TARGET, h->tokens, h->length,
                                    h->finished ? "</s>" : NULL);
        cJSON *rows = cJSON_CreateArray();
        ok = source != NULL && target != NULL && rows != NULL;
        cJSON_AddItemToObject(alignment, "source", source);
        cJSON_AddItemToObject(alignment, "target", target);
        cJSON_AddItemToObject(alignment, "weights", rows);
        for (int64_t i = 0; ok && i < h->steps; i++) {
            cJSON *row = cJSON_CreateFloatArray(weights + i * src_length, (int)src_length);
            ok = row != NULL && cJSON_AddItemToArray(rows, row);
        }
    }
    free(weights);
    if (!ok) {
        cJSON_Delete(alignment);
        return NULL;
    }
    return alignment;
}

/* The answer for a decoded sentence. */
static cJSON *sentence_result(const attn_server *s, const request *r,
                              const attn_decode_result *result, const attn_decode_sentence *d,
                              int64_t sentence)
{
    cJSON *answer = cJSON_CreateObject();
    cJSON *nbest = r->job.options.nbest > 1 ? cJSON_CreateArray() : NULL;
    int ok = answer != NULL && (r->job.options.nbest == 1 || nbest != NULL);
    for (int64_t j = 0; ok && j < d->count; j++) {
        char *text = NULL;
        if (attn_bundle_text(s->bundle, &d->hypotheses[j], &text) != ATTN_OK) {
            ok = 0;
            break;
        }
        if (j == 0) {
            ok = cJSON_AddStringToObject(answer, "translation", text) != NULL &&
                 cJSON_AddNumberToObject(answer, "score", d->hypotheses[0].score) != NULL;
        }
        if (ok && nbest != NULL) {
            cJSON *item = cJSON_CreateObject();
            ok = item != NULL && cJSON_AddItemToArray(nbest, item) &&
                 cJSON_AddStringToObject(item, "translation", text) != NULL &&
                 cJSON_AddNumberToObject(item, "score", d->hypotheses[j].score) != NULL;
        }
        free(text);
    }
    if (ok && nbest != NULL) {
        ok = cJSON_AddItemToObject(answer, "nbest", nbest);
        nbest = NULL;
    }
    if (ok && r->job.options.alignments && d->count > 0) {
        cJSON *alignment =
            alignment_json(s, result, &d->hypotheses[0], r->ids[sentence], r->counts[sentence]);
        ok = alignment != NULL && cJSON_AddItemToObject(answer, "alignment", alignment);
    }
    cJSON_Delete(nbest);
    if (!ok) {
        cJSON_Delete(answer);
        return NULL;
    }
    return answer;
}

/* A classified text's answer: its class, that class's probability and every class's; with
 * "pooling", its tokens and the weight the pooling gives each. NULL, with *failure saying why,
 * when out of memory or when the pooling fails. */
static cJSON *class_result(attn_server *s, const request *r, int64_t text,
                           const float *probabilities, const char **failure)
{
    *failure = "out of memory writing the answer";
    const attn_labels *classes = attn_bundle_classes(s->bundle);
    const int64_t n = attn_labels_count(classes);
    const int64_t best = attn_argmax(n, probabilities);
    cJSON *answer = cJSON_CreateObject();
    cJSON *all = cJSON_CreateObject();
    int ok = answer != NULL && all != NULL &&
             cJSON_AddStringToObject(answer, "label", attn_labels_name(classes, best)) != NULL &&
             cJSON_AddNumberToObject(answer, "probability", probabilities[best]) != NULL;
    for (int64_t k = 0; ok && k < n; k++)
        ok = cJSON_AddNumberToObject(all, attn_labels_name(classes, k), probabilities[k]) != NULL;
    if (ok) {
        ok = cJSON_AddItemToObject(answer, "probabilities", all);
        all = NULL;
    }
    if (ok && r->pooling) {
        const int64_t count = r->counts[text];
        float *weights = malloc((size_t)count * sizeof *weights);
        const int pooled =
            weights != NULL &&
            attn_bundle_pooling_weights(s->bundle, r->ids[text], count, weights) == ATTN_OK;
        if (weights != NULL && !pooled)
            *failure = attn_last_error();
        ok = pooled &&
             cJSON_AddItemToObject(answer, "tokens",
                                   labels_json(s->bundle, ATTN_BUNDLE_SOURCE, r->ids[text], count,
                                               NULL)) &&
             cJSON_AddItemToObject(answer, "pooling",
                                   cJSON_CreateFloatArray(weights, (int)count));
        free(weights);
    }
    cJSON_Delete(all);
    if (!ok) {
        cJSON_Delete(answer);
        return NULL;
    }
    return answer;
}

/* Classifies the texts a batch took (owners[i]'s text texts[i]) as one padded batch. */
static void classify_taken(attn_server *s, int64_t n, request *const *owners,
                           const int64_t *texts, const int32_t **ids, const int64_t *counts)
{
    const int64_t classes = attn_labels_count(attn_bundle_classes(s->bundle));
    float *probabilities = malloc((size_t)(n * classes) * sizeof *probabilities + 1);
    const char *failure = NULL;
    if (probabilities == NULL)
        failure = "out of memory";
    else if (n > 0 && attn_bundle_classify(s->bundle, n, ids, counts, probabilities) != ATTN_OK)
        failure = attn_last_error();
    for (int64_t i = 0; i < n; i++) {
        request *r = owners[i];
        if (failure != NULL) {
            request_set_error(r, HTTP_INTERNAL_ERROR, failure);
            continue;
        }
        if (r->http_status != 0)
            continue;
        const char *why = NULL;
        r->results[texts[i]] = class_result(s, r, texts[i], probabilities + i * classes, &why);
        if (r->results[texts[i]] == NULL)
            request_set_error(r, HTTP_INTERNAL_ERROR, why);
        else
            r->answered++;
    }
    free(probabilities);
}

/* Translates or classifies the next `size` sentences of the jobs compatible with head
 * (serve_plan_batch) and answers them (or records why not); drop_done then finishes the
 * requests that are done. */
static void answer_batch(attn_server *s, request *head, int64_t size)
{
    request **owners = malloc((size_t)size * sizeof *owners);
    int64_t *sentences = malloc((size_t)size * sizeof *sentences);
    const int32_t **ids = malloc((size_t)size * sizeof *ids);
    int64_t *counts = malloc((size_t)size * sizeof *counts);
    if (owners == NULL || sentences == NULL || ids == NULL || counts == NULL) {
        /* Nothing taken: the oldest request fails, so the worker does not retry forever. */
        request_set_error(head, HTTP_INTERNAL_ERROR, "out of memory");
        size = 0;
    }
    int64_t n = 0;
    for (request *r = head; r != NULL && n < size; r = (request *)r->job.next) {
        if (!serve_jobs_compatible(&head->job, &r->job))
            continue;
        while (r->job.taken < r->job.decodable && n < size) {
            const int64_t sentence = r->decode_order[r->job.taken++];
            owners[n] = r;
            sentences[n] = sentence;
            ids[n] = r->ids[sentence];
            counts[n++] = r->counts[sentence];
        }
    }
    if (head->job.task == SERVE_CLASSIFY) {
        classify_taken(s, n, owners, sentences, ids, counts);
        n = 0;
    }
    attn_decode_result *result = NULL;
    const char *failure = NULL;
    if (n > 0 &&
        attn_bundle_decode(s->bundle, n, ids, counts, &head->job.options, &result) != ATTN_OK)
        failure = attn_last_error();
    for (int64_t i = 0; i < n; i++) {
        request *r = owners[i];
        if (failure != NULL) {
            /* Every request of the batch learns why; the worker goes on with the next batch. */
            request_set_error(r, HTTP_INTERNAL_ERROR, failure);
            continue;
        }
        if (r->http_status != 0)
            continue;
        r->results[sentences[i]] =
            sentence_result(s, r, result, &result->sentences[i], sentences[i]);
        if (r->results[sentences[i]] == NULL)
            request_set_error(r, HTTP_INTERNAL_ERROR, "out of memory writing the answer");
        else
            r->answered++;
    }
    attn_decode_result_destroy(result);
    free(owners);
    free(sentences);
    free(ids);
    free(counts);
}

/* ---- POST /v1/generate ------------------------------------------------------------------------
 */

/* Appends size bytes to a growing NUL-terminated buffer. 0, or 1 when out of memory. */
static int append_bytes(char **buffer, size_t *length, size_t *capacity, const char *bytes,
                        size_t size)
{
    if (*length + size + 1 > *capacity) {
        size_t grown = *capacity > 0 ? *capacity : 256;
        while (grown < *length + size + 1)
            grown *= 2;
        char *larger = realloc(*buffer, grown);
        if (larger == NULL)
            return 1;
        *buffer = larger;
        *capacity = grown;
    }
    memcpy(*buffer + *length, bytes, size);
    *length += size;
    (*buffer)[*length] = '\0';
    return 0;
}

/* Starts prompt i's continuation on the prompt's last line, whose text is not given out. 0, or
 * 1 after failing r. */
static int continuation_start(attn_server *s, request *r, int64_t i)
{
    continuation *c = &r->continuations[i];
    const int32_t *ids = r->ids[i];
    int64_t start = r->counts[i];
    while (start > 0 && ids[start - 1] != ATTN_EOS_ID)
        start--;
    c->length = r->counts[i] - start;
    c->capacity = c->length + 64;
    c->line = malloc((size_t)c->capacity * sizeof *c->line);
    char *prompt_text = NULL;
    if (c->line == NULL || append_bytes(&c->text, &c->text_length, &c->text_capacity, "", 0)) {
        request_fail(s, r, HTTP_INTERNAL_ERROR, "out of memory");
        return 1;
    }
    memcpy(c->line, ids + start, (size_t)c->length * sizeof *c->line);
    if (attn_bundle_generated_text(s->bundle, c->line, c->length, &prompt_text) != ATTN_OK) {
        request_fail(s, r, HTTP_INTERNAL_ERROR, attn_last_error());
        return 1;
    }
    c->given = strlen(prompt_text);
    free(prompt_text);
    return 0;
}

/* Encodes r's prompts (</s> then the tokens, cut to the context's room when r->truncate) and
 * starts their continuations. 0, or 1 after failing r (400 naming the prompt). */
static int encode_prompts(attn_server *s, request *r)
{
    r->ids = calloc((size_t)r->n, sizeof *r->ids);
    r->counts = calloc((size_t)r->n, sizeof *r->counts);
    r->decode_order = calloc((size_t)r->n, sizeof *r->decode_order);
    r->results = calloc((size_t)r->n, sizeof *r->results);
    r->continuations = calloc((size_t)r->n, sizeof *r->continuations);
    if (r->ids == NULL || r->counts == NULL || r->decode_order == NULL || r->results == NULL ||
        r->continuations == NULL) {
        request_fail(s, r, HTTP_INTERNAL_ERROR, "out of memory");
        return 1;
    }
    const int64_t room = attn_bundle_config(s->bundle)->max_len - 1;
    for (int64_t i = 0; i < r->n; i++) {
        int64_t cut = 0;
        char message[sizeof r->error];
        if (attn_bundle_encode_prompt(s->bundle, r->texts[i], 1, &r->ids[i], &r->counts[i], NULL,
                                      &cut) != ATTN_OK) {
            snprintf(message, sizeof message, "prompts[%lld]: %s", (long long)i, attn_last_error());
            request_fail(s, r, HTTP_BAD_REQUEST, message);
            return 1;
        }
        if (cut > 0 && !r->truncate) {
            snprintf(message, sizeof message,
                     "prompts[%lld]: the prompt is %lld tokens (with the end of line before it), "
                     "above the %lld that leave room for a new token in the model's context of "
                     "%lld; shorten it, or send \"truncate\": true to keep its last %lld tokens",
                     (long long)i, (long long)(r->counts[i] + cut), (long long)room,
                     (long long)room + 1, (long long)room);
            request_fail(s, r, HTTP_BAD_REQUEST, message);
            return 1;
        }
        if (continuation_start(s, r, i) != 0)
            return 1;
        r->decode_order[r->job.decodable++] = i;
    }
    return 0;
}

/* Queues one line of a streamed answer for the connection and wakes its reader. */
static int queue_line(attn_server *s, request *r, cJSON *line)
{
    char *text = line != NULL ? cJSON_PrintUnformatted(line) : NULL;
    cJSON_Delete(line);
    if (text == NULL)
        return 1;
    pthread_mutex_lock(&s->lock);
    const int failed =
        append_bytes(&r->lines, &r->lines_length, &r->lines_capacity, text, strlen(text)) ||
        append_bytes(&r->lines, &r->lines_length, &r->lines_capacity, "\n", 1);
    pthread_cond_broadcast(&r->finished_changed);
    pthread_mutex_unlock(&s->lock);
    free(text);
    return failed;
}

/* The rows of one attn_bundle_generate call: whose prompt each row is. */
typedef struct generate_rows {
    attn_server *server;
    request **owners;
    int64_t *prompts;
} generate_rows;

/* attn_generate's callback: the token's piece of text joins its prompt's continuation (and, for
 * a streamed request, goes out as a line). A request that fails here fails alone: the other
 * rows of the batch go on. */
static attn_status take_token(void *user, int64_t row, int32_t token)
{
    generate_rows *rows = user;
    attn_server *s = rows->server;
    request *r = rows->owners[row];
    const int64_t prompt = rows->prompts[row];
    continuation *c = &r->continuations[prompt];
    if (r->http_status != 0 || token == r->job.sampling.stop_token)
        return ATTN_OK; /* the stop token ends the row; the result says so */
    char *line_text = NULL;
    const char *piece = "";
    size_t piece_size = 0;
    int failed = 0;
    if (token == ATTN_EOS_ID) {
        /* The model ended the line: a newline, and the next line starts empty. */
        piece = "\n";
        piece_size = 1;
        c->length = 0;
        c->given = 0;
    } else {
        if (c->length == c->capacity) {
            int32_t *larger = realloc(c->line, (size_t)(2 * c->capacity) * sizeof *larger);
            failed = larger == NULL;
            if (!failed) {
                c->line = larger;
                c->capacity *= 2;
            }
        }
        if (!failed) {
            c->line[c->length++] = token;
            failed =
                attn_bundle_generated_text(s->bundle, c->line, c->length, &line_text) != ATTN_OK;
        }
        /* A text that rewrote what was given (a tokenizer joining differently) waits for more. */
        const size_t size = failed ? 0 : strlen(line_text);
        if (size > c->given) {
            piece = line_text + c->given;
            piece_size = size - c->given;
            c->given = size;
        }
    }
    failed =
        failed || append_bytes(&c->text, &c->text_length, &c->text_capacity, piece, piece_size);
    if (!failed && r->stream) {
        cJSON *line = cJSON_CreateObject();
        if (line != NULL) {
            cJSON_AddNumberToObject(line, "prompt", (double)prompt);
            cJSON_AddNumberToObject(line, "token", (double)token);
            cJSON_AddItemToObject(line, "text",
                                  cJSON_CreateString(c->text + c->text_length - piece_size));
        }
        failed = queue_line(s, r, line);
    }
    free(line_text);
    if (failed)
        request_set_error(r, HTTP_INTERNAL_ERROR, "out of memory writing the continuation");
    return ATTN_OK;
}

static const char *const stop_names[] = {"max_new_tokens", "end_of_line", "context"};

/* A prompt's answer: its continuation's text, how many tokens it drew and why it stopped. */
static cJSON *generation_result(const request *r, int64_t prompt, const attn_generation *g)
{
    cJSON *answer = cJSON_CreateObject();
    if (answer == NULL)
        return NULL;
    if (cJSON_AddStringToObject(answer, "text", r->continuations[prompt].text) == NULL ||
        cJSON_AddNumberToObject(answer, "tokens", (double)g->length) == NULL ||
        cJSON_AddNumberToObject(answer, "prompt_tokens", (double)r->counts[prompt]) == NULL ||
        cJSON_AddStringToObject(answer, "stop", stop_names[g->stop]) == NULL) {
        cJSON_Delete(answer);
        return NULL;
    }
    return answer;
}

/* Continues the next `size` prompts of the jobs compatible with head as the rows of one
 * attn_bundle_generate call, each from its own stream (seed, its index in its request), and
 * answers them (or records why not); drop_done then finishes the requests that are done. */
static void generate_batch(attn_server *s, request *head, int64_t size)
{
    request **owners = malloc((size_t)size * sizeof *owners);
    int64_t *prompts = malloc((size_t)size * sizeof *prompts);
    const int32_t **ids = malloc((size_t)size * sizeof *ids);
    int64_t *counts = malloc((size_t)size * sizeof *counts);
    uint64_t *streams = malloc((size_t)size * sizeof *streams);
    if (owners == NULL || prompts == NULL || ids == NULL || counts == NULL || streams == NULL) {
        /* Nothing taken: the oldest request fails, so the worker does not retry forever. */
        request_set_error(head, HTTP_INTERNAL_ERROR, "out of memory");
        size = 0;
    }
    int64_t n = 0;
    for (request *r = head; r != NULL && n < size; r = (request *)r->job.next) {
        if (!serve_jobs_compatible(&head->job, &r->job))
            continue;
        while (r->job.taken < r->job.decodable && n < size) {
            const int64_t prompt = r->decode_order[r->job.taken++];
            owners[n] = r;
            prompts[n] = prompt;
            ids[n] = r->ids[prompt];
            counts[n] = r->counts[prompt];
            streams[n++] = (uint64_t)prompt; /* its place in its request, not in the batch */
        }
    }
    generate_rows rows = {s, owners, prompts};
    attn_generate_result *result = NULL;
    const char *failure = NULL;
    if (n > 0 && attn_bundle_generate(s->bundle, n, ids, counts, streams, &head->job.sampling,
                                      take_token, &rows, &result) != ATTN_OK)
        failure = attn_last_error();
    for (int64_t i = 0; i < n; i++) {
        request *r = owners[i];
        if (failure != NULL) {
            request_set_error(r, HTTP_INTERNAL_ERROR, failure);
            continue;
        }
        if (r->http_status != 0)
            continue;
        r->results[prompts[i]] = generation_result(r, prompts[i], &result->generations[i]);
        if (r->results[prompts[i]] == NULL)
            request_set_error(r, HTTP_INTERNAL_ERROR, "out of memory writing the answer");
        else
            r->answered++;
    }
    attn_generate_result_destroy(result);
    free(owners);
    free(prompts);
    free(ids);
    free(counts);
    free(streams);
}

/* Unlinks the requests that are answered or failed from the worker's list and only then
 * finishes them: their connections free them. Returns the new head. */
static request *drop_done(attn_server *s, request *head)
{
    serve_job *first = head != NULL ? &head->job : NULL;
    serve_job **link = &first;
    request *done = NULL; /* linked through next_incoming, which the worker no longer needs */
    while (*link != NULL) {
        request *r = (request *)*link; /* job is a request's first member */
        if (r->answered == r->n || r->http_status != 0) {
            *link = r->job.next;
            r->next_incoming = done;
            done = r;
        } else {
            link = &r->job.next;
        }
    }
    while (done != NULL) {
        request *r = done;
        done = r->next_incoming;
        request_finish(s, r);
    }
    return (request *)first;
}

/* ---- POST /v1/attention --------------------------------------------------------------------- */

/* attn_attention_kind, then a classifier's pooling. */
enum { POOLING_KIND = 3 };
static const char *const kind_names[] = {"encoder", "self", "cross", "pooling"};

/* 1 after recording a 400 when layer, or r's head (-1: the mean), is not one of the model's;
 * layers_name says which layers ("layers of this kind"). */
static int map_choice_refused(request *r, int64_t layer, int64_t layers, int64_t heads,
                              const char *layers_name)
{
    if (layer < layers && r->head < heads)
        return 0;
    char message[160];
    snprintf(message, sizeof message, "\"%s\" %lld: the model has %lld %s",
             layer >= layers ? "layer" : "head", (long long)(layer >= layers ? layer : r->head),
             (long long)(layer >= layers ? layers : heads),
             layer >= layers ? layers_name : "heads per layer");
    request_set_error(r, HTTP_BAD_REQUEST, message);
    return 1;
}

/* weights [cells]: r's head of maps [heads, cells], or the heads' mean. */
static void chosen_head(const request *r, const float *maps, int64_t heads, size_t cells,
                        float *weights)
{
    for (size_t c = 0; c < cells; c++) {
        float sum = 0;
        for (int64_t k = 0; k < heads; k++)
            sum += maps[(size_t)k * cells + c];
        weights[c] = r->head >= 0 ? maps[(size_t)r->head * cells + c] : sum / (float)heads;
    }
}

/* An attention answer's map: its kind, layer and head (layer < 0: neither, for the pooling,
 * which is one), the model's layers and heads, the labels and weights [rows, cols]. 0 when out
 * of memory. */
static int add_map(cJSON *answer, const request *r, int64_t layer, int64_t layers, int64_t heads,
                   const char *const *row_labels, int64_t rows, const char *const *col_labels,
                   int64_t cols, const float *weights)
{
    cJSON_AddStringToObject(answer, "kind", kind_names[r->kind]);
    if (layer >= 0) {
        cJSON_AddNumberToObject(answer, "layer", (double)layer);
        if (r->head >= 0)
            cJSON_AddNumberToObject(answer, "head", (double)r->head);
        else
            cJSON_AddStringToObject(answer, "head", "mean");
    }
    cJSON_AddNumberToObject(answer, "layers", (double)layers);
    cJSON_AddNumberToObject(answer, "heads", (double)heads);
    cJSON_AddItemToObject(answer, "rows", cJSON_CreateStringArray(row_labels, (int)rows));
    cJSON_AddItemToObject(answer, "columns", cJSON_CreateStringArray(col_labels, (int)cols));
    cJSON *matrix = cJSON_AddArrayToObject(answer, "weights");
    int ok = matrix != NULL;
    for (int64_t i = 0; ok && i < rows; i++)
        ok = cJSON_AddItemToArray(matrix, cJSON_CreateFloatArray(weights + i * cols, (int)cols));
    return ok;
}

/* The maps of one kind and layer for r's text and its best translation (beam search as for
 * /v1/translate): cross-attention from the search itself, as attn translate --alignment gives
 * it; the self-attentions from the Transformer re-run on the source and the translation, as
 * attn viz --kind draws them. One head, or their mean. */
static void answer_attention(attn_server *s, request *r)
{
    const int64_t src_length = r->counts[0];
    if (src_length == 0) {
        request_set_error(r, HTTP_BAD_REQUEST, "\"text\" has no tokens");
        return;
    }
    const attn_model_config *config = attn_bundle_config(s->bundle);
    if (r->kind == POOLING_KIND) {
        request_set_error(r, HTTP_BAD_REQUEST,
                          "only a classifier pools its encoder: \"kind\" \"cross\", \"self\" "
                          "or \"encoder\" show a translation's attention");
        return;
    }
    if (r->kind != ATTN_CROSS_ATTENTION && config->arch != ATTN_ARCH_TRANSFORMER) {
        request_set_error(r, HTTP_BAD_REQUEST,
                          "this model has no self-attention (an rnn); \"kind\": \"cross\" "
                          "shows its alignment");
        return;
    }
    attn_decode_result *result = NULL;
    attn_decode_options options = r->job.options;
    options.alignments = 1;
    if (attn_bundle_decode(s->bundle, 1, (const int32_t *const *)r->ids, r->counts, &options,
                           &result) != ATTN_OK) {
        request_set_error(r, HTTP_INTERNAL_ERROR, attn_last_error());
        return;
    }
    const attn_hypothesis *h = &result->sentences[0].hypotheses[0];
    const int encoder = r->kind == ATTN_ENCODER_SELF_ATTENTION;
    const int64_t layers = r->kind == ATTN_CROSS_ATTENTION ? result->cross_layers
                           : encoder                       ? config->encoder_layers
                                                           : config->decoder_layers;
    const int64_t heads = r->kind == ATTN_CROSS_ATTENTION ? result->cross_heads : config->num_heads;
    const int64_t layer = r->layer < 0 ? layers - 1 : r->layer;
    if (map_choice_refused(r, layer, layers, heads, "layers of this kind")) {
        attn_decode_result_destroy(result);
        return;
    }
    const int64_t rows = encoder ? src_length : h->steps;
    const int64_t cols = r->kind == ATTN_DECODER_SELF_ATTENTION ? h->steps : src_length;
    const size_t cells = (size_t)(rows * cols);
    float *maps = malloc((size_t)heads * cells * sizeof *maps);
    float *weights = malloc(cells * sizeof *weights);
    int32_t *inputs = malloc((size_t)h->steps * sizeof *inputs);
    const char **row_labels = malloc((size_t)rows * sizeof *row_labels);
    const char **col_labels = malloc((size_t)cols * sizeof *col_labels);
    cJSON *answer = cJSON_CreateObject();
    char *text = NULL;
    const char *failure = "out of memory";
    if (maps == NULL || weights == NULL || inputs == NULL || row_labels == NULL ||
        col_labels == NULL || answer == NULL)
        goto done;
    failure = NULL;
    if (r->kind == ATTN_CROSS_ATTENTION) {
        if (attn_decode_alignment(result, h, src_length, layer, r->head, weights) != ATTN_OK)
            failure = attn_last_error();
    } else {
        /* The decoder read <s> and then each output token but the last. */
        inputs[0] = ATTN_BOS_ID;
        for (int64_t i = 1; i < h->steps; i++)
            inputs[i] = h->tokens[i - 1];
        if (attn_model_attention_weights(attn_bundle_model(s->bundle), attn_bundle_graph(s->bundle),
                                         r->ids[0], src_length, inputs, h->steps,
                                         (attn_attention_kind)r->kind, layer, maps) != ATTN_OK)
            failure = attn_last_error();
        else
            chosen_head(r, maps, heads, cells, weights);
    }
    if (failure != NULL || attn_bundle_text(s->bundle, h, &text) != ATTN_OK) {
        failure = failure != NULL ? failure : attn_last_error();
        goto done;
    }
    if (encoder) {
        attn_bundle_labels(s->bundle, ATTN_BUNDLE_SOURCE, r->ids[0], src_length, row_labels);
    } else {
        attn_bundle_labels(s->bundle, ATTN_BUNDLE_TARGET, h->tokens, h->length, row_labels);
        if (h->finished)
            row_labels[h->length] = "</s>";
    }
    if (r->kind == ATTN_DECODER_SELF_ATTENTION) {
        col_labels[0] = "<s>";
        attn_bundle_labels(s->bundle, ATTN_BUNDLE_TARGET, h->tokens, h->steps - 1, col_labels + 1);
    } else {
        attn_bundle_labels(s->bundle, ATTN_BUNDLE_SOURCE, r->ids[0], src_length, col_labels);
    }
    cJSON_AddStringToObject(answer, "translation", text);
    cJSON_AddNumberToObject(answer, "score", h->score);
    if (!add_map(answer, r, layer, layers, heads, row_labels, rows, col_labels, cols, weights))
        failure = "out of memory";
done:
    if (failure != NULL) {
        request_set_error(r, HTTP_INTERNAL_ERROR, failure);
        cJSON_Delete(answer);
    } else {
        r->results[0] = answer;
    }
    free(text);
    free(maps);
    free(weights);
    free(inputs);
    free(row_labels);
    free(col_labels);
    attn_decode_result_destroy(result);
}

/* A language model's causal self-attention over r's text read as a prompt (</s> then its
 * tokens, as attn viz draws it): one layer, one head or their mean, rows and columns the same
 * tokens. The answer then fails or holds the maps in results[0]. */
static void answer_prompt_attention(attn_server *s, request *r)
{
    const attn_model_config *config = attn_bundle_config(s->bundle);
    if (r->kind != ATTN_DECODER_SELF_ATTENTION) {
        request_set_error(r, HTTP_BAD_REQUEST,
                          "a language model's one attention is its causal self-attention: "
                          "\"kind\": \"self\"");
        return;
    }
    const int64_t layers = config->decoder_layers, heads = config->num_heads;
    const int64_t layer = r->layer < 0 ? layers - 1 : r->layer;
    if (map_choice_refused(r, layer, layers, heads, "layers"))
        return;
    if ((r->results = calloc(1, sizeof *r->results)) == NULL) {
        request_set_error(r, HTTP_INTERNAL_ERROR, "out of memory");
        return;
    }
    int32_t *ids = NULL;
    int64_t count = 0;
    if (attn_bundle_encode_prompt(s->bundle, r->texts[0], 0, &ids, &count, NULL, NULL) != ATTN_OK) {
        char message[sizeof r->error];
        snprintf(message, sizeof message, "\"text\": %s", attn_last_error());
        request_set_error(r, HTTP_BAD_REQUEST, message);
        return;
    }
    const size_t cells = (size_t)(count * count);
    float *maps = malloc((size_t)heads * cells * sizeof *maps);
    float *weights = malloc(cells * sizeof *weights);
    const char **labels = malloc((size_t)count * sizeof *labels);
    cJSON *answer = cJSON_CreateObject();
    const char *failure = "out of memory";
    if (maps == NULL || weights == NULL || labels == NULL || answer == NULL)
        goto done;
    failure = NULL;
    if (attn_bundle_labels(s->bundle, ATTN_BUNDLE_TARGET, ids, count, labels) != ATTN_OK ||
        attn_model_attention_weights(attn_bundle_model(s->bundle), attn_bundle_graph(s->bundle),
                                     NULL, 0, ids, count, ATTN_DECODER_SELF_ATTENTION, layer,
                                     maps) != ATTN_OK) {
        failure = attn_last_error();
        goto done;
    }
    chosen_head(r, maps, heads, cells, weights);
    if (!add_map(answer, r, layer, layers, heads, labels, count, labels, count, weights))
        failure = "out of memory";
done:
    if (failure != NULL) {
        request_set_error(r, HTTP_INTERNAL_ERROR, failure);
        cJSON_Delete(answer);
    } else {
        r->results[0] = answer;
    }
    free(ids);
    free(maps);
    free(weights);
    free(labels);
}

/* A classifier's view of r's text: its class, and either the weight its pooling gives each
 * token (one row, the class, over the tokens) or one layer of its encoder's self-attention
 * (the classification token first under pooling "cls", as the model reads it). The answer
 * then fails or holds the map in results[0]. */
static void answer_classifier_attention(attn_server *s, request *r)
{
    const attn_model_config *config = attn_bundle_config(s->bundle);
    if (r->kind != POOLING_KIND && r->kind != ATTN_ENCODER_SELF_ATTENTION) {
        request_set_error(r, HTTP_BAD_REQUEST,
                          "a classifier is an encoder without a decoder: \"kind\" \"pooling\" "
                          "or \"encoder\"");
        return;
    }
    const int pooling = r->kind == POOLING_KIND;
    if (!pooling && config->arch == ATTN_ARCH_RNN_CLASSIFIER) {
        request_set_error(r, HTTP_BAD_REQUEST,
                          "an rnn classifier has no self-attention (its recurrent encoder reads "
                          "the text in order; only its pooling attends): \"kind\" \"pooling\"");
        return;
    }
    const int64_t layers = config->encoder_layers, heads = config->num_heads;
    const int64_t layer = r->layer < 0 ? layers - 1 : r->layer;
    if (!pooling && map_choice_refused(r, layer, layers, heads, "layers"))
        return;
    const int64_t count = r->counts[0];
    if (count == 0) {
        request_set_error(r, HTTP_BAD_REQUEST, "\"text\" has no tokens");
        return;
    }
    const int cls = !pooling && config->pooling == ATTN_POOLING_CLS;
    const int64_t len = count + cls, rows = pooling ? 1 : len;
    const int64_t classes = attn_labels_count(attn_bundle_classes(s->bundle));
    const size_t cells = (size_t)(rows * len);
    float *probabilities = malloc((size_t)classes * sizeof *probabilities);
    float *maps = malloc((size_t)(pooling ? 1 : heads) * cells * sizeof *maps);
    float *weights = malloc(cells * sizeof *weights);
    int32_t *read = malloc((size_t)len * sizeof *read);
    const char **labels = malloc((size_t)len * sizeof *labels);
    cJSON *answer = cJSON_CreateObject();
    const char *failure = "out of memory";
    if (probabilities == NULL || maps == NULL || weights == NULL || read == NULL ||
        labels == NULL || answer == NULL)
        goto done;
    failure = NULL;
    read[0] = ATTN_MODEL_CLS_ID;
    labels[0] = "<cls>";
    memcpy(read + cls, r->ids[0], (size_t)count * sizeof *read);
    if (attn_bundle_classify(s->bundle, 1, (const int32_t *const *)r->ids, r->counts,
                             probabilities) != ATTN_OK ||
        attn_bundle_labels(s->bundle, ATTN_BUNDLE_SOURCE, r->ids[0], count, labels + cls) !=
            ATTN_OK ||
        (pooling ? attn_bundle_pooling_weights(s->bundle, r->ids[0], count, weights)
                 : attn_model_attention_weights(attn_bundle_model(s->bundle),
                                                attn_bundle_graph(s->bundle), read, len, NULL, 0,
                                                ATTN_ENCODER_SELF_ATTENTION, layer, maps)) !=
            ATTN_OK) {
        failure = attn_last_error();
        goto done;
    }
    if (!pooling)
        chosen_head(r, maps, heads, cells, weights);
    const int64_t best = attn_argmax(classes, probabilities);
    const char *label = attn_labels_name(attn_bundle_classes(s->bundle), best);
    cJSON_AddStringToObject(answer, "label", label);
    cJSON_AddNumberToObject(answer, "probability", probabilities[best]);
    if (!add_map(answer, r, pooling ? -1 : layer, layers, heads, pooling ? &label : labels, rows,
                 labels, len, weights))
        failure = "out of memory";
done:
    if (failure != NULL) {
        request_set_error(r, HTTP_INTERNAL_ERROR, failure);
        cJSON_Delete(answer);
    } else {
        r->results[0] = answer;
    }
    free(probabilities);
    free(maps);
    free(weights);
    free(read);
    free(labels);
}

static void *worker_main(void *arg)
{
    attn_server *s = arg;
    request *pending = NULL, *pending_tail = NULL; /* the worker's own list, oldest first */
    const int language_model = attn_bundle_config(s->bundle)->arch == ATTN_ARCH_TRANSFORMER_LM;
    const int classifier = attn_model_arch_is_classifier(attn_bundle_config(s->bundle)->arch);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        /* Take the connections' new requests; encode them outside the lock. */
        request *incoming = s->incoming_head;
        s->incoming_head = s->incoming_tail = NULL;
        pthread_mutex_unlock(&s->lock);
        for (request *r = incoming, *next; r != NULL; r = next) {
            next = r->next_incoming;
            if (r->attention && language_model) {
                answer_prompt_attention(s, r);
                request_finish(s, r);
                continue;
            }
            if (r->job.task == SERVE_GENERATE) {
                if (encode_prompts(s, r) != 0)
                    continue;
                request_accept(s, r);
            } else if (encode_request(s, r) != 0) {
                continue;
            }
            if (r->attention) {
                if (classifier)
                    answer_classifier_attention(s, r);
                else
                    answer_attention(s, r);
                request_finish(s, r);
                continue;
            }
            if (r->answered == r->n) {
                request_finish(s, r); /* only empty texts */
                continue;
            }
            r->job.next = NULL;
            if (pending_tail != NULL)
                pending_tail->job.next = &r->job;
            else
                pending = r;
            pending_tail = r;
        }
        pthread_mutex_lock(&s->lock);
        const int draining = s->stopping;
        pthread_mutex_unlock(&s->lock);
        int64_t wait = 0;
        const int64_t size =
            serve_plan_batch(pending != NULL ? &pending->job : NULL, now_ms(), s->options.max_batch,
                             s->options.max_wait_ms, draining, &wait);
        if (size > 0) {
            if (pending->job.task == SERVE_GENERATE)
                generate_batch(s, pending, size);
            else
                answer_batch(s, pending, size);
            pending = drop_done(s, pending);
            pending_tail = pending;
            while (pending_tail != NULL && pending_tail->job.next != NULL)
                pending_tail = (request *)pending_tail->job.next;
        }
        pthread_mutex_lock(&s->lock);
        int64_t queued = 0;
        for (request *r = pending; r != NULL; r = (request *)r->job.next)
            queued += r->job.decodable - r->job.taken;
        s->queued_sentences = queued;
        if (size > 0 || s->incoming_head != NULL)
            continue;
        if (pending == NULL && s->stopping)
            break;
        if (pending == NULL) {
            pthread_cond_wait(&s->worker_wake, &s->lock);
        } else if (wait > 0) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += wait / 1000;
            until.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->worker_wake, &s->lock, &until);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- parsing requests -------------------------------------------------------------------- */

/* Why a request is refused: the HTTP status and the message of its JSON error. */
typedef struct refusal {
    int status;
    char message[512];
} refusal;

static void refuse(refusal *why, int status, const char *format, ...) ATTN_PRINTF(3, 4);
static void refuse(refusal *why, int status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    why->status = status;
    vsnprintf(why->message, sizeof why->message, format, args);
    va_end(args);
}

/* The body as a JSON object whose fields are all among `fields` (NULL-terminated), or NULL. */
static cJSON *parse_body(const char *body, size_t length, const char *const *fields,
                         const char *field_list, refusal *why)
{
    if (!attn_utf8_valid(body, length)) {
        refuse(why, HTTP_BAD_REQUEST, "the body is not valid UTF-8");
        return NULL;
    }
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(body, length, &end, 0);
    if (json == NULL) {
        const size_t at = end != NULL && end >= body ? (size_t)(end - body) : 0;
        refuse(why, HTTP_BAD_REQUEST, "the body is not valid JSON (at byte %zu)", at);
        return NULL;
    }
    if (!cJSON_IsObject(json)) {
        refuse(why, HTTP_BAD_REQUEST, "the body must be a JSON object");
        cJSON_Delete(json);
        return NULL;
    }
    const cJSON *field;
    cJSON_ArrayForEach(field, json)
    {
        int known = 0;
        for (const char *const *f = fields; *f != NULL && !known; f++)
            known = strcmp(field->string, *f) == 0;
        if (!known) {
            refuse(why, HTTP_BAD_REQUEST, "unknown field \"%.64s\" (fields: %s)", field->string,
                   field_list);
            cJSON_Delete(json);
            return NULL;
        }
    }
    return json;
}

/* An optional integer field in [lo, hi] into *value (left alone when absent). 0, or 1 after
 * refusing. */
static int integer_field(const cJSON *json, const char *name, int64_t lo, int64_t hi,
                         int64_t *value, refusal *why)
{
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(json, name);
    if (field == NULL)
        return 0;
    if (!cJSON_IsNumber(field) || !(field->valuedouble >= (double)lo) ||
        field->valuedouble > (double)hi ||
        field->valuedouble != (double)(int64_t)field->valuedouble) {
        refuse(why, HTTP_BAD_REQUEST, "\"%s\" must be an integer from %lld to %lld", name,
               (long long)lo, (long long)hi);
        return 1;
    }
    *value = (int64_t)field->valuedouble;
    return 0;
}

/* A request of n texts with default options (beam 5, as attn translate). */
static request *request_create(int64_t n, refusal *why)
{
    request *r = calloc(1, sizeof *r);
    if (r == NULL || (r->texts = calloc((size_t)n, sizeof *r->texts)) == NULL) {
        free(r);
        refuse(why, HTTP_INTERNAL_ERROR, "out of memory");
        return NULL;
    }
    pthread_cond_init(&r->finished_changed, NULL);
    r->n = n;
    r->job.options = attn_decode_default_options();
    r->job.options.beam_size = 5;
    r->layer = -1;
    r->head = -1;
    return r;
}

/* The number of texts in "text", an array of 1 to max_sentences strings; -1 after refusing. */
static int64_t texts_in(const attn_server *s, const cJSON *text, refusal *why)
{
    const int64_t n = cJSON_GetArraySize(text);
    if (!cJSON_IsArray(text))
        refuse(why, HTTP_BAD_REQUEST, "\"text\" must be an array of strings");
    else if (n == 0)
        refuse(why, HTTP_BAD_REQUEST, "\"text\" has no sentences");
    else if (n > s->options.max_sentences)
        refuse(why, HTTP_TOO_LARGE, "\"text\" has %lld sentences; the limit is %lld", (long long)n,
               (long long)s->options.max_sentences);
    else
        return n;
    return -1;
}

/* Copies the strings of "text" into r's texts; on refusing, frees r and returns NULL. */
static request *take_texts(request *r, const cJSON *text, refusal *why)
{
    int64_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, text)
    {
        if (!cJSON_IsString(item)) {
            refuse(why, HTTP_BAD_REQUEST, "text[%lld] is not a string", (long long)i);
            break;
        }
        if ((r->texts[i] = strdup(item->valuestring)) == NULL) {
            refuse(why, HTTP_INTERNAL_ERROR, "out of memory");
            break;
        }
        i++;
    }
    if (i < r->n) {
        request_free(r);
        return NULL;
    }
    return r;
}

/* POST /v1/translate: {"text": [...], "beam", "nbest", "alignment"}. */
static request *parse_translate(attn_server *s, const char *body, size_t length, refusal *why)
{
    static const char *const fields[] = {"text", "beam", "nbest", "alignment", NULL};
    cJSON *json = parse_body(body, length, fields, "text, beam, nbest, alignment", why);
    if (json == NULL)
        return NULL;
    request *r = NULL;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(json, "text");
    const cJSON *alignment = cJSON_GetObjectItemCaseSensitive(json, "alignment");
    int64_t beam = 5, nbest = 1;
    const int64_t n = texts_in(s, text, why);
    if (n < 0)
        ;
    else if (integer_field(json, "beam", 1, ATTN_DECODE_MAX_BEAM, &beam, why) != 0 ||
             integer_field(json, "nbest", 1, beam, &nbest, why) != 0)
        ;
    else if (alignment != NULL && !cJSON_IsBool(alignment))
        refuse(why, HTTP_BAD_REQUEST, "\"alignment\" must be true or false");
    else if ((r = request_create(n, why)) != NULL) {
        r->job.options.beam_size = beam;
        r->job.options.nbest = nbest;
        r->job.options.alignments = cJSON_IsTrue(alignment);
        r = take_texts(r, text, why);
    }
    cJSON_Delete(json);
    return r;
}

/* A number field in (lo, hi] into *value (left alone when absent). 0, or 1 after refusing. */
static int number_field(const cJSON *json, const char *name, double lo, double hi, double *value,
                        refusal *why)
{
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(json, name);
    if (field == NULL)
        return 0;
    if (!cJSON_IsNumber(field) || !(field->valuedouble > lo) || field->valuedouble > hi) {
        refuse(why, HTTP_BAD_REQUEST, "\"%s\" must be a number above %g and at most %g", name, lo,
               hi);
        return 1;
    }
    *value = field->valuedouble;
    return 0;
}

/* An optional true/false field into *value (left alone when absent). 0, or 1 after refusing. */
static int bool_field(const cJSON *json, const char *name, int *value, refusal *why)
{
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(json, name);
    if (field == NULL)
        return 0;
    if (!cJSON_IsBool(field)) {
        refuse(why, HTTP_BAD_REQUEST, "\"%s\" must be true or false", name);
        return 1;
    }
    *value = cJSON_IsTrue(field);
    return 0;
}

/* POST /v1/classify: {"text": [...], "pooling", "truncate"}. */
static request *parse_classify(attn_server *s, const char *body, size_t length, refusal *why)
{
    static const char *const fields[] = {"text", "pooling", "truncate", NULL};
    cJSON *json = parse_body(body, length, fields, "text, pooling, truncate", why);
    if (json == NULL)
        return NULL;
    request *r = NULL;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(json, "text");
    int pooling = 0, truncate = 0;
    const int64_t n = texts_in(s, text, why);
    if (n >= 0 && bool_field(json, "pooling", &pooling, why) == 0 &&
        bool_field(json, "truncate", &truncate, why) == 0 &&
        (r = request_create(n, why)) != NULL) {
        r->job.task = SERVE_CLASSIFY;
        r->pooling = pooling;
        r->truncate = truncate;
        r = take_texts(r, text, why);
    }
    cJSON_Delete(json);
    return r;
}

/* Seeds travel as JSON numbers, which hold integers exactly up to 2^53. */
#define LARGEST_EXACT_SEED 9007199254740991.0

/* POST /v1/generate: {"prompts": [...]} or {"prompt": "..."}, with attn generate's options
 * (max_new_tokens, temperature, top_k, top_p, seed, greedy), "truncate", "stop_at_end_of_line"
 * and "stream". */
static request *parse_generate(attn_server *s, const char *body, size_t length, refusal *why)
{
    static const char *const fields[] = {
        "prompts", "prompt", "max_new_tokens", "temperature",         "top_k",  "top_p",
        "seed",    "greedy", "truncate",       "stop_at_end_of_line", "stream", NULL};
    cJSON *json = parse_body(body, length, fields,
                             "prompts or prompt, max_new_tokens, temperature, top_k, top_p, "
                             "seed, greedy, truncate, stop_at_end_of_line, stream",
                             why);
    if (json == NULL)
        return NULL;
    request *r = NULL;
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(json, "prompts");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(json, "prompt");
    attn_sample_options sampling = attn_sample_default_options();
    int64_t seed = 0;
    int truncate = 0, stop_at_end_of_line = 0, stream = 0;
    const int64_t n = prompts != NULL ? cJSON_GetArraySize(prompts) : 1;
    if ((prompts == NULL) == (prompt == NULL))
        refuse(why, HTTP_BAD_REQUEST,
               "give either \"prompts\" (an array of strings) or \"prompt\" (a string)");
    else if (prompt != NULL && !cJSON_IsString(prompt))
        refuse(why, HTTP_BAD_REQUEST, "\"prompt\" must be a string");
    else if (prompts != NULL && !cJSON_IsArray(prompts))
        refuse(why, HTTP_BAD_REQUEST, "\"prompts\" must be an array of strings");
    else if (n == 0)
        refuse(why, HTTP_BAD_REQUEST, "\"prompts\" has no prompts");
    else if (n > s->options.max_sentences)
        refuse(why, HTTP_TOO_LARGE, "\"prompts\" has %lld prompts; the limit is %lld", (long long)n,
               (long long)s->options.max_sentences);
    else if (integer_field(json, "max_new_tokens", 1, s->options.max_new_tokens,
                           &sampling.max_new_tokens, why) != 0 ||
             number_field(json, "temperature", 0, 1e6, &sampling.temperature, why) != 0 ||
             integer_field(json, "top_k", 0, INT32_MAX, &sampling.top_k, why) != 0 ||
             number_field(json, "top_p", 0, 1, &sampling.top_p, why) != 0 ||
             integer_field(json, "seed", 0, (int64_t)LARGEST_EXACT_SEED, &seed, why) != 0 ||
             bool_field(json, "greedy", &sampling.greedy, why) != 0 ||
             bool_field(json, "truncate", &truncate, why) != 0 ||
             bool_field(json, "stop_at_end_of_line", &stop_at_end_of_line, why) != 0 ||
             bool_field(json, "stream", &stream, why) != 0)
        ;
    else if ((r = request_create(n, why)) != NULL) {
        r->job.task = SERVE_GENERATE;
        sampling.seed = (uint64_t)seed;
        sampling.stop_token = stop_at_end_of_line ? ATTN_EOS_ID : -1;
        r->job.sampling = sampling;
        r->truncate = truncate;
        r->stream = stream;
        int64_t i = 0;
        const cJSON *item;
        if (prompt != NULL && (r->texts[i++] = strdup(prompt->valuestring)) == NULL)
            refuse(why, HTTP_INTERNAL_ERROR, "out of memory");
        cJSON_ArrayForEach(item, prompts)
        {
            if (!cJSON_IsString(item)) {
                refuse(why, HTTP_BAD_REQUEST, "prompts[%lld] is not a string", (long long)i);
                break;
            }
            if ((r->texts[i] = strdup(item->valuestring)) == NULL) {
                refuse(why, HTTP_INTERNAL_ERROR, "out of memory");
                break;
            }
            i++;
        }
        if (i < n || (prompt != NULL && r->texts[0] == NULL)) {
            request_free(r);
            r = NULL;
        }
    }
    cJSON_Delete(json);
    return r;
}

/* POST /v1/attention: {"text": "...", "kind": "cross"|"self"|"encoder", "layer", "head"}; a
 * language model's kind is "self" (the default for it). */
static request *parse_attention(attn_server *s, const char *body, size_t length, refusal *why)
{
    static const char *const fields[] = {"text", "kind", "layer", "head", "beam", NULL};
    cJSON *json = parse_body(body, length, fields, "text, kind, layer, head, beam", why);
    if (json == NULL)
        return NULL;
    request *r = NULL;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(json, "text");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(json, "kind");
    const cJSON *head = cJSON_GetObjectItemCaseSensitive(json, "head");
    int64_t beam = 5, layer = -1, head_index = -1;
    const attn_model_arch arch = attn_bundle_config(s->bundle)->arch;
    int64_t kind_index = arch == ATTN_ARCH_TRANSFORMER_LM      ? ATTN_DECODER_SELF_ATTENTION
                         : attn_model_arch_is_classifier(arch) ? POOLING_KIND
                                                               : ATTN_CROSS_ATTENTION;
    if (kind != NULL) {
        kind_index = -1;
        for (int64_t k = 0; k < 4 && cJSON_IsString(kind); k++)
            if (strcmp(kind->valuestring, kind_names[k]) == 0)
                kind_index = k;
    }
    if (!cJSON_IsString(text))
        refuse(why, HTTP_BAD_REQUEST, "\"text\" must be a string");
    else if (kind_index < 0)
        refuse(why, HTTP_BAD_REQUEST,
               "\"kind\" must be \"cross\", \"self\", \"encoder\" or \"pooling\"");
    else if (integer_field(json, "beam", 1, ATTN_DECODE_MAX_BEAM, &beam, why) != 0 ||
             integer_field(json, "layer", 0, 1 << 20, &layer, why) != 0)
        ;
    else if (head != NULL && !(cJSON_IsString(head) && strcmp(head->valuestring, "mean") == 0) &&
             integer_field(json, "head", 0, 1 << 20, &head_index, why) != 0)
        ;
    else if ((r = request_create(1, why)) != NULL) {
        r->attention = 1;
        r->kind = (int)kind_index;
        r->layer = layer;
        r->head = head_index;
        r->job.options.beam_size = beam;
        if ((r->texts[0] = strdup(text->valuestring)) == NULL) {
            refuse(why, HTTP_INTERNAL_ERROR, "out of memory");
            request_free(r);
            r = NULL;
        }
    }
    cJSON_Delete(json);
    return r;
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

static enum MHD_Result respond(struct MHD_Connection *connection, unsigned status, char *json)
{
    if (json == NULL)
        return MHD_NO;
    struct MHD_Response *response =
        MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (response == NULL) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json; charset=utf-8");
    enum MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
}

static enum MHD_Result respond_error(struct MHD_Connection *connection, unsigned status,
                                     const char *message)
{
    cJSON *json = cJSON_CreateObject();
    char *text = NULL;
    if (json != NULL && cJSON_AddStringToObject(json, "error", message) != NULL)
        text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    return respond(connection, status, text);
}

/* {"results": [...]} from r's answered sentences or prompts (which it takes), or NULL. */
static cJSON *results_json(request *r)
{
    cJSON *answer = cJSON_CreateObject();
    cJSON *results = answer != NULL ? cJSON_AddArrayToObject(answer, "results") : NULL;
    for (int64_t i = 0; results != NULL && i < r->n; i++)
        if (cJSON_AddItemToArray(results, r->results[i]))
            r->results[i] = NULL; /* now answer's */
    if (results == NULL) {
        cJSON_Delete(answer);
        return NULL;
    }
    return answer;
}

/* The last line of a streamed answer: {"done": true, "results": [...]} or the error. */
static char *final_line(request *r)
{
    cJSON *answer = r->http_status == 0 ? results_json(r) : cJSON_CreateObject();
    if (answer != NULL && r->http_status != 0)
        cJSON_AddStringToObject(answer, "error", r->error);
    char *text = NULL;
    if (answer != NULL && cJSON_AddTrueToObject(answer, "done") != NULL)
        text = cJSON_PrintUnformatted(answer);
    cJSON_Delete(answer);
    return text;
}

/* libmicrohttpd's reader of a streamed answer, on the connection's own thread (so it may block):
 * the lines the worker queued, as they come, then the final line once the request is done. */
static ssize_t read_stream(void *cls, uint64_t position, char *buffer, size_t max)
{
    (void)position;
    request *r = cls;
    attn_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    while (r->lines_sent == r->lines_length && !r->finished)
        pthread_cond_wait(&r->finished_changed, &s->lock);
    if (r->lines_sent == r->lines_length && !r->final_line_queued) {
        /* The worker is done with r: its results are final and only this thread reads them. */
        pthread_mutex_unlock(&s->lock);
        char *last = final_line(r);
        pthread_mutex_lock(&s->lock);
        r->final_line_queued = 1;
        if (last == NULL ||
            append_bytes(&r->lines, &r->lines_length, &r->lines_capacity, last, strlen(last)) ||
            append_bytes(&r->lines, &r->lines_length, &r->lines_capacity, "\n", 1)) {
            free(last);
            pthread_mutex_unlock(&s->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        free(last);
    }
    size_t size = r->lines_length - r->lines_sent;
    size = size < max ? size : max;
    memcpy(buffer, r->lines + r->lines_sent, size);
    r->lines_sent += size;
    pthread_mutex_unlock(&s->lock);
    return size > 0 ? (ssize_t)size : MHD_CONTENT_READER_END_OF_STREAM;
}

/* Frees a streamed request once the worker is done with it: a client that hung up does not
 * stop its batch, whose other rows belong to other clients. */
static void free_stream(void *cls)
{
    request *r = cls;
    attn_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    while (!r->finished)
        pthread_cond_wait(&r->finished_changed, &s->lock);
    pthread_mutex_unlock(&s->lock);
    request_free(r);
}

/* Answers a streamed generate request once its prompts are encoded (a prompt that cannot be
 * read still gets its 400): 200 and one JSON line per token as they come, chunked. */
static enum MHD_Result answer_stream(attn_server *s, struct MHD_Connection *connection, request *r)
{
    pthread_mutex_lock(&s->lock);
    while (!r->accepted && !r->finished)
        pthread_cond_wait(&r->finished_changed, &s->lock);
    const int refused = !r->accepted;
    pthread_mutex_unlock(&s->lock);
    if (refused) {
        enum MHD_Result result = respond_error(connection, (unsigned)r->http_status, r->error);
        request_free(r);
        return result;
    }
    struct MHD_Response *response =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, r, free_stream);
    if (response == NULL) {
        free_stream(r);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/x-ndjson; charset=utf-8");
    enum MHD_Result queued = MHD_queue_response(connection, HTTP_OK, response);
    MHD_destroy_response(response);
    return queued;
}

/* Queues r, waits for the worker, and answers: {"results": [...]} for a translation or a
 * generation, the maps for an attention request, or the error; a streamed generation answers
 * as it goes (answer_stream). */
static enum MHD_Result answer_request(attn_server *s, struct MHD_Connection *connection, request *r)
{
    r->server = s;
    pthread_mutex_lock(&s->lock);
    r->job.arrival_ms = now_ms();
    if (s->incoming_tail != NULL)
        s->incoming_tail->next_incoming = r;
    else
        s->incoming_head = r;
    s->incoming_tail = r;
    pthread_cond_signal(&s->worker_wake);
    if (r->stream) {
        pthread_mutex_unlock(&s->lock);
        return answer_stream(s, connection, r);
    }
    while (!r->finished)
        pthread_cond_wait(&r->finished_changed, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (r->http_status != 0) {
        enum MHD_Result result = respond_error(connection, (unsigned)r->http_status, r->error);
        request_free(r);
        return result;
    }
    cJSON *answer = NULL;
    if (r->attention) {
        answer = r->results[0];
        r->results[0] = NULL;
    } else {
        answer = results_json(r);
    }
    char *text = answer != NULL ? cJSON_PrintUnformatted(answer) : NULL;
    cJSON_Delete(answer);
    request_free(r);
    if (text == NULL)
        return respond_error(connection, HTTP_INTERNAL_ERROR, "out of memory writing the answer");
    return respond(connection, HTTP_OK, text);
}

static enum MHD_Result health(attn_server *s, struct MHD_Connection *connection)
{
    pthread_mutex_lock(&s->lock);
    const int64_t queued = s->queued_sentences, in_flight = s->in_flight;
    pthread_mutex_unlock(&s->lock);
    char *text = malloc(128);
    if (text == NULL)
        return MHD_NO;
    snprintf(text, 128, "{\"status\":\"ok\",\"queued_sentences\":%lld,\"requests\":%lld}",
             (long long)queued, (long long)in_flight);
    return respond(connection, HTTP_OK, text);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *connection, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    (void)version;
    attn_server *s = cls;
    connection_state *state = *con_cls;
    if (state == NULL) {
        state = calloc(1, sizeof *state);
        if (state == NULL)
            return MHD_NO;
        *con_cls = state;
        pthread_mutex_lock(&s->lock);
        s->in_flight++;
        pthread_mutex_unlock(&s->lock);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* Past the limit the body is read and dropped, so the client gets its 413. */
        if (!state->too_large &&
            state->length + *upload_data_size > (size_t)s->options.max_body_bytes) {
            state->too_large = 1;
            free(state->body);
            state->body = NULL;
            state->length = state->capacity = 0;
        }
        if (!state->too_large) {
            if (state->length + *upload_data_size > state->capacity) {
                size_t capacity = state->capacity > 0 ? state->capacity : 4096;
                while (capacity < state->length + *upload_data_size)
                    capacity *= 2;
                char *grown = realloc(state->body, capacity);
                if (grown == NULL)
                    return MHD_NO;
                state->body = grown;
                state->capacity = capacity;
            }
            memcpy(state->body + state->length, upload_data, *upload_data_size);
            state->length += *upload_data_size;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    const int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    const int post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    const int attention = strcmp(url, "/v1/attention") == 0;
    const int generate = strcmp(url, "/v1/generate") == 0;
    const int classify = strcmp(url, "/v1/classify") == 0;
    if (strcmp(url, "/v1/translate") == 0 || attention || generate || classify) {
        if (!post)
            return respond_error(connection, HTTP_METHOD_NOT_ALLOWED, "use POST");
        /* Each kind of model answers one of the three tasks (and /v1/attention). */
        const attn_model_arch arch = attn_bundle_config(s->bundle)->arch;
        const int language_model = arch == ATTN_ARCH_TRANSFORMER_LM;
        const int classifier = attn_model_arch_is_classifier(arch);
        if (!attention && language_model && !generate)
            return respond_error(connection, HTTP_BAD_REQUEST,
                                 "this model is a language model, which continues text: POST "
                                 "/v1/generate {\"prompts\": [...]}");
        if (!attention && classifier && !classify)
            return respond_error(connection, HTTP_BAD_REQUEST,
                                 "this model is a classifier, which labels texts: POST "
                                 "/v1/classify {\"text\": [...]}");
        if (!attention && !language_model && !classifier && (generate || classify))
            return respond_error(connection, HTTP_BAD_REQUEST,
                                 "this model is an encoder-decoder, which translates: POST "
                                 "/v1/translate {\"text\": [...]}");
        refusal why = {0, ""};
        if (state->too_large) {
            refuse(&why, HTTP_TOO_LARGE, "the body is above the limit of %lld bytes",
                   (long long)s->options.max_body_bytes);
            return respond_error(connection, (unsigned)why.status, why.message);
        }
        const char *body = state->body != NULL ? state->body : "";
        request *r = attention  ? parse_attention(s, body, state->length, &why)
                     : generate ? parse_generate(s, body, state->length, &why)
                     : classify ? parse_classify(s, body, state->length, &why)
                                : parse_translate(s, body, state->length, &why);
        if (r == NULL)
            return respond_error(connection, (unsigned)why.status, why.message);
        return answer_request(s, connection, r);
    }
    if (strcmp(url, "/v1/health") == 0 || strcmp(url, "/v1/model") == 0) {
        if (!get)
            return respond_error(connection, HTTP_METHOD_NOT_ALLOWED, "use GET");
        if (url[4] == 'h')
            return health(s, connection);
        char *copy = strdup(s->model_json);
        return copy != NULL ? respond(connection, HTTP_OK, copy) : MHD_NO;
    }
    for (size_t i = 0; i < serve_page_file_count; i++) {
        const serve_page_file *file = &serve_page_files[i];
        if (strcmp(url, file->url) != 0)
            continue;
        if (!get)
            return respond_error(connection, HTTP_METHOD_NOT_ALLOWED, "use GET");
        struct MHD_Response *response = MHD_create_response_from_buffer(
            file->size, (void *)(uintptr_t)file->bytes, MHD_RESPMEM_PERSISTENT);
        if (response == NULL)
            return MHD_NO;
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, file->content_type);
        enum MHD_Result queued = MHD_queue_response(connection, HTTP_OK, response);
        MHD_destroy_response(response);
        return queued;
    }
    return respond_error(
        connection, HTTP_NOT_FOUND,
        "no such endpoint (POST /v1/translate, POST /v1/generate, POST /v1/classify, POST "
        "/v1/attention, GET /v1/health, GET /v1/model, GET /)");
}

static void completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                      enum MHD_RequestTerminationCode code)
{
    (void)connection;
    (void)code;
    attn_server *s = cls;
    connection_state *state = *con_cls;
    if (state == NULL)
        return;
    free(state->body);
    free(state);
    *con_cls = NULL;
    pthread_mutex_lock(&s->lock);
    s->in_flight--;
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

/* ---- the model's description ----------------------------------------------------------------- */

static cJSON *tokenizer_json(const attn_tokenizer *tokenizer)
{
    cJSON *json = cJSON_CreateObject();
    if (json == NULL)
        return NULL;
    const attn_tokenizer_kind kind = attn_tokenizer_get_kind(tokenizer);
    cJSON_AddStringToObject(json, "kind", attn_tokenizer_kind_name(kind));
    cJSON_AddNumberToObject(json, "vocab_size",
                            (double)attn_vocab_size(attn_tokenizer_vocab(tokenizer)));
    if (kind == ATTN_TOKENIZER_BPE)
        cJSON_AddNumberToObject(json, "merges", (double)attn_tokenizer_num_merges(tokenizer));
    return json;
}

/* GET /v1/model's answer: the config as attn train stored it, the tokenizers and precision. */
static attn_status describe_model(attn_server *s)
{
    char *config_text = NULL;
    attn_status status = attn_model_config_to_json(attn_bundle_config(s->bundle), &config_text);
    if (status != ATTN_OK)
        return status;
    cJSON *config = cJSON_Parse(config_text);
    free(config_text);
    cJSON *json = cJSON_CreateObject();
    if (config == NULL || json == NULL) {
        cJSON_Delete(config);
        cJSON_Delete(json);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_server_start: describing the model");
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(config, "arch");
    cJSON_AddStringToObject(json, "architecture",
                            cJSON_IsString(arch) ? arch->valuestring : "unknown");
    cJSON_AddStringToObject(
        json, "precision",
        attn_precision_name(attn_model_precision(attn_bundle_model(s->bundle))));
    cJSON_AddNumberToObject(
        json, "parameters",
        (double)attn_params_numel(attn_model_params(attn_bundle_model(s->bundle))));
    const attn_model_config *model_config = attn_bundle_config(s->bundle);
    if (model_config->arch == ATTN_ARCH_TRANSFORMER_LM)
    /* A language model has one tokenizer, a context its prompts must fit and the server's
     * cap on new tokens, which the page asks for at most. */
    {
        cJSON_AddNumberToObject(json, "context", (double)model_config->max_len);
        cJSON_AddNumberToObject(json, "max_new_tokens", (double)s->options.max_new_tokens);
    } else
        cJSON_AddItemToObject(json, "source_tokenizer",
                              tokenizer_json(attn_bundle_tokenizer(s->bundle, ATTN_BUNDLE_SOURCE)));
    if (attn_model_arch_is_classifier(model_config->arch)) {
        /* A classifier has no target tokens: its outputs are the classes. */
        const attn_labels *classes = attn_bundle_classes(s->bundle);
        cJSON *names = cJSON_AddArrayToObject(json, "classes");
        for (int64_t k = 0; names != NULL && k < attn_labels_count(classes); k++)
            cJSON_AddItemToArray(names, cJSON_CreateString(attn_labels_name(classes, k)));
    } else
        cJSON_AddItemToObject(json, "target_tokenizer",
                              tokenizer_json(attn_bundle_tokenizer(s->bundle, ATTN_BUNDLE_TARGET)));
    cJSON_AddItemToObject(json, "config", config);
    s->model_json = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (s->model_json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_server_start: describing the model");
    return ATTN_OK;
}

/* ---- starting and stopping ------------------------------------------------------------------- */

attn_server_options attn_server_default_options(void)
{
    attn_server_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 8080;
    o.max_batch = 32;
    o.max_wait_ms = 5;
    o.max_body_bytes = 1 << 20;
    o.max_sentences = 256;
    o.max_new_tokens = 1024;
    o.connection_timeout = 30;
    return o;
}

attn_status attn_server_start(attn_bundle *bundle, const attn_server_options *options,
                              attn_server **out)
{
    ATTN_CHECK_ARG(bundle != NULL && options != NULL && out != NULL,
                   "attn_server_start: bundle, options and out must not be NULL");
    *out = NULL;
    const attn_server_options *o = options;
    ATTN_CHECK_ARG(o->host != NULL, "attn_server_start: no host to bind");
    ATTN_CHECK_ARG(o->port >= 0 && o->port <= 65535, "attn_server_start: port %d is not 0-65535",
                   o->port);
    ATTN_CHECK_ARG(o->max_batch >= 1 && o->max_batch <= (1 << 20),
                   "attn_server_start: max_batch %lld is not 1-1048576", (long long)o->max_batch);
    ATTN_CHECK_ARG(o->max_wait_ms >= 0 && o->max_wait_ms <= 60000,
                   "attn_server_start: max_wait_ms %lld is not 0-60000", (long long)o->max_wait_ms);
    ATTN_CHECK_ARG(o->max_body_bytes >= 1 && o->max_sentences >= 1 && o->connection_timeout >= 1,
                   "attn_server_start: the limits must be positive");
    const attn_model_arch arch = attn_bundle_config(bundle)->arch;
    attn_status status = arch == ATTN_ARCH_TRANSFORMER_LM || attn_model_arch_is_classifier(arch)
                             ? ATTN_OK
                             : attn_bundle_check_encoder_decoder(bundle);
    if (status != ATTN_OK)
        return status;
    ATTN_CHECK_ARG(o->max_new_tokens >= 1 && o->max_new_tokens <= INT32_MAX,
                   "attn_server_start: max_new_tokens %lld is not 1-2147483647",
                   (long long)o->max_new_tokens);

    struct sockaddr_in address4;
    struct sockaddr_in6 address6;
    memset(&address4, 0, sizeof address4);
    memset(&address6, 0, sizeof address6);
    const int ipv6 = strchr(o->host, ':') != NULL;
    if (ipv6) {
        address6.sin6_family = AF_INET6;
        address6.sin6_port = htons((uint16_t)o->port);
        ATTN_CHECK_ARG(inet_pton(AF_INET6, o->host, &address6.sin6_addr) == 1,
                       "attn_server_start: host '%s' is not an IPv6 address", o->host);
    } else {
        address4.sin_family = AF_INET;
        address4.sin_port = htons((uint16_t)o->port);
        ATTN_CHECK_ARG(inet_pton(AF_INET, o->host, &address4.sin_addr) == 1,
                       "attn_server_start: host '%s' is not an IPv4 address (like 127.0.0.1)",
                       o->host);
    }

    attn_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_server_start: out of memory");
    s->bundle = bundle;
    s->options = *o;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->worker_wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if ((status = describe_model(s)) != ATTN_OK) {
        attn_server_stop(s);
        return status;
    }
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        attn_server_stop(s);
        return attn_fail(ATTN_ERR_INTERNAL, "attn_server_start: cannot start the worker thread");
    }
    s->worker_started = 1;
    const unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                           MHD_USE_POLL | MHD_USE_ITC | (ipv6 ? MHD_USE_IPv6 : 0);
    const struct sockaddr *address =
        ipv6 ? (const struct sockaddr *)&address6 : (const struct sockaddr *)&address4;
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, s,
                                 MHD_OPTION_SOCK_ADDR, address, MHD_OPTION_NOTIFY_COMPLETED,
                                 completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)o->connection_timeout, MHD_OPTION_END);
    if (s->daemon == NULL) {
        const int error = errno;
        attn_server_stop(s);
        return attn_fail(ATTN_ERR_IO, "attn_server_start: cannot listen on %s port %d: %s", o->host,
                         o->port, strerror(error));
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info != NULL ? (int)info->port : o->port;
    *out = s;
    return ATTN_OK;
}

int attn_server_port(const attn_server *server)
{
    return server != NULL ? server->port : 0;
}

void attn_server_stop(attn_server *s)
{
    if (s == NULL)
        return;
    if (s->daemon != NULL) {
        /* No new connections; the requests already received are answered first. */
        const MHD_socket listener = MHD_quiesce_daemon(s->daemon);
        if (listener != MHD_INVALID_SOCKET)
            close(listener);
        pthread_mutex_lock(&s->lock);
        while (s->in_flight > 0)
            pthread_cond_wait(&s->idle, &s->lock);
        pthread_mutex_unlock(&s->lock);
    }
    if (s->worker_started) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->worker_wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->worker, NULL);
    }
    if (s->daemon != NULL)
        MHD_stop_daemon(s->daemon);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->worker_wake);
    pthread_mutex_destroy(&s->lock);
    free(s->model_json);
    free(s);
}
