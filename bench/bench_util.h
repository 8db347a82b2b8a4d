/* bench_util.h — the timing helpers the benchmarks share: a monotonic
 * clock in seconds and an ascending sort of timings (for medians and
 * ranges). Not here: how a bench takes its median. Header only: each
 * benchmark is one .c file. Benchmarks only. */
#ifndef WF_BENCH_UTIL_H
#define WF_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Monotonic seconds. */
static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts the n values of t in ascending order. */
static inline void bench_sort(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
}

#endif /* WF_BENCH_UTIL_H */
