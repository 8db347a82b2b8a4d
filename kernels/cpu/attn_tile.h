/* attn_tile.h — the CPU attention's register-blocked tile path (AVX-512):
 * the two products of a query tile written as micro-kernels that keep
 * their accumulators in registers, with the softmax's row max taken in
 * the score kernel's epilogue and the exp2 / sum in one pass over a score
 * block that stays in L1. Internal to kernels/cpu; cpu_backend.c decides
 * when it runs and keeps the cblas path for everything else.
 */
#ifndef WF_CPU_ATTN_TILE_H
#define WF_CPU_ATTN_TILE_H

#include <stdbool.h>
#include <stdint.h>

/* Rows of a query block: the unit both micro-kernels work on. A query
 * tile of the tile path is a multiple of it (padded with zero rows). */
enum { WF_ATTN_RB = 12 };

/* Keys of one packed K panel: K^T of 32 consecutive keys, (D, 32). */
enum { WF_ATTN_KP = 32 };

/* Keys of one key tile: the score block (WF_ATTN_RB, WF_ATTN_FK) is 12
 * KiB and stays in L1; the K and V tiles it reads (FK x D each) stay in
 * L2 across the query blocks of a tile. A multiple of WF_ATTN_KP. */
enum { WF_ATTN_FK = 256 };

/* Whether the tile path is compiled into this build (an AVX-512 target)
 * and takes head dim D (a multiple of 16). */
bool wf_cpu_attn_tile_ok(int64_t D);

/* kp (Skv rounded up to WF_ATTN_KP, times D floats, 64-byte aligned) = k (Skv, D) f32
 * row-major as panels of WF_ATTN_KP keys, each (D, WF_ATTN_KP): the keys
 * past Skv in the last panel are 0. */
void wf_cpu_attn_kpack(float *kp, const float *k, int64_t Skv, int64_t D);

/* Attention of one query tile (the online softmax in base 2, as
 * cpu_backend.c's attend_tile with its fast mode):
 *   q  (tq, D) f32, tq a multiple of WF_ATTN_RB (rows past the first
 *      `real` are zero and their results unused)
 *   kp packed K (wf_cpu_attn_kpack), v (Skv, D) f32
 *   o  (tq, D): the unnormalised output; m, l (tq): running max and sum
 *      (m -inf and l 0 for a row that sees no key)
 *   s  (WF_ATTN_RB, WF_ATTN_FK) scratch
 * causal: row i sees key j iff j <= first + i (first = q_offset + q0 -
 * kv_offset); otherwise every key. alpha = scale * log2 e, a normal
 * positive f32. Scores are alpha * q.k. Returns false (o, m, l undefined)
 * as soon as the max of one of the first `real` rows is not finite, or a
 * key tile that crosses a block's diagonal has a non-finite v: the caller
 * reruns the tile on the cblas path in safe mode. */
bool wf_cpu_attn_tile(int64_t tq, int64_t real, int64_t D, int64_t Skv, bool causal,
                      int64_t first, float alpha, const float *q, const float *kp,
                      const float *v, float *o, float *m, float *l, float *s);

#endif /* WF_CPU_ATTN_TILE_H */
