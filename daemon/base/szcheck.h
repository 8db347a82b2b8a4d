/* szcheck.h — size arithmetic with a sticky overflow flag, for workspace
 * layouts computed before anything runs (cp_attention, flux_forward): a
 * chain of products and sums sets the flag once any step overflows (or
 * gets a negative factor), and the caller checks it at the end. Also the
 * int64 min / max that such layouts need. */
#ifndef WF_SZCHECK_H
#define WF_SZCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline int64_t wf_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t wf_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

typedef struct szc {
    bool overflow; /* set once any operation overflowed */
} szc_t;

static inline size_t szc_mul(szc_t *c, size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) {
        c->overflow = true;
        return 0;
    }
    return a * b;
}

static inline size_t szc_add(szc_t *c, size_t a, size_t b)
{
    if (b > SIZE_MAX - a) {
        c->overflow = true;
        return 0;
    }
    return a + b;
}

/* Product of non-negative int64 factors (a negative one overflows). */
static inline size_t szc_mul3(szc_t *c, int64_t a, int64_t b, int64_t d)
{
    if (a < 0 || b < 0 || d < 0) {
        c->overflow = true;
        return 0;
    }
    return szc_mul(c, szc_mul(c, (size_t)a, (size_t)b), (size_t)d);
}

/* a * b * d * e * es (non-negative factors, element size es). */
static inline size_t szc_mul5(szc_t *c, int64_t a, int64_t b, int64_t d, int64_t e,
                              size_t es)
{
    if (e < 0) {
        c->overflow = true;
        return 0;
    }
    return szc_mul(c, szc_mul(c, szc_mul3(c, a, b, d), (size_t)e), es);
}

#endif /* WF_SZCHECK_H */
