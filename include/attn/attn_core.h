/* attn core runtime: status codes and error messages, threads, instruction-set dispatch,
 * the seeded random generator, tensor views and the arena allocator.
 *
 * Conventions that hold for the whole library:
 *  - Every function that can fail returns an attn_status. On failure attn_last_error()
 *    gives a readable message (per thread). The library never exits or aborts.
 *  - Arrays are float32, row-major, owned by the caller unless a function says otherwise.
 *  - Backward functions ACCUMULATE into every gradient they produce (dx += ...), for inputs
 *    and parameters alike, so a value that feeds several operations gets the sum of its
 *    gradients. Zero gradient buffers before the first backward.
 *  - At a fixed thread count, the same inputs and seed give bit-identical results.
 */
#ifndef ATTN_CORE_H
#define ATTN_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* ---- status and errors ---------------------------------------------------------------- */

typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, wrong shape, value out of range */
    ATTN_ERR_OUT_OF_MEMORY = 2,
    ATTN_ERR_IO = 3,               /* a file could not be read or written */
    ATTN_ERR_FORMAT = 4,           /* a file or string is malformed */
    ATTN_ERR_UNSUPPORTED = 5,      /* valid request this build or CPU cannot do */
    ATTN_ERR_INTERNAL = 6,
    ATTN_ERR_DIVERGED = 7,         /* training gave up: the gradients stayed non-finite */
    ATTN_ERR_CANCELLED = 8         /* a cancel flag the caller set stopped the work */
} attn_status;

/* The message of the most recent failure on this thread ("" if none). */
ATTN_API const char *attn_last_error(void);
/* A short fixed name for a status ("invalid argument", ...). */
ATTN_API const char *attn_status_name(attn_status status);
ATTN_API void attn_clear_error(void);
/* Library version, e.g. "0.1.0", and a one-line description of the build
 * (threading, instruction sets compiled in, the one in use). */
ATTN_API const char *attn_version(void);
ATTN_API const char *attn_build_info(void);

/* ---- threads ---------------------------------------------------------------------------- */

/* One place decides how many threads the library uses. The default is the environment
 * variable ATTN_NUM_THREADS if set, else the number of online cores. n = 0 restores that
 * default. Results are bit-identical across runs at the same thread count. */
ATTN_API attn_status attn_set_num_threads(int n);
ATTN_API int attn_get_num_threads(void);

/* ---- instruction-set dispatch --------------------------------------------------------- */

/* Every kernel has a plain scalar reference (written for clarity, in double precision
 * internally) and optimized versions (tiled, threaded, SIMD). By default the best version
 * the CPU supports runs; tests and benchmarks select others to compare. The environment
 * variable ATTN_ISA (reference|portable|avx2|avx512 on x86-64,
 * reference|portable|neon|neon-dotprod|neon-bf16 on AArch64) sets the initial choice.
 * On x86-64 the int8 and bf16 products come with avx512 when the CPU has VNNI and AVX512_BF16;
 * on AArch64 they are levels of their own above neon, so each can be forced and compared. */
typedef enum attn_isa {
    ATTN_ISA_AUTO = -1,
    ATTN_ISA_REFERENCE = 0, /* scalar textbook loops: the ground truth */
    ATTN_ISA_PORTABLE = 1,  /* tiled, threaded plain C */
    ATTN_ISA_AVX2 = 2,      /* AVX2 + FMA */
    ATTN_ISA_AVX512 = 3,    /* AVX-512F/BW/DQ/VL */
    ATTN_ISA_NEON = 4,      /* AArch64 Advanced SIMD (ASIMD), 4 float lanes */
    /* neon, and int8 products by SDOT (FEAT_DotProd; SMMLA for pairs of rows where the CPU
     * also has FEAT_I8MM) */
    ATTN_ISA_NEON_DOTPROD = 5,
    /* neon-dotprod, and bf16 products by BFDOT (FEAT_BF16) */
    ATTN_ISA_NEON_BF16 = 6
} attn_isa;
/* The last value of attn_isa, for loops over every instruction set. */
#define ATTN_ISA_LAST ATTN_ISA_NEON_BF16

/* Fails with ATTN_ERR_UNSUPPORTED if the CPU lacks the instruction set. */
ATTN_API attn_status attn_set_isa(attn_isa isa);
ATTN_API attn_isa attn_get_isa(void);
ATTN_API int attn_isa_supported(attn_isa isa);
ATTN_API const char *attn_isa_name(attn_isa isa);
/* The CPU features the library looks for that this CPU has, space-separated (x86-64: avx2
 * fma avx512f avx512vnni avx512bf16; AArch64: asimd asimddp i8mm bf16), for attn info. */
ATTN_API const char *attn_cpu_features(void);

/* ---- arithmetic precision -------------------------------------------------------------- */

/* The number format of the operands of products (GEMM, attention). Sums, softmax statistics,
 * master weights, gradients and optimizer state stay float32 whatever the precision.
 *   FP32: float32 everywhere.
 *   BF16: operands rounded to bfloat16 (round to nearest even), products accumulated in float32
 *         (AVX512_BF16's vdpbf16ps where the CPU has it, the same rounding emulated elsewhere).
 *   INT8: inference only: weights quantized per output row with a float32 scale, activations
 *         per row at run time, products in int32 (AVX512_VNNI's vpdpbusd where present). */
typedef enum attn_precision {
    /* A request, not a format: the fastest precision that keeps training's results, chosen by
     * attn_precision_resolve. Accepted where a whole run's precision is chosen (the trainer's
     * options, attn_model_set_precision); the kernels take only the formats below. */
    ATTN_PRECISION_AUTO = -1,
    ATTN_PRECISION_FP32 = 0,
    ATTN_PRECISION_BF16 = 1,
    ATTN_PRECISION_INT8 = 2
} attn_precision;

/* "auto", "fp32", "bf16", "int8" ("unknown" otherwise) */
ATTN_API const char *attn_precision_name(attn_precision precision);
/* The inverse of attn_precision_name; ATTN_ERR_INVALID_ARGUMENT naming the choices otherwise. */
ATTN_API attn_status attn_precision_parse(const char *name, attn_precision *precision);
/* 1 when this CPU has the instructions that make the precision fast (fp32: always; bf16:
 * AVX512_BF16; int8: AVX512_VNNI) and the selected instruction set is avx512; 0 when the
 * library emulates them (same results, slower). auto: 0. On AArch64: int8 under
 * neon-dotprod and neon-bf16, bf16 under neon-bf16 (which the CPU must support to be
 * selected). */
ATTN_API int attn_precision_native(attn_precision precision);
/* The one decision of ATTN_PRECISION_AUTO: bf16 where attn_precision_native(bf16) (under the
 * instruction set selected now, so ATTN_ISA=avx2 gives fp32), fp32 elsewhere, where emulated
 * bf16 would be slower than fp32. int8 is never chosen: it changes results, so only a user
 * asks for it. Any other precision is returned unchanged. */
ATTN_API attn_precision attn_precision_resolve(attn_precision precision);
/* The instructions that make a precision native on this build's architecture, for messages:
 * bf16 "AVX512_BF16", int8 "AVX512_VNNI" on x86-64; "BFDOT", "SDOT" (or "SDOT, SMMLA" on a
 * CPU with I8MM) on AArch64; "" for fp32 and auto. */
ATTN_API const char *attn_precision_instructions(attn_precision precision);

/* Checks ATTN_NUM_THREADS and ATTN_ISA: ATTN_ERR_INVALID_ARGUMENT for a value that is not a
 * thread count from 0 to the maximum or not an instruction set's name, ATTN_ERR_UNSUPPORTED for
 * an instruction set this CPU lacks, each with a message naming the variable and the fix. The
 * library itself falls back to its defaults on such values (it must not stop a host program);
 * programs call this at start to tell their user instead of running as they were not told. */
ATTN_API attn_status attn_check_environment(void);

/* ---- random numbers ------------------------------------------------------------------- */

/* A small seeded generator (xoshiro256**, seeded through splitmix64) for sequential draws:
 * initialisation, shuffling, sampling. Kernels that draw in parallel (dropout) do not use
 * it; they hash (seed, element index) so results do not depend on the thread count. */
typedef struct attn_rng {
    uint64_t state[4];
} attn_rng;

ATTN_API void attn_rng_seed(attn_rng *rng, uint64_t seed);
ATTN_API uint64_t attn_rng_next_u64(attn_rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
ATTN_API float attn_rng_uniform(attn_rng *rng);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
ATTN_API uint64_t attn_rng_below(attn_rng *rng, uint64_t n);
/* Standard normal (Box-Muller). */
ATTN_API float attn_rng_normal(attn_rng *rng);
/* Stateless: a uniform float in [0, 1) that depends only on (seed, index). */
ATTN_API float attn_hash_uniform(uint64_t seed, uint64_t index);

/* ---- tensor views --------------------------------------------------------------------- */

#define ATTN_MAX_DIMS 6

/* A view: shape, strides (in elements) and a pointer into memory owned elsewhere. */
typedef struct attn_tensor {
    float *data;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t stride[ATTN_MAX_DIMS];
} attn_tensor;

/* A contiguous row-major view of data with the given shape. */
ATTN_API attn_tensor attn_tensor_view(float *data, int ndim, const int64_t *shape);
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);
ATTN_API int attn_tensor_is_contiguous(const attn_tensor *t);

/* ---- arena ---------------------------------------------------------------------------- */

/* A bump allocator for per-step activations: allocations are 64-byte aligned and freed all
 * at once by attn_arena_reset. Blocks are kept across resets, so after the first step a
 * training loop allocates nothing. */
typedef struct attn_arena attn_arena;

ATTN_API attn_status attn_arena_create(size_t initial_bytes, attn_arena **out);
ATTN_API void attn_arena_destroy(attn_arena *arena);
/* NULL (with attn_last_error set) when memory runs out. */
ATTN_API void *attn_arena_alloc(attn_arena *arena, size_t bytes);
ATTN_API float *attn_arena_floats(attn_arena *arena, size_t count);
ATTN_API void attn_arena_reset(attn_arena *arena);
ATTN_API size_t attn_arena_used(const attn_arena *arena);
ATTN_API size_t attn_arena_peak(const attn_arena *arena);

/* ---- aligned memory ------------------------------------------------------------------- */

/* 64-byte aligned allocation; NULL (with attn_last_error set) on failure. */
ATTN_API void *attn_aligned_alloc(size_t bytes);
ATTN_API void attn_aligned_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CORE_H */
