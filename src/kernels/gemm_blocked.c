/* The blocked, packed GEMM in the style of GotoBLAS/BLIS, shared by every optimized
 * instruction set; only the micro-kernel (and its tile shape) differs between them.
 *
 * Loop nest over one rectangle of C (one per thread):
 *   for each block of MC rows of op(A):                   packed A block lives in L2/L3
 *     for each k-block of `depth` (kc) steps:
 *       pack op(A)[rows, k-block] into MR-row panels
 *       for each block of NC columns of op(B):
 *         pack op(B)[k-block, columns] into NR-column panels    packed B block lives in L2
 *           (or, with a shared B, wait until those panels are packed)
 *         for each A panel:                                     A panel stays in L1
 *           for each B panel: micro-kernel                      B panels stream from L2
 * The register tile is MR x NR with vectors along n (rows of C are contiguous), so the
 * A panel is the broadcast operand and is the one worth keeping in L1. A panel that few
 * tiles use (op(A) of a product with few columns, op(B) = B of one with few rows) is not
 * worth its copy: those are read in place and only a ragged edge panel is packed.
 * C is cut into one rectangle per thread (see choose_partition); each thread packs op(A)
 * into its own buffers.
 *
 * Shared B. When C is cut into row bands, every thread needs all of op(B); packed per
 * thread, each would copy it whole, reading what is often a matrix another core has just
 * written. So when the packed op(B) is small enough, the threads pack it once into one
 * shared buffer, each claiming groups of panels from a counter, and publish each group with
 * a flag; a thread that reaches a group another is still packing waits for its flag.
 * Nothing waits for a thread that has not started: whoever arrives packs what is left.
 * Row bands also keep each thread on the rows (tokens) it owns in the row-wise operations
 * around a product. Packing is a copy, so who packs what never changes a bit of C.
 *
 * Determinism: the k-blocks depend only on k and the micro-kernel, and each element of C
 * is summed over its k-block in order, then combined with C as alpha*sum + beta*C (the
 * first block) or alpha*sum + C (the later ones). Nothing in that depends on the thread
 * partition or on the MC/NC blocking, so results are bit-identical for any thread count.
 */
#include "kernels/gemm_internal.h"

#include "kernels/bf16.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Cache budgets for this CPU class (48 KiB L1d, 2 MiB L2 per core, large shared L3). The
 * packed B block (depth x NC) takes half of L2 so that C tiles and the next A panel fit
 * beside it; the packed A block (MC x depth) is re-read once per NC block, from L2/L3. */
#define GEMM_B_BLOCK_BYTES ((size_t)1 << 20)
#define GEMM_A_BLOCK_BYTES ((size_t)2 << 20)
/* Below this much work per thread, waking another thread costs more than it saves. */
#define GEMM_MIN_FLOPS_PER_THREAD (4.0e6)
/* Panels used by at most this many tiles are read in place rather than packed. B panels
 * read in place cost little more than packed ones (both stream from L2); A panels read in
 * place are strided rows that may alias in L1, so they get the lower limit. */
#define GEMM_A_IN_PLACE_MAX_USES 4
#define GEMM_B_IN_PLACE_MAX_USES 8
/* At most this many rectangles (threads) per call. */
#define GEMM_MAX_PARTS 64
/* Shared B: the largest packed op(B) shared by the threads (4 MiB: a fraction of L3, so
 * the threads' reads of each other's panels stay in cache), and the panels per claim. */
#define GEMM_SHARED_B_MAX_FLOATS ((int64_t)1 << 20)
#define GEMM_SHARED_B_GROUP 4
#define GEMM_SHARED_B_MAX_GROUPS 1024

/* ---- packing ------------------------------------------------------------------------ */

/* Packs a `width` x `depth` slab of a matrix, element (w, p) at src[w * w_stride +
 * p * p_stride], into panels of `panel` consecutive w, each stored depth-major:
 * dst[panel_index * panel * depth + p * panel + (w % panel)]. The last panel is padded
 * with zeros so the micro-kernel can always run full tiles. Both paths walk the source in
 * memory order (whole rows at a time) so that hardware prefetch keeps up. */
static inline void pack_panels_fixed(const float *src, int64_t w_stride, int64_t p_stride,
                                     int64_t width, int64_t depth, const int panel, float *dst)
{
    const int64_t panel_floats = (int64_t)panel * depth;
    if (w_stride == 1) {
        /* The panels' width is contiguous in memory: each source row feeds every panel. */
        const int64_t full = width / panel * panel;
        for (int64_t p = 0; p < depth; p++) {
            const float *row = src + p * p_stride;
            float *d = dst + p * panel;
            int64_t w0 = 0;
            for (; w0 < full; w0 += panel, d += panel_floats)
                for (int w = 0; w < panel; w++)
                    d[w] = row[w0 + w];
            if (w0 < width) {
                int live = (int)(width - w0), w = 0;
                for (; w < live; w++)
                    d[w] = row[w0 + w];
                for (; w < panel; w++)
                    d[w] = 0.0f;
            }
        }
        return;
    }
    /* Depth is contiguous in memory: a transpose, one source row at a time. */
    for (int64_t w0 = 0; w0 < width; w0 += panel, dst += panel_floats) {
        int64_t live = width - w0 < panel ? width - w0 : panel;
        for (int64_t w = 0; w < live; w++) {
            const float *row = src + (w0 + w) * w_stride;
            float *d = dst + w;
            for (int64_t p = 0; p < depth; p++)
                d[p * panel] = row[p * p_stride];
        }
        for (int64_t w = live; w < panel; w++)
            for (int64_t p = 0; p < depth; p++)
                dst[p * panel + w] = 0.0f;
    }
}

/* The panel widths of the micro-kernels, as constants so the copies are unrolled; the
 * transposing case goes to the instruction set's own version where it has one. */
static void pack_panels(const gemm_kernel_info *info, const float *src, int64_t w_stride,
                        int64_t p_stride, int64_t width, int64_t depth, int panel, float *dst)
{
    if (w_stride != 1 && p_stride == 1 && info->pack_transposed != NULL) {
        info->pack_transposed(src, w_stride, width, depth, panel, dst);
        return;
    }
    switch (panel) {
    case 4:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 4, dst);
        break;
    case 6:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 6, dst);
        break;
    case 8:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 8, dst);
        break;
    case 14:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 14, dst);
        break;
    case 16:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 16, dst);
        break;
    case 32:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, 32, dst);
        break;
    default:
        pack_panels_fixed(src, w_stride, p_stride, width, depth, panel, dst);
        break;
    }
}

/* Rounds packed floats to bf16 in place: the emulated bf16 product rounds after an ordinary
 * packing copy, so every float kernel and its fast transposing packer serve unchanged. */
static void round_packed_to_bf16(float *packed, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        packed[i] = attn_bf16_round(packed[i]);
}

/* ---- reusable packing buffers --------------------------------------------------------- */

/* Packing buffers are kept across calls in a small pool so that a training loop does not
 * page-fault fresh memory on every multiply. Idle buffers stay reachable from the pool
 * (no leak reports at exit); attn_gemm_release_buffers() frees them. A pool rather than
 * thread-local storage keeps concurrent callers safe and frees nothing behind a thread
 * that exits. */
typedef struct gemm_buffers {
    struct gemm_buffers *next;
    float *a;
    size_t a_capacity; /* floats */
    float *b;
    size_t b_capacity;
} gemm_buffers;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static gemm_buffers *idle_buffers;

static void buffers_destroy(gemm_buffers *buf)
{
    attn_aligned_free(buf->a);
    attn_aligned_free(buf->b);
    free(buf);
}

static int ensure_capacity(float **p, size_t *capacity, size_t floats)
{
    if (*capacity >= floats)
        return 1;
    size_t bytes;
    if (!attn_mul_size(floats, sizeof(float), &bytes))
        return 0;
    float *fresh = attn_aligned_alloc(bytes);
    if (fresh == NULL)
        return 0;
    attn_aligned_free(*p);
    *p = fresh;
    *capacity = floats;
    return 1;
}

static void pool_release(gemm_buffers **bufs, int count)
{
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < count; i++) {
        bufs[i]->next = idle_buffers;
        idle_buffers = bufs[i];
    }
    pthread_mutex_unlock(&pool_lock);
}

/* Takes `count` buffer sets from the pool (making new ones as needed), each able to hold
 * a_floats and b_floats. On failure returns 0 with nothing taken. */
static int pool_acquire(gemm_buffers **bufs, int count, size_t a_floats, size_t b_floats)
{
    int taken = 0;
    pthread_mutex_lock(&pool_lock);
    while (taken < count && idle_buffers != NULL) {
        bufs[taken] = idle_buffers;
        idle_buffers = idle_buffers->next;
        taken++;
    }
    pthread_mutex_unlock(&pool_lock);
    for (; taken < count; taken++) {
        bufs[taken] = calloc(1, sizeof(gemm_buffers));
        if (bufs[taken] == NULL) {
            attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_gemm: out of memory for packing buffers");
            pool_release(bufs, taken);
            return 0;
        }
    }
    for (int i = 0; i < count; i++) {
        if (!ensure_capacity(&bufs[i]->a, &bufs[i]->a_capacity, a_floats) ||
            !ensure_capacity(&bufs[i]->b, &bufs[i]->b_capacity, b_floats)) {
            pool_release(bufs, count);
            attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                      "attn_gemm: out of memory for packing buffers (%zu floats per thread)",
                      a_floats + b_floats);
            return 0;
        }
    }
    return 1;
}

void attn_gemm_release_buffers(void)
{
    pthread_mutex_lock(&pool_lock);
    gemm_buffers *list = idle_buffers;
    idle_buffers = NULL;
    pthread_mutex_unlock(&pool_lock);
    while (list != NULL) {
        gemm_buffers *next = list->next;
        buffers_destroy(list);
        list = next;
    }
}

/* ---- blocking and partition ------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Splits `length` into the fewest blocks of at most `limit`, as equal as possible, each a
 * multiple of `unit` (except where the length ends). Returns the block size. */
static int64_t balanced_block(int64_t length, int64_t limit, int64_t unit)
{
    int64_t blocks = ceil_div(length, limit);
    return ceil_div(ceil_div(length, blocks), unit) * unit;
}

typedef struct gemm_plan {
    const gemm_kernel_info *info;
    attn_precision precision;
    attn_transpose ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    int64_t depth;       /* k-block length */
    int64_t depth_words; /* packed words per row of a full k-block (depth, or depth / 2) */
    int64_t max_mc;      /* rows of the packed A block */
    int64_t max_nc;      /* columns of the packed B block */
    int64_t row_parts;   /* the rectangles: row_parts x col_parts */
    int64_t col_parts;
    int a_in_place;         /* full A panels are read from the caller's A, not packed */
    int b_in_place;         /* likewise for B (only when op(B) = B: rows contiguous) */
    gemm_buffers **buffers; /* one set per thread */
    /* Shared B (NULL when each thread packs its own): op(B) packed whole, k-block kb's
     * panel jp at shared_b + kb * depth * b_panels * NR + jp * NR * kc. */
    float *shared_b;
    int b_prepacked;  /* shared_b was packed before the call: nothing to pack or wait for */
    int64_t b_panels; /* column panels of op(B) */
    int64_t b_groups_per_block; /* claims per k-block: GEMM_SHARED_B_GROUP panels each */
    int64_t b_groups;           /* claims in all */
    atomic_int_fast64_t *next_b_group;
    atomic_int *b_group_ready;
} gemm_plan;

/* Packed words of a k-block of kc steps: one per step, or one per pair of steps. */
static int64_t packed_steps(const gemm_plan *g, int64_t kc)
{
    return g->info->pack_pairs != NULL ? (kc + 1) / 2 : kc;
}

/* Packs a slab into panels in the kernel's format, rounding when the precision asks. */
static void pack_operand(const gemm_plan *g, const float *src, int64_t w_stride, int64_t p_stride,
                         int64_t width, int64_t depth, int panel, float *dst)
{
    if (g->info->pack_pairs != NULL) {
        g->info->pack_pairs(src, w_stride, p_stride, width, depth, panel, dst);
        return;
    }
    pack_panels(g->info, src, w_stride, p_stride, width, depth, panel, dst);
    if (g->precision == ATTN_PRECISION_BF16)
        round_packed_to_bf16(dst, (width + panel - 1) / panel * panel * depth);
}

/* op(B)[p, j] = b[p * b_row + j * b_col]. */
static int64_t b_row_stride(const gemm_plan *g)
{
    return g->tb == ATTN_NO_TRANS ? g->ldb : 1;
}
static int64_t b_col_stride(const gemm_plan *g)
{
    return g->tb == ATTN_NO_TRANS ? 1 : g->ldb;
}

/* Packs one claim of the shared B: GEMM_SHARED_B_GROUP panels of one k-block. */
static void pack_shared_group(const gemm_plan *g, int64_t group)
{
    const int nr = g->info->nr;
    int64_t kb = group / g->b_groups_per_block;
    int64_t first = group % g->b_groups_per_block * GEMM_SHARED_B_GROUP;
    int64_t p0 = kb * g->depth, kc = min64(g->depth, g->k - p0);
    int64_t j0 = first * nr, width = min64((int64_t)GEMM_SHARED_B_GROUP * nr, g->n - j0);
    float *dst =
        g->shared_b + kb * g->depth_words * g->b_panels * nr + first * nr * packed_steps(g, kc);
    pack_operand(g, g->b + p0 * b_row_stride(g) + j0 * b_col_stride(g), b_col_stride(g),
                 b_row_stride(g), width, kc, nr, dst);
}

/* Claims and packs groups of the shared B until none is left. */
static void pack_shared_b(const gemm_plan *g)
{
    for (;;) {
        int64_t group = atomic_fetch_add_explicit(g->next_b_group, 1, memory_order_relaxed);
        if (group >= g->b_groups)
            return;
        pack_shared_group(g, group);
        atomic_store_explicit(&g->b_group_ready[group], 1, memory_order_release);
    }
}

/* Returns once the group holding panel jp of k-block kb is packed (by whichever thread
 * claimed it; by the time a thread asks, every group has been claimed). */
static void wait_for_shared_panel(const gemm_plan *g, int64_t kb, int64_t jp)
{
    int64_t group = kb * g->b_groups_per_block + jp / GEMM_SHARED_B_GROUP;
    for (int spin = 0; !atomic_load_explicit(&g->b_group_ready[group], memory_order_acquire);
         spin++) {
        if (spin < 4096)
            CPU_RELAX();
        else
            sched_yield(); /* the packer may be waiting for this core */
    }
}

/* One rectangle of C: rows [r0, r1), columns [c0, c1). */
static void multiply_rectangle(const gemm_plan *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                               gemm_buffers *buf)
{
    const int mr = g->info->mr, nr = g->info->nr;
    const gemm_micro_kernel kernel = g->info->kernel;
    /* op(A)[i, p] = a[i * a_row + p * a_col]; op(B)[p, j] = b[p * b_row + j * b_col]. */
    const int64_t a_row = g->ta == ATTN_NO_TRANS ? g->lda : 1;
    const int64_t a_col = g->ta == ATTN_NO_TRANS ? 1 : g->lda;
    const int64_t b_row = b_row_stride(g), b_col = b_col_stride(g);
    /* Read in place, A needs no row blocks: one pass packs each B block just once. */
    const int64_t mc = g->a_in_place ? r1 - r0 : balanced_block(r1 - r0, g->max_mc, mr);
    const int64_t nc = balanced_block(c1 - c0, g->max_nc, nr);
    gemm_tile tile = {.ldc = g->ldc};

    for (int64_t i0 = r0; i0 < r1; i0 += mc) {
        int64_t mb = min64(mc, r1 - i0);
        for (int64_t p0 = 0; p0 < g->k; p0 += g->depth) {
            int64_t kc = min64(g->depth, g->k - p0), kc_words = packed_steps(g, kc);
            float beta = p0 == 0 ? g->beta : 1.0f;
            /* Panels [0, a_direct) come from A itself; the rest (all, or the ragged last
             * one) are packed. */
            const float *a_block = g->a + i0 * a_row + p0 * a_col;
            int64_t a_direct = g->a_in_place ? mb / mr * mr : 0;
            pack_operand(g, a_block + a_direct * a_row, a_row, a_col, mb - a_direct, kc, mr,
                         buf->a);
            for (int64_t j0 = c0; j0 < c1; j0 += nc) {
                int64_t nb = min64(nc, c1 - j0);
                const float *b_block = g->b + p0 * b_row + j0 * b_col;
                int64_t b_direct = g->b_in_place ? nb / nr * nr : 0;
                const float *b_packed = buf->b;
                if (g->shared_b != NULL) {
                    int64_t kb = p0 / g->depth;
                    for (int64_t jp = j0 / nr; !g->b_prepacked && jp < ceil_div(j0 + nb, nr);
                         jp += GEMM_SHARED_B_GROUP - jp % GEMM_SHARED_B_GROUP)
                        wait_for_shared_panel(g, kb, jp);
                    b_packed = g->shared_b + kb * g->depth_words * g->b_panels * nr +
                               j0 / nr * nr * kc_words;
                } else {
                    pack_operand(g, b_block + b_direct * b_col, b_col, b_row, nb - b_direct, kc, nr,
                                 buf->b);
                }
                for (int64_t i = 0; i < mb; i += mr) {
                    if (i < a_direct) {
                        tile.a = a_block + i * a_row;
                        tile.a_row_stride = a_row;
                        tile.a_step_stride = a_col;
                    } else {
                        tile.a = buf->a + (i - a_direct) * kc_words;
                        tile.a_row_stride = 1;
                        tile.a_step_stride = mr;
                    }
                    tile.rows = (int)min64(mr, mb - i);
                    for (int64_t j = 0; j < nb; j += nr) {
                        if (j < b_direct) {
                            tile.b = b_block + j;
                            tile.b_step_stride = b_row;
                        } else {
                            tile.b = b_packed + (j - b_direct) * kc_words;
                            tile.b_step_stride = nr;
                        }
                        tile.c = g->c + (i0 + i) * g->ldc + j0 + j;
                        tile.cols = (int)min64(nr, nb - j);
                        kernel(kc, &tile, g->alpha, beta);
                    }
                }
            }
        }
    }
}

static void multiply_parts(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    const gemm_plan *g = ctx;
    const int64_t row_panels = ceil_div(g->m, g->info->mr);
    const int64_t col_panels = ceil_div(g->n, g->info->nr);
    for (int64_t part = begin; part < end; part++) {
        int64_t pr = part / g->col_parts, pc = part % g->col_parts;
        int64_t r0 = row_panels * pr / g->row_parts * g->info->mr;
        int64_t r1 = min64(row_panels * (pr + 1) / g->row_parts * g->info->mr, g->m);
        int64_t c0 = col_panels * pc / g->col_parts * g->info->nr;
        int64_t c1 = min64(col_panels * (pc + 1) / g->col_parts * g->info->nr, g->n);
        if (g->shared_b != NULL && !g->b_prepacked)
            pack_shared_b(g);
        if (r0 < r1 && c0 < c1)
            multiply_rectangle(g, r0, r1, c0, c1, g->buffers[thread_index]);
    }
}

/* Chooses how to cut C into `parts` rectangles (rows x columns) so that the packing work
 * each thread repeats is smallest: every thread packs all of its rows of op(A) once and
 * its columns of op(B) once per block of MC rows. */
static void choose_partition(gemm_plan *g, int64_t parts)
{
    const int64_t row_panels = ceil_div(g->m, g->info->mr);
    const int64_t col_panels = ceil_div(g->n, g->info->nr);
    double best_cost = -1;
    g->row_parts = 1;
    g->col_parts = 1;
    for (int64_t rp = 1; rp <= parts; rp++) {
        if (parts % rp != 0)
            continue;
        int64_t cp = parts / rp;
        if (rp > row_panels || cp > col_panels)
            continue;
        double rows = (double)g->m / (double)rp, cols = (double)g->n / (double)cp;
        double cost = rows + cols * (double)ceil_div((int64_t)rows + 1, g->max_mc);
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            g->row_parts = rp;
            g->col_parts = cp;
        }
    }
}

/* The k-blocks, cache blocks and panels of op(B) of a product: what a prepacked op(B) must
 * agree with, so they depend only on the kernel, the precision and the sizes. */
static void plan_blocks(gemm_plan *g)
{
    const gemm_kernel_info *info = g->info;
    g->depth = balanced_block(g->k, info->max_depth, info->pack_pairs != NULL ? 2 : 1);
    g->depth_words = packed_steps(g, g->depth);
    int64_t depth_bytes = g->depth_words * (int64_t)sizeof(float);
    g->max_nc = (int64_t)GEMM_B_BLOCK_BYTES / depth_bytes / info->nr * info->nr;
    g->max_mc = (int64_t)GEMM_A_BLOCK_BYTES / depth_bytes / info->mr * info->mr;
    if (g->max_nc < info->nr)
        g->max_nc = info->nr;
    if (g->max_mc < info->mr)
        g->max_mc = info->mr;
    g->b_panels = ceil_div(g->n, info->nr);
    g->b_groups_per_block = ceil_div(g->b_panels, GEMM_SHARED_B_GROUP);
    g->b_groups = ceil_div(g->k, g->depth) * g->b_groups_per_block;
}

static void pack_groups(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    for (int64_t group = begin; group < end; group++)
        pack_shared_group(ctx, group);
}

size_t attn_gemm_packed_b_floats(const gemm_kernel_info *info, attn_precision precision, int64_t k,
                                 int64_t n)
{
    gemm_plan g = {.info = info, .precision = precision, .k = k, .n = n};
    plan_blocks(&g);
    return (size_t)(ceil_div(k, g.depth) * g.depth_words * g.b_panels * info->nr);
}

void attn_gemm_pack_b(const gemm_kernel_info *info, attn_precision precision, attn_transpose tb,
                      int64_t k, int64_t n, const float *b, int64_t ldb, float *packed)
{
    gemm_plan g = {.info = info,
                   .precision = precision,
                   .tb = tb,
                   .k = k,
                   .n = n,
                   .b = b,
                   .ldb = ldb,
                   .shared_b = packed};
    plan_blocks(&g);
    attn_parallel_for(g.b_groups, 1, pack_groups, &g);
}

attn_status attn_gemm_blocked(const gemm_kernel_info *info, attn_precision precision,
                              attn_transpose ta, attn_transpose tb, int64_t m, int64_t n, int64_t k,
                              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                              const float *prepacked_b, float beta, float *c, int64_t ldc)
{
    gemm_plan g = {.info = info,
                   .precision = precision,
                   .ta = ta,
                   .tb = tb,
                   .m = m,
                   .n = n,
                   .k = k,
                   .alpha = alpha,
                   .beta = beta,
                   .a = a,
                   .b = b,
                   .c = c,
                   .lda = lda,
                   .ldb = ldb,
                   .ldc = ldc};
    plan_blocks(&g);

    double flops = 2.0 * (double)m * (double)n * (double)k;
    int64_t parts = attn_parallel_threads();
    if (parts > GEMM_MAX_PARTS)
        parts = GEMM_MAX_PARTS;
    if ((double)parts * GEMM_MIN_FLOPS_PER_THREAD > flops)
        parts = (int64_t)(flops / GEMM_MIN_FLOPS_PER_THREAD);
    if (parts < 1)
        parts = 1;
    /* Row bands with a shared op(B) pack nothing twice; otherwise the cheaper cut. */
    const int64_t row_panels = ceil_div(m, info->mr);
    int64_t shared_floats = ceil_div(k, g.depth) * g.depth_words * g.b_panels * info->nr;
    /* Operands rounded to bf16 exist only packed. */
    const int may_read_in_place = precision == ATTN_PRECISION_FP32;
    int share_b = prepacked_b == NULL && parts > 1 && row_panels >= parts &&
                  !(may_read_in_place && tb == ATTN_NO_TRANS &&
                    ceil_div(row_panels, parts) <= GEMM_B_IN_PLACE_MAX_USES) &&
                  shared_floats <= GEMM_SHARED_B_MAX_FLOATS &&
                  g.b_groups <= GEMM_SHARED_B_MAX_GROUPS;
    if (share_b || (prepacked_b != NULL && row_panels >= parts)) {
        g.row_parts = parts;
        g.col_parts = 1;
    } else {
        choose_partition(&g, parts);
    }
    parts = g.row_parts * g.col_parts;

    /* Each rectangle is at most this large, so each thread's buffers need no more. */
    int64_t rect_rows = ceil_div(row_panels, g.row_parts) * info->mr;
    int64_t rect_cols = ceil_div(ceil_div(n, info->nr), g.col_parts) * info->nr;
    /* A packed panel repays its copy only if enough tiles use it: an A panel is used by
     * every column panel of the rectangle, a B panel by every row panel. */
    g.a_in_place = may_read_in_place && rect_cols / info->nr <= GEMM_A_IN_PLACE_MAX_USES;
    g.b_in_place = may_read_in_place && prepacked_b == NULL && tb == ATTN_NO_TRANS &&
                   rect_rows / info->mr <= GEMM_B_IN_PLACE_MAX_USES;
    size_t a_floats =
        (size_t)((g.a_in_place ? info->mr : min64(rect_rows, g.max_mc)) * g.depth_words);
    size_t b_floats =
        (size_t)((g.b_in_place || share_b || prepacked_b != NULL ? info->nr
                                                                 : min64(rect_cols, g.max_nc)) *
                 g.depth_words);
    /* With a shared B, one more buffer set holds it (its A part unused). */
    int sets = (int)parts + share_b;
    gemm_buffers *buffers[GEMM_MAX_PARTS + 1];
    if (!pool_acquire(buffers, sets, a_floats, b_floats))
        return ATTN_ERR_OUT_OF_MEMORY;
    atomic_int_fast64_t next_b_group;
    atomic_int b_group_ready[GEMM_SHARED_B_MAX_GROUPS];
    if (share_b) {
        gemm_buffers *shared = buffers[parts];
        if (!ensure_capacity(&shared->b, &shared->b_capacity, (size_t)shared_floats)) {
            pool_release(buffers, sets);
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                             "attn_gemm: out of memory for the shared packing buffer "
                             "(%lld floats)",
                             (long long)shared_floats);
        }
        g.shared_b = shared->b;
        atomic_init(&next_b_group, 0);
        for (int64_t i = 0; i < g.b_groups; i++)
            atomic_init(&b_group_ready[i], 0);
        g.next_b_group = &next_b_group;
        g.b_group_ready = b_group_ready;
    }
    if (prepacked_b != NULL) {
        g.shared_b = (float *)prepacked_b; /* only read: b_prepacked keeps the packers away */
        g.b_prepacked = 1;
    }
    g.buffers = buffers;
    attn_parallel_for(parts, 1, multiply_parts, &g);
    pool_release(buffers, sets);
    return ATTN_OK;
}
