/* softmax.h — the vectorised row operations of the CPU attention's online
 * softmax (base 2). Internal to kernels/cpu. */
#ifndef WF_CPU_SOFTMAX_H
#define WF_CPU_SOFTMAX_H

#include <stdint.h>

/* Largest of row[0..n), NaN ignored; -inf when n == 0 or every value is
 * NaN or -inf. row: float-aligned. */
float wf_cpu_row_max(const float *row, int64_t n);

/* row[j] = 2^(row[j] - m) in place for j < n; returns the sum of the new
 * values. 2^x underflows to exactly 0 below 2^-126; a NaN difference
 * (a NaN score, or inf - inf) gives NaN, so the sum is NaN. */
float wf_cpu_row_exp2(float *row, int64_t n, float m);

/* The same with the difference scaled: row[j] = 2^((row[j] - m) * b1 * b2),
 * multiplied in that order so that a finite b1 * b2 beyond the f32 range
 * (a huge softmax scale) never makes inf * 0: the row's maximum gives
 * exactly 1 and the others underflow to 0 (or overflow to -inf, then 0). */
float wf_cpu_row_exp2_scaled(float *row, int64_t n, float m, float b1, float b2);

/* 2^x for one value, same polynomial (for tests). */
float wf_cpu_exp2(float x);

#endif /* WF_CPU_SOFTMAX_H */
