/* xoshiro256** (Blackman & Vigna) seeded through splitmix64, and a stateless hash for
 * draws that must not depend on how work is split between threads. */
#include "core/internal.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void attn_rng_seed(attn_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->state[i] = splitmix64(&x);
}

uint64_t attn_rng_next_u64(attn_rng *rng)
{
    uint64_t *s = rng->state;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float attn_rng_uniform(attn_rng *rng)
{
    return (float)(attn_rng_next_u64(rng) >> 40) * (1.0f / 16777216.0f);
}

uint64_t attn_rng_below(attn_rng *rng, uint64_t n)
{
    if (n == 0)
        return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = attn_rng_next_u64(rng);
    } while (x >= limit);
    return x % n;
}

float attn_rng_normal(attn_rng *rng)
{
    double u1 = ((double)(attn_rng_next_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(attn_rng_next_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float attn_hash_uniform(uint64_t seed, uint64_t index)
{
    return (float)(attn_index_hash(seed, index) >> 40) * (1.0f / 16777216.0f);
}
