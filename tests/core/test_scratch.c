/* The scratch cache kernels take their per-call work buffers from. */
#include "harness.h"
#include "core/internal.h"

#include <stdint.h>
#include <string.h>

static void test_buffers_are_aligned_usable_and_reused(void)
{
    unsigned char *a = attn_scratch_acquire(1000);
    CHECK(a != NULL && (uintptr_t)a % 64 == 0, "64-byte aligned");
    memset(a, 0xab, 1000);
    attn_scratch_release(a);
    unsigned char *b = attn_scratch_acquire(600);
    CHECK(b == a, "a smaller request reuses the idle buffer");
    unsigned char *c = attn_scratch_acquire(600);
    CHECK(c != NULL && c != b, "a buffer in use is not handed out twice");
    memset(c, 0x11, 600);
    CHECK(b[0] == 0xab && b[599] == 0xab, "buffers do not overlap");
    attn_scratch_release(b);
    attn_scratch_release(c);
    unsigned char *big = attn_scratch_acquire(1 << 20);
    CHECK(big != NULL && (uintptr_t)big % 64 == 0, "a larger request gets a large enough buffer");
    memset(big, 0, 1 << 20);
    attn_scratch_release(big);
    attn_scratch_release(NULL);
    CHECK(attn_scratch_acquire(SIZE_MAX - 8) == NULL, "an impossible size fails");
    CHECK(strlen(attn_last_error()) > 0, "with a message");
}

static void test_many_buffers_at_once(void)
{
    enum { COUNT = 40 };
    unsigned char *held[COUNT];
    int ok = 1;
    for (int i = 0; i < COUNT; i++) {
        held[i] = attn_scratch_acquire((size_t)(i + 1) * 100);
        ok &= held[i] != NULL;
        if (held[i] != NULL)
            memset(held[i], i, (size_t)(i + 1) * 100);
    }
    for (int i = 0; i < COUNT && ok; i++)
        ok &= held[i][0] == i && held[i][(i + 1) * 100 - 1] == i;
    CHECK(ok, "40 buffers held at once keep their contents");
    for (int i = 0; i < COUNT; i++)
        attn_scratch_release(held[i]); /* more than the cache keeps: the rest are freed */
}

int main(void)
{
    RUN_TEST(test_buffers_are_aligned_usable_and_reused);
    RUN_TEST(test_many_buffers_at_once);
    return test_summary();
}
