/* test_cuda_plan_fp8.c — the host side of the fp8 attention kernel
 * (kernels/cuda/attention_fp8.cu and fp8_quant.cu), without a
 * GPU: which devices take fp8 jobs (compute capability 9.0 in a build with
 * sm_90a), the geometry's selection and refusals (WF_E_UNSUPPORTED without
 * fp8 or when its shared memory does not fit; the bf16 geometry refuses
 * fp8 jobs), the launch grid, the shared memory against sm_90's 227 KiB,
 * the workspace of the quantized copies (offsets, alignment, the K/V heads
 * a head range reads, overflow), the quantizer's grid, and the order of
 * v8t's keys against the P fragment's derivation (attention_fp8.cu's
 * file comment). Runs in every build: weft_cuda_plan is plain C. */
#include "cuda_plan.h"
#include "support/check.h"
#include "support/cuda_params.h"

#include <stdio.h>
#include <string.h>

#define SM90_SMEM 232448u /* sm_90's opt-in shared memory per block (227 KiB) */

static wf_cuda_limits_t hopper(size_t smem)
{
    wf_cuda_limits_t l = {smem, 2147483647, 65535, 65535, 132, WF_CUDA_KERNEL_WGMMA, 0};
    return l;
}

static uint64_t up256(uint64_t x) { return (x + 255u) & ~(uint64_t)255u; }

/* attn_params' shapes as an fp8 job. */
static wf_attn_params_t mk(int64_t B, int64_t Sq, int64_t Skv, int64_t Hq, int64_t Hkv,
                           int64_t D, wf_dtype_t dt)
{
    wf_attn_params_t p = attn_params(B, Sq, Skv, Hq, Hkv, D, dt);
    p.fp8 = true;
    return p;
}

static void test_device_ok(void)
{
    CHECK_TRUE(wf_cuda_fp8_device_ok(9, 0, 1) == 1);
    CHECK_TRUE(wf_cuda_fp8_device_ok(9, 0, 0) == 0); /* no sm_90a body */
    CHECK_TRUE(wf_cuda_fp8_device_ok(8, 0, 1) == 0);
    CHECK_TRUE(wf_cuda_fp8_device_ok(8, 9, 1) == 0); /* Ada has fp8 mma, not this kernel */
    CHECK_TRUE(wf_cuda_fp8_device_ok(10, 0, 1) == 0); /* sm_90a code does not run on 10.0 */
    CHECK_TRUE(wf_cuda_fp8_device_ok(12, 0, 1) == 0);
}

/* The P fragment (attention_fp8.cu): byte j of A register 2 h + r of
 * thread t takes S accumulator s[16 kk + 8 h + 4 (j / 2) + 2 r + (j % 2)];
 * S's layout puts accumulator i at row g + 8 ((i >> 1) & 1), key 8 (i >> 2)
 * + 2 t + (i & 1); wgmma's k32 A fragment wants row g + 8 r, column 16 h +
 * 4 t + j of the k-step. The slot where v8t stores that key must be that
 * column, and the slots a permutation. */
static void test_key_slot(void)
{
    int seen[32] = {0};
    for (int k = 0; k < 32; k++) {
        const int s = wf_cuda_fp8_key_slot(k);
        CHECK_TRUE(s >= 0 && s < 32);
        if (s >= 0 && s < 32)
            seen[s]++;
    }
    for (int s = 0; s < 32; s++)
        CHECK_TRUE(seen[s] == 1);
    int bad = 0;
    for (int kk = 0; kk < 4; kk++)
        for (int t = 0; t < 4; t++)
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++)
                    for (int j = 0; j < 4; j++) {
                        const int i = 16 * kk + 8 * h + 4 * (j / 2) + 2 * r + (j % 2);
                        const int row = (i >> 1) & 1;
                        const int key = 8 * (i >> 2) + 2 * t + (i & 1);
                        const int col = 16 * h + 4 * t + j;
                        if (row != r || key / 32 != kk ||
                            wf_cuda_fp8_key_slot(key % 32) != col)
                            bad++;
                    }
    CHECK_TRUE(bad == 0);
}

static void test_geometry(void)
{
    const wf_cuda_limits_t lim = hopper(SM90_SMEM);
    static const int64_t D[2] = {64, 128};
    static const wf_dtype_t DT[3] = {WF_DTYPE_BF16, WF_DTYPE_F16, WF_DTYPE_F32};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 3; ti++) {
            wf_attn_params_t p = mk(2, 1000, 777, 24, 8, D[di], DT[ti]);
            p.h_begin = 3;
            p.h_end = 20;
            p.causal = ti == 1;
            wf_cuda_attn_geom_t g;
            CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 1, &g) == WF_OK);
            CHECK_TRUE(g.kernel == WF_CUDA_KERNEL_FP8);
            CHECK_TRUE(g.grid[0] == (unsigned)cdiv(1000, WF_CUDA_BR));
            CHECK_TRUE(g.grid[1] == 17 && g.grid[2] == 2);
            CHECK_TRUE(g.block[0] == WF_CUDA_FP8_THREADS && g.block[1] == 1 && g.block[2] == 1);
            CHECK_TRUE(g.d == D[di] && g.stages == WF_CUDA_FP8_STAGES);
            CHECK_TRUE(g.smem_bytes == wf_cuda_attn_fp8_smem_bytes((int)D[di]));
            CHECK_TRUE(g.smem_bytes <= SM90_SMEM);
            /* the bf16 kernels' geometry never takes an fp8 job */
            CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_E_UNSUPPORTED);
            p.fp8 = false;
            CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel != WF_CUDA_KERNEL_FP8);
        }
    /* shared memory: 1024 + D (128 + 4 * 2 * 128) + 256 */
    CHECK_TRUE(wf_cuda_attn_fp8_smem_bytes(128) == 1024u + 128u * 1152u + 256u);
    CHECK_TRUE(wf_cuda_attn_fp8_smem_bytes(64) == 1024u + 64u * 1152u + 256u);
    CHECK_TRUE(wf_cuda_attn_fp8_smem_bytes(128) <= SM90_SMEM);
    /* TMA boxes: a Q / K row of D bytes is the swizzle span (64 or 128),
     * v8t's rows of BC = 128 keys too, D rows per box (<= 256) */
    CHECK_TRUE(WF_CUDA_FP8_BC == 128 && WF_CUDA_BR <= 256);
    /* 1 + 4 * stages mbarriers of 8 bytes */
    CHECK_TRUE((1 + 4 * WF_CUDA_FP8_STAGES) * 8 <= WF_CUDA_FP8_BAR_BYTES);

    wf_attn_params_t p = mk(1, 4096, 4096, 24, 24, 128, WF_DTYPE_BF16);
    wf_cuda_attn_geom_t g;
    memset(&g, 0x5a, sizeof g);
    /* refusals: no fp8 on the device, or its tiles do not fit */
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 0, &g) == WF_E_UNSUPPORTED);
    wf_cuda_limits_t small = hopper(100u * 1024u);
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &small, 1, &g) == WF_E_UNSUPPORTED);
    p.D = 64; /* 75 KiB fits */
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &small, 1, &g) == WF_OK && g.d == 64);
    /* invalid params and grids */
    p.D = 96;
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 1, &g) == WF_E_BAD_ARGUMENT);
    p.D = 128;
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(NULL, &lim, 1, &g) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, NULL, 1, &g) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 1, NULL) == WF_E_BAD_ARGUMENT);
    p.B = 70000; /* > maxGridSize[2] */
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 1, &g) == WF_E_BAD_ARGUMENT);
    p.B = 1;
    /* an empty head range: nothing to launch */
    p.h_begin = p.h_end = 5;
    CHECK_TRUE(wf_cuda_attn_fp8_geometry(&p, &lim, 1, &g) == WF_OK && g.grid[1] == 0);
}

static void test_workspace(void)
{
    wf_attn_params_t p = mk(2, 1000, 777, 24, 8, 128, WF_DTYPE_BF16);
    p.h_begin = 5;
    p.h_end = 13; /* query heads 5..12 read K/V heads 1..4 (groups of 3) */
    wf_cuda_fp8_ws_t L;
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK);
    CHECK_TRUE(L.skv_pad == 896);
    CHECK_TRUE(L.kv_begin == 1 && L.kv_end == 5);
    uint64_t t = 0;
    CHECK_TRUE(L.q8 == t);
    t += up256(2ull * 1000 * 24 * 128);
    CHECK_TRUE(L.k8 == t);
    t += up256(2ull * 777 * 8 * 128);
    CHECK_TRUE(L.v8t == t);
    t += up256(2ull * 8 * 128 * 896);
    CHECK_TRUE(L.amax_q == t);
    t += up256(2ull * 24 * 4);
    CHECK_TRUE(L.amax_k == t);
    t += up256(2ull * 8 * 4);
    CHECK_TRUE(L.amax_v == t);
    t += up256(2ull * 8 * 4);
    CHECK_TRUE(L.sq == t);
    t += up256(2ull * 24 * 4);
    CHECK_TRUE(L.sk == t);
    t += up256(2ull * 8 * 4);
    CHECK_TRUE(L.sv == t);
    t += up256(2ull * 8 * 4);
    CHECK_TRUE(L.bytes == t);
    const uint64_t off[9] = {L.q8, L.k8, L.v8t, L.amax_q, L.amax_k, L.amax_v, L.sq, L.sk, L.sv};
    for (int i = 0; i < 9; i++)
        CHECK_TRUE(off[i] % WF_CUDA_ALIGN == 0); /* TMA wants 16 */
    /* the skv_pad stride of v8t is a multiple of 16 (TMA strides) */
    CHECK_TRUE(L.skv_pad % 16 == 0);
    CHECK_TRUE(wf_cuda_attn_workspace(&p) == L.bytes);
    const uint64_t with = wf_cuda_attn_job_bytes(&p);
    p.fp8 = false;
    CHECK_TRUE(wf_cuda_attn_workspace(&p) == 0);
    CHECK_TRUE(wf_cuda_attn_job_bytes(&p) + L.bytes == with); /* admission counts the copies */
    /* layout does not look at p->fp8 */
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK && L.bytes == t);

    /* the explicit GQA mapping: local heads 0..7 of global 8..15, groups
     * of 4, local K/V head 0 = global 2: K/V heads [0, 2) */
    p = mk(1, 64, 64, 8, 2, 64, WF_DTYPE_F16);
    p.gqa_group = 4;
    p.q_head_base = 8;
    p.kv_head_base = 2;
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK && L.kv_begin == 0 && L.kv_end == 2);
    CHECK_TRUE(L.skv_pad == 128);
    p.h_begin = 4; /* global 12..15: K/V head 3 = local 1 */
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK && L.kv_begin == 1 && L.kv_end == 2);
    /* Skv a multiple of the tile: no padding */
    p = mk(1, 10, 256, 1, 1, 64, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK && L.skv_pad == 256);
    /* an empty head range reads no K/V head */
    p.h_begin = p.h_end = 1;
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_OK && L.kv_begin == L.kv_end);
    /* refusals: invalid params, sizes past 2^64 */
    p = mk(1, 10, 10, 1, 1, 80, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_workspace(&p) == 0);
    p = mk(2147483647, 2147483647, 2147483647, 2147483647, 1, 128, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, &L) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_fp8_layout(&p, NULL) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_fp8_layout(NULL, &L) == WF_E_BAD_ARGUMENT);
}

static void test_quant_geometry(void)
{
    unsigned g[3], b[3];
    wf_cuda_fp8_quant_geometry(1000, 24, 2, g, b);
    CHECK_TRUE(g[0] == 16 && g[1] == 24 && g[2] == 2);
    CHECK_TRUE(b[0] == WF_CUDA_FP8_QUANT_THREADS && b[1] == 1 && b[2] == 1);
    wf_cuda_fp8_quant_geometry(64, 1, 1, g, b);
    CHECK_TRUE(g[0] == 1);
    wf_cuda_fp8_quant_geometry(65, 1, 1, g, b);
    CHECK_TRUE(g[0] == 2);
    /* v8t: blocks of 64 keys over skv_pad (a multiple of 128): whole blocks */
    CHECK_TRUE(WF_CUDA_FP8_BC % WF_CUDA_FP8_QUANT_ROWS == 0);
    wf_cuda_fp8_quant_geometry(0, 3, 1, g, b);
    CHECK_TRUE(g[0] == 0);
}

int main(void)
{
    test_device_ok();
    test_key_slot();
    test_geometry();
    test_workspace();
    test_quant_geometry();
    printf("test_cuda_plan_fp8: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
