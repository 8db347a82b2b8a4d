/* rng.h — the unit tests' random numbers: xorshift32 on one static
 * state per test program, deterministic and without library state.
 * Define WF_TEST_RNG_SEED (non-zero) before the include to pick the
 * program's seed. Header only. Tests only. */
#ifndef WF_TEST_RNG_H
#define WF_TEST_RNG_H

#include <stdint.h>

#ifndef WF_TEST_RNG_SEED
#define WF_TEST_RNG_SEED 12345u
#endif

static uint32_t rng_state = WF_TEST_RNG_SEED;

static inline uint32_t rnd_u32(void)
{
    uint32_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    rng_state = x;
    return x;
}

/* uniform in [-1, 1) (24 random bits) */
static inline float rnd_unit(void)
{
    return (float)(rnd_u32() >> 8) / 8388608.0f - 1.0f;
}

#endif /* WF_TEST_RNG_H */
