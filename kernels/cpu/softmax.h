/* softmax.h — the vectorised row operations of the CPU attention's online
 * softmax (base 2). Internal to kernels/cpu. */
#ifndef WF_CPU_SOFTMAX_H
#define WF_CPU_SOFTMAX_H

#include <stdint.h>

/* Largest of row[0..n); -inf when n == 0. row: float-aligned. */
float wf_cpu_row_max(const float *row, int64_t n);

/* row[j] = 2^(row[j] - m) in place for j < n; returns the sum of the new
 * values. m must be finite; 2^x underflows to exactly 0 below 2^-126. */
float wf_cpu_row_exp2(float *row, int64_t n, float m);

/* 2^x for one value, same polynomial (for tests). */
float wf_cpu_exp2(float x);

#endif /* WF_CPU_SOFTMAX_H */
