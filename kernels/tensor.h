/* tensor.h — element conversions between the wire dtypes and f32.
 *
 * Sources may sit at any alignment (received ZeroMQ frames are not
 * aligned), so every load goes through memcpy; nothing here casts a
 * received pointer to float *. bf16 and f16 are converted with
 * round-to-nearest-even; NaN stays NaN, overflow becomes infinity.
 */
#ifndef WF_TENSOR_H
#define WF_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Scalar conversions. */
float wf_bf16_to_f32(uint16_t h);
uint16_t wf_f32_to_bf16(float f);
float wf_f16_to_f32(uint16_t h);
uint16_t wf_f32_to_f16(float f);

/* dst[i] = (float)src[i] for n elements of dtype dt. src: any alignment.
 * dst: float-aligned. */
void wf_convert_to_f32(float *dst, const void *src, wf_dtype_t dt, size_t n);

/* dst[i] = (dt)src[i] for n elements. dst: any alignment. */
void wf_convert_from_f32(void *dst, wf_dtype_t dt, const float *src, size_t n);

/* Strided gather-convert: rows of n elements, src row r starts at
 * src + r * src_stride elements (of dt), dst rows are contiguous
 * (dst + r * n). Used to pull one head's (S, D) slice out of a
 * (B, S, H, D) tensor. */
void wf_convert_rows_to_f32(float *dst, const void *src, wf_dtype_t dt,
                            size_t rows, size_t n, size_t src_stride);

/* Strided scatter-convert, the inverse of wf_convert_rows_to_f32. */
void wf_convert_rows_from_f32(void *dst, wf_dtype_t dt, size_t dst_stride,
                              const float *src, size_t rows, size_t n);

/* Element i of buf (dtype dt) read as f32 / written from x (rounded to
 * nearest even); buf at any alignment. For tests and tools that fill or
 * read single elements; bulk code uses the conversions above. */
float wf_elem_load(const void *buf, wf_dtype_t dt, size_t i);
void wf_elem_store(void *buf, wf_dtype_t dt, size_t i, float x);

/* x rounded to dtype dt and back (f32: x itself). */
float wf_round_to_dtype(float x, wf_dtype_t dt);

/* The log-sum-exp merge of a partial attention result into accumulators
 * on host memory: backend.h's lse_merge formula, the reference every
 * backend's lse_merge matches. For each of `rows` rows (ao, po: (rows, D);
 * al, pl: (rows)): lse_p = -inf leaves the row (but when lse_a is -inf
 * too, each NaN of out_p is copied: a row whose visible scores were all
 * -inf has out NaN, lse -inf, and the NaN must survive until a finite
 * partial replaces it); lse_a = -inf takes the
 * partial; else with w = sigmoid(lse_p - lse_a)
 *   out = out_a - w * (out_a - out_p) (both finite),
 *   out = sigmoid(lse_a - lse_p) * out_a + w * out_p (either not finite:
 *         an infinity stays one, never inf - inf),
 *   lse = max + log1p(exp(-|lse_a - lse_p|)).
 * rdt F16 / BF16 rounds the partial and the merged output to that dtype,
 * as if both were stored in it (diffusers keeping ring steps in the input
 * dtype); F32 does not round. lse stays f32. NaN in either lse or out
 * propagates (sigmoid and log1p of NaN). */
void wf_lse_merge_rows(float *ao, float *al, const float *po, const float *pl,
                       int64_t rows, int64_t D, wf_dtype_t rdt);

#endif /* WF_TENSOR_H */
