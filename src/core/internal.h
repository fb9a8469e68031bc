/* Helpers shared by the library's own sources; not part of the public API. */
#ifndef ATTN_CORE_INTERNAL_H
#define ATTN_CORE_INTERNAL_H

#include "attn/attn_core.h"

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ATTN_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define ATTN_INTERNAL __attribute__((visibility("hidden")))
#else
#define ATTN_PRINTF(fmt, args)
#define ATTN_INTERNAL
#endif

/* Record a failure message for attn_last_error() and return the status, so that error
 * paths read: return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "q: expected 4 dims, got %d", n); */
ATTN_INTERNAL attn_status attn_fail(attn_status status, const char *fmt, ...) ATTN_PRINTF(2, 3);

/* Argument checks that set a message naming the function and the argument. */
#define ATTN_CHECK_NOT_NULL(ptr)                                                                   \
    do {                                                                                           \
        if ((ptr) == NULL)                                                                         \
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s must not be NULL", __func__,       \
                             #ptr);                                                                \
    } while (0)

#define ATTN_CHECK_ARG(cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, __VA_ARGS__);                              \
    } while (0)

#define ATTN_TRY(expr)                                                                             \
    do {                                                                                           \
        attn_status attn_try_status_ = (expr);                                                     \
        if (attn_try_status_ != ATTN_OK)                                                           \
            return attn_try_status_;                                                               \
    } while (0)

/* ---- JSON -------------------------------------------------------------------------------- */

struct cJSON;
/* A JSON number (null when not finite) that parses back to exactly `value`; cJSON's own may
 * lose the last bit. attn_json_add_exact_number returns 0 when out of memory. */
ATTN_INTERNAL struct cJSON *attn_json_exact_number(double value);
ATTN_INTERNAL int attn_json_add_exact_number(struct cJSON *object, const char *name, double value);

/* ---- threads: the library's only parallel construct ------------------------------------ */

/* Runs body(ctx, begin, end, thread_index) over a static partition of [0, n) into
 * contiguous chunks, one per thread (never more chunks than n / min_chunk). The partition
 * depends only on n, min_chunk and the thread count, which keeps results deterministic.
 * thread_index is the chunk's number, below attn_parallel_threads(): whichever pool thread
 * runs a chunk (the caller runs the ones no worker has claimed yet), per-thread scratch
 * indexed by it is never shared by two running chunks. Runs serially inside a chunk. */
typedef void (*attn_range_fn)(void *ctx, int64_t begin, int64_t end, int thread_index);
ATTN_INTERNAL void attn_parallel_for(int64_t n, int64_t min_chunk, attn_range_fn body, void *ctx);
/* Threads attn_parallel_for may use right now (1 inside a parallel region). */
ATTN_INTERNAL int attn_parallel_threads(void);
/* ATTN_NUM_THREADS holds a valid count, or is unset (attn_check_environment's half). */
ATTN_INTERNAL attn_status attn_check_threads_variable(void);

/* ---- scratch ------------------------------------------------------------------------------ */

/* A 64-byte aligned work buffer of at least `bytes` (contents undefined) for the length of
 * one call, from a cache of buffers kept across calls (src/core/scratch.c), so a training
 * step allocates nothing once its calls have been seen. NULL with attn_last_error set when
 * memory runs out. Give it back with attn_scratch_release (NULL is ignored). */
ATTN_INTERNAL void *attn_scratch_acquire(size_t bytes);
ATTN_INTERNAL void attn_scratch_release(void *p);

/* ---- dispatch -------------------------------------------------------------------------- */

/* The instruction set kernels should use now: the user's choice, capped by the CPU. */
ATTN_INTERNAL attn_isa attn_active_isa(void);
/* The best instruction set this CPU supports (what ATTN_ISA_AUTO selects). */
ATTN_INTERNAL attn_isa attn_best_isa(void);

/* neon-dotprod and neon-bf16 are neon with more products native (int8, bf16): every float
 * kernel runs its neon version under all three. */
static inline int attn_isa_is_neon(attn_isa isa)
{
    return isa == ATTN_ISA_NEON || isa == ATTN_ISA_NEON_DOTPROD || isa == ATTN_ISA_NEON_BF16;
}
/* Whether the CPU has FEAT_I8MM (SMMLA), which neon-dotprod uses for pairs of rows when
 * present: a choice inside the path, as AVX512_VNNI is inside avx512, not a path of its own. */
ATTN_INTERNAL int attn_cpu_has_arm_i8mm(void);

/* Which optimized versions this build has: CMakeLists.txt compiles the *_avx2.c and *_avx512*.c
 * files only for x86-64 and the *_neon.c files only for AArch64, so a dispatch site names a
 * version only where it exists. ATTN_FOR_ISA(isa, name, fallback) is the version of a kernel
 * whose per-instruction-set functions (or tables) are name_avx512, name_avx2 or name_neon, or
 * fallback (the portable version) for any other isa. */
#if defined(__x86_64__)
#define ATTN_HAVE_X86_KERNELS 1
#define ATTN_FOR_ISA(isa, name, fallback)                                                          \
    ((isa) == ATTN_ISA_AVX512 ? name##_avx512 : (isa) == ATTN_ISA_AVX2 ? name##_avx2 : (fallback))
#elif defined(__aarch64__)
#define ATTN_HAVE_NEON_KERNELS 1
#define ATTN_FOR_ISA(isa, name, fallback) (attn_isa_is_neon(isa) ? name##_neon : (fallback))
#else
#define ATTN_FOR_ISA(isa, name, fallback) ((void)(isa), (fallback))
#endif

/* The stateless hash behind attn_hash_uniform: a splitmix64 finaliser of (seed, index).
 * Dropout decides each element with its top 24 bits, so masks do not depend on threads. */
static inline uint64_t attn_index_hash(uint64_t seed, uint64_t index)
{
    uint64_t z = (seed ^ (index * 0xd1342543de82ef95ULL)) + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Writes the body of a file (returns 0 with errno set when a write fails). */
typedef int (*attn_file_body_writer)(FILE *f, void *context);
/* Writes a file atomically: write_body fills "<path>.tmp.<pid>" in the same folder (the name
 * attn_tensor_file_remove_stale_temporaries looks for), which is flushed, fsync'ed, closed and
 * renamed over path, and the folder is fsync'ed. On failure the temporary file is removed and
 * a file at path is left as it was: ATTN_ERR_IO, led by fn, naming the path, the step that
 * failed and the system's reason. */
ATTN_INTERNAL attn_status attn_file_write_atomically(const char *fn, const char *path,
                                                     attn_file_body_writer write_body,
                                                     void *context);
/* The same for size bytes in memory. */
ATTN_INTERNAL attn_status attn_file_write_bytes_atomically(const char *fn, const char *path,
                                                           const void *bytes, size_t size);
/* Checked size arithmetic for allocations: returns 0 and sets an error on overflow. */
ATTN_INTERNAL int attn_mul_size(size_t a, size_t b, size_t *out);

#endif /* ATTN_CORE_INTERNAL_H */
