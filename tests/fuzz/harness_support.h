/* Shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): temporary files for loaders that read
 * paths, NUL-terminated copies of the input, and a check that stops the run on a broken
 * invariant. Every harness defines LLVMFuzzerTestOneInput; libFuzzer drives it when built with
 * ATTN_FUZZ=ON, and run_corpus.c replays the committed seed corpus in the plain test suite. */
#ifndef ATTN_FUZZ_HARNESS_SUPPORT_H
#define ATTN_FUZZ_HARNESS_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes size bytes to the file `name` inside this process's own temporary folder (created
 * under $TMPDIR or /tmp on first use, removed with its files at exit) and returns its path,
 * which stays valid until the next call with the same name. NULL if the file could not be
 * written (the harness then has nothing to test). */
const char *fuzz_temp_file(const char *name, const uint8_t *data, size_t size);

/* The path of the file `name` in that folder, for a loader's writer to create (NULL if the
 * folder could not be made). */
const char *fuzz_temp_path(const char *name);

/* A malloc'ed copy of the input with a NUL after it (NULL when out of memory). */
char *fuzz_string(const uint8_t *data, size_t size);

/* What word and BPE tokenizers decode a text to when none of its tokens became <unk>: its
 * words (split at ASCII whitespace) joined by single spaces. Malloc'ed; NULL when out of
 * memory. */
char *fuzz_single_spaced(const char *text);

/* A broken invariant is a finding: print it and abort, which libFuzzer and CTest both report. */
#define FUZZ_CHECK(cond) ((cond) ? (void)0 : fuzz_check_failed(#cond, __FILE__, __LINE__))
void fuzz_check_failed(const char *what, const char *file, int line);

#endif /* ATTN_FUZZ_HARNESS_SUPPORT_H */
