/* attn train's progress: a redrawn bar on a terminal or plain lines, a JSON-lines log, and
 * Ctrl-C that stops after the current update. */
#define _POSIX_C_SOURCE 200809L /* isatty, fileno */

#include "cli/train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_interrupt(int signal_number)
{
    interrupted = signal_number;
    signal(signal_number, SIG_DFL); /* a second Ctrl-C ends the program at once */
}

static void format_duration(double seconds, char *out, size_t size)
{
    if (!(seconds >= 0.0) || seconds > 1e8) {
        snprintf(out, size, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, size, "%ld:%02ld", s / 60, s % 60);
}

/* A language model's loss also as perplexity and, when known, bits per character. */
static void language_model_figures(const train_progress *p, double loss, double chars_per_token,
                                   char *out, size_t size)
{
    out[0] = '\0';
    if (!p->language_model)
        return;
    if (chars_per_token > 0.0)
        snprintf(out, size, " ppl %.2f bpc %.3f", exp(loss), loss / log(2.0) / chars_per_token);
    else
        snprintf(out, size, " ppl %.2f", exp(loss));
}

static double eta_seconds(const train_progress *p, const attn_train_event *e, int64_t first_step)
{
    double eta = -1.0;
    int64_t done = e->step - first_step;
    if (e->planned_steps > 0 && done > 0)
        eta = (double)(e->planned_steps - e->step) * e->elapsed / (double)done;
    if (p->time_limit > 0.0) {
        double left = p->time_limit - e->elapsed;
        if (eta < 0.0 || left < eta)
            eta = left > 0.0 ? left : 0.0;
    }
    return eta;
}

/* A JSON number, or null for NaN and infinities, which JSON has no way to write (printf's
 * "-nan" and "inf" made the whole log unreadable to attn viz and Python's json). */
typedef struct json_number {
    char text[32];
} json_number;

static json_number number(double x)
{
    json_number n;
    if (isfinite(x))
        snprintf(n.text, sizeof n.text, "%.17g", x);
    else
        snprintf(n.text, sizeof n.text, "null");
    return n;
}

static void write_json_event(FILE *log, const attn_train_event *e)
{
    if (e->kind == ATTN_TRAIN_EVENT_STEP)
        fprintf(log,
                "{\"event\":\"step\",\"step\":%lld,\"epoch\":%lld,\"batch\":%lld,"
                "\"train_loss\":%s,\"train_accuracy\":%s,\"tokens\":%lld,\"lr\":%s,"
                "\"grad_norm\":%s,\"skipped\":%s,\"tokens_per_second\":%s,"
                "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, (long long)e->batch_index,
                number(e->loss).text, number(e->accuracy).text, (long long)e->tokens,
                number(e->lr).text, number(e->grad_norm).text, e->skipped ? "true" : "false",
                number(e->tokens_per_second).text, e->elapsed);
    else if (e->kind == ATTN_TRAIN_EVENT_EVAL)
        fprintf(log,
                "{\"event\":\"eval\",\"step\":%lld,\"epoch\":%lld,\"valid_loss\":%s,"
                "\"valid_accuracy\":%s,\"tokens\":%lld,\"improved\":%s,"
                "\"best_valid_loss\":%s,"
                "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, number(e->loss).text,
                number(e->accuracy).text, (long long)e->tokens, e->improved ? "true" : "false",
                number(e->best_valid_loss).text, e->elapsed);
    else
        fprintf(log,
                "{\"event\":\"done\",\"step\":%lld,\"epoch\":%lld,\"reason\":\"%s\","
                "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, e->stop_reason, e->elapsed);
    fflush(log);
}

int train_progress_on_event(const attn_train_event *e, void *user)
{
    train_progress *p = user;
    if (p->first_step < 0)
        p->first_step = e->kind == ATTN_TRAIN_EVENT_STEP ? e->step - 1 : e->step;
    if (p->log != NULL)
        write_json_event(p->log, e);
    char eta[32], elapsed[32];
    /* Epochs as a decimal: completed ones plus the share of the current one. */
    double epoch = (double)e->epoch +
                   (e->epoch_batches > 0 ? (double)e->batch_index / (double)e->epoch_batches : 0);
    format_duration(eta_seconds(p, e, p->first_step), eta, sizeof eta);
    format_duration(e->elapsed, elapsed, sizeof elapsed);
    /* What the rate counts: a masked language model scores (and counts) the chosen tokens. */
    const char *unit = p->classifier ? "lines" : p->masked_lm ? "masked tok" : "tok";
    char figures[64];
    language_model_figures(p, e->loss,
                           e->kind == ATTN_TRAIN_EVENT_EVAL ? p->valid_chars_per_token
                                                            : p->train_chars_per_token,
                           figures, sizeof figures);
    if (e->kind == ATTN_TRAIN_EVENT_STEP) {
        if (p->terminal &&
            (e->elapsed - p->last_drawn >= 0.1 || e->step == e->planned_steps || e->skipped)) {
            p->last_drawn = e->elapsed;
            /* The bar and the count follow whichever limit ends the run first, assuming the
             * steps keep their pace: a --time-limit run of a long epoch plan would otherwise
             * sit near an empty bar until the clock stops it. */
            const double step_share =
                e->planned_steps > 0 ? (double)e->step / (double)e->planned_steps : 0.0;
            const double time_share = p->time_limit > 0.0 ? e->elapsed / p->time_limit : 0.0;
            const double done = step_share > time_share ? step_share : time_share;
            char planned[80] = "";
            if (time_share > step_share) {
                char limit[32];
                format_duration(p->time_limit, limit, sizeof limit);
                snprintf(planned, sizeof planned, " time %s/%s", elapsed, limit);
            } else if (e->planned_steps > 0) {
                snprintf(planned, sizeof planned, "/%lld", (long long)e->planned_steps);
            }
            char bar[21];
            for (int i = 0; i < 20; i++)
                bar[i] = (double)i < done * 20.0 ? '#' : '.';
            bar[20] = '\0';
            if (p->classifier)
                snprintf(figures, sizeof figures, " acc %.1f%%", 100.0 * e->accuracy);
            fprintf(stderr,
                    "\r\033[Kepoch %.2f step %lld%s [%s] loss %.4f%s lr %.2e %.0f %s/s "
                    "ETA %s%s",
                    epoch, (long long)e->step, planned, bar, e->loss, figures, e->lr,
                    e->tokens_per_second, unit, eta,
                    e->skipped ? " (skipped: non-finite gradient)" : "");
            p->bar_drawn = 1;
        } else if (!p->terminal && (e->step % p->log_every == 0 || e->skipped)) {
            /* Plain lines keep "step N/PLANNED" (scripts read them) beside the elapsed time
             * and the ETA. */
            char planned[32] = "";
            if (e->planned_steps > 0)
                snprintf(planned, sizeof planned, "/%lld", (long long)e->planned_steps);
            fprintf(stderr,
                    "step %lld%s epoch %.2f loss %.4f%s acc %.4f lr %.3e grad %.3f %s/s "
                    "%.0f elapsed %s ETA %s%s\n",
                    (long long)e->step, planned, epoch, e->loss, figures, e->accuracy, e->lr,
                    e->grad_norm, unit, e->tokens_per_second, elapsed,
                    eta, e->skipped ? " skipped: non-finite gradient" : "");
        }
    } else if (e->kind == ATTN_TRAIN_EVENT_EVAL) {
        char bits[40] = "";
        if (p->language_model && p->valid_chars_per_token > 0.0)
            snprintf(bits, sizeof bits, ", %.3f bits/char",
                     e->loss / log(2.0) / p->valid_chars_per_token);
        if (p->bar_drawn)
            fprintf(stderr, "\r\033[K");
        p->bar_drawn = 0;
        if (p->classifier)
            fprintf(stderr, "step %lld epoch %.2f: valid loss %.4f, accuracy %.2f%%%s\n",
                    (long long)e->step, epoch, e->loss, 100.0 * e->accuracy,
                    e->improved ? ", new best: model written" : "");
        else
            fprintf(stderr,
                    "step %lld epoch %.2f: valid %sloss %.4f (perplexity %.2f%s), %stoken "
                    "accuracy %.2f%%%s\n",
                    (long long)e->step, epoch, p->masked_lm ? "masked-token " : "", e->loss,
                    exp(e->loss), bits, p->masked_lm ? "masked-" : "", 100.0 * e->accuracy,
                    e->improved ? ", new best: model written" : "");
    } else {
        if (p->bar_drawn)
            fprintf(stderr, "\n");
        p->bar_drawn = 0;
    }
    return interrupted != 0;
}

void train_progress_init(train_progress *p, int64_t log_every, double time_limit)
{
    p->log = NULL;
    p->terminal = isatty(fileno(stderr));
    p->log_every = log_every;
    p->bar_drawn = 0;
    p->last_drawn = -1.0;
    p->language_model = 0;
    p->masked_lm = 0;
    p->classifier = 0;
    p->train_chars_per_token = p->valid_chars_per_token = 0.0;
    p->time_limit = time_limit;
    p->first_step = -1;
}

int train_progress_interrupted_by(void)
{
    return (int)interrupted;
}

const volatile sig_atomic_t *train_progress_interrupt_flag(void)
{
    return &interrupted;
}

void train_progress_catch_interrupts(int on)
{
    signal(SIGINT, on ? on_interrupt : SIG_DFL);
    signal(SIGTERM, on ? on_interrupt : SIG_DFL);
}
