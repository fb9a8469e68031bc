/* attn serve: a model behind the HTTP JSON API of the serve layer (attn_serve.h) until SIGTERM
 * or SIGINT, which finish the requests in flight before the program exits. */
#define _POSIX_C_SOURCE 200809L /* sigwait, pthread_sigmask */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/precision.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct serve_args {
    const char *model, *host, *precision;
    int64_t port, max_batch, max_wait, threads, max_body, max_sentences, max_new_tokens;
} serve_args;

#define FIELD(name) offsetof(serve_args, name)

static const cli_option serve_options[] = {
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "FILE",
                "the model: weights, config and tokenizers")},
    {CLI_OPTION("--host", CLI_STRING, FIELD(host), "ADDRESS",
                "the address to listen on (0.0.0.0: every IPv4 interface) [127.0.0.1]")},
    {CLI_OPTION("--port", CLI_INT, FIELD(port), "N", "the port; 0: any free one"), .min = 0,
     .max = 65535, .show_default = 1},
    {CLI_OPTION("--max-batch", CLI_INT, FIELD(max_batch), "N",
                "sentences decoded together, at most"),
     .min = 1, .max = 1 << 20, .show_default = 1},
    {CLI_OPTION("--max-wait", CLI_INT, FIELD(max_wait), "MS",
                "how long the oldest queued sentence waits for others to fill its batch"),
     .min = 0, .max = 60000, .show_default = 1},
    {CLI_OPTION("--max-body", CLI_INT, FIELD(max_body), "BYTES",
                "a larger request body answers 413"),
     .min = 1, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--max-sentences", CLI_INT, FIELD(max_sentences), "N",
                "more sentences in one request answer 413"),
     .min = 1, .max = 1 << 20, .show_default = 1},
    {CLI_OPTION("--max-new-tokens", CLI_INT, FIELD(max_new_tokens), "N",
                "a language model: a generate request asking for more new tokens per prompt "
                "answers 400"),
     .min = 1, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--threads", CLI_INT, FIELD(threads), "N",
                "threads of the decoder (0: ATTN_NUM_THREADS or all cores)"),
     .min = 0, .max = 1 << 16, .show_default = 1},
    {CLI_OPTION("--precision", CLI_STRING, FIELD(precision), "auto|fp32|bf16|int8",
                CLI_INFERENCE_PRECISION_HELP)},
};
#define N_SERVE_OPTIONS (sizeof serve_options / sizeof serve_options[0])

static const cli_command serve_command = {
    "serve",
    "attn serve --model MODEL.safetensors [--host 127.0.0.1] [--port 8080] [options]",
    "Serves the model over HTTP: POST /v1/translate {\"text\": [...], \"beam\": 5, \"nbest\": 1,\n"
    "\"alignment\": false}, GET /v1/health, GET /v1/model (docs/serving.md); a language model\n"
    "answers POST /v1/generate {\"prompts\": [...], \"max_new_tokens\": 200, \"seed\": 0,\n"
    "\"stream\": false, ...} instead of /v1/translate, a classifier POST /v1/classify\n"
    "{\"text\": [...], \"pooling\": false}. Requests from all clients are decoded\n"
    "together in batches of up to --max-batch sentences (or prompts). Prints\n"
    "'attn serve: listening on http://HOST:PORT' on stderr once it accepts requests.\n"
    "SIGTERM or SIGINT answers the requests already received, then exits 0.\n",
    serve_options,
    N_SERVE_OPTIONS,
    NULL};

int attn_cmd_serve(int argc, char **argv)
{
    const attn_server_options defaults = attn_server_default_options();
    serve_args a;
    memset(&a, 0, sizeof a);
    a.host = defaults.host;
    a.precision = "auto";
    a.port = defaults.port;
    a.max_batch = defaults.max_batch;
    a.max_wait = defaults.max_wait_ms;
    a.max_body = defaults.max_body_bytes;
    a.max_sentences = defaults.max_sentences;
    a.max_new_tokens = defaults.max_new_tokens;
    int given[N_SERVE_OPTIONS] = {0};
    const int code = cli_parse(&serve_command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    if (a.model == NULL)
        return cli_usage_error(&serve_command, "--model MODEL.safetensors is required");
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("serve");
        return CLI_EXIT_USAGE;
    }
    /* Every thread started from here on (the server's) leaves the signals to sigwait below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up is the connection's error, not ours */

    attn_bundle *bundle = NULL;
    if (attn_bundle_load(a.model, &bundle) != ATTN_OK) {
        cli_library_error("serve");
        return 1;
    }
    if (cli_set_model_precision("serve", attn_bundle_model(bundle), a.precision) != 0) {
        attn_bundle_destroy(bundle);
        return 1;
    }
    attn_server_options options = defaults;
    options.host = a.host;
    options.port = (int)a.port;
    options.max_batch = a.max_batch;
    options.max_wait_ms = a.max_wait;
    options.max_body_bytes = a.max_body;
    options.max_sentences = a.max_sentences;
    options.max_new_tokens = a.max_new_tokens;
    attn_server *server = NULL;
    if (attn_server_start(bundle, &options, &server) != ATTN_OK) {
        cli_library_error("serve");
        attn_bundle_destroy(bundle);
        return 1;
    }
    const int ipv6 = strchr(a.host, ':') != NULL;
    fprintf(stderr, "attn serve: listening on http://%s%s%s:%d\n", ipv6 ? "[" : "", a.host,
            ipv6 ? "]" : "", attn_server_port(server));
    int received = 0;
    sigwait(&stop_signals, &received);
    fprintf(stderr, "attn serve: %s: answering the requests in flight, then exiting\n",
            received == SIGINT ? "SIGINT" : "SIGTERM");
    attn_server_stop(server);
    attn_bundle_destroy(bundle);
    return 0;
}
