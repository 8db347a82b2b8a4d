/* test_cuda_host.c — the host-side logic of the CUDA backend and of the
 * NCCL comm backend, without a GPU: attention launch geometry for many
 * shapes and both head dims, the device arena (offsets, alignment, high
 * water, refusal), admission, workspace sizes, and NCCL's deadlines, poll
 * pacing and error mapping. (The point-to-point plans NCCL runs are
 * tested in every build by tests/test_p2p_plan.c; the split colors are
 * wf_mesh_color's, tested by tests/test_mesh.c.) */
#include "cuda_plan.h"
#if WEFT_TEST_NCCL
#include "comm/comm_nccl.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* An H100 / H200 as cudaDeviceProp reports it, with the mma.sync kernel
 * only (H100) and with the wgmma kernel allowed (H100W). */
static const wf_cuda_limits_t H100 = {232448, 2147483647, 65535, 65535, 132, 0};
static const wf_cuda_limits_t H100W = {232448, 2147483647, 65535, 65535, 132,
                                       WF_CUDA_KERNEL_WGMMA};

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static wf_attn_params_t mk(int64_t B, int64_t Sq, int64_t Skv, int64_t Hq, int64_t Hkv,
                           int64_t D, wf_dtype_t dt)
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

static void test_geometry(void)
{
    static const int64_t S[] = {1, 7, 63, 64, 65, 127, 128, 1000, 4096, 16384, 100003};
    static const int64_t D[] = {64, 128};
    static const wf_dtype_t DT[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
        for (size_t di = 0; di < 2; di++)
            for (size_t ti = 0; ti < 3; ti++) {
                wf_attn_params_t p = mk(2, S[si], S[(si + 3) % 11], 24, 8, D[di], DT[ti]);
                p.h_begin = 3;
                p.h_end = 17;
                wf_cuda_attn_geom_t g;
                CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK);
                CHECK(g.grid[0] == (unsigned)cdiv(S[si], WF_CUDA_BR));
                CHECK(g.grid[1] == 14);
                CHECK(g.grid[2] == 2);
                CHECK(g.block[0] == 32 * WF_CUDA_WARPS && g.block[1] == 1 && g.block[2] == 1);
                CHECK(g.d == (int)D[di] && g.dpad == (int)D[di] + WF_CUDA_PAD);
                CHECK(g.stages == 2);
                CHECK(g.smem_bytes == 2u * (size_t)(WF_CUDA_BR + 4 * WF_CUDA_BC) *
                                          (size_t)(D[di] + WF_CUDA_PAD));
                CHECK(g.smem_bytes <= H100.smem_optin);
                CHECK(g.compute_bf16 == (DT[ti] == WF_DTYPE_BF16));
                /* 16-byte aligned rows for ldmatrix / cp.async */
                CHECK((g.dpad * 2) % 16 == 0);
            }
    /* The exact figures the kernel relies on. */
    CHECK(wf_cuda_attn_smem_bytes(128, 2) == 104448);
    CHECK(wf_cuda_attn_smem_bytes(64, 2) == 55296);
    CHECK(wf_cuda_attn_smem_bytes(128, 1) == 69632);
    CHECK(wf_cuda_attn_smem_bytes(64, 1) == 36864);
    /* Two blocks of the largest geometry fit an H100 / H200 SM (228 KiB,
     * 1 KiB reserved per block). */
    CHECK(2 * (wf_cuda_attn_smem_bytes(128, 2) + 1024) <= 228 * 1024);

    wf_cuda_attn_geom_t g;
    /* The wgmma kernel: chosen when allowed and q, k, v all have the
     * compute dtype; its block, shared bytes and the mma.sync fallback. */
    CHECK(wf_cuda_attn_wgmma_smem_bytes(128) ==
          1024 + 2 * 128 * (128 + 2 * WF_CUDA_WG_STAGES * WF_CUDA_WG_BC) + 128);
    CHECK(wf_cuda_attn_wgmma_smem_bytes(128) == 230528); /* fits 232448 */
    CHECK(wf_cuda_attn_wgmma_smem_bytes(64) == 115840);
    for (size_t di = 0; di < 2; di++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int mix = 0; mix < 3; mix++) {
                wf_attn_params_t p = mk(1, 1000, 777, 8, 2, D[di], DT[ti]);
                if (mix == 1)
                    p.k_dtype = WF_DTYPE_F32;
                if (mix == 2)
                    p.out_dtype = WF_DTYPE_F32; /* out's dtype does not matter */
                CHECK(wf_cuda_attn_geometry(&p, &H100W, &g) == WF_OK);
                int want = DT[ti] != WF_DTYPE_F32 && mix != 1;
                CHECK(g.kernel == (want ? WF_CUDA_KERNEL_WGMMA : WF_CUDA_KERNEL_MMA));
                CHECK(g.grid[0] == (unsigned)cdiv(1000, WF_CUDA_BR) && g.grid[1] == 8);
                if (want) {
                    CHECK(g.block[0] == WF_CUDA_WG_THREADS);
                    CHECK(g.smem_bytes == wf_cuda_attn_wgmma_smem_bytes((int)D[di]));
                } else {
                    CHECK(g.block[0] == 32 * WF_CUDA_WARPS);
                    CHECK(g.smem_bytes == wf_cuda_attn_smem_bytes((int)D[di], 2));
                }
                CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK &&
                      g.kernel == WF_CUDA_KERNEL_MMA);
            }
    {
        /* Shared memory too small for the wgmma tiles: mma.sync. */
        wf_cuda_limits_t w = H100W;
        w.smem_optin = 160 * 1024;
        wf_attn_params_t p = mk(1, 128, 128, 4, 4, 128, WF_DTYPE_BF16);
        CHECK(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA);
        p.D = 64;
        CHECK(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK &&
              g.kernel == WF_CUDA_KERNEL_WGMMA && g.stages == WF_CUDA_WG_STAGES);
        /* The pipelined form when the limits ask for it. */
        w.wgmma = WF_CUDA_KERNEL_WGMMA_PIPE;
        CHECK(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK &&
              g.kernel == WF_CUDA_KERNEL_WGMMA_PIPE);
    }
    /* Other head dims are refused. */
    static const int64_t bad_d[] = {0, 1, 32, 80, 96, 127, 192, 256};
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++) {
        wf_attn_params_t p = mk(1, 128, 128, 4, 4, bad_d[i], WF_DTYPE_BF16);
        CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    }
    /* Small shared memory: one stage, then refusal. */
    wf_cuda_limits_t small = H100;
    small.smem_optin = 80000;
    wf_attn_params_t p = mk(1, 128, 128, 4, 4, 128, WF_DTYPE_BF16);
    CHECK(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 1 &&
          g.smem_bytes == 69632);
    small.smem_optin = 48 * 1024;
    CHECK(wf_cuda_attn_geometry(&p, &small, &g) == WF_E_BAD_ARGUMENT);
    p.D = 64;
    CHECK(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 1 &&
          g.smem_bytes == 36864);
    small.smem_optin = 56 * 1024;
    CHECK(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 2 &&
          g.smem_bytes == 55296);
    /* Grid limits: heads and batch beyond gridDim.y / z. */
    p = mk(65536, 64, 64, 1, 1, 64, WF_DTYPE_F16);
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = mk(1, 64, 64, 65536, 1, 64, WF_DTYPE_F16);
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p.h_end = 65535;
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK && g.grid[1] == 65535);
    /* Empty head range: nothing to launch. */
    p = mk(1, 64, 64, 8, 8, 64, WF_DTYPE_F16);
    p.h_begin = p.h_end = 5;
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK && g.grid[1] == 0);
    /* Invalid shapes and mappings. */
    p = mk(1, 64, 64, 8, 3, 64, WF_DTYPE_F16);
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT); /* 3 does not divide 8 */
    p = mk(1, 64, 64, 4, 1, 64, WF_DTYPE_F16); /* slice of a 16-head, 4-group problem */
    p.gqa_group = 4; p.q_head_base = 8; p.kv_head_base = 2;
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK);
    p.kv_head_base = 1; /* heads 8..11 read K/V head 2: local 1, but Hkv = 1 */
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = mk(1, 64, 64, 4, 4, 64, (wf_dtype_t)7);
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = mk(1, 0, 64, 4, 4, 64, WF_DTYPE_F16);
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = mk(1, 64, 64, 4, 4, 64, WF_DTYPE_F16);
    p.q_offset = -1;
    CHECK(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    CHECK(wf_cuda_attn_geometry(NULL, &H100, &g) == WF_E_BAD_ARGUMENT);

    unsigned gr[3], bl[3];
    wf_cuda_merge_geometry(1, gr, bl);
    CHECK(gr[0] == 1 && bl[0] == 256);
    wf_cuda_merge_geometry(17, gr, bl);
    CHECK(gr[0] == 3);
    wf_cuda_convert_geometry(10, &H100, gr, bl);
    CHECK(gr[0] == 1 && bl[0] == 256);
    wf_cuda_convert_geometry((size_t)1 << 30, &H100, gr, bl);
    CHECK(gr[0] == 132u * 16u);
}

static void test_arena(void)
{
    wf_cuda_arena_t a;
    CHECK(wf_cuda_arena_init(&a, 1000, 100) == WF_E_BAD_ARGUMENT); /* not a power of 2 */
    CHECK(wf_cuda_arena_init(&a, 1000, 8) == WF_E_BAD_ARGUMENT);   /* < 16 */
    CHECK(wf_cuda_arena_init(&a, 10000, 256) == WF_OK);
    CHECK(a.capacity == 9984); /* rounded down */
    uint64_t off;
    CHECK(wf_cuda_arena_take(&a, 1, &off) == WF_OK && off == 0);
    CHECK(wf_cuda_arena_take(&a, 256, &off) == WF_OK && off == 256);
    CHECK(wf_cuda_arena_take(&a, 257, &off) == WF_OK && off == 512);
    CHECK(a.used == 1024 && a.count == 3);
    CHECK(wf_cuda_arena_take(&a, 0, &off) == WF_OK && off == 1024 && a.count == 3);
    CHECK(wf_cuda_arena_free(&a) == 9984 - 1024);
    /* Refusal changes nothing. */
    CHECK(wf_cuda_arena_take(&a, 9984 - 1024 + 1, &off) == WF_E_NO_MEMORY);
    CHECK(a.used == 1024 && a.count == 3);
    CHECK(wf_cuda_arena_take(&a, UINT64_MAX, &off) == WF_E_NO_MEMORY);
    CHECK(wf_cuda_arena_take(&a, 9984 - 1024, &off) == WF_OK && off == 1024);
    CHECK(wf_cuda_arena_free(&a) == 0);
    CHECK(wf_cuda_arena_take(&a, 1, &off) == WF_E_NO_MEMORY);
    CHECK(a.high_water == 9984);
    wf_cuda_arena_reset(&a);
    CHECK(a.used == 0 && a.count == 0 && a.high_water == 9984);
    CHECK(wf_cuda_arena_take(&a, 300, &off) == WF_OK && off == 0);
    /* Every offset stays aligned over a random sequence. */
    wf_cuda_arena_reset(&a);
    unsigned x = 12345;
    for (int i = 0; i < 1000; i++) {
        x = x * 1103515245u + 12345u;
        uint64_t want = (x >> 8) % 700;
        uint64_t before = a.used;
        wf_status_t st = wf_cuda_arena_take(&a, want, &off);
        if (st == WF_OK) {
            CHECK(off % 256 == 0 && off == before && off + want <= a.capacity);
        } else {
            CHECK(st == WF_E_NO_MEMORY && a.used == before && want > a.capacity - before);
            wf_cuda_arena_reset(&a);
        }
    }
}

static void test_admission(void)
{
    /* bf16, B 1, S 4096, H 24, D 128: q, k, v, out 24 MiB each, lse 384 KiB. */
    wf_attn_params_t p = mk(1, 4096, 4096, 24, 24, 128, WF_DTYPE_BF16);
    uint64_t t = 4096ull * 24 * 128 * 2;
    uint64_t want = 4 * t + 4096ull * 24 * 4;
    CHECK(wf_cuda_attn_job_bytes(&p) == want);
    uint64_t need = 0;
    CHECK(wf_cuda_admit(&p, want, &need) == WF_OK && need == want);
    CHECK(wf_cuda_admit(&p, want - 1, &need) == WF_E_NO_MEMORY && need == want);
    /* f32 out, GQA K/V, odd sizes: each region rounded to 256. */
    p = mk(1, 3, 5, 4, 2, 64, WF_DTYPE_F16);
    p.out_dtype = WF_DTYPE_F32;
    uint64_t r = 0;
    r += (3 * 4 * 64 * 2 + 255) / 256 * 256;     /* q */
    r += 2 * ((5 * 2 * 64 * 2 + 255) / 256 * 256); /* k, v */
    r += (3 * 4 * 64 * 4 + 255) / 256 * 256;     /* out */
    r += 256;                                    /* lse 48 bytes */
    CHECK(wf_cuda_attn_job_bytes(&p) == r);
    /* Overflowing shapes are refused, never wrapped. */
    p = mk(INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 1, 128, WF_DTYPE_F32);
    CHECK(wf_cuda_attn_job_bytes(&p) == UINT64_MAX);
    CHECK(wf_cuda_admit(&p, UINT64_MAX - 1, NULL) == WF_E_NO_MEMORY);
    p = mk(1, 4, 4, 4, 4, 96, WF_DTYPE_F32);
    CHECK(wf_cuda_admit(&p, UINT64_MAX, NULL) == WF_E_BAD_ARGUMENT);
    /* The workspace is exactly zero: everything stays on chip. */
    p = mk(3, 1000, 77, 8, 2, 128, WF_DTYPE_BF16);
    CHECK(wf_cuda_attn_workspace(&p) == 0);
}

#if WEFT_TEST_NCCL
static void test_deadlines(void)
{
    wf_nccl_deadline_t d = {1000, 0};
    CHECK(!wf_nccl_deadline_expired(&d, UINT64_MAX)); /* no timeout */
    d.timeout_ns = 500;
    CHECK(!wf_nccl_deadline_expired(&d, 1499));
    CHECK(wf_nccl_deadline_expired(&d, 1500));
    CHECK(!wf_nccl_deadline_expired(&d, 999)); /* clock before start: not expired */
    CHECK(wf_nccl_poll_delay_ns(0) == 0 && wf_nccl_poll_delay_ns(999) == 0);
    uint64_t prev = 0;
    for (unsigned i = 1000; i < 5000; i += 50) {
        uint64_t x = wf_nccl_poll_delay_ns(i);
        CHECK(x >= prev && x <= 100000 && x > 0);
        prev = x;
    }
    CHECK(wf_nccl_poll_delay_ns(100000) == 100000);
    CHECK(wf_nccl_status(0) == WF_OK);         /* ncclSuccess */
    CHECK(wf_nccl_status(7) == WF_OK);         /* ncclInProgress */
    CHECK(wf_nccl_status(4) == WF_E_BAD_ARGUMENT);
    CHECK(wf_nccl_status(5) == WF_E_BAD_ARGUMENT);
    CHECK(wf_nccl_status(6) == WF_E_ABORTED);  /* ncclRemoteError */
    CHECK(wf_nccl_status(1) == WF_E_INTERNAL); /* CUDA error */
    CHECK(wf_nccl_status(3) == WF_E_INTERNAL);
}
#endif

int main(void)
{
    test_geometry();
    test_arena();
    test_admission();
#if WEFT_TEST_NCCL
    test_deadlines();
#endif
    if (failures) {
        fprintf(stderr, "test_cuda_host: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_cuda_host: ok\n");
    return 0;
}
