/* Text as sacreBLEU sees it: Python's whitespace, tokens, and the mteval-v13a tokenizer.
 *
 * sacreBLEU runs Python regular expressions over code points; here the same rules run over
 * UTF-8 bytes. That gives the same result because every character the rules name is ASCII:
 * a pattern "X then one of [.,]" can only match at the last byte of X's code point (the byte
 * before an ASCII byte ends a code point), and "one of [.,] then X" consumes X's first byte,
 * after which X's continuation bytes match nothing, exactly as if X had been consumed whole. */
#include "metrics/metrics_internal.h"

#include <stdlib.h>
#include <string.h>

size_t utf8_decode(const char *text, size_t size, uint32_t *code)
{
    const unsigned char *bytes = (const unsigned char *)text;
    if (bytes[0] < 0x80) {
        *code = bytes[0];
        return 1;
    }
    size_t length = utf8_sequence_length(bytes, size);
    if (length <= 1) {
        *code = bytes[0];
        return 1;
    }
    uint32_t value = bytes[0] & (0x7Fu >> length);
    for (size_t i = 1; i < length; i++)
        value = (value << 6) | (bytes[i] & 0x3Fu);
    *code = value;
    return length;
}

int is_python_space(uint32_t code)
{
    if (code <= 0x20)
        return (code >= 0x09 && code <= 0x0D) || (code >= 0x1C && code <= 0x20);
    if (code < 0x85)
        return 0;
    return code == 0x85 || code == 0xA0 || code == 0x1680 || (code >= 0x2000 && code <= 0x200A) ||
           code == 0x2028 || code == 0x2029 || code == 0x202F || code == 0x205F ||
           code == 0x3000;
}

size_t rstrip_length(const char *text, size_t size)
{
    while (size > 0) {
        size_t start = size - 1;
        while (start > 0 && ((unsigned char)text[start] & 0xC0) == 0x80)
            start--;
        uint32_t code;
        utf8_decode(text + start, size - start, &code);
        if (!is_python_space(code))
            break;
        size = start;
    }
    return size;
}

int reference_absent(const char *text)
{
    return text == NULL || rstrip_length(text, strlen(text)) == 0;
}

attn_status check_segment(const char *fn, const char *what, int64_t index, const char *text)
{
    if (text == NULL)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s %lld is NULL", fn, what,
                         (long long)(index + 1));
    size_t size = strlen(text);
    size_t bad = utf8_first_invalid(text, size);
    if (bad != size)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s %lld is not valid UTF-8 (byte %zu)", fn, what,
                         (long long)(index + 1), bad + 1);
    return ATTN_OK;
}

attn_status check_corpus_args(const char *fn, const char *const *hypotheses, int64_t n,
                              const char *const *const *references, int64_t n_refs)
{
    ATTN_CHECK_ARG(n >= 0, "%s: n must be >= 0, got %lld", fn, (long long)n);
    ATTN_CHECK_ARG(n_refs >= 1, "%s: n_refs must be >= 1, got %lld", fn, (long long)n_refs);
    ATTN_CHECK_ARG(hypotheses != NULL || n == 0, "%s: hypotheses must not be NULL", fn);
    ATTN_CHECK_ARG(references != NULL, "%s: references must not be NULL", fn);
    for (int64_t r = 0; r < n_refs && n > 0; r++)
        ATTN_CHECK_ARG(references[r] != NULL, "%s: references[%lld] must not be NULL", fn,
                       (long long)r);
    return ATTN_OK;
}

attn_status symbol_seq_push(symbol_seq *seq, uint32_t symbol)
{
    if (seq->size == seq->capacity)
        ATTN_TRY(grow_array((void **)&seq->data, &seq->capacity, seq->size + 1,
                            sizeof *seq->data));
    seq->data[seq->size++] = symbol;
    return ATTN_OK;
}

void symbol_seq_free(symbol_seq *seq)
{
    free(seq->data);
    memset(seq, 0, sizeof *seq);
}

attn_status split_tokens(const char *text, size_t size, strtab *tokens, symbol_seq *out)
{
    size_t i = 0, token_start = 0;
    int in_token = 0;
    /* One step past the end reads as a space, which ends the last token. */
    while (i <= size) {
        uint32_t code = ' ';
        size_t length = 1;
        if (i < size)
            length = utf8_decode(text + i, size - i, &code);
        int space = is_python_space(code);
        if (space && in_token) {
            int32_t id;
            ATTN_TRY(strtab_intern(tokens, text + token_start, i - token_start, &id, NULL));
            ATTN_TRY(symbol_seq_push(out, (uint32_t)id));
            in_token = 0;
        } else if (!space && !in_token) {
            token_start = i;
            in_token = 1;
        }
        i += length;
    }
    return ATTN_OK;
}

/* ---- the 13a tokenizer ------------------------------------------------------------------- */

/* Makes room for `more` bytes after buf->size (and the NUL byte_buffer keeps). */
static attn_status reserve(byte_buffer *buf, size_t more)
{
    if (more > SIZE_MAX / 4 - buf->size)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "tokenize: text of %zu bytes is too large",
                         buf->size + more);
    size_t needed = buf->size + more + 1;
    if (needed <= buf->capacity)
        return ATTN_OK;
    size_t capacity = buf->capacity < 64 ? 64 : buf->capacity;
    while (capacity < needed)
        capacity *= 2;
    char *grown = realloc(buf->data, capacity);
    if (grown == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "tokenize: out of memory for %zu bytes",
                         capacity);
    buf->data = grown;
    buf->capacity = capacity;
    return ATTN_OK;
}

static void put(byte_buffer *buf, char c)
{
    buf->data[buf->size++] = c;
}

static void put_spaced(byte_buffer *buf, char before, char middle, char after)
{
    put(buf, before);
    put(buf, middle);
    put(buf, after);
}

/* Python's str.replace(from, to) of in into out: left to right, matches do not overlap. */
static attn_status replace_all(const byte_buffer *in, const char *from, const char *to,
                               byte_buffer *out)
{
    size_t from_size = strlen(from), to_size = strlen(to);
    out->size = 0;
    ATTN_TRY(reserve(out, in->size + 1));
    size_t i = 0;
    while (i < in->size) {
        if (in->data[i] == from[0] && in->size - i >= from_size &&
            memcmp(in->data + i, from, from_size) == 0) {
            ATTN_TRY(reserve(out, to_size + (in->size - i)));
            memcpy(out->data + out->size, to, to_size);
            out->size += to_size;
            i += from_size;
        } else {
            put(out, in->data[i++]);
        }
    }
    out->data[out->size] = '\0';
    return ATTN_OK;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The symbols 13a makes tokens of: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
 * (sacreBLEU's character class [\{-\~\[-\` -\&\(-\+\:-\@\/]). */
static int is_13a_symbol(char c)
{
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

static int is_period_or_comma(char c)
{
    return c == '.' || c == ',';
}

/* The four substitutions of 13a's regular-expression pass, each over the whole line in turn,
 * from in into out. Each match covers two characters and scanning goes on after it, as in
 * Python's re.sub. */
enum { SPLIT_SYMBOLS, SPLIT_AFTER_NON_DIGIT, SPLIT_BEFORE_NON_DIGIT, SPLIT_DASH_AFTER_DIGIT };

static attn_status substitute(int rule, const byte_buffer *in, byte_buffer *out)
{
    out->size = 0;
    /* At most 3 bytes out per byte in (a symbol becomes " c "). */
    ATTN_TRY(reserve(out, 3 * in->size + 1));
    const char *s = in->data;
    size_t n = in->size, i = 0;
    while (i < n) {
        int pair = i + 1 < n;
        if (rule == SPLIT_SYMBOLS && is_13a_symbol(s[i])) {
            put_spaced(out, ' ', s[i], ' '); /* "c" -> " c " */
            i++;
        } else if (rule == SPLIT_AFTER_NON_DIGIT && pair && !is_digit(s[i]) &&
                   is_period_or_comma(s[i + 1])) {
            put(out, s[i]); /* "x." -> "x . " */
            put_spaced(out, ' ', s[i + 1], ' ');
            i += 2;
        } else if (rule == SPLIT_BEFORE_NON_DIGIT && pair && is_period_or_comma(s[i]) &&
                   !is_digit(s[i + 1])) {
            put_spaced(out, ' ', s[i], ' '); /* ".x" -> " . x" */
            put(out, s[i + 1]);
            i += 2;
        } else if (rule == SPLIT_DASH_AFTER_DIGIT && pair && is_digit(s[i]) && s[i + 1] == '-') {
            put(out, s[i]); /* "3-" -> "3 - " */
            put_spaced(out, ' ', '-', ' ');
            i += 2;
        } else {
            put(out, s[i++]);
        }
    }
    out->data[out->size] = '\0';
    return ATTN_OK;
}

attn_status join_tokens(const char *text, size_t size, byte_buffer *out)
{
    out->size = 0;
    ATTN_TRY(reserve(out, size + 1));
    size_t i = 0;
    int pending_space = 0;
    while (i < size) {
        uint32_t code;
        size_t length = utf8_decode(text + i, size - i, &code);
        if (is_python_space(code)) {
            pending_space = out->size > 0;
        } else {
            if (pending_space)
                put(out, ' ');
            pending_space = 0;
            memcpy(out->data + out->size, text + i, length);
            out->size += length;
        }
        i += length;
    }
    out->data[out->size] = '\0';
    return ATTN_OK;
}

attn_status tokenize_13a(const char *text, size_t size, byte_buffer *out)
{
    /* Language-independent part: sacreBLEU's replacements, in its order. */
    static const char *const replacements[][2] = {
        {"<skipped>", ""}, {"-\n", ""},  {"\n", " "},  {"&quot;", "\""},
        {"&amp;", "&"},    {"&lt;", "<"}, {"&gt;", ">"},
    };
    byte_buffer a = {0}, b = {0};
    attn_status status = reserve(&a, size + 2);
    if (status == ATTN_OK) {
        memcpy(a.data, text, size);
        a.size = size;
        a.data[size] = '\0';
    }
    for (size_t r = 0; status == ATTN_OK && r < sizeof replacements / sizeof *replacements; r++) {
        status = replace_all(&a, replacements[r][0], replacements[r][1], &b);
        byte_buffer t = a;
        a = b, b = t;
    }
    /* " {} ".format(line) */
    if (status == ATTN_OK)
        status = reserve(&b, a.size + 2);
    if (status == ATTN_OK) {
        b.size = 0;
        put(&b, ' ');
        memcpy(b.data + 1, a.data, a.size);
        b.size += a.size;
        put(&b, ' ');
        b.data[b.size] = '\0';
        byte_buffer t = a;
        a = b, b = t;
    }
    /* Language-dependent part. */
    for (int rule = SPLIT_SYMBOLS; status == ATTN_OK && rule <= SPLIT_DASH_AFTER_DIGIT; rule++) {
        status = substitute(rule, &a, &b);
        byte_buffer t = a;
        a = b, b = t;
    }
    if (status == ATTN_OK)
        status = join_tokens(a.data, a.size, out);
    byte_buffer_free(&a);
    byte_buffer_free(&b);
    return status;
}
