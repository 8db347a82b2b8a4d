/* test_cuda_host.c — the host-side logic of the CUDA backend and of the
 * NCCL comm backend, without a GPU: attention launch geometry for many
 * shapes and both head dims, the device arena (offsets, alignment, high
 * water, refusal) and its resident blocks (first fit from the top, free,
 * coalescing, fragmentation, no overlap with job buffers, refusals that
 * change nothing, against a brute-force model), admission, workspace
 * sizes, the linear's cuBLASLt plan (column-major mapping, blocks, beta,
 * epilogues, alignments, validation), the elementwise ops' geometry and
 * checks, rope_table's frequencies, and NCCL's deadlines, poll
 * pacing and error mapping. (The point-to-point plans NCCL runs are
 * tested in every build by tests/unit/test_p2p_plan.c; the split colors are
 * wf_mesh_color's, tested by tests/unit/test_mesh.c.) */
#include "cuda_plan.h"
#include "support/check.h"
#include "support/cuda_params.h"
#if WEFT_TEST_NCCL
#include "comm/comm_nccl.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An H100 / H200 as cudaDeviceProp reports it, with the mma.sync kernel
 * only (H100) and with the wgmma kernel allowed (H100W). */
static const wf_cuda_limits_t H100 = {232448, 2147483647, 65535, 65535, 132, 0, 0};
static const wf_cuda_limits_t H100W = {232448, 2147483647, 65535, 65535, 132,
                                       WF_CUDA_KERNEL_WGMMA, 0};

static void test_geometry(void)
{
    static const int64_t S[] = {1, 7, 63, 64, 65, 127, 128, 1000, 4096, 16384, 100003};
    static const int64_t D[] = {64, 128};
    static const wf_dtype_t DT[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
        for (size_t di = 0; di < 2; di++)
            for (size_t ti = 0; ti < 3; ti++) {
                wf_attn_params_t p = attn_params(2, S[si], S[(si + 3) % 11], 24, 8, D[di], DT[ti]);
                p.h_begin = 3;
                p.h_end = 17;
                wf_cuda_attn_geom_t g;
                CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK);
                CHECK_TRUE(g.grid[0] == (unsigned)cdiv(S[si], WF_CUDA_BR));
                CHECK_TRUE(g.grid[1] == 14);
                CHECK_TRUE(g.grid[2] == 2);
                CHECK_TRUE(g.block[0] == 32 * WF_CUDA_WARPS && g.block[1] == 1 && g.block[2] == 1);
                CHECK_TRUE(g.d == (int)D[di] && g.dpad == (int)D[di] + WF_CUDA_PAD);
                CHECK_TRUE(g.stages == 2);
                CHECK_TRUE(g.smem_bytes == 2u * (size_t)(WF_CUDA_BR + 4 * WF_CUDA_BC) *
                                               (size_t)(D[di] + WF_CUDA_PAD));
                CHECK_TRUE(g.smem_bytes <= H100.smem_optin);
                CHECK_TRUE(g.compute_bf16 == (DT[ti] == WF_DTYPE_BF16));
                /* 16-byte aligned rows for ldmatrix / cp.async */
                CHECK_TRUE((g.dpad * 2) % 16 == 0);
            }
    /* The exact figures the kernel relies on. */
    CHECK_TRUE(wf_cuda_attn_smem_bytes(128, 2) == 104448);
    CHECK_TRUE(wf_cuda_attn_smem_bytes(64, 2) == 55296);
    CHECK_TRUE(wf_cuda_attn_smem_bytes(128, 1) == 69632);
    CHECK_TRUE(wf_cuda_attn_smem_bytes(64, 1) == 36864);
    /* Two blocks of the largest geometry fit an H100 / H200 SM (228 KiB,
     * 1 KiB reserved per block). */
    CHECK_TRUE(2 * (wf_cuda_attn_smem_bytes(128, 2) + 1024) <= 228 * 1024);

    wf_cuda_attn_geom_t g;
    /* The wgmma kernel: chosen when allowed and q, k, v all have the
     * compute dtype; its block, shared bytes and the mma.sync fallback. */
    CHECK_TRUE(wf_cuda_attn_wgmma_smem_bytes(128) ==
               1024 + 2 * 128 * (128 + 2 * WF_CUDA_WG_STAGES * WF_CUDA_WG_BC) + 128);
    CHECK_TRUE(wf_cuda_attn_wgmma_smem_bytes(128) == 230528); /* fits 232448 */
    CHECK_TRUE(wf_cuda_attn_wgmma_smem_bytes(64) == 115840);
    for (size_t di = 0; di < 2; di++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int mix = 0; mix < 3; mix++) {
                wf_attn_params_t p = attn_params(1, 1000, 777, 8, 2, D[di], DT[ti]);
                if (mix == 1)
                    p.k_dtype = WF_DTYPE_F32;
                if (mix == 2)
                    p.out_dtype = WF_DTYPE_F32; /* out's dtype does not matter */
                CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100W, &g) == WF_OK);
                int want = DT[ti] != WF_DTYPE_F32 && mix != 1;
                CHECK_TRUE(g.kernel == (want ? WF_CUDA_KERNEL_WGMMA : WF_CUDA_KERNEL_MMA));
                CHECK_TRUE(g.grid[0] == (unsigned)cdiv(1000, WF_CUDA_BR) && g.grid[1] == 8);
                if (want) {
                    CHECK_TRUE(g.block[0] == WF_CUDA_WG_THREADS);
                    CHECK_TRUE(g.smem_bytes == wf_cuda_attn_wgmma_smem_bytes((int)D[di]));
                } else {
                    CHECK_TRUE(g.block[0] == 32 * WF_CUDA_WARPS);
                    CHECK_TRUE(g.smem_bytes == wf_cuda_attn_smem_bytes((int)D[di], 2));
                }
                CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK &&
                           g.kernel == WF_CUDA_KERNEL_MMA);
            }
    {
        /* A FLUX.1-dev forward's attention at 1024 x 1024 on a bf16 device
         * (daemon/models/flux: head_norm_rope writes q / k / v in bf16,
         * the attention its output in bf16): the wgmma kernel. */
        wf_attn_params_t p = attn_params(1, 4608, 4608, 24, 24, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100W, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA && g.grid[1] == 24);
        /* f32 q / k / v (a model whose activations stay f32): mma.sync */
        p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_F32;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100W, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_MMA);
    }
    {
        /* Shared memory too small for the wgmma tiles: mma.sync. */
        wf_cuda_limits_t w = H100W;
        w.smem_optin = 160 * 1024;
        wf_attn_params_t p = attn_params(1, 128, 128, 4, 4, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA);
        p.D = 64;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA && g.stages == WF_CUDA_WG_STAGES);
        /* The pipelined form when the limits ask for it. */
        w.wgmma = WF_CUDA_KERNEL_WGMMA_PIPE;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &w, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA_PIPE);
    }
    /* Other head dims are refused. */
    static const int64_t bad_d[] = {0, 1, 32, 80, 96, 127, 192, 256};
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++) {
        wf_attn_params_t p = attn_params(1, 128, 128, 4, 4, bad_d[i], WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    }
    /* Small shared memory: one stage, then refusal. */
    wf_cuda_limits_t small = H100;
    small.smem_optin = 80000;
    wf_attn_params_t p = attn_params(1, 128, 128, 4, 4, 128, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 1 &&
               g.smem_bytes == 69632);
    small.smem_optin = 48 * 1024;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &small, &g) == WF_E_BAD_ARGUMENT);
    p.D = 64;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 1 &&
               g.smem_bytes == 36864);
    small.smem_optin = 56 * 1024;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &small, &g) == WF_OK && g.stages == 2 &&
               g.smem_bytes == 55296);
    /* Grid limits: heads and batch beyond gridDim.y / z. */
    p = attn_params(65536, 64, 64, 1, 1, 64, WF_DTYPE_F16);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = attn_params(1, 64, 64, 65536, 1, 64, WF_DTYPE_F16);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p.h_end = 65535;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK && g.grid[1] == 65535);
    /* Empty head range: nothing to launch. */
    p = attn_params(1, 64, 64, 8, 8, 64, WF_DTYPE_F16);
    p.h_begin = p.h_end = 5;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK && g.grid[1] == 0);
    /* Invalid shapes and mappings. */
    p = attn_params(1, 64, 64, 8, 3, 64, WF_DTYPE_F16);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT); /* 3 does not divide 8 */
    p = attn_params(1, 64, 64, 4, 1, 64, WF_DTYPE_F16); /* slice of a 16-head, 4-group problem */
    p.gqa_group = 4; p.q_head_base = 8; p.kv_head_base = 2;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_OK);
    p.kv_head_base = 1; /* heads 8..11 read K/V head 2: local 1, but Hkv = 1 */
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = attn_params(1, 64, 64, 4, 4, 64, (wf_dtype_t)7);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = attn_params(1, 0, 64, 4, 4, 64, WF_DTYPE_F16);
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    p = attn_params(1, 64, 64, 4, 4, 64, WF_DTYPE_F16);
    p.q_offset = -1;
    CHECK_TRUE(wf_cuda_attn_geometry(&p, &H100, &g) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_geometry(NULL, &H100, &g) == WF_E_BAD_ARGUMENT);

    unsigned gr[3], bl[3];
    wf_cuda_merge_geometry(1, gr, bl);
    CHECK_TRUE(gr[0] == 1 && bl[0] == 256);
    wf_cuda_merge_geometry(17, gr, bl);
    CHECK_TRUE(gr[0] == 3);
    wf_cuda_convert_geometry(10, &H100, gr, bl);
    CHECK_TRUE(gr[0] == 1 && bl[0] == 256);
    wf_cuda_convert_geometry((size_t)1 << 30, &H100, gr, bl);
    CHECK_TRUE(gr[0] == 132u * 16u);
}

static void test_arena(void)
{
    wf_cuda_arena_t a;
    CHECK_TRUE(wf_cuda_arena_init(&a, 1000, 100) == WF_E_BAD_ARGUMENT); /* not a power of 2 */
    CHECK_TRUE(wf_cuda_arena_init(&a, 1000, 8) == WF_E_BAD_ARGUMENT);   /* < 16 */
    CHECK_TRUE(wf_cuda_arena_init(&a, 10000, 256) == WF_OK);
    CHECK_TRUE(a.capacity == 9984); /* rounded down */
    uint64_t off;
    CHECK_TRUE(wf_cuda_arena_take(&a, 1, &off) == WF_OK && off == 0);
    CHECK_TRUE(wf_cuda_arena_take(&a, 256, &off) == WF_OK && off == 256);
    CHECK_TRUE(wf_cuda_arena_take(&a, 257, &off) == WF_OK && off == 512);
    CHECK_TRUE(a.used == 1024 && a.count == 3);
    CHECK_TRUE(wf_cuda_arena_take(&a, 0, &off) == WF_OK && off == 1024 && a.count == 3);
    CHECK_TRUE(wf_cuda_arena_free(&a) == 9984 - 1024);
    /* Refusal changes nothing. */
    CHECK_TRUE(wf_cuda_arena_take(&a, 9984 - 1024 + 1, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(a.used == 1024 && a.count == 3);
    CHECK_TRUE(wf_cuda_arena_take(&a, UINT64_MAX, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(wf_cuda_arena_take(&a, 9984 - 1024, &off) == WF_OK && off == 1024);
    CHECK_TRUE(wf_cuda_arena_free(&a) == 0);
    CHECK_TRUE(wf_cuda_arena_take(&a, 1, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(a.high_water == 9984);
    wf_cuda_arena_reset(&a);
    CHECK_TRUE(a.used == 0 && a.count == 0 && a.high_water == 9984);
    CHECK_TRUE(wf_cuda_arena_take(&a, 300, &off) == WF_OK && off == 0);
    /* Every offset stays aligned over a random sequence. */
    wf_cuda_arena_reset(&a);
    unsigned x = 12345;
    for (int i = 0; i < 1000; i++) {
        x = x * 1103515245u + 12345u;
        uint64_t want = (x >> 8) % 700;
        uint64_t before = a.used;
        wf_status_t st = wf_cuda_arena_take(&a, want, &off);
        if (st == WF_OK) {
            CHECK_TRUE(off % 256 == 0 && off == before && off + want <= a.capacity);
        } else {
            CHECK_TRUE(st == WF_E_NO_MEMORY && a.used == before && want > a.capacity - before);
            wf_cuda_arena_reset(&a);
        }
    }
}


/* The resident blocks' invariants: sorted, aligned, disjoint, inside
 * [used, capacity), floor and resident consistent. */
static int res_consistent(const wf_cuda_arena_t *a)
{
    uint64_t sum = 0, prev_end = a->used;
    for (uint32_t i = 0; i < a->nres; i++) {
        const wf_cuda_block_t *b = &a->res[i];
        if (b->off % a->align || b->bytes % a->align || b->bytes == 0)
            return 0;
        if (b->off < prev_end || b->off + b->bytes > a->capacity)
            return 0;
        prev_end = b->off + b->bytes;
        sum += b->bytes;
    }
    if (sum != a->resident)
        return 0;
    return a->floor == (a->nres ? a->res[0].off : a->capacity) && a->used <= a->floor;
}

static void test_resident(void)
{
    static wf_cuda_arena_t a, snap; /* 16 KiB each: not on the stack */
    uint64_t off, o1, o2, o3, j;
    CHECK_TRUE(wf_cuda_arena_init(&a, 10 * 256, 256) == WF_OK);
    CHECK_TRUE(a.floor == 2560 && a.nres == 0 && a.resident == 0);
    /* First fit from the top, rounded to the alignment. */
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 300, &o1) == WF_OK && o1 == 2560 - 512);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 256, &o2) == WF_OK && o2 == 2560 - 768);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 0, &o3) == WF_OK && o3 == 2560 - 1024); /* 0: one unit */
    CHECK_TRUE(a.floor == 1536 && a.resident == 1024 && a.nres == 3 && res_consistent(&a));
    /* Job buffers stop at the lowest resident block. */
    CHECK_TRUE(wf_cuda_arena_free(&a) == 1536);
    CHECK_TRUE(wf_cuda_arena_take(&a, 1000, &j) == WF_OK && j == 0);
    CHECK_TRUE(wf_cuda_arena_take(&a, 513, &j) == WF_E_NO_MEMORY && a.used == 1024);
    CHECK_TRUE(wf_cuda_arena_take(&a, 512, &j) == WF_OK && j == 1024 && a.used == 1536);
    CHECK_TRUE(wf_cuda_arena_free(&a) == 0);
    /* ... and resident blocks never go below the job buffers. */
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 1, &off) == WF_E_NO_MEMORY);
    wf_cuda_arena_reset(&a);
    CHECK_TRUE(a.nres == 3 && a.floor == 1536 && res_consistent(&a)); /* reset keeps them */
    /* A hole in the middle: freed, then refilled first (highest hole). */
    CHECK_TRUE(wf_cuda_arena_res_free(&a, o2) == WF_OK && a.nres == 2 && a.floor == 1536);
    CHECK_TRUE(a.resident == 768 && res_consistent(&a));
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 200, &off) == WF_OK && off == o2);
    /* Too big for the hole: below the lowest block. */
    CHECK_TRUE(wf_cuda_arena_res_free(&a, o2) == WF_OK);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 512, &off) == WF_OK && off == 1536 - 512);
    CHECK_TRUE(a.floor == 1024 && res_consistent(&a));
    /* Coalescing: freeing neighbours makes one hole that takes a larger block. */
    CHECK_TRUE(wf_cuda_arena_res_free(&a, o3) == WF_OK);  /* hole [1536, 2048) now 512 */
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 512, &off) == WF_OK && off == 1536);
    CHECK_TRUE(wf_cuda_arena_res_free(&a, 1536) == WF_OK);
    CHECK_TRUE(wf_cuda_arena_res_free(&a, o1) == WF_OK);  /* [1536, 2560) free */
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 1024, &off) == WF_OK && off == 1536);
    CHECK_TRUE(res_consistent(&a) && a.nres == 2);
    /* Unknown or inner offsets are refused, nothing changes. */
    memcpy(&snap, &a, sizeof a);
    CHECK_TRUE(wf_cuda_arena_res_free(&a, 1536 + 256) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_arena_res_free(&a, 0) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(memcmp(&snap, &a, sizeof a) == 0);
    /* Fragmentation: enough bytes in total but no hole big enough. */
    CHECK_TRUE(wf_cuda_arena_init(&a, 8 * 256, 256) == WF_OK);
    uint64_t offs[8];
    for (int i = 0; i < 8; i++)
        CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 256, &offs[i]) == WF_OK &&
                   offs[i] == (uint64_t)(7 - i) * 256);
    CHECK_TRUE(wf_cuda_arena_free(&a) == 0 && a.floor == 0);
    CHECK_TRUE(wf_cuda_arena_take(&a, 0, &j) == WF_OK && j == 0);
    CHECK_TRUE(wf_cuda_arena_take(&a, 1, &j) == WF_E_NO_MEMORY);
    for (int i = 0; i < 8; i += 2)
        CHECK_TRUE(wf_cuda_arena_res_free(&a, offs[i]) == WF_OK); /* 4 holes of 256 */
    CHECK_TRUE(a.resident == 1024);
    memcpy(&snap, &a, sizeof a);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 257, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(memcmp(&snap, &a, sizeof a) == 0); /* refusal changes nothing */
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 256, &off) == WF_OK && off == offs[0]);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, UINT64_MAX, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(wf_cuda_arena_res_alloc(NULL, 1, &off) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 1, NULL) == WF_E_BAD_ARGUMENT);
    /* The block count is bounded. */
    CHECK_TRUE(wf_cuda_arena_init(&a, (uint64_t)(WF_CUDA_MAX_RESIDENT + 10) * 16, 16) == WF_OK);
    for (int i = 0; i < WF_CUDA_MAX_RESIDENT; i++)
        CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 16, &off) == WF_OK);
    CHECK_TRUE(wf_cuda_arena_res_alloc(&a, 16, &off) == WF_E_NO_MEMORY);
    CHECK_TRUE(wf_cuda_arena_free(&a) == 160);

    /* Random sequences against a brute-force model: a byte map of who
     * owns each unit (0 free, 1 job, 2 + i resident block i). */
    enum { UNITS = 64 };
    static unsigned char own[UNITS];
    uint64_t live[UNITS];
    int nlive = 0;
    CHECK_TRUE(wf_cuda_arena_init(&a, UNITS * 256, 256) == WF_OK);
    memset(own, 0, sizeof own);
    unsigned x = 777;
    for (int it = 0; it < 20000; it++) {
        x = x * 1103515245u + 12345u;
        unsigned op = (x >> 16) % 10;
        uint64_t units = 1 + (x >> 4) % 6;
        if (op < 4) { /* resident alloc: the model's answer is the top of
                       * the highest free hole above the job units that
                       * holds the block */
            int hole_want = -1;
            {
                int top = UNITS;
                while (top > 0 && hole_want < 0) {
                    while (top > 0 && own[top - 1] >= 2)
                        top--;
                    int lo = top;
                    while (lo > 0 && own[lo - 1] == 0)
                        lo--;
                    if (top - lo >= (int)units)
                        hole_want = top - (int)units;
                    if (lo > 0 && own[lo - 1] == 1)
                        break; /* job units below: no more holes */
                    top = lo;
                }
            }
            memcpy(&snap, &a, sizeof a);
            wf_status_t st = wf_cuda_arena_res_alloc(&a, units * 256 - 100, &off);
            if (hole_want < 0 || nlive >= WF_CUDA_MAX_RESIDENT) {
                CHECK_TRUE(st == WF_E_NO_MEMORY && memcmp(&snap, &a, sizeof a) == 0);
            } else {
                CHECK_TRUE(st == WF_OK && off == (uint64_t)hole_want * 256);
                for (uint64_t u = 0; u < units; u++)
                    own[off / 256 + u] = 2;
                live[nlive++] = off;
            }
        } else if (op < 7) { /* resident free */
            if (nlive) {
                int k = (int)((x >> 8) % (unsigned)nlive);
                uint64_t o = live[k];
                uint64_t bytes = 0;
                for (uint32_t i = 0; i < a.nres; i++)
                    if (a.res[i].off == o)
                        bytes = a.res[i].bytes;
                CHECK_TRUE(bytes > 0);
                CHECK_TRUE(wf_cuda_arena_res_free(&a, o) == WF_OK);
                for (uint64_t u = 0; u < bytes / 256; u++)
                    own[o / 256 + u] = 0;
                live[k] = live[--nlive];
            }
        } else if (op < 9) { /* job buffer */
            uint64_t before = a.used;
            wf_status_t st = wf_cuda_arena_take(&a, units * 256 - 7, &j);
            int fits = 1;
            for (uint64_t u = before / 256; u < before / 256 + units; u++)
                fits &= u < UNITS && own[u] == 0;
            CHECK_TRUE((st == WF_OK) == fits);
            if (st == WF_OK) {
                CHECK_TRUE(j == before);
                for (uint64_t u = 0; u < units; u++)
                    own[j / 256 + u] = 1;
            } else {
                CHECK_TRUE(a.used == before);
            }
        } else { /* end of job */
            wf_cuda_arena_reset(&a);
            for (int u = 0; u < UNITS; u++)
                if (own[u] == 1)
                    own[u] = 0;
        }
        CHECK_TRUE(res_consistent(&a));
        CHECK_TRUE(a.nres == (uint32_t)nlive);
    }
}

static wf_linear_params_t mkl(int64_t rows, int64_t in, int64_t out, wf_dtype_t wdt)
{
    static float xbuf[4096], ybuf[4096]; /* large enough for every case: x and y never overlap */
    static char wbuf[256] __attribute__((aligned(256)));
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows; p.in = in; p.out = out;
    p.x = xbuf; p.ldx = in;
    p.w_dtype = wdt; p.ldw = in;
    p.nwb = 1; p.wb[0] = wbuf; p.wbw[0] = in;
    p.y = ybuf; p.ldy = out;
    return p;
}

static void test_linear_plan(void)
{
    static float xbuf_of_plan[4096] __attribute__((aligned(256)));
    static char ws[4096] __attribute__((aligned(256)));
    static float bias[64] __attribute__((aligned(64)));
    wf_cuda_linear_plan_t pl;
    /* bf16, one block: y^T (out x rows) = W (out x in) x^T. */
    wf_linear_params_t p = mkl(5, 24, 12, WF_DTYPE_BF16);
    p.ldx = 40; p.ldy = 16; p.ldw = 32;
    CHECK_TRUE(wf_cuda_linear_workspace(&p) == 256); /* 5 * 24 * 2 = 240 -> 256 */
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK);
    CHECK_TRUE(pl.convert_x == 1 && pl.x_bytes == 240 && pl.nwb == 1);
    CHECK_TRUE(pl.post_bias == 0 && pl.post_act == WF_ACT_NONE);
    const wf_cuda_gemm_key_t *k = &pl.g[0].key;
    CHECK_TRUE(k->m == 12 && k->n == 5 && k->k == 24);
    CHECK_TRUE(k->lda == 32 && k->ldb == 24 && k->ldc == 16); /* converted x is contiguous */
    CHECK_TRUE(k->dtype == WF_DTYPE_BF16 && k->epilogue == WF_CUDA_EPI_NONE);
    CHECK_TRUE(k->align_a == 256 && k->align_b == 256);
    CHECK_TRUE(pl.g[0].beta == 0.0f && pl.g[0].b_col == 0 && pl.g[0].a == p.wb[0]);
    /* No workspace where one is needed; misaligned workspace. */
    CHECK_TRUE(wf_cuda_linear_plan(&p, NULL, 1, &pl) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws + 16, 1, &pl) == WF_E_BAD_ARGUMENT);
    /* f32: no workspace, x used in place with its own ld. */
    p.w_dtype = WF_DTYPE_F32;
    CHECK_TRUE(wf_cuda_linear_workspace(&p) == 0);
    CHECK_TRUE(wf_cuda_linear_plan(&p, NULL, 1, &pl) == WF_OK && pl.convert_x == 0 &&
               pl.x_bytes == 0);
    CHECK_TRUE(pl.g[0].key.ldb == 40 && pl.g[0].key.dtype == WF_DTYPE_F32);
    /* Three column blocks: b_col, beta, epilogue on the last only. */
    p = mkl(7, 24, 8, WF_DTYPE_F16);
    p.nwb = 3;
    p.wbw[0] = 8; p.wbw[1] = 4; p.wbw[2] = 12;
    p.wb[1] = (const char *)p.wb[0] + 2; p.wb[2] = (const char *)p.wb[0] + 64;
    p.ldw = 12;
    p.bias = bias;
    p.act = WF_ACT_GELU_TANH;
    CHECK_TRUE(wf_cuda_linear_workspace(&p) == 512); /* 7 * 24 * 2 = 336 */
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK && pl.nwb == 3);
    CHECK_TRUE(pl.g[0].b_col == 0 && pl.g[1].b_col == 8 && pl.g[2].b_col == 12);
    CHECK_TRUE(pl.g[0].beta == 0.0f && pl.g[1].beta == 1.0f && pl.g[2].beta == 1.0f);
    CHECK_TRUE(pl.g[0].key.epilogue == WF_CUDA_EPI_NONE &&
               pl.g[1].key.epilogue == WF_CUDA_EPI_NONE);
    CHECK_TRUE(pl.g[2].key.epilogue == WF_CUDA_EPI_GELU_BIAS);
    CHECK_TRUE(pl.post_bias == 0 && pl.post_act == WF_ACT_NONE);
    CHECK_TRUE(pl.g[0].key.k == 8 && pl.g[1].key.k == 4 && pl.g[2].key.k == 12);
    CHECK_TRUE(pl.g[1].key.align_a == 2 && pl.g[2].key.align_a == 64);
    CHECK_TRUE(pl.g[1].key.align_b == 16 && pl.g[2].key.align_b == 8); /* ws + 8*2, ws + 12*2 */
    /* GELU not fused: a kernel applies it, bias stays in the epilogue. */
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 0, &pl) == WF_OK);
    CHECK_TRUE(pl.g[2].key.epilogue == WF_CUDA_EPI_BIAS && pl.post_act == WF_ACT_GELU_TANH);
    /* SiLU: always a kernel. */
    p.act = WF_ACT_SILU;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK);
    CHECK_TRUE(pl.g[2].key.epilogue == WF_CUDA_EPI_BIAS && pl.post_act == WF_ACT_SILU);
    /* A bias not 16-byte aligned: bias and act both by the kernel. */
    p.bias = bias + 1;
    p.act = WF_ACT_GELU_TANH;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK);
    CHECK_TRUE(pl.g[2].key.epilogue == WF_CUDA_EPI_NONE && pl.post_bias == 1 &&
               pl.post_act == WF_ACT_GELU_TANH);
    p.bias = NULL;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK);
    CHECK_TRUE(pl.g[2].key.epilogue == WF_CUDA_EPI_GELU && pl.post_bias == 0);
    /* A bf16 x (its producer wrote the GEMM's operand): read in place with
     * its own ld, no workspace, no rounding pass; a bf16 y: C = D bf16. */
    p = mkl(5, 24, 12, WF_DTYPE_BF16);
    p.ldx = 40; p.ldy = 16;
    p.x_dtype = WF_DTYPE_BF16;
    p.y_dtype = WF_DTYPE_BF16;
    p.x = (const char *)xbuf_of_plan + 2;
    CHECK_TRUE(wf_cuda_linear_workspace(&p) == 0);
    CHECK_TRUE(wf_cuda_linear_plan(&p, NULL, 1, &pl) == WF_OK);
    CHECK_TRUE(pl.convert_x == 0 && pl.x_bytes == 0 && pl.nwb == 1);
    CHECK_TRUE(pl.g[0].key.ldb == 40 && pl.g[0].key.dtype == WF_DTYPE_BF16 &&
               pl.g[0].key.c_dtype == WF_DTYPE_BF16 && pl.g[0].key.align_b == 2);
    /* an f32 x keeps the rounding pass whatever y is; C = D f32 by default */
    p.x_dtype = WF_DTYPE_F32;
    p.x = xbuf_of_plan;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK && pl.convert_x == 1 &&
               pl.g[0].key.c_dtype == WF_DTYPE_BF16);
    p.y_dtype = WF_DTYPE_F32;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK &&
               pl.g[0].key.c_dtype == WF_DTYPE_F32);
    /* x in a dtype other than the weight's, a bf16 y over two blocks:
     * refused */
    p.x_dtype = WF_DTYPE_F16;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_E_BAD_ARGUMENT);
    p.x_dtype = WF_DTYPE_BF16;
    p.w_dtype = WF_DTYPE_F32;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_E_BAD_ARGUMENT);
    p.x_dtype = WF_DTYPE_F32;
    p.y_dtype = WF_DTYPE_BF16;
    p.nwb = 2; p.wbw[0] = 8; p.wbw[1] = 16; p.wb[1] = p.wb[0];
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_E_BAD_ARGUMENT);
    /* rows 0: nothing to do, no pointers needed. */
    wf_linear_params_t z = mkl(0, 24, 12, WF_DTYPE_BF16);
    z.x = NULL; z.y = NULL; z.wb[0] = NULL;
    CHECK_TRUE(wf_cuda_linear_workspace(&z) == 0);
    CHECK_TRUE(wf_cuda_linear_plan(&z, NULL, 1, &pl) == WF_OK && pl.nwb == 0);
    /* The validation rules. */
    wf_linear_params_t b;
    memset(&pl, 0x5a, sizeof pl);
    wf_cuda_linear_plan_t before = pl;
#define BAD(mutate)                                                            \
    do {                                                                       \
        b = mkl(4, 16, 8, WF_DTYPE_BF16);                                      \
        mutate;                                                                \
        CHECK_TRUE(wf_cuda_linear_plan(&b, ws, 1, &pl) == WF_E_BAD_ARGUMENT);       \
        CHECK_TRUE(memcmp(&pl, &before, sizeof pl) == 0);                           \
    } while (0)
    /* shape errors: no workspace either */
#define BADSHAPE(mutate)                                                       \
    do {                                                                       \
        BAD(mutate);                                                           \
        CHECK_TRUE(wf_cuda_linear_workspace(&b) == 0);                              \
    } while (0)
    BADSHAPE(b.rows = -1);
    BADSHAPE(b.in = 0);
    BADSHAPE(b.out = -3);
    BADSHAPE(b.nwb = 0);
    BADSHAPE(b.nwb = WF_LINEAR_MAX_BLOCKS + 1);
    BADSHAPE(b.wbw[0] = 15);                         /* sum != in */
    BAD((b.nwb = 2, b.wbw[0] = 8, b.wbw[1] = 8)); /* wb[1] NULL */
    BADSHAPE((b.nwb = 2, b.wbw[0] = 16, b.wbw[1] = 0, b.wb[1] = b.wb[0]));
    BADSHAPE(b.w_dtype = (wf_dtype_t)9);
    BADSHAPE(b.act = (wf_act_t)4);
    BADSHAPE(b.ldx = 15);
    BADSHAPE(b.ldy = 7);
    BADSHAPE(b.ldw = 15);
    BAD(b.x = NULL);
    BAD(b.y = NULL);
    BAD(b.wb[0] = NULL);
    BAD(b.y = (float *)b.x + 3);                /* y overlaps x */
    BADSHAPE(b.rows = (int64_t)INT32_MAX + 1);
    /* The workspace is a function of the shapes alone: NULL pointers
     * (admission before any buffer exists) give the same bytes. */
    b = mkl(4, 16, 8, WF_DTYPE_BF16);
    b.x = NULL; b.y = NULL; b.wb[0] = NULL;
    CHECK_TRUE(wf_cuda_linear_workspace(&b) == 256);
    b.rows = 1000; b.in = 3072; b.ldx = 3072; b.ldw = 3072; b.wbw[0] = 3072;
    CHECK_TRUE(wf_cuda_linear_workspace(&b) == 1000u * 3072u * 2u);
    b = mkl(4, 16, 8, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_linear_plan(NULL, ws, 1, &pl) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_linear_plan(&b, ws, 1, NULL) == WF_E_BAD_ARGUMENT);
    /* Blocks of 8 with 2 columns each: still fine. */
    b = mkl(2, 16, 4, WF_DTYPE_F32);
    b.nwb = 8;
    for (int i = 0; i < 8; i++) {
        b.wbw[i] = 2;
        b.wb[i] = b.wb[0];
    }
    CHECK_TRUE(wf_cuda_linear_plan(&b, NULL, 1, &pl) == WF_OK && pl.nwb == 8);
    CHECK_TRUE(pl.g[7].b_col == 14 &&
               pl.g[7].key.align_b == wf_cuda_ptr_align((const float *)b.x + 14));
#undef BAD
#undef BADSHAPE
    /* Pointer alignment. */
    CHECK_TRUE(wf_cuda_ptr_align((void *)0) == 256);
    CHECK_TRUE(wf_cuda_ptr_align((void *)0x1000) == 256);
    CHECK_TRUE(wf_cuda_ptr_align((void *)0x1080) == 128);
    CHECK_TRUE(wf_cuda_ptr_align((void *)0x1002) == 2);
    CHECK_TRUE(wf_cuda_ptr_align((void *)0x1001) == 1);
    /* The key has no padding (it is compared with memcmp). */
    CHECK_TRUE(sizeof(wf_cuda_gemm_key_t) == 12 * sizeof(int64_t));
}


/* The plan's column-major matmuls, run on the host with BLAS semantics
 * (C (m x n, ldc) = op(A) B + beta C, op(A) = A^T with A (k x m, lda),
 * B (k x n, ldb); epilogue bias over the m rows, then GELU), give the
 * row-major y = act(x W^T + bias) of backend.h: the mapping checked
 * without a GPU. Weights and x as element arrays (a float shadow of the
 * 2-byte weights: the plan's pointers are turned into element indices). */
static double gelu_t(double a)
{
    return 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
}

static void plan_sim_case(wf_dtype_t wdt, int64_t rows, int64_t out, uint32_t nwb,
                          const int64_t *wbw, int64_t gap, int64_t xpad, int64_t ypad, int bias,
                          wf_act_t act)
{
    int64_t in = 0;
    for (uint32_t k = 0; k < nwb; k++)
        in += wbw[k];
    const int64_t ldw = in + gap * nwb + 3, ldx = in + xpad, ldy = out + ypad;
    const size_t es = wdt == WF_DTYPE_F32 ? 4 : 2;
    float *wf = malloc((size_t)(out * ldw) * sizeof *wf);
    char *wraw = aligned_alloc(256, ((size_t)(out * ldw) * es + 255) / 256 * 256);
    float *x = malloc((size_t)(rows * ldx) * sizeof *x), *y = malloc((size_t)(rows * ldy) * 4);
    float *b = aligned_alloc(64, ((size_t)out * 4 + 63) / 64 * 64);
    float *xw = aligned_alloc(256, ((size_t)(rows * in) * 4 + 255) / 256 * 256);
    unsigned r = 99;
    for (int64_t i = 0; i < out * ldw; i++) {
        r = r * 1664525u + 1013904223u;
        wf[i] = (float)((r >> 9) % 2001) / 1000.0f - 1.0f;
    }
    for (int64_t i = 0; i < rows * ldx; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)((r >> 9) % 2001) / 1000.0f - 1.0f;
    }
    for (int64_t i = 0; i < out; i++)
        b[i] = (float)i * 0.01f - 0.3f;
    for (int64_t i = 0; i < rows * ldy; i++)
        y[i] = 777.f;
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows; p.in = in; p.out = out; p.x = x; p.ldx = ldx;
    p.w_dtype = wdt; p.ldw = ldw; p.nwb = nwb; p.bias = bias ? b : NULL; p.act = act;
    p.y = y; p.ldy = ldy;
    int64_t col = gap, starts[WF_LINEAR_MAX_BLOCKS];
    for (uint32_t k = 0; k < nwb; k++) {
        starts[k] = col;
        p.wb[k] = wraw + (size_t)col * es;
        p.wbw[k] = wbw[k];
        col += wbw[k] + gap;
    }
    size_t wsb = wf_cuda_linear_workspace(&p);
    char *ws = wsb ? aligned_alloc(256, wsb) : NULL;
    wf_cuda_linear_plan_t pl;
    CHECK_TRUE(wf_cuda_linear_plan(&p, ws, 1, &pl) == WF_OK && pl.nwb == nwb);
    /* what round_rows does, kept in f32 for the simulation: x contiguous */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < in; c++)
            xw[i * in + c] = x[i * ldx + c];
    const float *B = pl.convert_x ? xw : x;
    for (uint32_t g = 0; g < pl.nwb; g++) {
        const wf_cuda_gemm_t *gm = &pl.g[g];
        const wf_cuda_gemm_key_t *k = &gm->key;
        const float *A = wf + ((const char *)gm->a - wraw) / (ptrdiff_t)es;
        const float *Bb = B + gm->b_col;
        for (int64_t j = 0; j < k->n; j++)
            for (int64_t i = 0; i < k->m; i++) {
                double acc = 0;
                for (int64_t l = 0; l < k->k; l++)
                    acc += (double)A[l + i * k->lda] * (double)Bb[l + j * k->ldb];
                float *cij = y + i + j * k->ldc;
                double v = acc + (gm->beta != 0.0f ? (double)gm->beta * *cij : 0.0);
                if (k->epilogue & WF_CUDA_EPI_BIAS)
                    v += b[i];
                if (k->epilogue & WF_CUDA_EPI_GELU)
                    v = gelu_t(v);
                *cij = (float)v;
            }
    }
    /* the post kernel (bias_act) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t o = 0; o < out; o++) {
            double v = y[i * ldy + o];
            if (pl.post_bias)
                v += b[o];
            if (pl.post_act == WF_ACT_GELU_TANH)
                v = gelu_t(v);
            else if (pl.post_act == WF_ACT_SILU)
                v = v / (1.0 + exp(-v));
            y[i * ldy + o] = (float)v;
        }
    /* direct row-major reference */
    double maxe = 0;
    int pad_ok = 1;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t o = 0; o < out; o++) {
            double acc = bias ? b[o] : 0.0;
            int64_t xc = 0;
            for (uint32_t k = 0; k < nwb; k++)
                for (int64_t c = 0; c < wbw[k]; c++, xc++)
                    acc += (double)x[i * ldx + xc] * (double)wf[o * ldw + starts[k] + c];
            if (act == WF_ACT_GELU_TANH)
                acc = gelu_t(acc);
            else if (act == WF_ACT_SILU)
                acc = acc / (1.0 + exp(-acc));
            double e = fabs(acc - y[i * ldy + o]);
            maxe = e > maxe ? e : maxe;
        }
        for (int64_t o = out; o < ldy; o++)
            pad_ok &= y[i * ldy + o] == 777.f;
    }
    CHECK_TRUE(maxe < 1e-4);
    CHECK_TRUE(pad_ok);
    free(wf); free(wraw); free(x); free(y); free(b); free(xw); free(ws);
}

static void test_linear_mapping(void)
{
    static const wf_dtype_t dts[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    const int64_t one[1] = {24}, three[3] = {8, 5, 11}, eight[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    for (int d = 0; d < 3; d++) {
        plan_sim_case(dts[d], 7, 9, 1, one, 0, 0, 0, 0, WF_ACT_NONE);
        plan_sim_case(dts[d], 5, 13, 1, one, 2, 3, 4, 1, WF_ACT_GELU_TANH);
        plan_sim_case(dts[d], 6, 10, 3, three, 1, 2, 1, 1, WF_ACT_SILU);
        plan_sim_case(dts[d], 3, 4, 3, three, 0, 0, 2, 1, WF_ACT_GELU_TANH);
        plan_sim_case(dts[d], 4, 7, 8, eight, 2, 5, 0, 0, WF_ACT_GELU_TANH);
        plan_sim_case(dts[d], 1, 1, 8, eight, 0, 0, 0, 1, WF_ACT_NONE);
    }
}

static void test_elementwise(void)
{
    unsigned gr[3], bl[3];
    wf_cuda_rows_geometry(1, 1, gr, bl);
    CHECK_TRUE(gr[0] == 1 && gr[1] == 1 && bl[0] == 256);
    wf_cuda_rows_geometry(4096, 3072, gr, bl);
    CHECK_TRUE(gr[0] == 12 && gr[1] == 4096 && gr[2] == 1);
    wf_cuda_rows_geometry(100000, 1000000, gr, bl);
    CHECK_TRUE(gr[0] == 64 && gr[1] == 65535);
    wf_cuda_rowblock_geometry(4608, &H100, gr, bl);
    CHECK_TRUE(gr[0] == 4608 && bl[0] == 256);
    wf_cuda_limits_t lim = H100;
    lim.max_grid_x = 1000;
    wf_cuda_rowblock_geometry(4608, &lim, gr, bl);
    CHECK_TRUE(gr[0] == 1000);
    wf_cuda_warp_geometry(4608 * 24, &H100, gr, bl);
    CHECK_TRUE(gr[0] == 4608 * 3 && bl[0] == 256);
    wf_cuda_warp_geometry(9, &H100, gr, bl);
    CHECK_TRUE(gr[0] == 2);

    /* shift / scale apart from dst, and head_norm_rope's dst apart from
     * src: the common checks (ops_check.h) refuse overlaps */
    static float buf[16], mod[56], hsrc[240], hdst[576];
    wf_modln_params_t m = {2, 3, 8, buf, 8, buf, 8, mod, mod, 48, 1e-6f, WF_DTYPE_F32};
    CHECK_TRUE(wf_cuda_modln_ok(&m));
    m.ld_src = 7; CHECK_TRUE(!wf_cuda_modln_ok(&m)); m.ld_src = 8;
    m.ld_mod = 7; CHECK_TRUE(!wf_cuda_modln_ok(&m)); m.ld_mod = 48;
    m.C = 0; CHECK_TRUE(!wf_cuda_modln_ok(&m)); m.C = 8;
    m.per = -1; CHECK_TRUE(!wf_cuda_modln_ok(&m)); m.per = 3;
    m.shift = NULL; CHECK_TRUE(!wf_cuda_modln_ok(&m));
    m.per = 0; CHECK_TRUE(wf_cuda_modln_ok(&m)); m.per = 3; m.shift = mod;
    m.eps = NAN; CHECK_TRUE(!wf_cuda_modln_ok(&m)); m.eps = 1e-6f;
    CHECK_TRUE(!wf_cuda_modln_ok(NULL));

    wf_headrope_params_t h = {2, 5, 12, 7, 3, 8, hsrc, 24, hdst, NULL, buf, buf, 1e-6f,
                              WF_DTYPE_F32, WF_DTYPE_F32};
    CHECK_TRUE(wf_cuda_headrope_ok(&h));
    h.row0 = 8; CHECK_TRUE(!wf_cuda_headrope_ok(&h)); h.row0 = 7; /* rows 7..11 of L = 12 */
    h.ld_src = 23; CHECK_TRUE(!wf_cuda_headrope_ok(&h)); h.ld_src = 24;
    h.sin = NULL; CHECK_TRUE(!wf_cuda_headrope_ok(&h));
    h.cos = NULL; CHECK_TRUE(wf_cuda_headrope_ok(&h)); /* no rotation */
    h.D = 7; h.ld_src = 21; CHECK_TRUE(wf_cuda_headrope_ok(&h)); /* odd D: norm only */
    h.cos = h.sin = buf; CHECK_TRUE(!wf_cuda_headrope_ok(&h)); h.D = 8; h.ld_src = 24;
    h.src = NULL; CHECK_TRUE(!wf_cuda_headrope_ok(&h));
    h.nbatch = 0; CHECK_TRUE(wf_cuda_headrope_ok(&h)); h.nbatch = 2; h.src = hsrc;
    h.H = 0; CHECK_TRUE(!wf_cuda_headrope_ok(&h)); h.H = 3;
    h.nbatch = (int64_t)1 << 40; CHECK_TRUE(!wf_cuda_headrope_ok(&h));

    /* rope_table's frequencies: FLUX's axes (16, 56, 56), theta 10000. */
    double fr[WF_CUDA_ROPE_MAX_PAIRS];
    uint8_t ax[WF_CUDA_ROPE_MAX_PAIRS];
    const uint32_t axes[3] = {16, 56, 56};
    CHECK_TRUE(wf_cuda_rope_freqs(axes, 3, 10000.0, 128, fr, ax) == WF_OK);
    CHECK_TRUE(ax[0] == 0 && ax[7] == 0 && ax[8] == 1 && ax[35] == 1 && ax[36] == 2 && ax[63] == 2);
    CHECK_TRUE(fr[0] == 1.0 && fr[8] == 1.0 && fr[36] == 1.0);
    CHECK_TRUE(fr[1] == 1.0 / pow(10000.0, 2.0 / 16.0));
    CHECK_TRUE(fr[63] == 1.0 / pow(10000.0, 54.0 / 56.0));
    CHECK_TRUE(wf_cuda_rope_freqs(axes, 3, 10000.0, 126, fr, ax) == WF_E_BAD_ARGUMENT);
    const uint32_t odd[2] = {15, 17};
    CHECK_TRUE(wf_cuda_rope_freqs(odd, 2, 10000.0, 32, fr, ax) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_rope_freqs(axes, 0, 10000.0, 0, fr, ax) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_rope_freqs(axes, 3, 0.0, 128, fr, ax) == WF_E_BAD_ARGUMENT);
    const uint32_t big[1] = {2 * WF_CUDA_ROPE_MAX_PAIRS + 2};
    CHECK_TRUE(wf_cuda_rope_freqs(big, 1, 10000.0, big[0], fr, ax) == WF_E_BAD_ARGUMENT);

    /* copy_rows. */
    static char cb[4096];
    CHECK_TRUE(wf_cuda_copy_rows_ok(cb, 64, cb + 2048, 32, 10, 32));
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, 16, cb + 2048, 32, 10, 32)); /* ld_dst < row */
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, 64, cb + 2048, 16, 10, 32));
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, 64, cb + 512, 32, 10, 32));  /* overlap */
    CHECK_TRUE(wf_cuda_copy_rows_ok(cb, 64, cb + 608, 32, 10, 32));   /* dst ends at 608 */
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, 64, cb + 607, 32, 10, 32));
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, 64, cb + 2048, 32, -1, 32));
    CHECK_TRUE(wf_cuda_copy_rows_ok(NULL, 64, NULL, 32, 0, 32));
    CHECK_TRUE(!wf_cuda_copy_rows_ok(NULL, 64, cb, 32, 1, 32));
    CHECK_TRUE(!wf_cuda_copy_rows_ok(cb, SIZE_MAX, cb + 8, SIZE_MAX, 3, 4)); /* overflow */
}

static void test_admission(void)
{
    /* bf16, B 1, S 4096, H 24, D 128: q, k, v, out 24 MiB each, lse 384 KiB. */
    wf_attn_params_t p = attn_params(1, 4096, 4096, 24, 24, 128, WF_DTYPE_BF16);
    uint64_t t = 4096ull * 24 * 128 * 2;
    uint64_t want = 4 * t + 4096ull * 24 * 4;
    CHECK_TRUE(wf_cuda_attn_job_bytes(&p) == want);
    uint64_t need = 0;
    CHECK_TRUE(wf_cuda_admit(&p, want, &need) == WF_OK && need == want);
    CHECK_TRUE(wf_cuda_admit(&p, want - 1, &need) == WF_E_NO_MEMORY && need == want);
    /* f32 out, GQA K/V, odd sizes: each region rounded to 256. */
    p = attn_params(1, 3, 5, 4, 2, 64, WF_DTYPE_F16);
    p.out_dtype = WF_DTYPE_F32;
    uint64_t r = 0;
    r += (3 * 4 * 64 * 2 + 255) / 256 * 256;     /* q */
    r += 2 * ((5 * 2 * 64 * 2 + 255) / 256 * 256); /* k, v */
    r += (3 * 4 * 64 * 4 + 255) / 256 * 256;     /* out */
    r += 256;                                    /* lse 48 bytes */
    CHECK_TRUE(wf_cuda_attn_job_bytes(&p) == r);
    /* Overflowing shapes are refused, never wrapped. */
    p = attn_params(INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 1, 128, WF_DTYPE_F32);
    CHECK_TRUE(wf_cuda_attn_job_bytes(&p) == UINT64_MAX);
    CHECK_TRUE(wf_cuda_admit(&p, UINT64_MAX - 1, NULL) == WF_E_NO_MEMORY);
    p = attn_params(1, 4, 4, 4, 4, 96, WF_DTYPE_F32);
    CHECK_TRUE(wf_cuda_admit(&p, UINT64_MAX, NULL) == WF_E_BAD_ARGUMENT);
    /* The workspace is exactly zero: everything stays on chip. */
    p = attn_params(3, 1000, 77, 8, 2, 128, WF_DTYPE_BF16);
    CHECK_TRUE(wf_cuda_attn_workspace(&p) == 0);
}

#if WEFT_TEST_NCCL
static void test_deadlines(void)
{
    wf_nccl_deadline_t d = {1000, 0};
    CHECK_TRUE(!wf_nccl_deadline_expired(&d, UINT64_MAX)); /* no timeout */
    d.timeout_ns = 500;
    CHECK_TRUE(!wf_nccl_deadline_expired(&d, 1499));
    CHECK_TRUE(wf_nccl_deadline_expired(&d, 1500));
    CHECK_TRUE(!wf_nccl_deadline_expired(&d, 999)); /* clock before start: not expired */
    CHECK_TRUE(wf_nccl_poll_delay_ns(0) == 0 && wf_nccl_poll_delay_ns(999) == 0);
    uint64_t prev = 0;
    for (unsigned i = 1000; i < 5000; i += 50) {
        uint64_t x = wf_nccl_poll_delay_ns(i);
        CHECK_TRUE(x >= prev && x <= 100000 && x > 0);
        prev = x;
    }
    CHECK_TRUE(wf_nccl_poll_delay_ns(100000) == 100000);
    CHECK_TRUE(wf_nccl_status(0) == WF_OK);         /* ncclSuccess */
    CHECK_TRUE(wf_nccl_status(7) == WF_OK);         /* ncclInProgress */
    CHECK_TRUE(wf_nccl_status(4) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_nccl_status(5) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_nccl_status(6) == WF_E_ABORTED);  /* ncclRemoteError */
    CHECK_TRUE(wf_nccl_status(1) == WF_E_INTERNAL); /* CUDA error */
    CHECK_TRUE(wf_nccl_status(3) == WF_E_INTERNAL);
}
#endif

int main(void)
{
    test_geometry();
    test_arena();
    test_resident();
    test_admission();
    test_linear_plan();
    test_linear_mapping();
    test_elementwise();
#if WEFT_TEST_NCCL
    test_deadlines();
#endif
    if (failed) {
        fprintf(stderr, "test_cuda_host: %d failure(s)\n", failed);
        return 1;
    }
    printf("test_cuda_host: ok\n");
    return 0;
}
