/* cuda_params.h — the attention parameters the host-side tests of the
 * CUDA plan (test_cuda_host.c, test_cuda_plan_ws.c, test_cuda_plan_fp8.c)
 * build their cases from, and the ceiling division their grids are
 * checked with. Not here: device limits (each test states the device it
 * plans for). Header only; tests only. */
#ifndef WF_TEST_CUDA_PARAMS_H
#define WF_TEST_CUDA_PARAMS_H

#include <stdint.h>
#include <string.h>

#include "cuda_plan.h"

/* a / b rounded up (a >= 0, b > 0). */
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Attention over q (B,Sq,Hq,D), k / v (B,Skv,Hkv,D), every tensor in dtype
 * dt, all Hq heads, scale 1/8, not fp8. The planner never reads the
 * tensors: they point at one small static buffer, so that none is NULL. */
static inline wf_attn_params_t attn_params(int64_t B, int64_t Sq, int64_t Skv, int64_t Hq,
                                           int64_t Hkv, int64_t D, wf_dtype_t dt)
{
    static char dummy[16];
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = B; p.Sq = Sq; p.Skv = Skv; p.Hq = Hq; p.Hkv = Hkv; p.D = D;
    p.h_begin = 0; p.h_end = Hq; p.scale = 0.125f;
    p.q = p.k = p.v = dummy; p.out = dummy;
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = dt;
    return p;
}

#endif
