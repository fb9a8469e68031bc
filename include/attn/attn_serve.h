/* attn model server: a model bundle behind an HTTP JSON API, with requests from many clients
 * decoded together (the layer after bundle/).
 *
 * One worker thread owns the bundle (a bundle owns one graph: attn_bundle.h). Each HTTP
 * connection has its own thread that reads the request, queues it and waits for its answer, so a
 * slow or malformed request never holds up the others. The worker closes a batch when it holds
 * max_batch sentences or when the oldest queued sentence has waited max_wait_ms, whichever comes
 * first; only requests with the same search options (beam, nbest, alignment) share a batch, so a
 * sentence gets the answer it would get alone (docs/serving.md).
 *
 * A language model's prompts are continued the same way: sampled together as the rows of one
 * attn_bundle_generate call when their sampling options (seed included) agree, each prompt from
 * its own random stream, and streamed token by token when asked.
 *
 * API: POST /v1/translate, POST /v1/generate, POST /v1/attention, GET /v1/health, GET /v1/model
 * (docs/serving.md). */
#ifndef ATTN_SERVE_H
#define ATTN_SERVE_H

#include "attn/attn_bundle.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_server attn_server;

typedef struct attn_server_options {
    const char *host;           /* an IPv4 or IPv6 address to bind: "127.0.0.1" */
    int port;                   /* 0: any free port (attn_server_port tells which) */
    int64_t max_batch;          /* sentences decoded together, at most */
    int64_t max_wait_ms;        /* how long the oldest queued sentence may wait for others */
    int64_t max_body_bytes;     /* a larger request body answers 413 */
    int64_t max_sentences;      /* more sentences (or prompts) in one request answer 413 */
    int64_t max_new_tokens;     /* a generate request asking for more answers 400 */
    int64_t connection_timeout; /* seconds a connection may stay idle (a stalled client) */
} attn_server_options;

/* host 127.0.0.1, port 8080, max_batch 32, max_wait_ms 5, 1 MiB bodies, 256 sentences per
 * request, 1024 new tokens per prompt, 30 s connection timeout. */
ATTN_API attn_server_options attn_server_default_options(void);

/* Starts serving bundle (an encoder-decoder, attn_bundle_check_encoder_decoder, or a language
 * model, which POST /v1/generate continues), which the server uses from its worker thread until
 * attn_server_stop; the caller keeps ownership and must not use it meanwhile. Fails with
 * ATTN_ERR_INVALID_ARGUMENT for an option out of range or a host that is not an address,
 * ATTN_ERR_IO when the address cannot be bound. */
ATTN_API attn_status attn_server_start(attn_bundle *bundle, const attn_server_options *options,
                                       attn_server **out);

/* The port the server listens on. */
ATTN_API int attn_server_port(const attn_server *server);

/* Stops accepting connections, answers every request already received (including those still
 * being read), then stops the threads and frees the server. NULL is ignored. */
ATTN_API void attn_server_stop(attn_server *server);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_SERVE_H */
